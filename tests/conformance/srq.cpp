// Conformance: shared receive queues (Feature::srq). A server's QPs take their receives from one queue, in
// the order they were posted, whichever QP a message arrives on; the completion names that QP. An empty
// queue answers with RNR; a QP in error flushes only what it took, and the queue's receives serve the other
// QPs; the limit event fires once when the queue runs low; a QP on a shared queue refuses receives of its
// own. The server lives in this process and the clients on side b (the peer process with --peer=process).
#include "harness.hpp"
#include "../support/expect_error.hpp"

#include <chrono>
#include <optional>
#include <thread>

using namespace weft;
using weft::test::contains;
using weft::test::error_of;
using weft::test::needs;
using weft::test::next;

namespace {

// A server with one shared receive queue and `n` QPs on it, each connected to a QP of its own client
// domain (side b). Both domains have one CQ for everything and a 64 KiB region.
struct SrqServer {
    static constexpr std::size_t buffer_size = 64 * 1024;

    explicit SrqServer(std::size_t n, SrqOptions srq_options = {.max_recv = 64}, QpOptions client_options = {}) {
        server.domain = open(test::backend_config());
        client.domain = test::open_side_b();
        for (test::Side* s : {&server, &client}) {
            s->cq = s->domain.create_cq({.depth = 1024});
            s->allocate(buffer_size);
            s->mr = s->domain.register_memory(s->buf, all_access);
        }
        srq = server.domain.create_srq(srq_options);
        for (std::size_t i = 0; i < n; ++i) {
            servers.push_back(server.domain.create_qp({.send_cq = server.cq, .recv_cq = server.cq, .srq = srq}));
            QpOptions o = client_options;
            o.send_cq = client.cq;
            o.recv_cq = client.cq;
            clients.push_back(client.domain.create_qp(o));
            test::connect_both(servers.back(), clients.back());
        }
    }

    // Client `i` sends `len` bytes of pattern `seed` from offset `off` and waits for its completion.
    Completion send_from(std::size_t i, std::uint64_t id, std::size_t off, std::size_t len, std::uint8_t seed) {
        client.fill(off, len, seed);
        BOOST_REQUIRE(clients[i].post_send({send(id, client.seg(off, len))}));
        return next(client.cq);
    }

    test::Side server;
    test::Side client;
    SharedReceiveQueue srq;
    std::vector<QueuePair> servers;
    std::vector<QueuePair> clients;
};

// Events of `dom` other than the port's (a device may report its port coming up at any time).
std::optional<AsyncEvent> await_srq_event(Domain& dom, std::chrono::milliseconds patience = test::completion_deadline) {
    for (;;) {
        auto e = test::await_event(dom, patience);
        if (!e || (e->type != EventType::port_active && e->type != EventType::port_error)) return e;
    }
}

bool reports_last_wqe() {
    // Soft-RoCE does not report Last WQE Reached; the simulator's rxe profile follows it.
    return test::backend_caps().has(Feature::async_events) && test::backend_caps().profile != "rxe";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(srq)

// Three clients' messages take the queue's receives in the order they were posted, whichever QP each came
// on; each completion names the server QP that took it, on that QP's CQ, with the bytes in that receive.
BOOST_AUTO_TEST_CASE(qps_take_receives_in_posted_order, *needs(Feature::srq)) {
    SrqServer s(3);
    BOOST_REQUIRE(s.srq.post_recv({recv(10, s.server.seg(0, 256)), recv(11, s.server.seg(1024, 256)),
                                   recv(12, s.server.seg(2048, 256)), recv(13, s.server.seg(3072, 256))}));
    BOOST_TEST(s.send_from(1, 1, 0, 100, 1).status == WcStatus::success);
    BOOST_TEST(s.send_from(0, 2, 1024, 200, 2).status == WcStatus::success);
    BOOST_TEST(s.send_from(2, 3, 2048, 40, 3).status == WcStatus::success);
    const std::uint32_t expected_qp[3] = {s.servers[1].qp_num(), s.servers[0].qp_num(), s.servers[2].qp_num()};
    const std::uint32_t expected_len[3] = {100, 200, 40};
    for (std::uint64_t k = 0; k < 3; ++k) {
        const Completion c = next(s.server.cq);
        BOOST_TEST_CONTEXT("receive " << k) {
            BOOST_TEST(c.id == 10 + k);
            BOOST_TEST(c.status == WcStatus::success);
            BOOST_TEST(c.opcode == Opcode::recv);
            BOOST_TEST(c.qp_num == expected_qp[k]);
            BOOST_TEST(c.byte_len == expected_len[k]);
        }
    }
    BOOST_TEST(s.server.holds(0, 100, 1));
    BOOST_TEST(s.server.holds(1024, 200, 2));
    BOOST_TEST(s.server.holds(2048, 40, 3));
    test::expect_empty(s.server.cq);
}

// A write with immediate takes the queue's next receive as a send would, and leaves its buffer untouched:
// the completion is recv_rdma_with_imm with the immediate, naming the QP it came on.
BOOST_AUTO_TEST_CASE(a_write_with_imm_takes_a_receive_of_the_queue,
                     *needs(Feature::srq) * needs(Feature::write_with_imm)) {
    SrqServer s(3);
    s.server.fill(3072, 256, 9);
    BOOST_REQUIRE(s.srq.post_recv({recv(10, s.server.seg(0, 256)), recv(11, s.server.seg(3072, 256))}));
    BOOST_TEST(s.send_from(1, 1, 0, 100, 1).status == WcStatus::success);
    const Completion r = next(s.server.cq);
    BOOST_TEST(r.id == 10u);
    BOOST_TEST(r.opcode == Opcode::recv);
    BOOST_TEST(r.qp_num == s.servers[1].qp_num());
    s.client.fill(8192, 64, 4);
    BOOST_REQUIRE(s.clients[2].post_send({write(4, s.client.seg(8192, 64), s.server.mr.remote().slice(4096, 64))
                                              .with_imm(77)}));
    BOOST_TEST(next(s.client.cq).status == WcStatus::success);
    const Completion w = next(s.server.cq);
    BOOST_TEST(w.id == 11u);
    BOOST_TEST(w.status == WcStatus::success);
    BOOST_TEST(w.opcode == Opcode::recv_rdma_with_imm);
    BOOST_TEST(w.has_imm);
    BOOST_TEST(w.imm == 77u);
    BOOST_TEST(w.qp_num == s.servers[2].qp_num());
    BOOST_TEST(s.server.holds(4096, 64, 4));
    BOOST_TEST(s.server.holds(3072, 256, 9));  // the receive's own buffer is untouched
    test::expect_empty(s.server.cq);
}

// A QP created with a shared queue posts no receives of its own, and the queue's limits hold.
BOOST_AUTO_TEST_CASE(limits_and_refusals, *needs(Feature::srq)) {
    SrqServer s(1, {.max_recv = 16, .max_sge = 2});
    const Capabilities& caps = test::backend_caps();
    BOOST_TEST(s.servers[0].caps().max_recv == 0u);
    BOOST_TEST(s.srq.max_recv() >= 16u);
    BOOST_TEST(s.srq.max_sge() >= 2u);
    const PostStatus own = s.servers[0].post_recv({recv(1, s.server.seg(0, 64))});
    BOOST_TEST((own.code() == PostStatus::Code::invalid));
    BOOST_TEST(contains(own.reason(), "shared receive queue"));

    // Full: the receives beyond max_recv() are refused, and what was accepted stays.
    std::vector<RecvRequest> many;
    for (std::uint32_t i = 0; i <= s.srq.max_recv(); ++i) many.push_back(recv(100 + i, s.server.seg(0, 64)));
    BOOST_TEST((s.srq.post_recv(many).code() == PostStatus::Code::queue_full));
    BOOST_TEST(s.srq.post_recv(std::span(many).first(s.srq.max_recv())));
    BOOST_TEST((s.srq.post_recv({recv(1, s.server.seg(0, 64))}).code() == PostStatus::Code::queue_full));
    // Too many segments for the queue.
    const LocalSegment three[3] = {s.server.seg(0, 8), s.server.seg(8, 8), s.server.seg(16, 8)};
    if (s.srq.max_sge() < 3) {
        const PostStatus st = s.srq.post_recv({recv(2, std::span<const LocalSegment>(three))});
        BOOST_TEST((st.code() == PostStatus::Code::invalid));
    }

    // Options out of range name the option and the accepted range.
    auto e = error_of([&] { (void)s.server.domain.create_srq({.max_recv = 0}); });
    BOOST_TEST(contains(e.what(), "max_recv"));
    e = error_of([&] { (void)s.server.domain.create_srq({.max_recv = caps.max_srq_wr + 1}); });
    BOOST_TEST(contains(e.what(), std::to_string(caps.max_srq_wr)));
    e = error_of([&] { (void)s.server.domain.create_srq({.max_sge = caps.max_srq_sge + 1}); });
    BOOST_TEST(contains(e.what(), "max_sge"));
    e = error_of([&] { (void)s.server.domain.create_srq({.max_recv = 8, .limit = 9}); });
    BOOST_TEST(contains(e.what(), "limit"));
    e = error_of([&] { s.srq.arm_limit(s.srq.max_recv() + 1); });
    BOOST_TEST(contains(e.what(), "max_recv"));

    // A shared queue serves only QPs of its own domain.
    Domain other = open(test::backend_config());
    CompletionQueue other_cq = other.create_cq({.depth = 16});
    e = error_of([&] { (void)other.create_qp({.send_cq = other_cq, .recv_cq = other_cq, .srq = s.srq}); });
    BOOST_TEST(contains(e.what(), "domain"));
    // An empty handle refuses at once.
    SharedReceiveQueue empty;
    BOOST_TEST((empty.post_recv({recv(1, s.server.seg(0, 8))}).code() == PostStatus::Code::not_connected));
}

// A message that finds the queue empty waits (RNR) until a receive is posted there, then lands.
BOOST_AUTO_TEST_CASE(an_empty_queue_answers_rnr_until_a_receive_comes, *needs(Feature::srq) * needs(Feature::rnr)) {
    SrqServer s(2, {.max_recv = 16}, {.rnr_retry = 7, .min_rnr_timer = 1});
    s.client.fill(0, 48, 5);
    BOOST_REQUIRE(s.clients[1].post_send({send(1, s.client.seg(0, 48))}));
    BOOST_TEST(!test::maybe_next(s.client.cq, std::chrono::milliseconds(30)).has_value());
    BOOST_REQUIRE(s.srq.post_recv({recv(20, s.server.seg(512, 64))}));
    BOOST_TEST(next(s.client.cq).status == WcStatus::success);
    const Completion c = next(s.server.cq);
    BOOST_TEST(c.id == 20u);
    BOOST_TEST(c.qp_num == s.servers[1].qp_num());
    BOOST_TEST(c.byte_len == 48u);
    BOOST_TEST(s.server.holds(512, 48, 5));
}

// A message that finds the queue empty is not lost: it lands in the first receive posted there, named by
// the QP it came to. (Whether the requester's send completes before that is the RNR case above.)
BOOST_AUTO_TEST_CASE(a_message_to_an_empty_queue_lands_once_a_receive_is_posted, *needs(Feature::srq)) {
    SrqServer s(2, {.max_recv = 16}, {.rnr_retry = 7, .min_rnr_timer = 1});
    s.client.fill(0, 48, 6);
    BOOST_REQUIRE(s.clients[1].post_send({send(1, s.client.seg(0, 48))}));
    BOOST_TEST(!test::maybe_next(s.server.cq, std::chrono::milliseconds(30)).has_value());
    BOOST_REQUIRE(s.srq.post_recv({recv(21, s.server.seg(512, 64)), recv(22, s.server.seg(1024, 64))}));
    const Completion c = next(s.server.cq);
    BOOST_TEST(c.id == 21u);
    BOOST_TEST(c.status == WcStatus::success);
    BOOST_TEST(c.qp_num == s.servers[1].qp_num());
    BOOST_TEST(c.byte_len == 48u);
    BOOST_TEST(s.server.holds(512, 48, 6));
    BOOST_TEST(next(s.client.cq).status == WcStatus::success);
    // The second receive stays for the next message, whichever QP it comes to.
    BOOST_TEST(s.send_from(0, 2, 2048, 8, 7).status == WcStatus::success);
    const Completion d = next(s.server.cq);
    BOOST_TEST(d.id == 22u);
    BOOST_TEST(d.qp_num == s.servers[0].qp_num());
    BOOST_TEST(s.server.holds(1024, 8, 7));
    test::expect_empty(s.server.cq);
}

// With no RNR retries, a message that finds the queue empty fails rnr_retry_exceeded at the requester; the
// server QP did nothing wrong and stays ready, and nothing completes on the server.
BOOST_AUTO_TEST_CASE(an_empty_queue_without_retries_is_rnr_retry_exceeded, *needs(Feature::srq) * needs(Feature::rnr)) {
    SrqServer s(2, {.max_recv = 16}, {.rnr_retry = 0, .min_rnr_timer = 1});
    BOOST_REQUIRE(s.clients[0].post_send({send(1, s.client.seg(0, 8))}));
    const Completion c = next(s.client.cq);
    BOOST_TEST(c.id == 1u);
    BOOST_TEST(c.status == WcStatus::rnr_retry_exceeded);
    BOOST_TEST(s.clients[0].state() == QpState::error);
    BOOST_TEST(s.servers[0].state() == QpState::rts);
    BOOST_TEST(s.servers[1].state() == QpState::rts);
    test::expect_empty(s.server.cq);
}

// A server QP that fails flushes only the receives it took: the queue's stay for the other QPs. Where the
// stack reports it, the failed QP's Last WQE Reached event follows.
BOOST_AUTO_TEST_CASE(a_qp_in_error_leaves_the_queue_to_the_others,
                     *needs(Feature::srq) * needs(Feature::error_flush) * needs(Feature::remote_access_check)) {
    SrqServer s(2);
    BOOST_REQUIRE(s.srq.post_recv({recv(40, s.server.seg(0, 64)), recv(41, s.server.seg(64, 64)),
                                   recv(42, s.server.seg(128, 64))}));
    // Server QP 0 writes past the client's region: remote access error, and QP 0 goes to error.
    const RemoteRegion r = s.client.mr.remote();
    const RemoteRegion beyond(r.addr() + r.length() - 16, 64, r.rkey(), r.backend());
    BOOST_REQUIRE(s.servers[0].post_send({write(7, s.server.seg(4096, 64), beyond)}));
    const Completion bad = next(s.server.cq);
    BOOST_TEST(bad.id == 7u);
    BOOST_TEST(bad.status == WcStatus::remote_access);
    BOOST_TEST(s.servers[0].state() == QpState::error);
    // Nothing of the queue was flushed: QP 0 had taken none of it.
    test::expect_empty(s.server.cq);
    if (reports_last_wqe()) {
        const auto e = await_srq_event(s.server.domain);
        BOOST_REQUIRE(e.has_value());
        BOOST_TEST((e->type == EventType::qp_last_wqe_reached));
        BOOST_TEST(e->qp_num == s.servers[0].qp_num());
    } else {
        BOOST_TEST_MESSAGE("Last WQE Reached not checked: " << test::backend_config()
                                                            << " does not report it (Soft-RoCE)");
    }
    // QP 1 takes the queue's receives in order.
    BOOST_TEST(s.send_from(1, 1, 0, 32, 7).status == WcStatus::success);
    BOOST_TEST(s.send_from(1, 2, 0, 16, 8).status == WcStatus::success);
    const Completion r0 = next(s.server.cq);
    const Completion r1 = next(s.server.cq);
    BOOST_TEST(r0.id == 40u);
    BOOST_TEST(r1.id == 41u);
    BOOST_TEST(r0.qp_num == s.servers[1].qp_num());
    BOOST_TEST(r1.status == WcStatus::success);
    BOOST_TEST(s.server.holds(64, 16, 8));
    test::expect_empty(s.server.cq);
}

// The limit event fires once, when a message leaves fewer receives than the limit, naming the queue; it is
// then disarmed until armed again.
BOOST_AUTO_TEST_CASE(the_limit_event_fires_once_when_the_queue_runs_low,
                     *needs(Feature::srq) * needs(Feature::async_events)) {
    SrqServer s(1, {.max_recv = 16});
    // What the device said before the case (a port event) is not this case's.
    while (s.server.domain.next_event()) {
    }
    BOOST_REQUIRE(s.srq.post_recv({recv(50, s.server.seg(0, 64)), recv(51, s.server.seg(64, 64)),
                                   recv(52, s.server.seg(128, 64)), recv(53, s.server.seg(192, 64))}));
    s.srq.arm_limit(3);
    BOOST_TEST(s.send_from(0, 1, 0, 8, 1).status == WcStatus::success);  // 3 left: not below the limit
    BOOST_TEST(next(s.server.cq).id == 50u);
    BOOST_TEST(!await_srq_event(s.server.domain, std::chrono::milliseconds(50)).has_value());
    BOOST_TEST(s.send_from(0, 2, 0, 8, 2).status == WcStatus::success);  // 2 left: below
    BOOST_TEST(next(s.server.cq).id == 51u);
    const auto e = await_srq_event(s.server.domain);
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST((e->type == EventType::srq_limit_reached));
    BOOST_TEST(e->srq_num == s.srq.srq_num());
    BOOST_TEST(s.send_from(0, 3, 0, 8, 3).status == WcStatus::success);  // disarmed: no second event
    BOOST_TEST(next(s.server.cq).id == 52u);
    BOOST_TEST(!await_srq_event(s.server.domain, std::chrono::milliseconds(50)).has_value());
    // Armed again while one receive is left: the next message fires it.
    BOOST_REQUIRE(s.srq.post_recv({recv(54, s.server.seg(256, 64))}));
    s.srq.arm_limit(2);
    BOOST_TEST(s.send_from(0, 4, 0, 8, 4).status == WcStatus::success);  // 1 left: below 2
    BOOST_TEST(next(s.server.cq).id == 53u);
    const auto again = await_srq_event(s.server.domain);
    BOOST_REQUIRE(again.has_value());
    BOOST_TEST((again->type == EventType::srq_limit_reached));
}

// The QPs keep their queue: the handle may go, and the receives posted before still serve them.
BOOST_AUTO_TEST_CASE(qps_keep_their_queue_alive, *needs(Feature::srq)) {
    SrqServer s(1);
    BOOST_REQUIRE(s.srq.post_recv({recv(60, s.server.seg(0, 64))}));
    s.srq = SharedReceiveQueue();
    BOOST_TEST(s.send_from(0, 1, 0, 24, 9).status == WcStatus::success);
    const Completion c = next(s.server.cq);
    BOOST_TEST(c.id == 60u);
    BOOST_TEST(c.status == WcStatus::success);
    BOOST_TEST(s.server.holds(0, 24, 9));
}

// Backends without shared receive queues say so, and what to do instead.
BOOST_AUTO_TEST_CASE(a_backend_without_them_says_so,
                     *test::only_if([] { return !test::backend_caps().has(Feature::srq); },
                                    "the backend has shared receive queues")) {
    Domain dom = open(test::backend_config());
    const Error e = error_of([&] { (void)dom.create_srq(); });
    BOOST_TEST(e.code() == Errc::not_supported);
    BOOST_TEST(contains(e.what(), "post receives to each QP"));
}

BOOST_AUTO_TEST_SUITE_END()
