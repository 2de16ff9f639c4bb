/* Shared by the C verbs programs of tests/compat: CHECK(cond, fmt, ...) exits 1 naming the failed
 * condition and what the program saw; the two buffers each side registers; polling one completion and
 * bringing an RC QP through INIT, RTR and RTS. */
#ifndef WEFT_TESTS_COMPAT_CHECK_H
#define WEFT_TESTS_COMPAT_CHECK_H

#include <infiniband/verbs.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

enum { buffer_size = 4096, port = 1 };

static char buf_a[buffer_size] __attribute__((aligned(64)));
static char buf_b[buffer_size] __attribute__((aligned(64)));

/* Polls `cq` until it returns one completion. */
static inline struct ibv_wc poll_one(struct ibv_cq *cq) {
    struct ibv_wc wc;
    for (long i = 0; i < 10000000; ++i) {
        int n = ibv_poll_cq(cq, 1, &wc);
        CHECK(n >= 0, "ibv_poll_cq returned %d", n);
        if (n == 1) return wc;
    }
    CHECK(0, "no completion");
    return wc;
}

/* INIT with `access`, RTR pointing at `dest` (a QP of this process: the port's LID), RTS. */
static inline void connect_qp(struct ibv_qp *qp, uint32_t dest, int access) {
    struct ibv_port_attr pa;
    CHECK(ibv_query_port(qp->context, port, &pa) == 0, "ibv_query_port");
    struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = port, .qp_access_flags = (unsigned)access};
    CHECK(ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "INIT");
    struct ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
                              .max_dest_rd_atomic = 1, .min_rnr_timer = 12, .ah_attr = {.dlid = pa.lid, .port_num = port}};
    CHECK(ibv_modify_qp(qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
          "RTR");
    struct ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
                              .max_rd_atomic = 1};
    CHECK(ibv_modify_qp(qp, &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
          "RTS");
}

#endif
