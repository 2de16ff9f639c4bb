/* ibv_rereg_mr on weft's front end, as a plain C program built against rdma-core's <infiniband/verbs.h>
 * and linked with -libverbs (run with LD_LIBRARY_PATH=build/compat/lib). Two RC QPs in one context, A
 * writing into B's region:
 * - rdma-core's argument checks (IBV_REREG_MR_ERR_INPUT, errno EINVAL) and the refusals of the
 *   re-registration itself (IBV_REREG_MR_ERR_CMD: EINVAL for no flags or bad rights, EOPNOTSUPP for a new
 *   PD or new memory), each leaving the region as it was;
 * - new rights: B's region registered without remote write refuses A's write (IBV_WC_REM_ACCESS_ERR
 *   is checked last, since it takes A's QP to the error state); after ibv_rereg_mr adds remote write, a
 *   write with the rkey A was given before lands, and a receive with B's new lkey takes a send;
 * - the rkey ibv_rereg_mr kept stays B's: regions registered and released hundreds of times meanwhile
 *   never get it, and a write with it still lands in B's memory;
 * - after ibv_rereg_mr takes remote write away again, the same write completes with
 *   IBV_WC_REM_ACCESS_ERR and B's memory is untouched.
 *
 *   usage: weft-verbs-rereg EXPECTED_DEVICE      (exits 0 when every check passed)
 */
#include <infiniband/verbs.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void write_to(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *local, uint32_t rkey, size_t offset,
                     uint32_t length) {
    struct ibv_sge sge = {(uintptr_t)buf_a + offset, length, local->lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)buf_b + offset, .rkey = rkey}};
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(qp, &wr, &bad);
    CHECK(rc == 0, "ibv_post_send: %s", strerror(rc));
}

static void expect_status(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status) {
    struct ibv_wc wc = poll_one(cq);
    CHECK(wc.wr_id == wr_id && wc.status == status, "wr_id %" PRIu64 ": %s, expected wr_id %" PRIu64 ": %s",
          wc.wr_id, ibv_wc_status_str(wc.status), wr_id, ibv_wc_status_str(status));
}

/* ibv_rereg_mr returns `ret` with errno `err`, and the region keeps its keys. */
static void refused(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access,
                    int ret, int err, const char *what) {
    const uint32_t lkey = mr->lkey, rkey = mr->rkey;
    errno = 0;
    int got = ibv_rereg_mr(mr, flags, pd, addr, length, access);
    CHECK(got == ret && errno == err, "%s: returned %d with errno %d, expected %d with errno %d", what, got, errno,
          ret, err);
    CHECK(mr->lkey == lkey && mr->rkey == rkey, "%s changed the keys", what);
}

int main(int argc, char **argv) {
    CHECK(argc == 2, "usage: %s EXPECTED_DEVICE", argv[0]);
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    CHECK(list && num >= 1, "no RDMA device");
    CHECK(strcmp(ibv_get_device_name(list[0]), argv[1]) == 0, "ran on device %s, not %s: not the front end",
          ibv_get_device_name(list[0]), argv[1]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx, "ibv_open_device: %s", strerror(errno));
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_pd *other_pd = ibv_alloc_pd(ctx);
    CHECK(pd && other_pd, "ibv_alloc_pd");
    struct ibv_cq *cq_a = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_cq *cq_b = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    CHECK(cq_a && cq_b, "ibv_create_cq: %s", strerror(errno));
    struct ibv_mr *mr_a = ibv_reg_mr(pd, buf_a, buffer_size, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *mr_b = ibv_reg_mr(pd, buf_b, buffer_size, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr_a && mr_b, "ibv_reg_mr: %s", strerror(errno));
    const uint32_t rkey_b = mr_b->rkey;  /* what A is given, before any re-registration */

    struct ibv_qp_init_attr init = {.send_cq = cq_a, .recv_cq = cq_a, .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
                                            .max_recv_sge = 1}};
    struct ibv_qp *qp_a = ibv_create_qp(pd, &init);
    init.send_cq = init.recv_cq = cq_b;
    struct ibv_qp *qp_b = ibv_create_qp(pd, &init);
    CHECK(qp_a && qp_b, "ibv_create_qp: %s", strerror(errno));
    const int qp_rights = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    connect_qp(qp_a, qp_b->qp_num, qp_rights);
    connect_qp(qp_b, qp_a->qp_num, qp_rights);

    /* rdma-core's checks of the arguments, then the re-registration's own refusals. */
    refused(mr_b, 1 << 7, NULL, NULL, 0, 0, IBV_REREG_MR_ERR_INPUT, EINVAL, "an unknown flag");
    refused(mr_b, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, buffer_size, 0, IBV_REREG_MR_ERR_INPUT, EINVAL,
            "new memory at a null address");
    refused(mr_b, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf_b, 0, 0, IBV_REREG_MR_ERR_INPUT, EINVAL,
            "new memory of no length");
    refused(mr_b, IBV_REREG_MR_CHANGE_PD, other_pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE, IBV_REREG_MR_ERR_INPUT, EINVAL,
            "rights without IBV_REREG_MR_CHANGE_ACCESS");
    refused(mr_b, 0, NULL, NULL, 0, 0, IBV_REREG_MR_ERR_CMD, EINVAL, "no flags");
    refused(mr_b, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE, IBV_REREG_MR_ERR_CMD, EINVAL,
            "remote write without local write");
    refused(mr_b, IBV_REREG_MR_CHANGE_PD, other_pd, NULL, 0, 0, IBV_REREG_MR_ERR_CMD, EOPNOTSUPP, "a new PD");
    refused(mr_b, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf_b, buffer_size / 2, 0, IBV_REREG_MR_ERR_CMD,
            EOPNOTSUPP, "new memory");
    CHECK(mr_b->pd == pd && mr_b->addr == buf_b && mr_b->length == buffer_size, "a refusal changed the region");

    /* New rights: remote write. The rkey A was given before is still B's region's. */
    CHECK(ibv_rereg_mr(mr_b, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE |
                                                                         IBV_ACCESS_REMOTE_WRITE) == 0,
          "ibv_rereg_mr adding remote write: errno %d", errno);
    CHECK(mr_b->rkey == rkey_b && mr_b->addr == buf_b && mr_b->length == buffer_size && mr_b->pd == pd,
          "ibv_rereg_mr changed what it was not asked to");
    memset(buf_a, 'w', 256);
    memset(buf_b, 0, buffer_size);
    write_to(qp_a, 1, mr_a, rkey_b, 0, 256);
    expect_status(cq_a, 1, IBV_WC_SUCCESS);
    CHECK(memcmp(buf_a, buf_b, 256) == 0, "the write after ibv_rereg_mr did not land");

    /* B's lkey is the new registration's: a receive with it takes a send. */
    struct ibv_sge recv_sge = {(uintptr_t)buf_b + 1024, 64, mr_b->lkey};
    struct ibv_recv_wr recv = {.wr_id = 2, .sg_list = &recv_sge, .num_sge = 1}, *bad_recv = NULL;
    CHECK(ibv_post_recv(qp_b, &recv, &bad_recv) == 0, "ibv_post_recv");
    strcpy(buf_a + 512, "after rereg");
    struct ibv_sge send_sge = {(uintptr_t)buf_a + 512, 12, mr_a->lkey};
    struct ibv_send_wr send = {.wr_id = 3, .sg_list = &send_sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                               .send_flags = IBV_SEND_SIGNALED}, *bad_send = NULL;
    CHECK(ibv_post_send(qp_a, &send, &bad_send) == 0, "ibv_post_send");
    expect_status(cq_a, 3, IBV_WC_SUCCESS);
    expect_status(cq_b, 2, IBV_WC_SUCCESS);
    CHECK(strcmp(buf_b + 1024, "after rereg") == 0, "received \"%s\"", buf_b + 1024);

    /* The kept rkey is never another region's: register and release a region many times (the simulator's
     * keys come round again after 256 registrations of one slot), then write with it again. */
    for (int i = 0; i < 600; ++i) {
        struct ibv_mr *mr = ibv_reg_mr(pd, buf_a + 2048, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        CHECK(mr, "ibv_reg_mr %d: %s", i, strerror(errno));
        CHECK(mr->rkey != rkey_b, "registration %d got the rkey ibv_rereg_mr kept for B", i);
        CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr %d", i);
    }
    memset(buf_a, 'k', 256);
    write_to(qp_a, 4, mr_a, rkey_b, 0, 256);
    expect_status(cq_a, 4, IBV_WC_SUCCESS);
    CHECK(memcmp(buf_a, buf_b, 256) == 0, "the write with the kept rkey did not land in B's region");

    /* Remote write taken away again: the old registration is gone, the write is refused. */
    CHECK(ibv_rereg_mr(mr_b, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == 0,
          "ibv_rereg_mr taking remote write away: errno %d", errno);
    CHECK(mr_b->rkey == rkey_b, "the rkey changed");
    memset(buf_a, 'x', 256);
    write_to(qp_a, 5, mr_a, rkey_b, 0, 256);
    expect_status(cq_a, 5, IBV_WC_REM_ACCESS_ERR);
    CHECK(buf_b[0] == 'k', "a refused write changed B's memory");
    printf("write without remote write: %s\n", ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));

    CHECK(ibv_destroy_qp(qp_a) == 0 && ibv_destroy_qp(qp_b) == 0, "ibv_destroy_qp");
    CHECK(ibv_dereg_mr(mr_a) == 0 && ibv_dereg_mr(mr_b) == 0, "ibv_dereg_mr");
    CHECK(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0, "ibv_destroy_cq");
    CHECK(ibv_dealloc_pd(pd) == 0 && ibv_dealloc_pd(other_pd) == 0, "ibv_dealloc_pd");
    CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
    ibv_free_device_list(list);
    printf("ok\n");
    return 0;
}
