// Simulator fidelity: the packet time model, and the legal behaviours of RC hardware the seed chooses —
// torn placement, reads observing later unfenced writes, acknowledgement jitter — with determinism.
#include "node.hpp"

#include <algorithm>
#include <numeric>

using namespace weft;
using weft::sim::Fabric;
using weft::sim::test::link;
using weft::sim::test::next;
using weft::sim::test::Node;

namespace {

std::string config(const std::string& fabric, std::uint64_t seed, const std::string& extra) {
    return "sim:fabric=" + fabric + ",seed=" + std::to_string(seed) + (extra.empty() ? "" : "," + extra);
}

// What a reader polling the target of a 64 KiB write sees, one event at a time: whether the last byte
// was ever set while the first was not.
bool last_byte_seen_before_first(const std::string& cfg) {
    Node a(cfg), b(cfg);
    link(a, b);
    constexpr std::size_t len = 64 * 1024;
    std::fill_n(a.buf.begin(), len, std::byte{0xab});
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, len), b.mr.remote().slice(0, len))}));
    auto fab = Fabric::of(a.dom);
    bool torn = false;
    while (!fab.idle()) {
        fab.run_until_idle(1);
        if (b.buf[len - 1] == std::byte{0xab} && b.buf[0] == std::byte{0}) torn = true;
    }
    auto c = next(a.cq);
    BOOST_TEST(c.ok());
    BOOST_TEST((std::all_of(b.buf.begin(), b.buf.begin() + len, [](std::byte x) { return x == std::byte{0xab}; })));
    return torn;
}

// A read of a word followed on the same QP by a write of a new value to it: the value the read returned.
std::uint64_t read_then_write(const std::string& cfg, bool fence) {
    Node a(cfg), b(cfg);
    link(a, b);
    b.set_word(0, 1);
    a.set_word(64, 2);
    auto w = write(2, a.mr.slice(64, 8), b.mr.remote().slice(0, 8));
    BOOST_REQUIRE(a.qp.post_send({read(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8)), fence ? w.fence() : w}));
    auto c1 = next(a.cq);
    auto c2 = next(a.cq);
    BOOST_TEST(c1.id == 1u);  // completions stay in posting order whatever executed first
    BOOST_TEST(c2.id == 2u);
    BOOST_TEST(b.word(0) == 2u);
    return a.word(0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fidelity)

BOOST_AUTO_TEST_CASE(packets_land_one_serialization_time_apart) {
    // 1 byte per ns; 4 packets of 1024 bytes; in order (reorder=none).
    const auto cfg = config("pkt", 1, "gbps=8,latency_ns=2000,mtu=1024,reorder=none");
    Node a(cfg), b(cfg);
    link(a, b);
    std::fill_n(a.buf.begin(), 4096, std::byte{1});
    auto fab = Fabric::of(a.dom);
    const auto t0 = fab.now();
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 4096), b.mr.remote().slice(0, 4096))}));
    auto landed = [&] {
        int n = 0;
        for (int p = 0; p < 4; ++p) n += b.buf[p * 1024 + 1023] == std::byte{1};
        return n;
    };
    fab.run_for(std::chrono::nanoseconds(2000 + 1024 - 1));
    BOOST_TEST(landed() == 0);
    fab.run_for(std::chrono::nanoseconds(1));
    BOOST_TEST(landed() == 1);
    BOOST_TEST((b.buf[1024] == std::byte{0}));
    fab.run_for(std::chrono::nanoseconds(1024));
    BOOST_TEST(landed() == 2);
    fab.run_for(std::chrono::nanoseconds(2048));
    BOOST_TEST(landed() == 4);
    auto c = next(a.cq);
    BOOST_TEST(c.ok());
    BOOST_TEST(fab.now() - t0 == 4096u + 2000u + 2000u);  // last packet, then the ACK's latency
}

BOOST_AUTO_TEST_CASE(the_link_is_shared_by_the_qps_of_a_node) {
    // Two QPs of node a each write 1000 bytes at 1 byte/ns: the second message waits for the first.
    const auto cfg = config("sharedlink", 1, "gbps=8,latency_ns=1000,reorder=none");
    Node a(cfg), b(cfg);
    link(a, b);
    auto cq2 = a.dom.create_cq({.depth = 16});
    auto qp2 = a.dom.create_qp({.send_cq = cq2, .recv_cq = cq2});
    auto bcq2 = b.dom.create_cq({.depth = 16});
    auto bqp2 = b.dom.create_qp({.send_cq = bcq2, .recv_cq = bcq2});
    qp2.connect(bqp2.address());
    bqp2.connect(qp2.address());
    auto fab = Fabric::of(a.dom);
    const auto t0 = fab.now();
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 1000), b.mr.remote().slice(0, 1000))}));
    BOOST_REQUIRE(qp2.post_send({write(2, a.mr.slice(0, 1000), b.mr.remote().slice(4096, 1000))}));
    next(a.cq);
    BOOST_TEST(fab.now() - t0 == 1000u + 2000u);
    next(cq2);
    BOOST_TEST(fab.now() - t0 == 2000u + 2000u);
}

BOOST_AUTO_TEST_CASE(torn_placement_shows_the_last_byte_before_the_first_on_some_seeds) {
    int torn = 0;
    for (std::uint64_t seed = 1; seed <= 16; ++seed) {
        torn += last_byte_seen_before_first(config("torn", seed, "mtu=1024"));
    }
    BOOST_TEST_MESSAGE("torn on " << torn << " of 16 seeds");
    BOOST_TEST(torn > 0);
    BOOST_TEST(torn < 16);  // a permutation, not a reversal
}

BOOST_AUTO_TEST_CASE(torn_placement_alone_can_be_chosen) {
    int torn = 0;
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
        torn += last_byte_seen_before_first(config("tornonly", seed, "mtu=1024,reorder=torn"));
    }
    BOOST_TEST(torn > 0);
}

BOOST_AUTO_TEST_CASE(in_order_fabric_never_shows_the_last_byte_first) {
    for (std::uint64_t seed = 1; seed <= 16; ++seed) {
        BOOST_TEST(!last_byte_seen_before_first(config("untorn", seed, "mtu=1024,reorder=none")));
        BOOST_TEST(!last_byte_seen_before_first(config("untorn2", seed, "mtu=1024,reorder=read_after_write|jitter")));
    }
}

BOOST_AUTO_TEST_CASE(a_read_may_return_the_value_of_a_later_unfenced_write) {
    int newer = 0;
    for (std::uint64_t seed = 1; seed <= 16; ++seed) {
        auto v = read_then_write(config("raw", seed, ""), false);
        BOOST_TEST((v == 1u || v == 2u));
        newer += v == 2;
    }
    BOOST_TEST_MESSAGE("the read saw the later write on " << newer << " of 16 seeds");
    BOOST_TEST(newer > 0);
    BOOST_TEST(newer < 16);
}

BOOST_AUTO_TEST_CASE(a_fenced_write_is_never_seen_by_an_earlier_read) {
    for (std::uint64_t seed = 1; seed <= 16; ++seed) {
        BOOST_TEST(read_then_write(config("fenced", seed, ""), true) == 1u);
    }
}

BOOST_AUTO_TEST_CASE(reorder_none_reads_before_later_writes) {
    for (std::uint64_t seed = 1; seed <= 16; ++seed) {
        BOOST_TEST(read_then_write(config("rawnone", seed, "reorder=none"), false) == 1u);
        BOOST_TEST(read_then_write(config("rawtorn", seed, "reorder=torn|jitter"), false) == 1u);
    }
}

BOOST_AUTO_TEST_CASE(an_atomic_may_observe_a_later_unfenced_write) {
    int newer = 0;
    for (std::uint64_t seed = 1; seed <= 16; ++seed) {
        const auto cfg = config("atomic_raw", seed, "");
        Node a(cfg), b(cfg);
        link(a, b);
        b.set_word(0, 10);
        a.set_word(64, 100);
        BOOST_REQUIRE(a.qp.post_send({fetch_add(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8), 1),
                                      write(2, a.mr.slice(64, 8), b.mr.remote().slice(0, 8))}));
        BOOST_TEST(next(a.cq).id == 1u);
        BOOST_TEST(next(a.cq).id == 2u);
        // Either the add ran first (old 10, then overwritten to 100) or after the write (old 100, now 101).
        if (a.word(0) == 10u) BOOST_TEST(b.word(0) == 100u);
        else {
            BOOST_TEST(a.word(0) == 100u);
            BOOST_TEST(b.word(0) == 101u);
            ++newer;
        }
    }
    BOOST_TEST(newer > 0);
}

BOOST_AUTO_TEST_CASE(ack_jitter_varies_completion_time_with_the_seed_and_never_shortens_it) {
    std::vector<std::uint64_t> times;
    for (std::uint64_t seed = 1; seed <= 8; ++seed) {
        for (const char* reorder : {"jitter", "none"}) {
            const auto cfg = config(std::string("jit") + reorder, seed, std::string("gbps=8,reorder=") + reorder);
            Node a(cfg), b(cfg);
            link(a, b);
            auto fab = Fabric::of(a.dom);
            const auto t0 = fab.now();
            BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 1000), b.mr.remote().slice(0, 1000))}));
            next(a.cq);
            const auto t = fab.now() - t0;
            if (std::string(reorder) == "none") BOOST_TEST(t == 3000u);
            else {
                BOOST_TEST(t >= 3000u);
                BOOST_TEST(t <= 5000u);  // at most two latencies late
                times.push_back(t);
            }
        }
    }
    std::sort(times.begin(), times.end());
    BOOST_TEST((std::unique(times.begin(), times.end()) - times.begin() > 1));
}

BOOST_AUTO_TEST_SUITE_END()
