/* Shared receive queues and asynchronous events on weft's front end, as a plain C program built against
 * rdma-core's <infiniband/verbs.h> and linked with -libverbs (run with LD_LIBRARY_PATH=build/compat/lib).
 * Two server QPs on one SRQ (one from ibv_create_qp, one from ibv_create_qp_ex) receive from two client
 * QPs: the receives are taken in the order they were posted, each completion naming the QP that took it;
 * ibv_post_recv is refused on a QP with an SRQ; ibv_post_srq_recv posts the prefix of a chain before a
 * refused request and names it in bad_wr. The SRQ limit, armed with ibv_modify_srq, raises no event while
 * as many receives remain, then IBV_EVENT_SRQ_LIMIT_REACHED (async_fd polled first, then
 * ibv_get_async_event, element.srq, ibv_ack_async_event). A server QP failed by a bad rkey raises
 * IBV_EVENT_QP_LAST_WQE_REACHED for it, after IBV_EVENT_QP_FATAL for the client QP whose region the write
 * missed, and the other server QP still takes the SRQ's receives. The SRQ is
 * not destroyed while QPs use it (EBUSY); IBV_SRQ_MAX_WR is refused (no resize). A client QP moved to
 * IBV_QPS_ERR flushes its posted receive and a send posted afterwards.
 *
 *   usage: weft-verbs-srq EXPECTED_DEVICE      (exits 0 when every check passed)
 */
#include <infiniband/verbs.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { slot_size = 64, srq_depth = 8, srq_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };

/* A receive of wr_id `id` into slot `slot` of buf_a. */
static struct ibv_recv_wr receive(struct ibv_sge *sge, struct ibv_mr *mr, uint64_t id, int slot) {
    *sge = (struct ibv_sge){.addr = (uintptr_t)(buf_a + slot * slot_size), .length = slot_size, .lkey = mr->lkey};
    return (struct ibv_recv_wr){.wr_id = id, .sg_list = sge, .num_sge = 1};
}

/* Posts receives `first`.. `first + n - 1` (wr_ids and slots) to the SRQ as one chain. */
static void post_srq_receives(struct ibv_srq *srq, struct ibv_mr *mr, uint64_t first, int n) {
    struct ibv_sge sge[srq_depth];
    struct ibv_recv_wr wr[srq_depth];
    for (int i = 0; i < n; ++i) {
        wr[i] = receive(&sge[i], mr, first + (uint64_t)i, (int)(first + (uint64_t)i) % (buffer_size / slot_size));
        wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
    }
    struct ibv_recv_wr *bad = NULL;
    CHECK(ibv_post_srq_recv(srq, wr, &bad) == 0, "ibv_post_srq_recv of %d receives", n);
}

/* Sends `text` from `client` (its own bytes in buf_b at slot `slot`) and waits for the send's completion. */
static void send_text(struct ibv_qp *client, struct ibv_cq *cq, struct ibv_mr *mr, const char *text, int slot) {
    char *at = buf_b + slot * slot_size;
    snprintf(at, slot_size, "%s", text);
    struct ibv_sge sge = {.addr = (uintptr_t)at, .length = (uint32_t)strlen(text) + 1, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 9000 + (uint64_t)slot, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr *bad = NULL;
    CHECK(ibv_post_send(client, &wr, &bad) == 0, "ibv_post_send of \"%s\"", text);
    struct ibv_wc wc = poll_one(cq);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == wr.wr_id, "send of \"%s\": %s", text,
          ibv_wc_status_str(wc.status));
}

/* The next receive completion on `cq` must be receive `id` taken by `qp`, holding `text`. */
static void expect_receive(struct ibv_cq *cq, uint64_t id, struct ibv_qp *qp, const char *text) {
    struct ibv_wc wc = poll_one(cq);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV, "receive: %s, opcode %d",
          ibv_wc_status_str(wc.status), wc.opcode);
    CHECK(wc.wr_id == id && wc.qp_num == qp->qp_num, "receive %" PRIu64 " taken by QP %u, expected %" PRIu64
          " by QP %u", wc.wr_id, wc.qp_num, id, qp->qp_num);
    const char *slot = buf_a + (int)(id % (buffer_size / slot_size)) * slot_size;
    CHECK(wc.byte_len == strlen(text) + 1 && strcmp(slot, text) == 0, "receive %" PRIu64 " holds \"%s\" (%u bytes)",
          id, slot, wc.byte_len);
}

/* The context has no asynchronous event pending (async_fd is non-blocking). */
static void expect_no_event(struct ibv_context *ctx) {
    struct ibv_async_event event;
    errno = 0;
    CHECK(ibv_get_async_event(ctx, &event) == -1 && errno == EAGAIN, "unexpected event %s",
          ibv_event_type_str(event.event_type));
}

/* Waits until async_fd is readable, then reads the next event with a blocking ibv_get_async_event. */
static struct ibv_async_event next_event(struct ibv_context *ctx) {
    struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
    CHECK(poll(&p, 1, 10000) == 1 && (p.revents & POLLIN), "async_fd not readable: %s", strerror(errno));
    const int flags = fcntl(ctx->async_fd, F_GETFL);
    CHECK(fcntl(ctx->async_fd, F_SETFL, flags & ~O_NONBLOCK) == 0, "fcntl");
    struct ibv_async_event event;
    CHECK(ibv_get_async_event(ctx, &event) == 0, "ibv_get_async_event: %s", strerror(errno));
    CHECK(fcntl(ctx->async_fd, F_SETFL, flags) == 0, "fcntl");
    return event;
}

/* `--overrun`: a CQ of a few entries overrun by more writes than it holds raises IBV_EVENT_CQ_ERR naming that
 * CQ (not the other CQ of the context); ibv_destroy_cq waits for the event's acknowledgement, which
 * ibv_ack_async_event counts in the CQ. An overrun is a misuse the simulator reports: run without strict=1. */
static int overrun(struct ibv_context *ctx) {
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd, "ibv_alloc_pd");
    struct ibv_mr *mr_a = ibv_reg_mr(pd, buf_a, buffer_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_mr *mr_b = ibv_reg_mr(pd, buf_b, buffer_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr_a && mr_b, "ibv_reg_mr: %s", strerror(errno));
    struct ibv_cq *small = ibv_create_cq(ctx, 2, NULL, NULL, 0);
    struct ibv_cq *other = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    CHECK(small && other, "ibv_create_cq");
    struct ibv_qp_init_attr init = {.send_cq = small, .recv_cq = small, .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *a = ibv_create_qp(pd, &init);
    init.send_cq = init.recv_cq = other;
    struct ibv_qp *b = ibv_create_qp(pd, &init);
    CHECK(a && b, "ibv_create_qp: %s", strerror(errno));
    connect_qp(a, b->qp_num, srq_access);
    connect_qp(b, a->qp_num, srq_access);
    struct ibv_sge sge[8];
    struct ibv_send_wr wr[8];
    for (int i = 0; i < 8; ++i) {
        sge[i] = (struct ibv_sge){.addr = (uintptr_t)buf_a, .length = 8, .lkey = mr_a->lkey};
        wr[i] = (struct ibv_send_wr){.wr_id = (uint64_t)i, .sg_list = &sge[i], .num_sge = 1,
                                    .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
                                    .wr.rdma = {.remote_addr = (uintptr_t)buf_b + 8u * (unsigned)i, .rkey = mr_b->rkey},
                                    .next = i + 1 < 8 ? &wr[i + 1] : NULL};
    }
    struct ibv_send_wr *bad = NULL;
    CHECK(ibv_post_send(a, wr, &bad) == 0, "ibv_post_send of 8 writes");
    struct ibv_async_event event = next_event(ctx);
    CHECK(event.event_type == IBV_EVENT_CQ_ERR && event.element.cq == small, "event %s, CQ %p (small %p, other %p)",
          ibv_event_type_str(event.event_type), (void *)event.element.cq, (void *)small, (void *)other);
    ibv_ack_async_event(&event);
    CHECK(small->async_events_completed == 1, "async_events_completed %u", small->async_events_completed);
    CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");
    CHECK(ibv_destroy_cq(small) == 0 && ibv_destroy_cq(other) == 0, "ibv_destroy_cq");
    CHECK(ibv_dereg_mr(mr_a) == 0 && ibv_dereg_mr(mr_b) == 0 && ibv_dealloc_pd(pd) == 0, "release");
    CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
    printf("verbs_srq --overrun: IBV_EVENT_CQ_ERR named the overrun CQ\n");
    return 0;
}

int main(int argc, char **argv) {
    CHECK(argc == 2 || (argc == 3 && strcmp(argv[2], "--overrun") == 0), "usage: %s EXPECTED_DEVICE [--overrun]",
          argv[0]);
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    CHECK(list && num >= 1, "no RDMA device");
    CHECK(strcmp(ibv_get_device_name(list[0]), argv[1]) == 0, "ran on device %s, not %s: not the front end",
          ibv_get_device_name(list[0]), argv[1]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx, "ibv_open_device: %s", strerror(errno));
    struct ibv_device_attr dev;
    CHECK(ibv_query_device(ctx, &dev) == 0, "ibv_query_device");
    CHECK(dev.max_srq > 0 && dev.max_srq_wr >= srq_depth && dev.max_srq_sge >= 2, "SRQ limits %d %d %d", dev.max_srq,
          dev.max_srq_wr, dev.max_srq_sge);
    const int flags = fcntl(ctx->async_fd, F_GETFL);
    CHECK(flags >= 0 && fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK) == 0, "async_fd: %s", strerror(errno));
    expect_no_event(ctx);
    if (argc == 3) {
        const int rc = overrun(ctx);
        ibv_free_device_list(list);
        return rc;
    }

    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd, "ibv_alloc_pd");
    struct ibv_mr *mr_a = ibv_reg_mr(pd, buf_a, buffer_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_mr *mr_b = ibv_reg_mr(pd, buf_b, buffer_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr_a && mr_b, "ibv_reg_mr: %s", strerror(errno));
    struct ibv_cq *server_cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_cq *client_cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    CHECK(server_cq && client_cq, "ibv_create_cq");

    /* The SRQ, through verbs.h's ibv_create_srq_ex (a basic SRQ goes to ibv_create_srq). */
    int srq_context = 0;
    struct ibv_srq_init_attr_ex srq_init = {.srq_context = &srq_context,
                                            .attr = {.max_wr = srq_depth, .max_sge = 2},
                                            .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
                                            .srq_type = IBV_SRQT_BASIC, .pd = pd};
    struct ibv_srq *srq = ibv_create_srq_ex(ctx, &srq_init);
    CHECK(srq, "ibv_create_srq_ex: %s", strerror(errno));
    CHECK(srq->srq_context == &srq_context && srq->pd == pd && srq->context == ctx, "SRQ fields");
    CHECK(srq_init.attr.max_wr >= srq_depth && srq_init.attr.max_sge >= 2, "granted %u, %u", srq_init.attr.max_wr,
          srq_init.attr.max_sge);
    struct ibv_srq_attr srq_attr;
    CHECK(ibv_query_srq(srq, &srq_attr) == 0 && srq_attr.max_wr == srq_init.attr.max_wr &&
              srq_attr.max_sge == srq_init.attr.max_sge && srq_attr.srq_limit == 0,
          "ibv_query_srq");
    struct ibv_srq_init_attr too_low = {.attr = {.max_wr = 2, .max_sge = 1, .srq_limit = 3}};
    errno = 0;
    CHECK(!ibv_create_srq(pd, &too_low) && errno == EINVAL, "srq_limit above max_wr: errno %d", errno);

    /* Two server QPs on the SRQ, the second from ibv_create_qp_ex; two clients. */
    struct ibv_qp_init_attr init = {.send_cq = server_cq, .recv_cq = server_cq, .srq = srq, .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *server1 = ibv_create_qp(pd, &init);
    CHECK(server1, "ibv_create_qp with an SRQ: %s", strerror(errno));
    CHECK(init.cap.max_recv_wr == 0 && server1->srq == srq, "max_recv_wr %u on an SRQ", init.cap.max_recv_wr);
    struct ibv_qp_init_attr_ex init_ex = {.send_cq = server_cq, .recv_cq = server_cq, .srq = srq,
                                          .qp_type = IBV_QPT_RC, .pd = pd, .comp_mask = IBV_QP_INIT_ATTR_PD,
                                          .cap = {.max_send_wr = 4, .max_send_sge = 1}};
    struct ibv_qp *server2 = ibv_create_qp_ex(ctx, &init_ex);
    CHECK(server2, "ibv_create_qp_ex with an SRQ: %s", strerror(errno));
    CHECK(init_ex.cap.max_recv_wr == 0, "max_recv_wr %u on an SRQ", init_ex.cap.max_recv_wr);
    struct ibv_qp_init_attr plain = {.send_cq = client_cq, .recv_cq = client_cq, .qp_type = IBV_QPT_RC,
                                     .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *client1 = ibv_create_qp(pd, &plain);
    struct ibv_qp *client2 = ibv_create_qp(pd, &plain);
    CHECK(client1 && client2, "ibv_create_qp: %s", strerror(errno));
    struct ibv_qp_attr qattr;
    struct ibv_qp_init_attr qinit;
    CHECK(ibv_query_qp(server1, &qattr, IBV_QP_CAP, &qinit) == 0 && qinit.srq == srq && qattr.cap.max_recv_wr == 0,
          "ibv_query_qp of a QP with an SRQ");
    connect_qp(server1, client1->qp_num, srq_access);
    connect_qp(client1, server1->qp_num, srq_access);
    connect_qp(server2, client2->qp_num, srq_access);
    connect_qp(client2, server2->qp_num, srq_access);

    /* A QP with an SRQ has no receive queue of its own. */
    struct ibv_sge sge;
    struct ibv_recv_wr own = receive(&sge, mr_a, 1, 0);
    struct ibv_recv_wr *bad = NULL;
    CHECK(ibv_post_recv(server1, &own, &bad) == EINVAL && bad == &own, "ibv_post_recv on a QP with an SRQ");

    /* A chain with a refused third request: the first two are posted, bad_wr names the third. */
    struct ibv_sge sges[4];
    struct ibv_recv_wr chain[3] = {receive(&sges[0], mr_a, 100, 100 % 64), receive(&sges[1], mr_a, 101, 101 % 64),
                                   receive(&sges[2], mr_a, 999, 0)};
    chain[0].next = &chain[1];
    chain[1].next = &chain[2];
    chain[2].num_sge = (int)srq_init.attr.max_sge + 1;  /* more segments than the SRQ takes */
    struct ibv_sge many[8];
    for (int i = 0; i < 8; ++i) many[i] = sges[2];
    chain[2].sg_list = many;
    CHECK((int)srq_init.attr.max_sge + 1 <= 8, "max_sge %u", srq_init.attr.max_sge);
    bad = NULL;
    CHECK(ibv_post_srq_recv(srq, chain, &bad) != 0 && bad == &chain[2], "the refused receive is not bad_wr");
    post_srq_receives(srq, mr_a, 102, 2);

    /* Receives are taken in posted order, by whichever QP a message arrives on. */
    send_text(client1, client_cq, mr_b, "one", 0);
    expect_receive(server_cq, 100, server1, "one");
    send_text(client2, client_cq, mr_b, "two", 1);
    expect_receive(server_cq, 101, server2, "two");
    send_text(client2, client_cq, mr_b, "three", 2);
    expect_receive(server_cq, 102, server2, "three");
    send_text(client1, client_cq, mr_b, "four", 3);
    expect_receive(server_cq, 103, server1, "four");

    /* The limit: no resize; armed at 2 with 3 receives posted, no event at 2 left, one at 1 left. */
    struct ibv_srq_attr resize = {.max_wr = 2 * srq_depth};
    CHECK(ibv_modify_srq(srq, &resize, IBV_SRQ_MAX_WR) == EINVAL, "IBV_SRQ_MAX_WR");
    struct ibv_srq_attr above = {.srq_limit = srq_init.attr.max_wr + 1};
    CHECK(ibv_modify_srq(srq, &above, IBV_SRQ_LIMIT) == EINVAL, "a limit above max_wr");
    post_srq_receives(srq, mr_a, 200, 3);
    struct ibv_srq_attr arm = {.srq_limit = 2};
    CHECK(ibv_modify_srq(srq, &arm, IBV_SRQ_LIMIT) == 0, "ibv_modify_srq IBV_SRQ_LIMIT");
    CHECK(ibv_query_srq(srq, &srq_attr) == 0 && srq_attr.srq_limit == 2, "armed limit %u", srq_attr.srq_limit);
    send_text(client1, client_cq, mr_b, "five", 4);
    expect_receive(server_cq, 200, server1, "five");
    expect_no_event(ctx);
    send_text(client1, client_cq, mr_b, "six", 5);
    expect_receive(server_cq, 201, server1, "six");
    struct ibv_async_event event = next_event(ctx);
    CHECK(event.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && event.element.srq == srq, "event %s, SRQ %p",
          ibv_event_type_str(event.event_type), (void *)event.element.srq);
    ibv_ack_async_event(&event);
    CHECK(srq->events_completed == 1, "events_completed %u", srq->events_completed);
    CHECK(ibv_query_srq(srq, &srq_attr) == 0 && srq_attr.srq_limit == 0, "limit %u after the event",
          srq_attr.srq_limit);
    expect_no_event(ctx);

    /* Not destroyed while QPs use it. */
    CHECK(ibv_destroy_srq(srq) == EBUSY, "ibv_destroy_srq of an SRQ in use");

    /* Server 1 fails (a write with a bad rkey): it takes no more receives (Last WQE Reached); server 2
     * still takes the SRQ's. */
    struct ibv_sge wsge = {.addr = (uintptr_t)buf_a, .length = 8, .lkey = mr_a->lkey};
    struct ibv_send_wr write = {.wr_id = 77, .sg_list = &wsge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                                .send_flags = IBV_SEND_SIGNALED,
                                .wr.rdma = {.remote_addr = (uintptr_t)buf_b, .rkey = mr_b->rkey ^ 0x5a5a00u}};
    struct ibv_send_wr *bad_send = NULL;
    CHECK(ibv_post_send(server1, &write, &bad_send) == 0, "ibv_post_send of a bad write");
    struct ibv_wc wc = poll_one(server_cq);
    CHECK(wc.wr_id == 77 && wc.status == IBV_WC_REM_ACCESS_ERR, "write with a bad rkey: %s",
          ibv_wc_status_str(wc.status));
    /* The responder, client 1, went to error with no completion of its own saying why: the spec's
     * affiliated error names it first (weft reports it as IBV_EVENT_QP_FATAL). */
    event = next_event(ctx);
    CHECK(event.event_type == IBV_EVENT_QP_FATAL && event.element.qp == client1, "event %s, QP %p",
          ibv_event_type_str(event.event_type), (void *)event.element.qp);
    ibv_ack_async_event(&event);
    event = next_event(ctx);
    CHECK(event.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && event.element.qp == server1, "event %s, QP %p",
          ibv_event_type_str(event.event_type), (void *)event.element.qp);
    ibv_ack_async_event(&event);
    send_text(client2, client_cq, mr_b, "seven", 6);
    expect_receive(server_cq, 202, server2, "seven");

    /* IBV_QPS_ERR drains a QP: its posted receive, and a send posted afterwards, complete flushed. */
    struct ibv_sge rsge;
    struct ibv_recv_wr rwr = receive(&rsge, mr_b, 300, 7);
    CHECK(ibv_post_recv(client2, &rwr, &bad) == 0, "ibv_post_recv");
    struct ibv_qp_attr to_err = {.qp_state = IBV_QPS_ERR};
    CHECK(ibv_modify_qp(client2, &to_err, IBV_QP_STATE) == 0, "ibv_modify_qp to IBV_QPS_ERR: %s", strerror(errno));
    CHECK(ibv_query_qp(client2, &qattr, IBV_QP_STATE, &qinit) == 0 && qattr.qp_state == IBV_QPS_ERR, "state %d",
          (int)qattr.qp_state);
    wc = poll_one(client_cq);
    CHECK(wc.wr_id == 300 && wc.status == IBV_WC_WR_FLUSH_ERR, "receive after IBV_QPS_ERR: %" PRIu64 " %s", wc.wr_id,
          ibv_wc_status_str(wc.status));
    struct ibv_sge ssge = {.addr = (uintptr_t)buf_b, .length = 8, .lkey = mr_b->lkey};
    struct ibv_send_wr swr = {.wr_id = 301, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED};
    CHECK(ibv_post_send(client2, &swr, &bad_send) == 0, "ibv_post_send in IBV_QPS_ERR");
    wc = poll_one(client_cq);
    CHECK(wc.wr_id == 301 && wc.status == IBV_WC_WR_FLUSH_ERR, "send in IBV_QPS_ERR: %" PRIu64 " %s", wc.wr_id,
          ibv_wc_status_str(wc.status));

    CHECK(ibv_destroy_qp(server1) == 0 && ibv_destroy_qp(server2) == 0, "ibv_destroy_qp");
    CHECK(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
    CHECK(ibv_destroy_qp(client1) == 0 && ibv_destroy_qp(client2) == 0, "ibv_destroy_qp");
    CHECK(ibv_destroy_cq(server_cq) == 0 && ibv_destroy_cq(client_cq) == 0, "ibv_destroy_cq");
    CHECK(ibv_dereg_mr(mr_a) == 0 && ibv_dereg_mr(mr_b) == 0, "ibv_dereg_mr");
    CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
    CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
    ibv_free_device_list(list);
    printf("verbs_srq: SRQ order, refusals, limit and last-WQE events passed\n");
    return 0;
}
