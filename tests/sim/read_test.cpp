// Reads over time: the responder reads a read's data packet by packet as the response leaves, so a read
// racing CPU stores (or other writes) at the responder can return a mix; a retransmitted read reads
// memory again.
#include "node.hpp"

#include <algorithm>
#include <iostream>
#include <set>

using namespace weft;
using weft::sim::test::link;
using weft::sim::test::next;
using weft::sim::test::Node;

namespace {

constexpr std::size_t record = 16384;  // four 4096-byte packets

// B's program keeps rewriting a 16 KiB record, each time with one byte value throughout; A reads it once.
// Returns how many distinct byte values the read returned.
std::size_t values_in_a_read(const std::string& config) {
    Node a(config), b(config);
    link(a, b);
    std::uint8_t version = 1;
    std::fill_n(b.buf.begin(), record, std::byte{version});
    BOOST_REQUIRE(a.qp.post_send({read(1, a.mr.slice(0, record), b.mr.remote().slice(0, record))}));
    Completion wc[1];
    for (;;) {
        if (!a.cq.poll(wc).empty()) break;
        BOOST_REQUIRE(!sim::Fabric::of(a.dom).idle());
        // B's program: a CPU store of the whole record between two of A's polls.
        ++version;
        std::fill_n(b.buf.begin(), record, std::byte{version});
        (void)b.cq.poll(wc);  // B's program makes a call of its own as well
    }
    BOOST_TEST_REQUIRE(wc[0].ok(), wc[0]);
    std::set<std::byte> seen(a.buf.begin(), a.buf.begin() + record);
    return seen.size();
}

std::string cfg(const std::string& fabric, std::uint64_t seed, const std::string& extra = "") {
    return "sim:seed=" + std::to_string(seed) + ",fabric=" + fabric + (extra.empty() ? "" : "," + extra);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(reads_over_time)

BOOST_AUTO_TEST_CASE(a_read_racing_cpu_stores_at_the_responder_can_return_a_mix) {
    std::uint64_t first = 0, mixed = 0;
    for (std::uint64_t seed = 1; seed <= 100; ++seed) {
        if (values_in_a_read(cfg("rot", seed)) > 1) {
            ++mixed;
            if (!first) first = seed;
        }
        BOOST_TEST(values_in_a_read(cfg("rot_none", seed, "reorder=none")) == 1u,
                   "seed " << seed << ": a read returned a mix with program time off");
    }
    std::cout << "reads_over_time: a read returned a mix of CPU stores at seed " << first << " (" << mixed
              << " of 100 seeds)\n";
    BOOST_TEST(mixed > 0u);
}

BOOST_AUTO_TEST_CASE(a_retransmitted_read_reads_memory_again) {
    const std::string config = cfg("reread", 1, "reorder=none");
    Node a(config, {.timeout = 1, .retry_cnt = 7}), b(config);
    link(a, b);
    auto fabric = sim::Fabric::of(a.dom);
    b.set_word(0, 111);
    BOOST_REQUIRE(a.qp.post_send({read(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
    // The request is on the wire; its response will be lost.
    fabric.set_faults({.drop = 1.0});
    fabric.run_for(std::chrono::microseconds(3));
    fabric.set_faults({});
    BOOST_TEST(fabric.stats().dropped >= 1u);
    // The memory changes before the requester's timeout sends the read again.
    b.set_word(0, 222);
    const Completion c = next(a.cq);
    BOOST_TEST_REQUIRE(c.ok(), c);
    BOOST_TEST(a.word(0) == 222u);
    BOOST_TEST(fabric.stats().reread == 1u);
    BOOST_TEST(fabric.stats().retransmitted >= 1u);
}

BOOST_AUTO_TEST_CASE(a_read_response_is_cut_short_by_a_deregistration_with_remote_access) {
    const std::string config = cfg("rot_dereg", 1, "reorder=none,mtu=1024");
    Node a(config);
    auto b = std::make_unique<Node>(config);
    link(a, *b);
    std::vector<std::byte> other(record);
    auto mr = b->dom.register_memory(other, all_access);
    BOOST_REQUIRE(a.qp.post_send({read(1, a.mr.slice(0, record), mr.remote().slice(0, record))}));
    auto fabric = sim::Fabric::of(a.dom);
    // Run until the response is under way (request delivered, some packets read), then deregister.
    fabric.run_for(std::chrono::nanoseconds(1100));
    BOOST_TEST(!fabric.idle());
    mr = MemoryRegion();
    const Completion c = next(a.cq);
    BOOST_TEST(c.status == WcStatus::remote_access, c);
    BOOST_TEST(b->qp.state() == QpState::error);
}

BOOST_AUTO_TEST_SUITE_END()
