// Conformance: QueuePair::disconnect (Feature::disconnect) closes a connection so that the peer learns it at
// once: both QPs go to error, and what either still has outstanding completes flushed, in order, with no
// error completion before the flushes and without waiting for a timeout. Backends without the feature say
// so when it is called.
//
// Each case runs on a pair connected by address exchange and on one connected through a listener
// (weft::listen / weft::connect). On verbs only the second has a connection to close: rdma_disconnect needs
// the rdma_cm id of the handshake, and a QP connected by address exchange has none, so there disconnect()
// says so (not_supported) and leaves the QP alone. None of these cases is recorded for the differential
// check (the simulator's pairs are connected by address exchange).
#include "harness.hpp"
#include "../support/expect_error.hpp"

using namespace weft;
using weft::test::contains;
using weft::test::error_of;
using weft::test::needs;
using weft::test::next;

namespace {

bool lacks_disconnect() { return !test::backend_caps().has(Feature::disconnect); }
// Whether a QP connected by address exchange can be disconnected: everywhere with the feature but verbs.
bool disconnects_exchanged() {
    return !lacks_disconnect() && test::backend_caps().kind != BackendKind::verbs;
}
bool cannot_disconnect_exchanged() { return !disconnects_exchanged(); }

auto exchanged() {
    return test::only_if(disconnects_exchanged,
                         "verbs closes only a connection made through rdma_cm (weft::connect / Listener::accept), "
                         "as rdma_disconnect: the case's _through_a_listener twin runs instead");
}
bool disconnects_through_listener() {
    return !lacks_disconnect() && test::backend_caps().has(Feature::listener);
}
auto through_listener() {
    return test::only_if(disconnects_through_listener, "the backend lacks Feature::disconnect or Feature::listener");
}

bool verbs_with_listener() {
    return test::backend_caps().kind == BackendKind::verbs && disconnects_through_listener();
}

enum class Via { address_exchange, listener };

void connect_pair(test::Pair& p, Via via) {
    if (via == Via::listener) {
        p.connect_through_listener();
    } else {
        p.connect();
    }
}

// Completions of `cq` until `n` came (the harness's deadline fails the case otherwise).
std::vector<Completion> take(CompletionQueue& cq, std::size_t n) {
    std::vector<Completion> out;
    for (std::size_t i = 0; i < n; ++i) out.push_back(next(cq));
    return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(disconnect)

// A sends one message and disconnects. A's own receives flush; B gets the message, then every receive it
// still has posted flushed, although it has nothing outstanding that could have timed out.
void the_peer_learns_at_once_and_both_sides_flush_in_order(Via via) {
    test::Unrecorded unrecorded;
    // A retry budget of hours: a peer that learned by timing out would make the case fail by its deadline.
    test::Pair p(test::unconnected, QpOptions{.timeout = 24, .retry_cnt = 7});
    connect_pair(p, via);
    p.a.fill(0, 64, 3);
    BOOST_REQUIRE(p.b.qp.post_recv({recv(10, p.b.seg(1024, 64)), recv(11, p.b.seg(2048, 64)),
                                    recv(12, p.b.seg(3072, 64))}));
    BOOST_REQUIRE(p.a.qp.post_recv({recv(20, p.a.seg(4096, 64)), recv(21, p.a.seg(5120, 64))}));
    BOOST_REQUIRE(p.a.qp.post_send({send(1, p.a.seg(0, 64))}));
    BOOST_TEST(next(p.a.cq).status == WcStatus::success);  // acknowledged: B has it

    p.a.qp.disconnect();
    BOOST_TEST(p.a.qp.state() == QpState::error);
    const auto at_a = take(p.a.cq, 2);
    BOOST_TEST(at_a[0].id == 20u);
    BOOST_TEST(at_a[1].id == 21u);
    for (const Completion& c : at_a) BOOST_TEST(c.status == WcStatus::flushed);

    const auto at_b = take(p.b.cq, 3);
    BOOST_TEST(at_b[0].id == 10u);
    BOOST_TEST(at_b[0].status == WcStatus::success);
    BOOST_TEST(p.b.holds(1024, 64, 3));
    BOOST_TEST(at_b[1].id == 11u);
    BOOST_TEST(at_b[2].id == 12u);
    BOOST_TEST(at_b[1].status == WcStatus::flushed);
    BOOST_TEST(at_b[2].status == WcStatus::flushed);
    BOOST_TEST(p.b.qp.state() == QpState::error);
    test::expect_empty(p.a.cq);
    test::expect_empty(p.b.cq);
}

// After the peer disconnected, whatever B posts completes flushed, and A is not touched by it.
void requests_posted_after_the_peer_disconnected_flush(Via via) {
    test::Unrecorded unrecorded;
    test::Pair p(test::unconnected, QpOptions{.timeout = 24, .retry_cnt = 7});
    connect_pair(p, via);
    BOOST_REQUIRE(p.b.qp.post_recv({recv(10, p.b.seg(0, 64))}));
    p.a.qp.disconnect();
    BOOST_TEST(next(p.b.cq).status == WcStatus::flushed);  // B has learned
    p.b.fill(1024, 64, 9);
    const PostStatus st = p.b.qp.post_send({write(5, p.b.seg(1024, 64), p.a.remote(0, 64)), send(6, p.b.seg(1024, 8))});
    BOOST_REQUIRE_MESSAGE(st, "post_send after the peer disconnected: " << st.reason());
    const auto c = take(p.b.cq, 2);
    BOOST_TEST(c[0].id == 5u);
    BOOST_TEST(c[1].id == 6u);
    BOOST_TEST(c[0].status == WcStatus::flushed);
    BOOST_TEST(c[1].status == WcStatus::flushed);
    bool untouched = true;  // the flushed write took no effect: A's buffer is as allocated, zeros
    for (std::size_t i = 0; i < 64; ++i) untouched = untouched && p.a.buf[i] == std::byte{0};
    BOOST_TEST(untouched);
    test::expect_empty(p.a.cq);
}

// Both sides may disconnect, in either order, and a second call changes nothing.
void both_sides_disconnecting_is_fine_and_a_second_call_is_a_no_op(Via via) {
    test::Unrecorded unrecorded;
    test::Pair p(test::unconnected);
    connect_pair(p, via);
    BOOST_REQUIRE(p.a.qp.post_recv({recv(1, p.a.seg(0, 64))}));
    p.a.qp.disconnect();
    p.a.qp.disconnect();
    BOOST_TEST(next(p.a.cq).status == WcStatus::flushed);
    p.b.qp.disconnect();
    BOOST_TEST(p.a.qp.state() == QpState::error);
    BOOST_TEST(p.b.qp.state() == QpState::error);
    test::expect_empty(p.a.cq);
    test::expect_empty(p.b.cq);
}

BOOST_AUTO_TEST_CASE(the_peer_learns_at_once_and_both_sides_flush_in_order_after_address_exchange, *exchanged()) {
    the_peer_learns_at_once_and_both_sides_flush_in_order(Via::address_exchange);
}
BOOST_AUTO_TEST_CASE(the_peer_learns_at_once_and_both_sides_flush_in_order_through_a_listener, *through_listener()) {
    the_peer_learns_at_once_and_both_sides_flush_in_order(Via::listener);
}
BOOST_AUTO_TEST_CASE(requests_posted_after_the_peer_disconnected_flush_after_address_exchange, *exchanged()) {
    requests_posted_after_the_peer_disconnected_flush(Via::address_exchange);
}
BOOST_AUTO_TEST_CASE(requests_posted_after_the_peer_disconnected_flush_through_a_listener, *through_listener()) {
    requests_posted_after_the_peer_disconnected_flush(Via::listener);
}
BOOST_AUTO_TEST_CASE(both_sides_disconnecting_is_fine_and_a_second_call_is_a_no_op_after_address_exchange,
                     *exchanged()) {
    both_sides_disconnecting_is_fine_and_a_second_call_is_a_no_op(Via::address_exchange);
}
BOOST_AUTO_TEST_CASE(both_sides_disconnecting_is_fine_and_a_second_call_is_a_no_op_through_a_listener,
                     *through_listener()) {
    both_sides_disconnecting_is_fine_and_a_second_call_is_a_no_op(Via::listener);
}

// On verbs a QP connected through a listener keeps its rdma_cm connection until it is destroyed, and
// rdma_destroy_id sends the CM's DREQ of a connection still open: the peer learns of the destroyed QP as of a
// disconnect (its receives flush, peer_disconnected), not by timing out. The peer's retry budget is hours.
BOOST_AUTO_TEST_CASE(on_verbs_destroying_a_qp_connected_through_a_listener_tells_the_peer,
                     *test::only_if(verbs_with_listener, "verbs only: elsewhere a destroyed QP's peer learns by "
                                                         "transport_retry_exceeded (errors/*)")) {
    test::Unrecorded unrecorded;
    test::Pair p(test::unconnected, QpOptions{.timeout = 24, .retry_cnt = 7});
    p.connect_through_listener();
    BOOST_REQUIRE(p.b.qp.post_recv({recv(10, p.b.seg(0, 64)), recv(11, p.b.seg(64, 64))}));
    p.a.qp = QueuePair();
    const auto at_b = take(p.b.cq, 2);
    BOOST_TEST(at_b[0].id == 10u);
    BOOST_TEST(at_b[1].id == 11u);
    for (const Completion& c : at_b) BOOST_TEST(c.status == WcStatus::flushed);
    BOOST_TEST(p.b.qp.state() == QpState::error);
    const auto e = test::await_event(p.b.domain);
    BOOST_REQUIRE(e.has_value());
    BOOST_TEST((e->type == EventType::peer_disconnected));
    BOOST_TEST(e->qp_num == p.b.qp.qp_num());
    test::expect_empty(p.b.cq);
}

BOOST_AUTO_TEST_CASE(a_queue_pair_never_connected_cannot_be_disconnected) {
    test::Unrecorded unrecorded;
    test::Pair p(test::unconnected);
    Error e = error_of([&] { p.a.qp.disconnect(); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == Errc::invalid_state));
    BOOST_TEST(contains(e.what(), "only a connected QP"), e.what());
    BOOST_TEST(p.a.qp.state() == QpState::init);
}

// Without the feature, or on verbs for a QP connected by address exchange.
BOOST_AUTO_TEST_CASE(where_a_qp_cannot_be_disconnected_it_is_not_supported_and_says_what_to_do,
                     *test::only_if(cannot_disconnect_exchanged,
                                    "the backend disconnects QPs connected by address exchange")) {
    test::Unrecorded unrecorded;
    test::Pair p;
    Error e = error_of([&] { p.a.qp.disconnect(); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == Errc::not_supported));
    BOOST_TEST(contains(e.what(), "destroy the QP"), e.what());
    BOOST_TEST(p.a.qp.state() == QpState::rts);  // untouched
}

BOOST_AUTO_TEST_SUITE_END()
