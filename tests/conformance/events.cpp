// Conformance: asynchronous events (Feature::async_events): Domain::event_fd and Domain::next_event report
// what happens to a domain's objects outside any call on them. Nothing is reported when nothing happened;
// a peer's disconnect, a CQ overrun and a responder failed by a peer's request are reported, on the domain
// they concern, naming the QP. Not
// recorded for the differential check: what a stack reports asynchronously differs (rxe drops an overrun
// completion without an event, docs/misuse.md).
#include "harness.hpp"
#include "../support/expect_error.hpp"

#include <poll.h>

#include <optional>

using namespace weft;
using weft::test::contains;
using weft::test::error_of;
using weft::test::needs;

namespace {

bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

bool is_sim() { return test::backend_caps().kind == BackendKind::sim; }
bool lacks_events() { return !test::backend_caps().has(Feature::async_events); }
// Where a responder that a peer's request failed says so in an event: the simulator's spec profile, and
// verbs on hardware that raises the spec's affiliated errors. ofi's providers report nothing of the kind.
bool reports_responder_errors() {
    const Capabilities& c = test::backend_caps();
    return (c.kind == BackendKind::sim || c.kind == BackendKind::verbs) && c.profile != "rxe" &&
           c.has(Feature::remote_access_check);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(events)

BOOST_AUTO_TEST_CASE(nothing_happened_nothing_is_reported, *needs(Feature::async_events)) {
    test::Unrecorded unrecorded;
    test::Pair p;
    const int fd = p.a.domain.event_fd();
    BOOST_TEST(fd >= 0);
    BOOST_TEST(p.a.domain.event_fd() == fd);  // the domain's one descriptor
    // What the device may have said before this case (a port event of its set-up) is read and shown.
    for (int i = 0; i < 16; ++i) {
        auto e = p.a.domain.next_event();
        if (!e) break;
        BOOST_TEST_MESSAGE("pending before the case: " << to_string(e->type) << " " << e->what);
        BOOST_TEST((e->type == EventType::port_active || e->type == EventType::other));
    }
    BOOST_TEST(!p.a.domain.next_event().has_value());
    BOOST_TEST(!readable(fd));
    // Traffic that succeeds is no event.
    p.a.fill(0, 64, 1);
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.seg(0, 64), p.b.remote(0, 64))}));
    BOOST_TEST(test::next(p.a.cq).status == WcStatus::success);
    BOOST_TEST(!p.a.domain.next_event().has_value());
}

BOOST_AUTO_TEST_CASE(a_peers_disconnect_is_an_event_of_the_peers_domain_naming_its_qp,
                     *needs(Feature::async_events) * needs(Feature::disconnect)) {
    test::Unrecorded unrecorded;
    test::Pair p(test::unconnected);
    // verbs closes only a connection made through rdma_cm (disconnect.cpp); the others any connected pair.
    if (test::backend_caps().kind == BackendKind::verbs) {
        p.connect_through_listener();
    } else {
        p.connect();
    }
    // Side b's descriptor, where it lives in this process (two processes: the events are asked for only).
    const bool local_b = !test::peer::is_remote(p.b.domain);
    const int fd = local_b ? p.b.domain.event_fd() : -1;
    p.a.qp.disconnect();
    // ofi tells a peer QP of this process at once, and its descriptor wakes a poller; on verbs the CM's DREQ
    // reaches the peer's domain within moments, and its descriptor wakes a poller then.
    if (local_b && test::backend_caps().kind == BackendKind::ofi) BOOST_TEST(readable(fd));
    if (local_b && test::backend_caps().kind == BackendKind::verbs) {
        pollfd w{fd, POLLIN, 0};
        BOOST_TEST(::poll(&w, 1, static_cast<int>(std::chrono::milliseconds(test::completion_deadline).count())) == 1);
    }
    const auto e = test::await_event(p.b.domain);
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST_MESSAGE(to_string(e->type) << " QP " << e->qp_num << ": " << e->what);
    BOOST_TEST((e->type == EventType::peer_disconnected));
    BOOST_TEST(e->qp_num == p.b.qp.qp_num());
    // In error at once on the simulator; on ofi once its CQ has been polled after the loss grace (the
    // provider's last deliveries are read first).
    const auto deadline = std::chrono::steady_clock::now() + test::completion_deadline;
    while (p.b.qp.state() != QpState::error && std::chrono::steady_clock::now() < deadline) {
        BOOST_TEST(!test::maybe_next(p.b.cq, std::chrono::milliseconds(1)).has_value());
    }
    BOOST_TEST(p.b.qp.state() == QpState::error);
    BOOST_TEST(!p.b.domain.next_event().has_value());  // one event for one disconnect
    if (local_b) BOOST_TEST(!readable(fd));
    BOOST_TEST(!p.a.domain.next_event().has_value());  // the side that disconnected is told nothing
}

BOOST_AUTO_TEST_CASE(a_cq_overrun_is_a_cq_error_event_naming_the_cq_and_its_fd_wakes_a_poller,
                     *needs(Feature::async_events) *
                         test::only_if(is_sim, "only the simulator lets a CQ overrun (verbs grows a CQ for the "
                                               "queues on it, ofi does not bound it: docs/misuse.md)")) {
    test::Unrecorded unrecorded;
    test::Pair p;
    const int fd = p.a.domain.event_fd();
    CompletionQueue small = p.a.domain.create_cq({.depth = 2});
    QueuePair qp = p.a.domain.create_qp({.send_cq = small, .recv_cq = small});
    QueuePair peer = p.b.domain.create_qp({.send_cq = p.b.cq, .recv_cq = p.b.cq});
    qp.connect(peer.address());
    peer.connect(qp.address());
    BOOST_REQUIRE(qp.post_send({write(1, p.a.seg(0, 8), p.b.remote(0, 8)), write(2, p.a.seg(0, 8), p.b.remote(8, 8)),
                                write(3, p.a.seg(0, 8), p.b.remote(16, 8)), write(4, p.a.seg(0, 8), p.b.remote(24, 8))}));
    BOOST_TEST(readable(fd));  // work in flight: a poller waiting on the descriptor would call next_event
    const auto e = test::await_event(p.a.domain);
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST_MESSAGE(to_string(e->type) << ": " << e->what);
    BOOST_TEST((e->type == EventType::cq_error));
    BOOST_TEST(e->cq_num == small.cq_num());  // the event names the CQ that overran, not the pair's
    BOOST_TEST(small.cq_num() != 0u);
    BOOST_TEST(small.cq_num() != p.a.cq.cq_num());
    BOOST_TEST(qp.state() == QpState::error);
}

// A write past the end of B's region fails A's request (remote_access) and puts B's QP in error. No
// completion of B's says why (its receive only flushes), so B's domain reports qp_fatal naming B's QP: the
// spec's "local access violation work queue error" (IBV_EVENT_QP_ACCESS_ERR). A is told nothing.
BOOST_AUTO_TEST_CASE(a_request_outside_a_region_fails_the_responder_with_a_qp_fatal_event,
                     *needs(Feature::async_events) *
                         test::only_if(reports_responder_errors,
                                       "the backend reports no affiliated error of a responder (rxe, ofi)")) {
    test::Unrecorded unrecorded;
    test::Pair p;
    BOOST_REQUIRE(p.b.qp.post_recv({recv(10, p.b.seg(1024, 64))}));
    const auto& r = p.b.mr.remote();
    RemoteRegion past_end(r.addr() + r.length() - 4, 16, r.rkey(), r.backend());
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.seg(0, 16), past_end)}));
    BOOST_TEST(test::next(p.a.cq).status == WcStatus::remote_access);
    const auto e = test::await_event(p.b.domain);
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST_MESSAGE(to_string(e->type) << " QP " << e->qp_num << ": " << e->what);
    BOOST_TEST((e->type == EventType::qp_fatal));
    BOOST_TEST(e->qp_num == p.b.qp.qp_num());
    BOOST_TEST(p.b.qp.state() == QpState::error);
    const Completion c = test::next(p.b.cq);
    BOOST_TEST(c.id == 10u);
    BOOST_TEST(c.status == WcStatus::flushed);
    BOOST_TEST(!p.b.domain.next_event().has_value());  // one event for one failure
    BOOST_TEST(!p.a.domain.next_event().has_value());  // the requester learns from its completion
}

BOOST_AUTO_TEST_CASE(without_the_feature_events_are_not_supported,
                     *test::only_if(lacks_events, "the backend has Feature::async_events")) {
    test::Unrecorded unrecorded;
    test::Pair p;
    Error e = error_of([&] { (void)p.a.domain.next_event(); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == Errc::not_supported));
    BOOST_TEST(contains(e.what(), "asynchronous events"), e.what());
    Error f = error_of([&] { (void)p.a.domain.event_fd(); });
    BOOST_TEST((f.code() == Errc::not_supported));
}

BOOST_AUTO_TEST_SUITE_END()
