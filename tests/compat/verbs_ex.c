/* The extended verbs on weft's front end, as a plain C program built against rdma-core's
 * <infiniband/verbs.h> and linked with -libverbs (run with LD_LIBRARY_PATH=build/compat/lib): a completion
 * channel shared by a plain and an extended CQ (blocking and non-blocking ibv_get_cq_event, acks, a
 * channel in use), two RC QPs from ibv_create_qp_ex with send_ops_flags and their work-request builders
 * (a send with immediate and a gather list, one batch of an inline write, a read and two atomics, a
 * builder error that posts nothing, an aborted batch), the extended CQ's polling and read functions,
 * the extended device and GID queries, and a responder QP's access flags refusing an atomic.
 *
 *   usage: weft-verbs-ex EXPECTED_DEVICE      (exits 0 when every check passed)
 */
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* Polls the plain CQ until it returns one completion, which must be a success with `wr_id`. */
static struct ibv_wc poll_success(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode opcode) {
    struct ibv_wc wc = poll_one(cq);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == wr_id && wc.opcode == opcode,
          "wr_id %" PRIu64 " (expected %" PRIu64 "), opcode %d (expected %d): %s", wc.wr_id, wr_id, wc.opcode, opcode,
          ibv_wc_status_str(wc.status));
    return wc;
}

/* Polls `cq` a while and checks that nothing arrives. */
static void expect_nothing(struct ibv_cq *cq) {
    struct ibv_wc wc;
    for (int i = 0; i < 1000; ++i) CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "unexpected completion %" PRIu64, wc.wr_id);
}

static struct ibv_qp *create_qp_ex(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq *send_cq,
                                   struct ibv_cq *recv_cq) {
    struct ibv_qp_init_attr_ex init = {
        .send_cq = send_cq, .recv_cq = recv_cq, .qp_type = IBV_QPT_RC, .pd = pd,
        .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 4, .max_recv_sge = 1, .max_inline_data = 64},
        .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |
                          IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                          IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD};
    struct ibv_qp *qp = ibv_create_qp_ex(ctx, &init);
    CHECK(qp, "ibv_create_qp_ex: %s", strerror(errno));
    CHECK(init.cap.max_send_wr >= 16 && init.cap.max_inline_data >= 64, "caps not granted");
    return qp;
}

/* Waits for the next completion event of the channel, which must be `cq`'s, and acknowledges it. */
static void expect_event(struct ibv_comp_channel *channel, struct ibv_cq *cq, void *cq_context) {
    struct ibv_cq *got = NULL;
    void *context = NULL;
    CHECK(ibv_get_cq_event(channel, &got, &context) == 0, "ibv_get_cq_event: %s", strerror(errno));
    CHECK(got == cq && context == cq_context, "event of CQ %p (context %p), expected %p", (void *)got, context,
          (void *)cq);
    ibv_ack_cq_events(got, 1);
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

    /* The extended queries. */
    struct ibv_device_attr_ex dev_ex;
    CHECK(ibv_query_device_ex(ctx, NULL, &dev_ex) == 0 && dev_ex.phys_port_cnt_ex == 1, "ibv_query_device_ex");
    struct ibv_gid_entry gids[4];
    CHECK(ibv_query_gid_ex(ctx, port, 0, &gids[0], 0) == 0 && gids[0].gid_type == IBV_GID_TYPE_IB &&
              gids[0].port_num == port,
          "ibv_query_gid_ex");
    /* A GID table like a real port's: slot 0 populated, the others empty (ENODATA, a zero GID), none
     * past gid_tbl_len (EINVAL). */
    struct ibv_port_attr port_attr;
    CHECK(ibv_query_port(ctx, port, &port_attr) == 0 && port_attr.gid_tbl_len > 1, "gid_tbl_len %d",
          port_attr.gid_tbl_len);
    int err = ibv_query_gid_ex(ctx, port, 1, &gids[0], 0);
    CHECK(err == ENODATA, "ibv_query_gid_ex of the empty GID index 1 returned %d", err);
    err = ibv_query_gid_ex(ctx, port, (uint32_t)port_attr.gid_tbl_len, &gids[0], 0);
    CHECK(err == EINVAL, "ibv_query_gid_ex past the GID table returned %d", err);
    union ibv_gid empty;
    memset(&empty, 0xff, sizeof empty);
    CHECK(ibv_query_gid(ctx, port, 1, &empty) == 0 && empty.global.subnet_prefix == 0 &&
              empty.global.interface_id == 0,
          "ibv_query_gid of an empty slot is not the zero GID");
    CHECK(ibv_query_gid(ctx, port, port_attr.gid_tbl_len, &empty) == -1 && errno == EINVAL,
          "ibv_query_gid past the GID table");
    CHECK(ibv_query_gid_table(ctx, gids, 4, 0) == 1 && gids[0].gid_index == 0, "ibv_query_gid_table");
    int fd = dup(ctx->cmd_fd);
    CHECK(fd >= 0, "dup of the context's cmd_fd: %s", strerror(errno));
    close(fd);

    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd, "ibv_alloc_pd");
    const int rights = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                       IBV_ACCESS_REMOTE_ATOMIC;
    struct ibv_mr *mr_a = ibv_reg_mr(pd, buf_a, buffer_size, rights);
    struct ibv_mr *mr_b = ibv_reg_mr(pd, buf_b, buffer_size, rights);
    CHECK(mr_a && mr_b, "ibv_reg_mr: %s", strerror(errno));

    /* One channel for both CQs: A's is a plain CQ, B's an extended one. */
    struct ibv_comp_channel *channel = ibv_create_comp_channel(ctx);
    CHECK(channel && channel->fd >= 0, "ibv_create_comp_channel: %s", strerror(errno));
    int cq_a_context = 1, cq_b_context = 2;
    struct ibv_cq *cq_a = ibv_create_cq(ctx, 64, &cq_a_context, channel, 0);
    CHECK(cq_a && cq_a->channel == channel, "ibv_create_cq with a channel: %s", strerror(errno));
    struct ibv_cq_init_attr_ex cq_attr = {.cqe = 64, .cq_context = &cq_b_context, .channel = channel,
                                          .wc_flags = IBV_WC_STANDARD_FLAGS};
    struct ibv_cq_ex *cq_b_ex = ibv_create_cq_ex(ctx, &cq_attr);
    CHECK(cq_b_ex, "ibv_create_cq_ex: %s", strerror(errno));
    struct ibv_cq *cq_b = ibv_cq_ex_to_cq(cq_b_ex);
    CHECK(ibv_destroy_comp_channel(channel) == EBUSY, "destroying a channel in use");

    struct ibv_qp *qp_a = create_qp_ex(ctx, pd, cq_a, cq_a);
    struct ibv_qp *qp_b = create_qp_ex(ctx, pd, cq_b, cq_b);
    connect_qp(qp_a, qp_b->qp_num, rights & ~IBV_ACCESS_LOCAL_WRITE);
    connect_qp(qp_b, qp_a->qp_num, rights & ~IBV_ACCESS_LOCAL_WRITE);
    struct ibv_qp_ex *ex = ibv_qp_to_qp_ex(qp_a);
    CHECK(ex, "ibv_qp_to_qp_ex");

    /* Non-blocking: no event yet. */
    const int flags = fcntl(channel->fd, F_GETFL);
    CHECK(fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) == 0, "O_NONBLOCK");
    struct ibv_cq *ev_cq;
    void *ev_context;
    CHECK(ibv_get_cq_event(channel, &ev_cq, &ev_context) == -1 && errno == EAGAIN, "an event before any traffic");
    CHECK(fcntl(channel->fd, F_SETFL, flags) == 0, "blocking again");

    /* A send with immediate data and two segments, received on the extended CQ after its event. */
    CHECK(ibv_req_notify_cq(cq_b, 0) == 0, "ibv_req_notify_cq");
    struct ibv_sge recv_sge = {(uintptr_t)buf_b, 64, mr_b->lkey};
    struct ibv_recv_wr recv = {.wr_id = 100, .sg_list = &recv_sge, .num_sge = 1}, *bad_recv = NULL;
    CHECK(ibv_post_recv(qp_b, &recv, &bad_recv) == 0, "ibv_post_recv");
    strcpy(buf_a, "hello, ");
    strcpy(buf_a + 64, "extended");
    struct ibv_sge two[2] = {{(uintptr_t)buf_a, 7, mr_a->lkey}, {(uintptr_t)buf_a + 64, 9, mr_a->lkey}};
    ibv_wr_start(ex);
    ex->wr_id = 1;
    ex->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send_imm(ex, htonl(0xabcd));
    ibv_wr_set_sge_list(ex, 2, two);
    CHECK(ibv_wr_complete(ex) == 0, "ibv_wr_complete");
    expect_event(channel, cq_b, &cq_b_context);
    struct ibv_poll_cq_attr poll_attr = {0};
    CHECK(ibv_start_poll(cq_b_ex, &poll_attr) == 0, "ibv_start_poll");
    CHECK(cq_b_ex->status == IBV_WC_SUCCESS && cq_b_ex->wr_id == 100, "wr_id %" PRIu64 ": %s", cq_b_ex->wr_id,
          ibv_wc_status_str(cq_b_ex->status));
    CHECK(ibv_wc_read_opcode(cq_b_ex) == IBV_WC_RECV && ibv_wc_read_byte_len(cq_b_ex) == 16 &&
              ibv_wc_read_qp_num(cq_b_ex) == qp_b->qp_num && (ibv_wc_read_wc_flags(cq_b_ex) & IBV_WC_WITH_IMM) &&
              ntohl(ibv_wc_read_imm_data(cq_b_ex)) == 0xabcd,
          "extended completion fields");
    CHECK(ibv_next_poll(cq_b_ex) == ENOENT, "a second completion");
    ibv_end_poll(cq_b_ex);
    CHECK(strcmp(buf_b, "hello, extended") == 0, "received \"%s\"", buf_b);
    poll_success(cq_a, 1, IBV_WC_SEND);

    /* One batch: an inline write (its source overwritten at once), a read and the two atomics. */
    CHECK(ibv_req_notify_cq(cq_a, 0) == 0, "ibv_req_notify_cq");
    char text[] = "inline bytes";
    for (int i = 0; i < 100; ++i) buf_b[1024 + i] = (char)(200 - i);
    uint64_t *target = (uint64_t *)(buf_b + 3072), *result = (uint64_t *)(buf_a + 3072);
    uint64_t *result2 = (uint64_t *)(buf_a + 3080);
    *target = 40;
    ibv_wr_start(ex);
    ex->wr_id = 2;
    ex->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_wr_rdma_write(ex, mr_b->rkey, (uintptr_t)buf_b + 512);
    ibv_wr_set_inline_data(ex, text, sizeof text);
    memset(text, 0, sizeof text);
    ex->wr_id = 3;
    ex->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_read(ex, mr_b->rkey, (uintptr_t)buf_b + 1024);
    ibv_wr_set_sge(ex, mr_a->lkey, (uintptr_t)buf_a + 1024, 100);
    ex->wr_id = 4;
    ibv_wr_atomic_fetch_add(ex, mr_b->rkey, (uintptr_t)target, 2);
    ibv_wr_set_sge(ex, mr_a->lkey, (uintptr_t)result, 8);
    ex->wr_id = 5;
    ibv_wr_atomic_cmp_swp(ex, mr_b->rkey, (uintptr_t)target, 42, 7);
    ibv_wr_set_sge(ex, mr_a->lkey, (uintptr_t)result2, 8);
    CHECK(ibv_wr_complete(ex) == 0, "ibv_wr_complete");
    expect_event(channel, cq_a, &cq_a_context);
    poll_success(cq_a, 2, IBV_WC_RDMA_WRITE);
    poll_success(cq_a, 3, IBV_WC_RDMA_READ);
    poll_success(cq_a, 4, IBV_WC_FETCH_ADD);
    poll_success(cq_a, 5, IBV_WC_COMP_SWAP);
    CHECK(strcmp(buf_b + 512, "inline bytes") == 0, "written \"%s\"", buf_b + 512);
    CHECK(memcmp(buf_a + 1024, buf_b + 1024, 100) == 0, "read bytes differ");
    CHECK(*result == 40 && *result2 == 42 && *target == 7, "atomics: %" PRIu64 ", %" PRIu64 ", target %" PRIu64,
          *result, *result2, *target);

    /* A builder error (a flag weft has none for) fails the batch, which posts nothing; an aborted batch
     * posts nothing either; the next batch goes through. */
    ibv_wr_start(ex);
    ex->wr_id = 6;
    ex->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(ex, mr_b->rkey, (uintptr_t)buf_b + 2048);
    ibv_wr_set_sge(ex, mr_a->lkey, (uintptr_t)buf_a, 8);
    ex->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_IP_CSUM;
    ibv_wr_rdma_write(ex, mr_b->rkey, (uintptr_t)buf_b + 2048);
    ibv_wr_set_sge(ex, mr_a->lkey, (uintptr_t)buf_a, 8);
    CHECK(ibv_wr_complete(ex) == EINVAL, "a batch with IBV_SEND_IP_CSUM");
    ibv_wr_start(ex);
    ex->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(ex, mr_b->rkey, (uintptr_t)buf_b + 2048);
    ibv_wr_set_sge(ex, mr_a->lkey, (uintptr_t)buf_a, 8);
    ibv_wr_abort(ex);
    expect_nothing(cq_a);
    ibv_wr_start(ex);
    ex->wr_id = 7;
    ibv_wr_rdma_write(ex, mr_b->rkey, (uintptr_t)buf_b + 2048);
    ibv_wr_set_sge(ex, mr_a->lkey, (uintptr_t)buf_a, 8);
    CHECK(ibv_wr_complete(ex) == 0, "ibv_wr_complete after an error and an abort");
    poll_success(cq_a, 7, IBV_WC_RDMA_WRITE);

    /* B's access flags lose REMOTE_ATOMIC (RTS to RTS): the responder refuses the next atomic. */
    struct ibv_qp_attr no_atomics = {.qp_state = IBV_QPS_RTS,
                                     .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
    CHECK(ibv_modify_qp(qp_b, &no_atomics, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS) == 0, "RTS to RTS");
    ibv_wr_start(ex);
    ex->wr_id = 8;
    ibv_wr_atomic_fetch_add(ex, mr_b->rkey, (uintptr_t)target, 1);
    ibv_wr_set_sge(ex, mr_a->lkey, (uintptr_t)result, 8);
    CHECK(ibv_wr_complete(ex) == 0, "ibv_wr_complete");
    struct ibv_wc wc;
    long tries = 0;
    while (ibv_poll_cq(cq_a, 1, &wc) == 0) CHECK(++tries < 10000000, "no completion for the refused atomic");
    CHECK(wc.wr_id == 8 && wc.status == IBV_WC_REM_ACCESS_ERR, "refused atomic: wr_id %" PRIu64 ", %s", wc.wr_id,
          ibv_wc_status_str(wc.status));
    CHECK(*target == 7, "the refused atomic changed the target to %" PRIu64, *target);
    printf("atomic without REMOTE_ATOMIC: %s\n", ibv_wc_status_str(wc.status));

    CHECK(ibv_destroy_qp(qp_a) == 0 && ibv_destroy_qp(qp_b) == 0, "ibv_destroy_qp");
    CHECK(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0, "ibv_destroy_cq");
    CHECK(ibv_destroy_comp_channel(channel) == 0, "ibv_destroy_comp_channel");
    CHECK(ibv_dereg_mr(mr_a) == 0 && ibv_dereg_mr(mr_b) == 0, "ibv_dereg_mr");
    CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
    CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
    ibv_free_device_list(list);
    printf("ok\n");
    return 0;
}
