/* An ordinary libibverbs program, built against rdma-core's <infiniband/verbs.h> and linked with
 * -libverbs, run on weft's front end (LD_LIBRARY_PATH=build/compat/lib). In one process it opens the first
 * device, checks that it is the one named on the command line (so that a run on the system library
 * fails), creates two RC QPs, moves them to RTS pointing at each other, and checks the bytes and
 * completions of a send, an inline send, an RDMA write with immediate, an RDMA read, a fetch-and-add
 * and a compare-and-swap; address handles; then the refusals: wrong modify masks, other QP types, memory
 * windows, objects in use and a write with a bad rkey.
 *
 * With --two-contexts, B's QP, CQ, PD and region belong to a second context of the same device.
 *
 *   usage: weft-verbs-rc EXPECTED_DEVICE [--two-contexts]      (exits 0 when every check passed)
 */
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* byte_len of send and write completions is undefined in verbs: pass any_length there. */
static const uint32_t any_length = UINT32_MAX;

static void expect(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode opcode, uint32_t byte_len,
                   struct ibv_qp *qp, struct ibv_wc *out) {
    struct ibv_wc wc = poll_one(cq);
    CHECK(wc.status == IBV_WC_SUCCESS, "wr_id %" PRIu64 ": %s", wc.wr_id, ibv_wc_status_str(wc.status));
    CHECK(wc.wr_id == wr_id, "wr_id %" PRIu64 ", expected %" PRIu64, wc.wr_id, wr_id);
    CHECK(wc.opcode == opcode, "opcode %d, expected %d", wc.opcode, opcode);
    CHECK(byte_len == any_length || wc.byte_len == byte_len, "byte_len %u, expected %u", wc.byte_len, byte_len);
    CHECK(wc.qp_num == qp->qp_num, "qp_num %u, expected %u", wc.qp_num, qp->qp_num);
    if (out) *out = wc;
}

static void post_send(struct ibv_qp *qp, struct ibv_send_wr *wr) {
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(qp, wr, &bad);
    CHECK(rc == 0, "ibv_post_send: %s", strerror(rc));
}

static void post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, void *addr, uint32_t length) {
    struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = length, .lkey = mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
    int rc = ibv_post_recv(qp, &wr, &bad);
    CHECK(rc == 0, "ibv_post_recv: %s", strerror(rc));
}

static int to_init(struct ibv_qp *qp, int mask) {
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = port,
                               .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                                  IBV_ACCESS_REMOTE_ATOMIC};
    return ibv_modify_qp(qp, &attr, mask);
}

static int to_rtr(struct ibv_qp *qp, uint32_t dest, uint16_t lid, int mask) {
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
                               .rq_psn = 0, .max_dest_rd_atomic = 1, .min_rnr_timer = 12,
                               .ah_attr = {.dlid = lid, .port_num = port}};
    return ibv_modify_qp(qp, &attr, mask);
}

static int to_rts(struct ibv_qp *qp) {
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
                               .sq_psn = 0, .max_rd_atomic = 1};
    return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
static const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

static struct ibv_qp *create_rc(struct ibv_pd *pd, struct ibv_cq *cq) {
    struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = 32, .max_recv_wr = 16, .max_send_sge = 5,
                                            .max_recv_sge = 1, .max_inline_data = 64}};
    struct ibv_qp *qp = ibv_create_qp(pd, &init);
    CHECK(qp, "ibv_create_qp: %s", strerror(errno));
    CHECK(init.cap.max_send_wr >= 32 && init.cap.max_send_sge == 5 && init.cap.max_inline_data >= 64,
          "caps not granted");
    return qp;
}

int main(int argc, char **argv) {
    CHECK(argc == 2 || (argc == 3 && strcmp(argv[2], "--two-contexts") == 0),
          "usage: %s EXPECTED_DEVICE [--two-contexts]", argv[0]);
    const int two_contexts = argc == 3;

    /* The device: the front end's, not the system library's. */
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    CHECK(list && num >= 1, "no RDMA device (%s)", list ? "empty list" : strerror(errno));
    const char *name = ibv_get_device_name(list[0]);
    printf("device %s\n", name);
    CHECK(strcmp(name, argv[1]) == 0, "ran on device %s, not %s: not the front end's libibverbs", name, argv[1]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx, "ibv_open_device: %s", strerror(errno));

    struct ibv_device_attr dev;
    CHECK(ibv_query_device(ctx, &dev) == 0, "ibv_query_device");
    CHECK(dev.phys_port_cnt == 1 && dev.atomic_cap != IBV_ATOMIC_NONE && dev.max_qp_wr > 0, "device attributes");
    struct ibv_port_attr pa;
    CHECK(ibv_query_port(ctx, port, &pa) == 0, "ibv_query_port");
    CHECK(pa.state == IBV_PORT_ACTIVE && pa.lid != 0 && pa.link_layer == IBV_LINK_LAYER_INFINIBAND, "port attributes");
    CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL, "port 2 exists");
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, port, 0, &gid) == 0 && gid.global.subnet_prefix == htobe64(0xfe80000000000000ull), "gid");
    uint16_t pkey = 0;
    CHECK(ibv_query_pkey(ctx, port, 0, &pkey) == 0 && pkey == 0xffff, "pkey");
    printf("port 1: %s, lid %u, active mtu %d\n", ibv_port_state_str(pa.state), pa.lid, pa.active_mtu);

    struct ibv_context *ctx_b = two_contexts ? ibv_open_device(list[0]) : ctx;
    CHECK(ctx_b, "second ibv_open_device: %s", strerror(errno));
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_pd *pd_b = two_contexts ? ibv_alloc_pd(ctx_b) : pd;
    CHECK(pd && pd_b, "ibv_alloc_pd");
    struct ibv_cq *cq_a = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_cq *cq_b = ibv_create_cq(ctx_b, 64, NULL, NULL, 0);
    CHECK(cq_a && cq_b, "ibv_create_cq: %s", strerror(errno));
    const int rights = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                       IBV_ACCESS_REMOTE_ATOMIC;
    struct ibv_mr *mr_a = ibv_reg_mr(pd, buf_a, buffer_size, rights);
    struct ibv_mr *mr_b = ibv_reg_mr(pd_b, buf_b, buffer_size, rights);
    CHECK(mr_a && mr_b, "ibv_reg_mr: %s", strerror(errno));
    errno = 0;
    CHECK(!ibv_reg_mr(pd, buf_a, 64, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL, "remote write without local write");

    /* What this step refuses, cleanly. */
    struct ibv_qp_init_attr ud = {.send_cq = cq_a, .recv_cq = cq_a, .qp_type = IBV_QPT_UD,
                                  .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
    errno = 0;
    CHECK(!ibv_create_qp(pd, &ud) && errno == EOPNOTSUPP, "UD QP: errno %d", errno);
    struct ibv_srq_init_attr_ex xrc_srq = {.attr = {.max_wr = 1, .max_sge = 1}, .srq_type = IBV_SRQT_XRC, .pd = pd,
                                           .cq = cq_a,
                                           .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                                        IBV_SRQ_INIT_ATTR_CQ};
    errno = 0;
    CHECK(!ibv_create_srq_ex(ctx, &xrc_srq) && errno == EOPNOTSUPP, "XRC SRQ: errno %d", errno);
    /* Address handles: made and destroyed (no UD QP takes one), refused for another port or an empty source
     * GID slot, and holding their PD. */
    struct ibv_ah_attr ah_attr = {.dlid = pa.lid, .port_num = port, .is_global = 1,
                                  .grh = {.dgid = gid, .hop_limit = 1}};
    struct ibv_pd *ah_pd = ibv_alloc_pd(ctx);
    CHECK(ah_pd, "ibv_alloc_pd");
    struct ibv_ah *ah = ibv_create_ah(ah_pd, &ah_attr);
    CHECK(ah && ah->pd == ah_pd && ah->context == ctx, "ibv_create_ah: %s", strerror(errno));
    CHECK(ibv_dealloc_pd(ah_pd) == EBUSY, "dealloc_pd with an address handle");
    ah_attr.port_num = 2;
    errno = 0;
    CHECK(!ibv_create_ah(ah_pd, &ah_attr) && errno == EINVAL, "address handle on port 2: errno %d", errno);
    ah_attr.port_num = port;
    ah_attr.grh.sgid_index = 1;
    errno = 0;
    CHECK(!ibv_create_ah(ah_pd, &ah_attr) && errno == EINVAL, "address handle from an empty GID slot: errno %d", errno);
    CHECK(ibv_destroy_ah(ah) == 0 && ibv_dealloc_pd(ah_pd) == 0, "ibv_destroy_ah, then ibv_dealloc_pd");
    /* Memory windows are not there; a type verbs does not define is a bad argument. */
    errno = 0;
    CHECK(!ibv_alloc_mw(pd, IBV_MW_TYPE_1) && errno == EOPNOTSUPP, "type 1 memory window: errno %d", errno);
    errno = 0;
    CHECK(!ibv_alloc_mw(pd, (enum ibv_mw_type)3) && errno == EINVAL, "memory window of type 3: errno %d", errno);
    /* verbs.h's inline _ex functions reach the front end's verbs_context operations: an extended CQ
     * with a completion timestamp and an extended UD QP are refused; the extended device query answers. */
    struct ibv_cq_init_attr_ex cq_ex = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
    errno = 0;
    CHECK(!ibv_create_cq_ex(ctx, &cq_ex) && errno == EOPNOTSUPP, "ibv_create_cq_ex with a timestamp: errno %d", errno);
    struct ibv_qp_init_attr_ex ud_ex = {.send_cq = cq_a, .recv_cq = cq_a, .qp_type = IBV_QPT_UD, .pd = pd,
                                        .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                                        .send_ops_flags = IBV_QP_EX_WITH_SEND,
                                        .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
                                                .max_recv_sge = 1}};
    errno = 0;
    CHECK(!ibv_create_qp_ex(ctx, &ud_ex) && errno == EOPNOTSUPP, "extended UD QP: errno %d", errno);
    struct ibv_device_attr_ex dev_ex;
    CHECK(ibv_query_device_ex(ctx, NULL, &dev_ex) == 0 && dev_ex.orig_attr.phys_port_cnt == 1 &&
              dev_ex.phys_port_cnt_ex == 1 && dev_ex.orig_attr.vendor_id != 0,
          "ibv_query_device_ex");

    struct ibv_qp *qp_a = create_rc(pd, cq_a);
    struct ibv_qp *qp_b = create_rc(pd_b, cq_b);
    printf("QPs %u and %u\n", qp_a->qp_num, qp_b->qp_num);

    /* The state machine with rdma-core's mask checks: a required attribute missing, an attribute the
     * transition does not take, and a skipped state are EINVAL. */
    CHECK(to_init(qp_a, init_mask & ~IBV_QP_PORT) == EINVAL, "INIT without IBV_QP_PORT");
    CHECK(to_init(qp_a, init_mask | IBV_QP_TIMEOUT) == EINVAL, "INIT with IBV_QP_TIMEOUT");
    CHECK(to_rts(qp_a) == EINVAL, "RESET to RTS");
    CHECK(to_init(qp_a, init_mask) == 0 && to_init(qp_b, init_mask) == 0, "to INIT");
    CHECK(qp_a->state == IBV_QPS_INIT, "state after INIT: %d", qp_a->state);
    CHECK(to_rtr(qp_a, qp_b->qp_num, pa.lid, rtr_mask & ~IBV_QP_DEST_QPN) == EINVAL, "RTR without IBV_QP_DEST_QPN");
    CHECK(to_rtr(qp_a, 0xfffff0, pa.lid, rtr_mask) == EINVAL, "RTR to a QP that does not exist");

    /* Receives may be posted before RTR. */
    post_recv(qp_b, 100, mr_b, buf_b, 64);
    CHECK(to_rtr(qp_a, qp_b->qp_num, pa.lid, rtr_mask) == 0 && to_rtr(qp_b, qp_a->qp_num, pa.lid, rtr_mask) == 0,
          "to RTR");
    struct ibv_send_wr *bad = NULL;
    struct ibv_send_wr early = {.wr_id = 1, .opcode = IBV_WR_SEND};
    CHECK(ibv_post_send(qp_a, &early, &bad) == EINVAL && bad == &early, "send in RTR");
    CHECK(to_rts(qp_a) == 0 && to_rts(qp_b) == 0, "to RTS");

    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    CHECK(ibv_query_qp(qp_a, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi) == 0, "ibv_query_qp");
    CHECK(qa.qp_state == IBV_QPS_RTS && qa.dest_qp_num == qp_b->qp_num && qa.path_mtu == IBV_MTU_1024 &&
              qi.qp_type == IBV_QPT_RC && qi.send_cq == cq_a,
          "queried attributes");

    /* Send: two segments gathered into one receive. */
    strcpy(buf_a, "hello, ");
    strcpy(buf_a + 64, "verbs");
    struct ibv_sge two[2] = {{(uintptr_t)buf_a, 7, mr_a->lkey}, {(uintptr_t)buf_a + 64, 6, mr_a->lkey}};
    struct ibv_send_wr send = {.wr_id = 1, .sg_list = two, .num_sge = 2, .opcode = IBV_WR_SEND,
                               .send_flags = IBV_SEND_SIGNALED};
    post_send(qp_a, &send);
    expect(cq_a, 1, IBV_WC_SEND, any_length, qp_a, NULL);
    struct ibv_wc wc;
    expect(cq_b, 100, IBV_WC_RECV, 13, qp_b, &wc);
    CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM) && strcmp(buf_b, "hello, verbs") == 0, "received \"%s\"", buf_b);

    /* Inline send with immediate data from a buffer that is not registered; an unsignaled send before it
     * gives no completion. */
    post_recv(qp_b, 101, mr_b, buf_b + 64, 64);
    post_recv(qp_b, 102, mr_b, buf_b + 128, 64);
    char inline_text[] = "inline";
    struct ibv_sge quiet_sge = {(uintptr_t)buf_a, 5, mr_a->lkey};
    struct ibv_sge inline_sge = {(uintptr_t)inline_text, sizeof inline_text, 0};
    struct ibv_send_wr inline_send = {.wr_id = 3, .sg_list = &inline_sge, .num_sge = 1,
                                      .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(7),
                                      .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
    struct ibv_send_wr quiet = {.wr_id = 2, .next = &inline_send, .sg_list = &quiet_sge, .num_sge = 1,
                                .opcode = IBV_WR_SEND};
    post_send(qp_a, &quiet);
    memset(inline_text, 0, sizeof inline_text);  /* inline: the bytes were copied at post time */
    expect(cq_a, 3, IBV_WC_SEND, any_length, qp_a, NULL);
    expect(cq_b, 101, IBV_WC_RECV, 5, qp_b, NULL);
    expect(cq_b, 102, IBV_WC_RECV, sizeof inline_text, qp_b, &wc);
    CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 7, "immediate %u", ntohl(wc.imm_data));
    CHECK(strcmp(buf_b + 128, "inline") == 0, "received \"%s\"", buf_b + 128);

    /* RDMA write with immediate: the bytes land at the target, the immediate in a receive completion. */
    post_recv(qp_b, 103, mr_b, buf_b + 1024, 16);
    for (int i = 0; i < 128; ++i) buf_a[256 + i] = (char)(i * 3 + 1);
    struct ibv_sge write_sge = {(uintptr_t)buf_a + 256, 128, mr_a->lkey};
    struct ibv_send_wr write = {.wr_id = 4, .sg_list = &write_sge, .num_sge = 1,
                                .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
                                .imm_data = htonl(0x1234abcd),
                                .wr.rdma = {.remote_addr = (uintptr_t)buf_b + 512, .rkey = mr_b->rkey}};
    post_send(qp_a, &write);
    expect(cq_a, 4, IBV_WC_RDMA_WRITE, any_length, qp_a, NULL);
    expect(cq_b, 103, IBV_WC_RECV_RDMA_WITH_IMM, 128, qp_b, &wc);
    CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0x1234abcd, "immediate %#x", ntohl(wc.imm_data));
    CHECK(memcmp(buf_b + 512, buf_a + 256, 128) == 0, "written bytes differ");

    /* RDMA read, fenced behind nothing in particular. */
    for (int i = 0; i < 100; ++i) buf_b[2048 + i] = (char)(200 - i);
    struct ibv_sge read_sge = {(uintptr_t)buf_a + 2048, 100, mr_a->lkey};
    struct ibv_send_wr read = {.wr_id = 5, .sg_list = &read_sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
                               .send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE,
                               .wr.rdma = {.remote_addr = (uintptr_t)buf_b + 2048, .rkey = mr_b->rkey}};
    post_send(qp_a, &read);
    expect(cq_a, 5, IBV_WC_RDMA_READ, 100, qp_a, NULL);
    CHECK(memcmp(buf_a + 2048, buf_b + 2048, 100) == 0, "read bytes differ");

    /* Atomics on an 8-byte word of B: fetch-and-add, then compare-and-swap. */
    uint64_t *target = (uint64_t *)(buf_b + 3072), *result = (uint64_t *)(buf_a + 3072);
    *target = 40;
    struct ibv_sge atomic_sge = {(uintptr_t)result, 8, mr_a->lkey};
    struct ibv_send_wr add = {.wr_id = 6, .sg_list = &atomic_sge, .num_sge = 1,
                              .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD, .send_flags = IBV_SEND_SIGNALED,
                              .wr.atomic = {.remote_addr = (uintptr_t)target, .compare_add = 2, .rkey = mr_b->rkey}};
    post_send(qp_a, &add);
    expect(cq_a, 6, IBV_WC_FETCH_ADD, 8, qp_a, NULL);
    CHECK(*result == 40 && *target == 42, "fetch_add: result %" PRIu64 ", target %" PRIu64, *result, *target);
    struct ibv_send_wr cas = {.wr_id = 7, .sg_list = &atomic_sge, .num_sge = 1,
                              .opcode = IBV_WR_ATOMIC_CMP_AND_SWP, .send_flags = IBV_SEND_SIGNALED,
                              .wr.atomic = {.remote_addr = (uintptr_t)target, .compare_add = 42, .swap = 7,
                                            .rkey = mr_b->rkey}};
    post_send(qp_a, &cas);
    expect(cq_a, 7, IBV_WC_COMP_SWAP, 8, qp_a, NULL);
    CHECK(*result == 42 && *target == 7, "cmp_swp: result %" PRIu64 ", target %" PRIu64, *result, *target);

    /* A chain of 20 writes of five 8-byte segments each, the 18th with one segment too many: verbs posts
     * the 17 before it and names it in bad_wr. */
    enum { chain = 20, segments = 5, bad_index = 17 };
    struct ibv_sge sges[chain][segments + 1];
    struct ibv_send_wr wrs[chain];
    for (int i = 0; i < chain; ++i) {
        for (int k = 0; k <= segments; ++k) {
            sges[i][k] = (struct ibv_sge){(uintptr_t)buf_a + 1024 + 8 * k, 8, mr_a->lkey};
            buf_a[1024 + 8 * k] = (char)('a' + k);
        }
        wrs[i] = (struct ibv_send_wr){.wr_id = 1000 + i, .next = i + 1 < chain ? &wrs[i + 1] : NULL,
                                      .sg_list = sges[i], .num_sge = i == bad_index ? segments + 1 : segments,
                                      .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                                      .wr.rdma = {.remote_addr = (uintptr_t)buf_b + 1536 + 40 * i, .rkey = mr_b->rkey}};
    }
    memset(buf_b + 1536, 0, 40 * chain);
    bad = NULL;
    CHECK(ibv_post_send(qp_a, wrs, &bad) == EINVAL && bad == &wrs[bad_index], "chain: bad_wr %p, expected %p",
          (void *)bad, (void *)&wrs[bad_index]);
    for (int i = 0; i < bad_index; ++i) expect(cq_a, 1000 + i, IBV_WC_RDMA_WRITE, any_length, qp_a, NULL);
    CHECK(ibv_poll_cq(cq_a, 1, &wc) == 0, "a completion of a request that was not posted: wr_id %" PRIu64, wc.wr_id);
    for (int i = 0; i < chain; ++i) {
        for (int k = 0; k < segments; ++k) {
            char want = i < bad_index ? (char)('a' + k) : 0;
            CHECK(buf_b[1536 + 40 * i + 8 * k] == want, "write %d, segment %d", i, k);
        }
    }

    /* Objects in use are not destroyed. */
    CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc_pd with QPs and regions");
    CHECK(!ibv_qp_to_qp_ex(qp_a), "a QP created without send_ops_flags has no work-request builders");
    CHECK(ibv_destroy_cq(cq_a) == EBUSY, "destroy_cq with a QP");
    struct ibv_send_wr local_inv = {.wr_id = 8, .opcode = IBV_WR_LOCAL_INV};
    CHECK(ibv_post_send(qp_a, &local_inv, &bad) == EINVAL && bad == &local_inv, "IBV_WR_LOCAL_INV");

    /* A write with a bad rkey completes in error. */
    struct ibv_send_wr bad_write = {.wr_id = 9, .sg_list = &write_sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                                    .send_flags = IBV_SEND_SIGNALED,
                                    .wr.rdma = {.remote_addr = (uintptr_t)buf_b, .rkey = mr_b->rkey ^ 0x5a5a00}};
    post_send(qp_a, &bad_write);
    wc = poll_one(cq_a);
    CHECK(wc.wr_id == 9 && wc.status == IBV_WC_REM_ACCESS_ERR, "bad rkey: wr_id %" PRIu64 ", %s", wc.wr_id,
          ibv_wc_status_str(wc.status));
    printf("bad rkey: %s\n", ibv_wc_status_str(wc.status));

    CHECK(ibv_destroy_qp(qp_a) == 0 && ibv_destroy_qp(qp_b) == 0, "ibv_destroy_qp");
    CHECK(ibv_dereg_mr(mr_a) == 0 && ibv_dereg_mr(mr_b) == 0, "ibv_dereg_mr");
    CHECK(ibv_destroy_cq(cq_a) == 0 && ibv_destroy_cq(cq_b) == 0, "ibv_destroy_cq");
    CHECK(ibv_dealloc_pd(pd) == 0 && (!two_contexts || ibv_dealloc_pd(pd_b) == 0), "ibv_dealloc_pd");
    CHECK(ibv_close_device(ctx) == 0 && (!two_contexts || ibv_close_device(ctx_b) == 0), "ibv_close_device");
    ibv_free_device_list(list);
    printf("ok\n");
    return 0;
}
