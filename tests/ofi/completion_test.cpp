// Every request completes exactly once with its true status: a send to a peer whose QP is in error fails
// (it neither hangs nor succeeds), and write_with_imm to a peer that has no receive posted waits for one,
// as RC does with rnr_retry = 7, instead of completing success before anything consumed it.
#include <weft/weft.hpp>

#include "support.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <thread>
#include <vector>

namespace {

using namespace weft;
using Side = weft::test::OfiSide;

struct Pair {
    Side a, b;
    Pair() {
        auto addr_a = a.qp.address();
        a.qp.connect(b.qp.address());
        b.qp.connect(addr_a);
    }
};

// Polls `cq` for up to `limit` (an idle poll progresses the peer's CQs too); false when nothing came.
bool poll_for(CompletionQueue& cq, Completion& out, std::chrono::milliseconds limit) {
    Completion wc[1];
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (cq.poll(wc).empty()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
    }
    out = wc[0];
    return true;
}

// Puts `s`'s QP in error with a receive whose key names no region (local_protection).
void break_qp(Side& s) {
    LocalSegment bad = s.mr.slice(0, 8);
    bad.lkey ^= 0x5a5a5;
    BOOST_REQUIRE(s.qp.post_recv({recv(99, bad)}));
    Completion wc[1];
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (s.cq.poll(wc).empty()) {
        if (std::chrono::steady_clock::now() > deadline) BOOST_FAIL("the bad receive never completed");
    }
    BOOST_REQUIRE(wc[0].status != WcStatus::success);
    BOOST_REQUIRE(s.qp.state() == QpState::error);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(true_status)

BOOST_AUTO_TEST_CASE(a_send_to_a_peer_in_error_completes_with_an_error) {
    Pair p;
    // One send that lands first, so the connection carried traffic.
    BOOST_REQUIRE(p.b.qp.post_recv({recv(10, p.b.mr.slice(0, 64))}));
    BOOST_REQUIRE(p.a.qp.post_send({send(1, p.a.mr.slice(0, 64))}));
    Completion c;
    BOOST_REQUIRE(poll_for(p.a.cq, c, std::chrono::seconds(10)));
    BOOST_REQUIRE_MESSAGE(c.ok(), c);
    BOOST_REQUIRE(poll_for(p.b.cq, c, std::chrono::seconds(10)));
    BOOST_REQUIRE_MESSAGE(c.ok(), c);

    break_qp(p.b);
    BOOST_REQUIRE(p.a.qp.post_send({send(2, p.a.mr.slice(0, 64)), send(3, p.a.mr.slice(0, 64))}));
    BOOST_REQUIRE_MESSAGE(poll_for(p.a.cq, c, std::chrono::seconds(20)), "no completion within 20 s");
    BOOST_TEST(c.id == 2u);
    BOOST_TEST(c.status != WcStatus::success, c);
    BOOST_REQUIRE(poll_for(p.a.cq, c, std::chrono::seconds(20)));
    BOOST_TEST(c.id == 3u);
    BOOST_TEST(c.status == WcStatus::flushed, c);
    BOOST_TEST(p.a.qp.state() == QpState::error);
    // Exactly once: nothing further arrives.
    BOOST_TEST(!poll_for(p.a.cq, c, std::chrono::milliseconds(200)), "extra completion " << c);
}

BOOST_AUTO_TEST_CASE(write_with_imm_waits_for_a_receive_at_the_target) {
    Pair p;
    const auto& caps = p.a.dom.capabilities();
    if (!caps.has(Feature::write_with_imm)) {
        BOOST_TEST_MESSAGE("skipped: no write_with_imm on " << caps.device);
        return;
    }
    // The marker send waits for a receive only where the provider completes a send once a receive took it:
    // tcp (delivery-complete) and verbs (native immediates, RNR in the device). shm completes it once
    // buffered locally, sockets and rxm once buffered at the target (docs/backends/ofi.md, "No RNR").
    if (caps.device.rfind("tcp/", 0) != 0 && caps.device.rfind("verbs/", 0) != 0) {
        BOOST_TEST_MESSAGE("skipped: " << caps.device << " completes a send once it has buffered it, before a "
                           "receive takes it: nothing waits as RNR there (docs/backends/ofi.md)");
        return;
    }
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.mr.slice(0, 64), p.b.mr.remote().slice(128, 64)).with_imm(7)}));
    Completion c;
    // No receive at the target: nothing may complete at either side (RNR with rnr_retry = 7 waits).
    BOOST_TEST(!poll_for(p.a.cq, c, std::chrono::milliseconds(500)), "completed without a receive: " << c);
    BOOST_TEST(p.a.qp.state() == QpState::rts);
    // Once a receive is posted both complete.
    BOOST_REQUIRE(p.b.qp.post_recv({recv(20, p.b.mr.slice(0, 8))}));
    BOOST_REQUIRE(poll_for(p.a.cq, c, std::chrono::seconds(20)));
    BOOST_TEST(c.id == 1u);
    BOOST_TEST(c.ok(), c);
    BOOST_REQUIRE(poll_for(p.b.cq, c, std::chrono::seconds(20)));
    BOOST_TEST(c.id == 20u);
    BOOST_TEST(c.opcode == Opcode::recv_rdma_with_imm);
    BOOST_TEST(c.imm == 7u);
}

BOOST_AUTO_TEST_SUITE_END()
