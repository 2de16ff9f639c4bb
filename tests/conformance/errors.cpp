// Conformance: error completions, the QP error state, and flushing.
#include "harness.hpp"

#include <string>
#include <thread>
#include <vector>

using namespace weft;
using weft::test::needs;
using weft::test::next;
using weft::test::Pair;

namespace {

// Posts a send and a receive on `s` after it is in error and checks both flush, in order.
void expect_later_requests_flush(weft::test::Side& s) {
    BOOST_TEST(s.qp.state() == QpState::error);
    BOOST_REQUIRE(s.qp.post_send({send(900, s.seg(0, 8)), send(901, s.seg(0, 8)).unsignaled()}));
    auto c1 = next(s.cq);
    auto c2 = next(s.cq);
    BOOST_TEST(c1.id == 900u);
    BOOST_TEST(c1.status == WcStatus::flushed);
    BOOST_TEST(c2.id == 901u);  // flushed requests complete even when unsignaled
    BOOST_TEST(c2.status == WcStatus::flushed);
    BOOST_REQUIRE(s.qp.post_recv({recv(902, s.seg(0, 8))}));
    auto c3 = next(s.cq);
    BOOST_TEST(c3.id == 902u);
    BOOST_TEST(c3.status == WcStatus::flushed);
    BOOST_TEST(c3.qp_num == s.qp.qp_num());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(bad_rkey_is_remote_access_error_and_flushes_the_rest, *needs(Feature::remote_access_check)) {
    Pair p;
    RemoteRegion bogus(p.b.mr.remote().addr(), 64, p.b.mr.rkey() ^ 0x5a5a00, p.b.mr.remote().backend());
    BOOST_REQUIRE(p.a.qp.post_send({
        write(1, p.a.seg(0, 8), p.b.remote(0, 8)),
        write(2, p.a.seg(0, 8), bogus),
        write(3, p.a.seg(0, 8), p.b.remote(0, 8)),
        write(4, p.a.seg(0, 8), p.b.remote(0, 8)).unsignaled(),
    }));
    auto c1 = next(p.a.cq);
    BOOST_TEST(c1.id == 1u);
    BOOST_TEST(c1.status == WcStatus::success);
    auto c2 = next(p.a.cq);
    BOOST_TEST(c2.id == 2u);
    BOOST_TEST(c2.status == WcStatus::remote_access);
    BOOST_TEST(c2.qp_num == p.a.qp.qp_num());
    auto c3 = next(p.a.cq);
    BOOST_TEST(c3.id == 3u);
    BOOST_TEST(c3.status == WcStatus::flushed);
    auto c4 = next(p.a.cq);
    BOOST_TEST(c4.id == 4u);
    BOOST_TEST(c4.status == WcStatus::flushed);
    expect_later_requests_flush(p.a);
}

BOOST_AUTO_TEST_CASE(write_out_of_bounds_is_remote_access_error, *needs(Feature::remote_access_check)) {
    Pair p;
    const auto& r = p.b.mr.remote();
    RemoteRegion past_end(r.addr() + r.length() - 4, 16, r.rkey(), r.backend());
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.seg(0, 16), past_end)}));
    auto c = next(p.a.cq);
    BOOST_TEST(c.status == WcStatus::remote_access);
    BOOST_TEST(p.a.qp.state() == QpState::error);
}

BOOST_AUTO_TEST_CASE(write_without_remote_write_right_is_remote_access_error, *needs(Feature::remote_access_check)) {
    Pair p;
    auto ro = p.b.memory(4096);
    auto ro_mr = p.b.domain.register_memory(ro.bytes(), Access::local_write | Access::remote_read);
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.seg(0, 8), ro_mr.remote().slice(0, 8))}));
    auto c = next(p.a.cq);
    BOOST_TEST(c.status == WcStatus::remote_access);
}

BOOST_AUTO_TEST_CASE(read_without_remote_read_right_is_remote_access_error,
                     *needs(Feature::remote_access_check) * needs(Feature::read)) {
    Pair p;
    auto wo = p.b.memory(4096);
    auto wo_mr = p.b.domain.register_memory(wo.bytes(), Access::local_write | Access::remote_write);
    BOOST_REQUIRE(p.a.qp.post_send({read(1, p.a.seg(0, 8), wo_mr.remote().slice(0, 8))}));
    auto c = next(p.a.cq);
    BOOST_TEST(c.status == WcStatus::remote_access);
}

BOOST_AUTO_TEST_CASE(atomic_without_remote_atomic_right_is_remote_access_error,
                     *needs(Feature::remote_access_check) * needs(Feature::atomics)) {
    Pair p;
    auto rw = p.b.memory(4096);
    auto rw_mr = p.b.domain.register_memory(rw.bytes(), Access::local_write | Access::remote_write | Access::remote_read);
    BOOST_REQUIRE(p.a.qp.post_send({fetch_add(1, p.a.seg(0, 8), rw_mr.remote().slice(0, 8), 1)}));
    auto c = next(p.a.cq);
    BOOST_TEST(c.status == WcStatus::remote_access);
}

BOOST_AUTO_TEST_CASE(misaligned_atomic_is_rejected_at_post, *needs(Feature::atomics)) {
    Pair p;
    auto st = p.a.qp.post_send({fetch_add(1, p.a.seg(0, 8), p.b.remote(4, 8), 1)});
    BOOST_TEST((st.code() == PostStatus::Code::invalid));
    BOOST_TEST(std::string(st.reason()).find("aligned") != std::string::npos);
    BOOST_TEST(p.a.qp.state() == QpState::rts);
}

BOOST_AUTO_TEST_CASE(bad_lkey_is_local_protection_error) {
    Pair p;
    LocalSegment bad = p.a.seg(0, 64);
    bad.lkey ^= 0x5a5a00;
    BOOST_REQUIRE(p.a.qp.post_send({write(1, bad, p.b.remote(0, 64)), write(2, p.a.seg(0, 8), p.b.remote(0, 8))}));
    auto c = next(p.a.cq);
    BOOST_TEST(c.id == 1u);
    BOOST_TEST(c.status == weft::test::expected(WcStatus::local_protection, {{"rxe", WcStatus::local_qp_operation}}));
    auto c2 = next(p.a.cq);
    BOOST_TEST(c2.id == 2u);
    BOOST_TEST(c2.status == WcStatus::flushed);
    BOOST_TEST(p.a.qp.state() == QpState::error);
}

BOOST_AUTO_TEST_CASE(local_segment_out_of_bounds_is_local_protection_error) {
    Pair p;
    LocalSegment past = p.a.seg(Pair::buffer_size - 32, 32);
    past.length = 64;  // runs 32 bytes past the region
    BOOST_REQUIRE(p.a.qp.post_send({write(1, past, p.b.remote(0, 64))}));
    auto c = next(p.a.cq);
    BOOST_TEST(c.status == WcStatus::local_protection);  // rxe too: only an unknown lkey differs there
}

BOOST_AUTO_TEST_CASE(no_receive_is_rnr_retry_exceeded_and_responder_stays_usable, *needs(Feature::rnr)) {
    QpOptions o;
    o.rnr_retry = 0;
    o.min_rnr_timer = 1;
    Pair p(o);
    BOOST_REQUIRE(p.a.qp.post_send({send(1, p.a.seg(0, 8))}));
    auto c = next(p.a.cq);
    BOOST_TEST(c.id == 1u);
    BOOST_TEST(c.status == WcStatus::rnr_retry_exceeded);
    BOOST_TEST(p.a.qp.state() == QpState::error);
    // The responder did nothing wrong: it is still ready, and its receives still work later.
    BOOST_TEST(p.b.qp.state() == QpState::rts);
    BOOST_REQUIRE(p.b.qp.post_recv({recv(2, p.b.seg(0, 64))}));
    weft::test::expect_empty(p.b.cq);
}

BOOST_AUTO_TEST_CASE(receive_posted_during_rnr_backoff_lets_the_send_succeed, *needs(Feature::rnr)) {
    QpOptions o;
    o.rnr_retry = 7;  // retry forever
    o.min_rnr_timer = 1;
    Pair p(o);
    p.a.fill(0, 40, 8);
    BOOST_REQUIRE(p.a.qp.post_send({send(1, p.a.seg(0, 40))}));
    // Nothing completes while no receive is posted.
    BOOST_TEST(!weft::test::maybe_next(p.a.cq, std::chrono::milliseconds(30)).has_value());
    BOOST_REQUIRE(p.b.qp.post_recv({recv(2, p.b.seg(0, 64))}));
    auto c = next(p.a.cq);
    BOOST_TEST(c.status == WcStatus::success);
    auto rc = next(p.b.cq);
    BOOST_TEST(rc.id == 2u);
    BOOST_TEST(rc.byte_len == 40u);
    BOOST_TEST(p.b.holds(0, 40, 8));
}

BOOST_AUTO_TEST_CASE(receive_too_small_is_length_error_at_responder_and_invalid_request_at_requester) {
    Pair p;
    BOOST_REQUIRE(p.b.qp.post_recv({recv(5, p.b.seg(0, 16)), recv(6, p.b.seg(16, 16))}));
    BOOST_REQUIRE(p.a.qp.post_send({send(1, p.a.seg(0, 64))}));
    auto rc = next(p.b.cq);
    BOOST_TEST(rc.id == 5u);
    BOOST_TEST(rc.status == weft::test::expected(WcStatus::local_length, {{"rxe", WcStatus::local_qp_operation},
                                                                          {"ofi-verbs", WcStatus::local_qp_operation}}));
    auto rc2 = next(p.b.cq);  // the responder is in error: its other receive is flushed
    BOOST_TEST(rc2.id == 6u);
    BOOST_TEST(rc2.status == WcStatus::flushed);
    // libfabric's host providers cannot tell the sender: tcp drops the connection, the others report
    // success (docs/backends/ofi.md).
    const WcStatus want = weft::test::expected(WcStatus::remote_invalid_request,
                                               {{"rxe", WcStatus::remote_operation},
                                                {"ofi-verbs", WcStatus::remote_operation},
                                                {"ofi-tcp", WcStatus::transport_retry_exceeded},
                                                {"ofi-tcp-rxm", WcStatus::success},
                                                {"ofi-verbs-rxm", WcStatus::success},
                                                {"ofi-shm", WcStatus::success},
                                                {"ofi-sockets", WcStatus::success}});
    auto sc = next(p.a.cq);
    BOOST_TEST(sc.id == 1u);
    BOOST_TEST(sc.status == want);
    BOOST_TEST(p.a.qp.state() == (want == WcStatus::success ? QpState::rts : QpState::error));
    BOOST_TEST(p.b.qp.state() == QpState::error);
}

BOOST_AUTO_TEST_CASE(error_flushes_outstanding_receives_in_order, *needs(Feature::remote_access_check)) {
    Pair p;
    BOOST_REQUIRE(p.a.qp.post_recv({recv(11, p.a.seg(0, 8)), recv(12, p.a.seg(8, 8)), recv(13, p.a.seg(16, 8))}));
    RemoteRegion bogus(p.b.mr.remote().addr(), 8, p.b.mr.rkey() ^ 0x5a5a00, p.b.mr.remote().backend());
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.seg(0, 8), bogus)}));
    std::vector<Completion> got;
    for (int i = 0; i < 4; ++i) got.push_back(next(p.a.cq));
    // The failed write and the three flushed receives; receives keep their order among themselves.
    std::vector<std::uint64_t> recv_ids;
    int write_errors = 0;
    for (const auto& c : got) {
        if (c.id == 1) {
            BOOST_TEST(c.status == WcStatus::remote_access);
            ++write_errors;
        } else {
            BOOST_TEST(c.status == WcStatus::flushed);
            recv_ids.push_back(c.id);
        }
    }
    BOOST_TEST(write_errors == 1);
    BOOST_TEST(recv_ids == (std::vector<std::uint64_t>{11, 12, 13}), boost::test_tools::per_element());
}

// Across processes the news comes from the provider's completions (tcp, sockets), the QP's event queue
// (the verbs provider: FI_SHUTDOWN) or, where the provider never says (shm, rxm), the transport deadline
// timeout x (retry_cnt + 1) the ofi backend keeps itself.
BOOST_AUTO_TEST_CASE(destroyed_peer_gives_transport_retry_exceeded) {
    QpOptions o;
    o.timeout = 8;     // ~1 ms
    o.retry_cnt = 1;
    Pair p(o);
    p.b.qp = QueuePair();  // the peer QP is destroyed
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.seg(0, 8), p.b.remote(0, 8))}));
    auto c = next(p.a.cq);
    BOOST_TEST(c.id == 1u);
    BOOST_TEST(c.status == WcStatus::transport_retry_exceeded);
    BOOST_TEST(p.a.qp.state() == QpState::error);
}

// A QP that only waits for messages does not see its peer go, as on an RC device (ibv_rc_pingpong's server
// may still wait for its last send's completion when the client exits): its receives stay outstanding, and
// complete flushed, in order, once the QP goes to error for a reason of its own.
BOOST_AUTO_TEST_CASE(destroyed_peer_leaves_waiting_receives_outstanding) {
    Pair p;
    BOOST_REQUIRE(p.a.qp.post_recv({recv(1, p.a.seg(0, 64)), recv(2, p.a.seg(64, 64))}));
    p.b.qp = QueuePair();  // the peer QP is destroyed
    const auto early = weft::test::maybe_next(p.a.cq, std::chrono::milliseconds(300));
    BOOST_TEST(!early.has_value(), "a receive completed after the peer went: " << (early ? *early : Completion{}));
    BOOST_TEST(p.a.qp.state() == QpState::rts);
    p.a.qp.to_error();
    for (std::uint64_t id = 1; id <= 2; ++id) {
        const Completion c = next(p.a.cq);
        BOOST_TEST(c.id == id);
        BOOST_TEST(c.status == WcStatus::flushed);
    }
}

// QueuePair::to_error drains a QP as ibv_modify_qp(IBV_QPS_ERR) does: it is in error at once, what is
// outstanding completes flushed in order, and so does everything posted later, which takes no effect.
BOOST_AUTO_TEST_CASE(to_error_flushes_what_is_outstanding_and_everything_later) {
    Pair p;
    BOOST_REQUIRE(p.a.qp.post_recv({recv(1, p.a.seg(0, 64)), recv(2, p.a.seg(64, 64)), recv(3, p.a.seg(128, 64))}));
    p.a.qp.to_error();
    BOOST_TEST(p.a.qp.state() == QpState::error);
    for (std::uint64_t id = 1; id <= 3; ++id) {
        const Completion c = next(p.a.cq);
        BOOST_TEST(c.id == id);
        BOOST_TEST(c.status == WcStatus::flushed);
    }
    p.a.fill(1024, 8, 5);
    BOOST_REQUIRE(p.a.qp.post_send({write(4, p.a.seg(1024, 8), p.b.remote(0, 8))}));
    const Completion w = next(p.a.cq);
    BOOST_TEST(w.id == 4u);
    BOOST_TEST(w.status == WcStatus::flushed);
    BOOST_REQUIRE(p.a.qp.post_recv({recv(5, p.a.seg(0, 64))}));
    const Completion r = next(p.a.cq);
    BOOST_TEST(r.id == 5u);
    BOOST_TEST(r.status == WcStatus::flushed);
    p.a.qp.to_error();  // already in error: nothing more
    weft::test::expect_empty(p.a.cq);
    bool zeros = true;  // b's buffer as allocated: the flushed write took no effect
    for (std::size_t i = 0; i < 8; ++i) zeros = zeros && p.b.buf[i] == std::byte{0};
    BOOST_TEST(zeros);
}

BOOST_AUTO_TEST_SUITE_END()
