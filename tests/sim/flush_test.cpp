// Flushed requests never take effect. When a requester goes to error, what it still had on the wire is
// flushed; the program may then post more requests to the errored QP (legal: they flush at once) and reuse
// the send-queue slots. A packet of a flushed request that arrives late must not execute, and must never
// make the responder read the slot a newer request now occupies.
#include "node.hpp"

#include <weft/testing.hpp>

#include <algorithm>

using namespace weft;
using weft::sim::test::link;
using weft::sim::test::next;
using weft::sim::test::Node;

namespace {

constexpr std::size_t target = 0;         // where the first writes go (64 KiB)
constexpr std::size_t canary = 512 * 1024;  // where only requests posted to the errored QP point

// Every packet is held up for up to 20 ms, the requester gives up after two tries of ~1 ms: it goes to
// error while its writes are still on the wire.
void run(const testing::Seed& s) {
    QpOptions o;
    o.timeout = 8;    // ~1 ms
    o.retry_cnt = 1;  // two tries
    o.max_send = 4;   // slots wrap after four requests
    const std::string cfg = s.config + ",delay=1,delay_ns=20000000";
    Node a(cfg, o), b(cfg, o);
    link(a, b);
    std::fill(a.buf.begin(), a.buf.begin() + 64 * 1024, std::byte{0x11});
    std::fill(a.buf.begin() + 64 * 1024, a.buf.begin() + 128 * 1024, std::byte{0x22});
    for (std::uint64_t i = 0; i < 4; ++i) {
        BOOST_REQUIRE(a.qp.post_send({write(i, a.mr.slice(i * 16384, 16384), b.mr.remote().slice(target + i * 16384, 16384))}));
    }
    std::vector<Completion> first;
    for (int k = 0; k < 4; ++k) first.push_back(next(a.cq));
    // The situation under test: the head write timed out (its packets still held up), the rest flushed.
    BOOST_TEST_REQUIRE((first[0].status == WcStatus::transport_retry_exceeded), first[0]);
    // Posted to the errored QP: each flushes at once, in a slot a write above used.
    for (std::uint64_t i = 0; i < 8; ++i) {
        BOOST_REQUIRE(a.qp.post_send({write(100 + i, a.mr.slice(64 * 1024 + (i % 4) * 16384, 16384),
                                            b.mr.remote().slice(canary + (i % 4) * 16384, 16384))}));
        auto c = next(a.cq);
        BOOST_TEST(c.id == 100 + i);
        BOOST_TEST((c.status == WcStatus::flushed), c);
    }
    // Let every late packet arrive: the fabric runs while B polls.
    Completion wc[4];
    for (int spin = 0; spin < 100000; ++spin) {
        if (!b.cq.poll(wc).empty()) BOOST_FAIL("the responder completed something: " << wc[0]);
    }
    BOOST_TEST(std::all_of(b.buf.begin() + canary, b.buf.begin() + canary + 64 * 1024,
                           [](std::byte x) { return x == std::byte{0}; }),
               "a request flushed at posting wrote into the region only it targeted");
    // Writes that completed flushed (not the one that failed) left no byte behind either.
    for (const auto& c : first) {
        if (c.status != WcStatus::flushed) continue;
        const auto at = b.buf.begin() + static_cast<std::ptrdiff_t>(target + c.id * 16384);
        BOOST_TEST(std::all_of(at, at + 16384, [](std::byte x) { return x == std::byte{0}; }),
                   "write " << c.id << " completed flushed but its bytes landed");
    }
    BOOST_TEST((a.qp.state() == QpState::error));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(flushed_requests)

BOOST_AUTO_TEST_CASE(never_take_effect_even_when_their_slots_are_reused) {
    testing::sweep([](const testing::Seed& s) { run(s); }, {.base = "sim:fabric=flush_reuse", .seeds = 50});
}

BOOST_AUTO_TEST_SUITE_END()
