/* A small RPC service written against raw verbs, for sweeping seeds and fault schedules on the front end.
 *
 * The client and the server are two device contexts (two nodes of the simulated fabric), each with its own
 * PD, CQ, QP and registered memory. The server keeps a table of 64 counters. Each request is a SEND of
 * { sequence, slot, amount }; the server adds `amount` to the counter and answers with a SEND of
 * { sequence, new value }. Every eighth request the client also RDMA-reads the whole table and checks it
 * against its own model, and every request is checked against the model when its answer arrives. The
 * client keeps up to `window` requests outstanding, each with its receive posted first.
 *
 * Whatever happens is printed in an order the simulator decides, so that a run can be replayed: every
 * completion either side takes (its side, wr_id, status, opcode, byte_len), folded into a digest with the
 * number of empty polls before it. The last line is either
 *     rpc: REQUESTS requests served, digest 0x...
 * or, when a completion fails (a fault schedule that outlasts the retries), the first failure:
 *     rpc: failed at request N: <side> wr_id W: <status> after K completions, digest 0x...
 * and the exit status is 1. The same WEFT_BACKEND (seed and faults) must print the same lines.
 *
 *   weft-verbs-rpc EXPECTED_DEVICE [REQUESTS]          (default 200)
 */
#include "check.h"

#include <inttypes.h>
#include <string.h>

enum { slots = 64, window = 4, message_size = 16 };

struct request {
    uint32_t sequence;
    uint32_t slot;
    uint64_t amount;
};
struct answer {
    uint32_t sequence;
    uint32_t pad;
    uint64_t value;
};

struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    char *mem;
};

/* Server memory (buf_a of check.h): the table, then one receive buffer per window slot, then the answer it
 * sends. Client memory (buf_b): a copy of the table (a read lands there), then one receive buffer per window
 * slot, then two request buffers per window slot. */
_Static_assert((slots + 6 * window) * sizeof(uint64_t) <= buffer_size, "the buffers of check.h hold it");

static uint64_t digest = 1469598103934665603ull; /* FNV-1a */
static unsigned long completions;
static unsigned long empty_polls;

static void fold(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
        digest ^= (v >> (8 * i)) & 0xff;
        digest *= 1099511628211ull;
    }
}

static void open_side(struct side *s, struct ibv_device *dev, char *mem, size_t bytes) {
    s->ctx = ibv_open_device(dev);
    CHECK(s->ctx, "ibv_open_device");
    s->pd = ibv_alloc_pd(s->ctx);
    CHECK(s->pd, "ibv_alloc_pd");
    s->mem = mem;
    s->mr = ibv_reg_mr(s->pd, mem, bytes,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    CHECK(s->mr, "ibv_reg_mr");
    s->cq = ibv_create_cq(s->ctx, 128, NULL, NULL, 0);
    CHECK(s->cq, "ibv_create_cq");
    struct ibv_qp_init_attr init = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
                                    .cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1,
                                            .max_recv_sge = 1, .max_inline_data = message_size}};
    s->qp = ibv_create_qp(s->pd, &init);
    CHECK(s->qp, "ibv_create_qp");
}

/* After a failure requests may still be in flight: the QP goes to error first, so that they are flushed
 * rather than lost with it. */
static void close_side(struct side *s, int failed) {
    if (failed) {
        struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
        CHECK(ibv_modify_qp(s->qp, &err, IBV_QP_STATE) == 0, "ibv_modify_qp to ERR");
    }
    CHECK(ibv_destroy_qp(s->qp) == 0 && ibv_destroy_cq(s->cq) == 0 && ibv_dereg_mr(s->mr) == 0 &&
              ibv_dealloc_pd(s->pd) == 0 && ibv_close_device(s->ctx) == 0,
          "release");
}

static void post_recv(struct side *s, uint64_t id, void *at) {
    struct ibv_sge sge = {.addr = (uintptr_t)at, .length = message_size, .lkey = s->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
    CHECK(ibv_post_recv(s->qp, &wr, &bad) == 0, "ibv_post_recv");
}

static void post_send(struct side *s, uint64_t id, enum ibv_wr_opcode op, void *at, uint32_t length,
                      uint64_t remote, uint32_t rkey, unsigned flags) {
    struct ibv_sge sge = {.addr = (uintptr_t)at, .length = length, .lkey = s->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = op,
                             .send_flags = IBV_SEND_SIGNALED | flags},
                       *bad = NULL;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    CHECK(ibv_post_send(s->qp, &wr, &bad) == 0, "ibv_post_send");
}

/* One completion from either side, the client's first: polls both until one comes, counting the polls
 * that found nothing. `*which` says whose it was (0 client, 1 server). */
static struct ibv_wc next(struct side *client, struct side *server, int *which) {
    struct ibv_wc wc;
    for (long i = 0; i < 100000000; ++i) {
        for (int w = 0; w < 2; ++w) {
            int n = ibv_poll_cq(w == 0 ? client->cq : server->cq, 1, &wc);
            CHECK(n >= 0, "ibv_poll_cq returned %d", n);
            if (n == 1) {
                *which = w;
                ++completions;
                fold(empty_polls);
                fold((uint64_t)w << 56 | wc.wr_id);
                fold((uint64_t)wc.status << 32 | (uint64_t)wc.opcode << 24 | wc.byte_len);
                empty_polls = 0;
                return wc;
            }
            ++empty_polls;
        }
    }
    CHECK(0, "no completion on either side");
    return wc;
}

int main(int argc, char **argv) {
    CHECK(argc == 2 || argc == 3, "usage: %s EXPECTED_DEVICE [REQUESTS]", argv[0]);
    const long requests = argc == 3 ? strtol(argv[2], NULL, 10) : 200;
    CHECK(requests > 0 && requests < 1000000, "REQUESTS %ld: from 1 to 999999", requests);
    int num = 0;
    struct ibv_device **list = ibv_get_device_list(&num);
    CHECK(list && num >= 1, "no RDMA device");
    CHECK(strcmp(ibv_get_device_name(list[0]), argv[1]) == 0, "ran on device %s, not %s: not the front end",
          ibv_get_device_name(list[0]), argv[1]);

    struct side client, server;
    uint64_t *server_mem = (uint64_t *)buf_a;
    uint64_t *client_mem = (uint64_t *)buf_b;
    open_side(&client, list[0], buf_b, buffer_size);
    open_side(&server, list[0], buf_a, buffer_size);
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    connect_qp(client.qp, server.qp->qp_num, access);
    connect_qp(server.qp, client.qp->qp_num, access);

    uint64_t *table = server_mem;
    struct request *server_in = (struct request *)(server_mem + slots);
    struct answer *server_out = (struct answer *)(server_mem + slots + 2 * window);
    uint64_t *copy = client_mem;
    struct answer *client_in = (struct answer *)(client_mem + slots);
    struct request *client_out = (struct request *)(client_mem + slots + 2 * window);
    uint64_t model[slots] = {0};

    /* wr_id: bits 32.. the kind (1 request, 2 answer receive, 3 server receive, 4 answer, 5 read), the rest
     * the request's sequence number (or the receive buffer). */
    for (uint32_t b = 0; b < window; ++b) post_recv(&server, 3ull << 32 | b, &server_in[b]);
    long sent = 0, answered = 0, reads = 0, reads_done = 0, sends_done = 0, answers_sent = 0;
    int failed = 0;
    while (answered < requests || reads_done < reads || sends_done < requests || answers_sent < requests) {
        /* A request's buffer is written again only once its send has completed: an answer proves the server
         * got the request, not that the client's QP got the acknowledgement, and until then it may send the
         * buffer again (the simulator reports a buffer changed before that as a misuse). */
        while (sent < requests && sent - answered < window && sent - sends_done < 2 * window) {
            const uint32_t b = (uint32_t)(sent % window);
            const uint32_t o = (uint32_t)(sent % (2 * window));
            post_recv(&client, 2ull << 32 | b, &client_in[b]);
            client_out[o] = (struct request){.sequence = (uint32_t)sent, .slot = (uint32_t)((sent * 37) % slots),
                                             .amount = (uint64_t)(sent % 13 + 1)};
            post_send(&client, 1ull << 32 | (uint64_t)sent, IBV_WR_SEND, &client_out[o], sizeof client_out[o], 0, 0,
                      0);
            ++sent;
        }
        int which = 0;
        const struct ibv_wc wc = next(&client, &server, &which);
        const uint32_t kind = (uint32_t)(wc.wr_id >> 32);
        if (wc.status != IBV_WC_SUCCESS) {
            printf("rpc: failed at request %ld: %s wr_id %" PRIx64 ": %s after %lu completions, digest 0x%016" PRIx64
                   "\n",
                   answered, which == 0 ? "client" : "server", wc.wr_id, ibv_wc_status_str(wc.status), completions,
                   digest);
            failed = 1;
            break;
        }
        if (which == 1 && kind == 3) { /* a request arrived: serve it, answer from the same buffer index */
            const uint32_t b = (uint32_t)wc.wr_id;
            const struct request r = server_in[b];
            CHECK(wc.byte_len == sizeof r && r.slot < slots, "request of %u bytes, slot %u", wc.byte_len, r.slot);
            table[r.slot] += r.amount;
            /* Answers go inline: their buffer is free again as soon as they are posted. */
            server_out[0] = (struct answer){.sequence = r.sequence, .value = table[r.slot]};
            post_recv(&server, 3ull << 32 | b, &server_in[b]);
            post_send(&server, 4ull << 32 | r.sequence, IBV_WR_SEND, &server_out[0], sizeof server_out[0], 0, 0,
                      IBV_SEND_INLINE);
        } else if (which == 0 && kind == 2) { /* an answer */
            const struct answer a = client_in[(uint32_t)wc.wr_id];
            CHECK(a.sequence == (uint32_t)answered, "answer %u, expected %ld: answers overtook each other",
                  a.sequence, answered);
            const uint32_t slot = (uint32_t)((answered * 37) % slots);
            model[slot] += (uint64_t)(answered % 13 + 1);
            CHECK(a.value == model[slot], "answer %ld: counter %u is %" PRIu64 ", expected %" PRIu64, answered, slot,
                  a.value, model[slot]);
            ++answered;
            if (answered % 8 == 0 && reads == reads_done) { /* one read at a time: each has the copy alone */
                post_send(&client, 5ull << 32 | (uint64_t)answered, IBV_WR_RDMA_READ, copy, slots * sizeof(uint64_t),
                          (uintptr_t)table, server.mr->rkey, 0);
                ++reads;
            }
        } else if (which == 0 && kind == 5) { /* a read of the table: never behind the answers before it */
            const long upto = (long)(uint32_t)wc.wr_id;
            uint64_t at_least[slots] = {0};
            for (long q = 0; q < upto; ++q) at_least[(q * 37) % slots] += (uint64_t)(q % 13 + 1);
            for (int s = 0; s < slots; ++s) {
                CHECK(copy[s] >= at_least[s], "read after answer %ld: counter %d is %" PRIu64 ", below %" PRIu64,
                      upto, s, copy[s], at_least[s]);
            }
            ++reads_done;
        } else if (which == 0 && kind == 1) { /* sends complete in the digest, and are counted */
            ++sends_done;
        } else if (which == 1 && kind == 4) {
            ++answers_sent;
        }
    }
    if (!failed) {
        for (int s = 0; s < slots; ++s) CHECK(table[s] == model[s], "counter %d: %" PRIu64 " != %" PRIu64, s, table[s], model[s]);
        printf("rpc: %ld requests served, %ld table reads, digest 0x%016" PRIx64 "\n", answered, reads, digest);
    }
    close_side(&client, failed);
    close_side(&server, failed);
    ibv_free_device_list(list);
    return failed;
}
