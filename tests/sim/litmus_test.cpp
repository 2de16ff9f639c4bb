// Litmus tests of the simulator's ordering model. Each is a small two-node program run once per seed that
// returns what it observed (which value a read returned, whether the responder's CPU saw the data when it
// saw the flag). Every test runs over seeds 1..200 on each reorder= setting and checks the outcomes against
// what InfiniBand RC allows: a relaxed outcome the specification allows must show on some seed of every
// setting that enables the behaviour behind it, and on no other setting; a forbidden outcome must never
// show. Each outcome seen is printed with its first seed and count, so the test log is the table.
// docs/simulator.md, "Litmus tests", gives the rules each test comes from.
#include "node.hpp"

#include <weft/testing.hpp>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>

using namespace weft;
using weft::sim::Fabric;
using weft::sim::test::link;
using weft::sim::test::next;
using weft::sim::test::Node;

namespace {

// What one run observed, named.
using Outcome = std::string_view;

// The behaviours a reorder= setting turns on (the simulator's reorder= names).
enum Behaviour : unsigned {
    torn = 1u << 0,
    read_after_write = 1u << 1,
    jitter = 1u << 2,
    qp_paths = 1u << 3,
    program = 1u << 4,
};

struct Setting {
    const char* reorder;
    unsigned enables;
};

constexpr Setting settings[] = {
    {"none", 0},
    {"torn", torn},
    {"read_after_write", read_after_write},
    {"jitter", jitter},
    {"qp_paths", qp_paths},
    {"program", program},
    {"all", torn | read_after_write | jitter | qp_paths | program},
};

constexpr std::uint64_t seeds = 200;
// 1 KiB packets: the 4 KiB messages below are four packets each, so torn placement applies to them.
constexpr std::string_view base = "sim:fabric=litmus,mtu=1024";
constexpr std::size_t len = 4096;

enum class Verdict { allowed, forbidden };

struct Expected {
    Outcome outcome;
    Verdict verdict;
    // For an allowed outcome: the behaviours of which one must be on for the simulator to show it (0: it
    // shows on every setting). It must show on every setting that enables one of them, and on no other.
    unsigned needs = 0;
    // False for an allowed outcome the simulator's model may never produce in this scenario: it is printed
    // when seen but not required.
    bool required = true;
};

std::string names(unsigned behaviours) {
    std::string out;
    for (const Setting& s : settings) {
        if (!std::has_single_bit(s.enables) || !(behaviours & s.enables)) continue;
        if (!out.empty()) out += '|';
        out += s.reorder;
    }
    return out;
}

// Runs `run` over the seeds of every setting and checks what it observed against `expected`; the log names
// the test by its Boost.Test case.
template <class Run>
void check(Run run, std::initializer_list<Expected> expected) {
    const std::string name = boost::unit_test::framework::current_test_case().p_name;
    std::map<Outcome, std::uint64_t> forbidden_seen;
    for (const Setting& s : settings) {
        struct Tally {
            std::uint64_t count = 0;
            std::uint64_t first = 0;
        };
        std::map<std::string, Tally, std::less<>> seen;
        testing::SweepOptions o;
        o.base = std::string(base) + ",reorder=" + s.reorder;
        o.seeds = seeds;
        o.honour_environment = false;  // every outcome's reachability is judged over the same range
        testing::sweep(
            [&](const testing::Seed& seed) {
                Tally& t = seen[std::string(run(seed.config))];
                if (t.count++ == 0) t.first = seed.value;
            },
            o);
        for (const auto& [outcome, t] : seen) {
            std::printf("litmus %s: outcome %s first at seed %llu (%llu of %llu seeds) on %s\n", name.c_str(),
                        outcome.c_str(), static_cast<unsigned long long>(t.first),
                        static_cast<unsigned long long>(t.count), static_cast<unsigned long long>(seeds),
                        o.base.c_str());
            const std::string& seen_outcome = outcome;  // clang 14 cannot capture a structured binding
            const bool known = std::any_of(expected.begin(), expected.end(),
                                           [&](const Expected& e) { return e.outcome == seen_outcome; });
            BOOST_TEST(known, "litmus " << name << ": outcome " << outcome << " is not one the test names (seed "
                                        << t.first << ", " << o.base << ")");
        }
        for (const Expected& e : expected) {
            const auto it = seen.find(e.outcome);
            const std::uint64_t count = it == seen.end() ? 0 : it->second.count;
            const std::uint64_t first = it == seen.end() ? 0 : it->second.first;
            if (e.verdict == Verdict::forbidden) {
                forbidden_seen[e.outcome] += count;
                BOOST_TEST(count == 0u, "litmus " << name << ": forbidden outcome " << e.outcome << " on " << count
                                                  << " of " << seeds << " seeds, first at seed " << first << " ("
                                                  << o.base << ")");
            } else if (!e.required) {
                if (count == 0) {
                    std::printf("litmus %s: allowed outcome %.*s not reached on %s (not required)\n", name.c_str(),
                                static_cast<int>(e.outcome.size()), e.outcome.data(), o.base.c_str());
                }
            } else if (e.needs == 0 || (s.enables & e.needs) != 0) {
                BOOST_TEST(count > 0u, "litmus " << name << ": allowed outcome " << e.outcome << " never showed in "
                                                 << seeds << " seeds (" << o.base << ")");
            } else {
                BOOST_TEST(count == 0u, "litmus " << name << ": outcome " << e.outcome << " needs reorder="
                                                  << names(e.needs) << " but showed on " << count
                                                  << " seeds, first at seed " << first << " (" << o.base << ")");
            }
        }
    }
    for (const auto& [outcome, count] : forbidden_seen) {
        if (count == 0) {
            std::printf("litmus %s: forbidden outcome %.*s never seen (%llu seeds on each of %zu settings)\n",
                        name.c_str(), static_cast<int>(outcome.size()), outcome.data(),
                        static_cast<unsigned long long>(seeds), std::size(settings));
        }
    }
}

// Two linked nodes with small queues and a 16 KiB buffer each, so that thousands of runs stay cheap.
struct Pair {
    Node a, b;
    explicit Pair(const std::string& cfg) : a(cfg, options(), 64, 16384), b(cfg, options(), 64, 16384) {
        link(a, b);
    }
    static QpOptions options() {
        QpOptions o;
        o.max_send = 16;
        o.max_recv = 16;
        return o;
    }
};

void fill(Node& n, std::size_t off, std::size_t count, std::uint8_t v) {
    std::fill_n(n.buf.begin() + static_cast<std::ptrdiff_t>(off), count, std::byte{v});
}

bool holds(const Node& n, std::size_t off, std::size_t count, std::uint8_t v) {
    const auto first = n.buf.begin() + static_cast<std::ptrdiff_t>(off);
    const auto last = first + static_cast<std::ptrdiff_t>(count);
    return std::all_of(first, last, [&](std::byte x) { return x == std::byte{v}; });
}

// Polls the requester's `count` completions; each must succeed.
void finish(Node& n, int count) {
    for (int k = 0; k < count; ++k) {
        const Completion c = next(n.cq);
        BOOST_TEST(c.ok(), c);
    }
}

// A CPU spinning on memory while the NIC works: the fabric takes one event per look at memory, until
// nothing is left in flight.
template <class Look>
void spin(Node& n, Look look) {
    auto fab = Fabric::of(n.dom);
    look();
    while (!fab.idle()) {
        fab.run_until_idle(1);
        look();
    }
}

// 1a. Data written, then a flag sent, on one QP. The responder's CPU learns of the flag from the receive
// completion and then looks at the data.
Outcome message_passing_send_flag(const std::string& cfg) {
    Pair p(cfg);
    fill(p.a, 0, len, 0xab);
    BOOST_REQUIRE(p.b.qp.post_recv({recv(9, p.b.mr.slice(len, 8))}));
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len)),
                                    send(2, p.a.mr.slice(len, 8))}));
    const Completion flag = next(p.b.cq);
    BOOST_TEST_REQUIRE(flag.ok(), flag);
    const bool data = holds(p.b, 0, len, 0xab);
    finish(p.a, 2);
    return data ? "data_seen" : "data_missing";
}

// 1b. Data written, then a flag word written, on one QP: two messages. The responder's CPU spins on the
// flag word and looks at the data the moment it is set.
Outcome message_passing_write_flag(const std::string& cfg) {
    Pair p(cfg);
    fill(p.a, 0, len, 0xab);
    p.a.set_word(len, 1);
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len)),
                                    write(2, p.a.mr.slice(len, 8), p.b.mr.remote().slice(len, 8))}));
    std::optional<bool> data_at_flag;
    spin(p.b, [&] {
        if (!data_at_flag && p.b.word(len) == 1) data_at_flag = holds(p.b, 0, len, 0xab);
    });
    finish(p.a, 2);
    BOOST_TEST_REQUIRE(data_at_flag.has_value());
    return *data_at_flag ? "data_seen" : "data_missing";
}

// 2. Data written on QP 1, then a flag sent on QP 2 between the same two nodes. The responder's CPU looks at
// the data when the flag's receive completes.
Outcome message_passing_two_qps(const std::string& cfg) {
    Pair p(cfg);
    auto a2 = p.a.dom.create_qp({.send_cq = p.a.cq, .recv_cq = p.a.cq, .max_send = 16, .max_recv = 16});
    auto b2 = p.b.dom.create_qp({.send_cq = p.b.cq, .recv_cq = p.b.cq, .max_send = 16, .max_recv = 16});
    a2.connect(b2.address());
    b2.connect(a2.address());
    fill(p.a, 0, len, 0xab);
    BOOST_REQUIRE(b2.post_recv({recv(9, p.b.mr.slice(len, 8))}));
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len))}));
    BOOST_REQUIRE(a2.post_send({send(2, p.a.mr.slice(len, 8))}));
    const Completion flag = next(p.b.cq);
    BOOST_TEST_REQUIRE(flag.ok(), flag);
    const bool data = holds(p.b, 0, len, 0xab);
    finish(p.a, 2);
    BOOST_TEST(holds(p.b, 0, len, 0xab));  // the data lands in the end either way
    return data ? "data_seen" : "data_missing";
}

// 3. Two 4 KiB writes to the same 4 KiB on one QP; the final contents once both completed.
Outcome write_write(const std::string& cfg) {
    Pair p(cfg);
    fill(p.a, 0, len, 0x11);
    fill(p.a, len, len, 0x22);
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len)),
                                    write(2, p.a.mr.slice(len, len), p.b.mr.remote().slice(0, len))}));
    finish(p.a, 2);
    if (holds(p.b, 0, len, 0x22)) return "second";
    if (holds(p.b, 0, len, 0x11)) return "first";
    return "mixed";
}

// 4. A read of X (1), then a write of 2 to X in the same batch, the write fenced or not; what the read
// returned.
Outcome read_then_write(const std::string& cfg, bool fence) {
    Pair p(cfg);
    p.b.set_word(0, 1);
    p.a.set_word(64, 2);
    const auto w = write(2, p.a.mr.slice(64, 8), p.b.mr.remote().slice(0, 8));
    BOOST_REQUIRE(p.a.qp.post_send({read(1, p.a.mr.slice(0, 8), p.b.mr.remote().slice(0, 8)), fence ? w.fence() : w}));
    finish(p.a, 2);
    BOOST_TEST(p.b.word(0) == 2u);
    if (p.a.word(0) == 1) return "read_old";
    if (p.a.word(0) == 2) return "read_new";
    return "read_other";
}

// 5. A read of X (1), then a send, the send fenced or not. The responder's CPU sets X to 2 as soon as the
// send's receive completes; the read returns 2 only if the send was delivered before the read executed.
Outcome send_after_read(const std::string& cfg, bool fence) {
    Pair p(cfg);
    p.b.set_word(0, 1);
    BOOST_REQUIRE(p.b.qp.post_recv({recv(9, p.b.mr.slice(64, 8))}));
    const auto s = send(2, p.a.mr.slice(64, 8));
    BOOST_REQUIRE(p.a.qp.post_send({read(1, p.a.mr.slice(0, 8), p.b.mr.remote().slice(0, 8)), fence ? s.fence() : s}));
    const Completion delivered = next(p.b.cq);
    BOOST_TEST_REQUIRE(delivered.ok(), delivered);
    p.b.set_word(0, 2);
    finish(p.a, 2);
    if (p.a.word(0) == 1) return "read_before_send";
    if (p.a.word(0) == 2) return "send_before_read";
    return "read_other";
}

// 6. Two reads on one QP, of X and then of Y, while the responder's CPU counts: between any two steps of
// the NIC it stores the step number to Y and then to X, so at every instant Y >= X. If the reads execute
// in order, the second cannot return an older count than the first. Both reads arrive at the same virtual
// time, in consecutive steps; they execute in one step (the same count) only when the first was deferred
// (read_after_write) until the second arrived.
Outcome read_read(const std::string& cfg) {
    Pair p(cfg);
    BOOST_REQUIRE(p.a.qp.post_send({read(1, p.a.mr.slice(0, 8), p.b.mr.remote().slice(0, 8)),
                                    read(2, p.a.mr.slice(64, 8), p.b.mr.remote().slice(64, 8))}));
    std::uint64_t step = 0;
    spin(p.b, [&] {
        ++step;
        p.b.set_word(64, step);
        p.b.set_word(0, step);
    });
    finish(p.a, 2);
    const std::uint64_t x = p.a.word(0), y = p.a.word(64);
    BOOST_TEST((x >= 1 && y >= 1));  // the reads execute after the first store
    if (x < y) return "second_read_newer";
    if (x == y) return "same_count";
    return "second_read_older";
}

// 7. A fetch_add of 1 to X (10), then a write of 100 to X in the same batch, the write fenced or not; the
// value the atomic fetched and X at the end.
Outcome atomic_then_write(const std::string& cfg, bool fence) {
    Pair p(cfg);
    p.b.set_word(0, 10);
    p.a.set_word(64, 100);
    const auto w = write(2, p.a.mr.slice(64, 8), p.b.mr.remote().slice(0, 8));
    BOOST_REQUIRE(p.a.qp.post_send(
        {fetch_add(1, p.a.mr.slice(0, 8), p.b.mr.remote().slice(0, 8), 1), fence ? w.fence() : w}));
    finish(p.a, 2);
    const std::uint64_t fetched = p.a.word(0), final_value = p.b.word(0);
    if (fetched == 10 && final_value == 100) return "add_then_write";
    if (fetched == 100 && final_value == 101) return "write_then_add";
    return "lost_update";
}

// 8. One 4 KiB write (four packets); the responder's CPU spins on its last byte. Whether it ever saw the
// last byte while an earlier byte was not yet placed.
Outcome torn_last_byte(const std::string& cfg) {
    Pair p(cfg);
    fill(p.a, 0, len, 0xab);
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len))}));
    bool last_first = false;
    spin(p.b, [&] {
        if (p.b.buf[len - 1] == std::byte{0xab} && !holds(p.b, 0, len - 1, 0xab)) last_first = true;
    });
    finish(p.a, 1);
    if (!holds(p.b, 0, len, 0xab)) return "incomplete";
    return last_first ? "last_byte_first" : "last_byte_last";
}

// 9. One 4 KiB write; the requester looks at the responder's memory the moment the write's completion is
// polled.
Outcome write_completion(const std::string& cfg) {
    Pair p(cfg);
    fill(p.a, 0, len, 0xab);
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len))}));
    const Completion c = next(p.a.cq);
    BOOST_TEST_REQUIRE(c.ok(), c);
    return holds(p.b, 0, len, 0xab) ? "all_placed" : "partly_placed";
}

// 10. One 4 KiB write_with_imm; the responder looks at the data the moment its receive completes.
Outcome write_with_imm(const std::string& cfg) {
    Pair p(cfg);
    fill(p.a, 0, len, 0xab);
    BOOST_REQUIRE(p.b.qp.post_recv({recv(9, p.b.mr.slice(2 * len, 8))}));
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len)).with_imm(7)}));
    const Completion c = next(p.b.cq);
    BOOST_TEST_REQUIRE(c.ok(), c);
    BOOST_TEST(c.has_imm);
    const bool placed = holds(p.b, 0, len, 0xab);
    finish(p.a, 1);
    return placed ? "all_placed" : "partly_placed";
}

// 11. A 4 KiB write to X, then a read of X, on one QP; what the read returned.
Outcome write_then_read(const std::string& cfg) {
    Pair p(cfg);
    fill(p.b, 0, len, 0x11);
    fill(p.a, 0, len, 0x22);
    BOOST_REQUIRE(p.a.qp.post_send({write(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len)),
                                    read(2, p.a.mr.slice(len, len), p.b.mr.remote().slice(0, len))}));
    finish(p.a, 2);
    if (holds(p.a, len, len, 0x22)) return "read_new";
    if (holds(p.a, len, len, 0x11)) return "read_old";
    return "read_mixed";
}

constexpr Verdict allowed = Verdict::allowed;
constexpr Verdict forbidden = Verdict::forbidden;

}  // namespace

BOOST_AUTO_TEST_SUITE(litmus)

BOOST_AUTO_TEST_CASE(message_passing_send_flag) {
    check(::message_passing_send_flag, {{"data_seen", allowed}, {"data_missing", forbidden}});
}

BOOST_AUTO_TEST_CASE(message_passing_write_flag) {
    check(::message_passing_write_flag, {{"data_seen", allowed}, {"data_missing", forbidden}});
}

BOOST_AUTO_TEST_CASE(message_passing_two_qps) {
    check(::message_passing_two_qps, {{"data_seen", allowed}, {"data_missing", allowed, qp_paths}});
}

BOOST_AUTO_TEST_CASE(write_write_same_location) {
    check(write_write, {{"second", allowed}, {"first", forbidden}, {"mixed", forbidden}});
}

BOOST_AUTO_TEST_CASE(read_then_unfenced_write) {
    check([](const std::string& c) { return read_then_write(c, false); },
          {{"read_old", allowed}, {"read_new", allowed, read_after_write}, {"read_other", forbidden}});
}

BOOST_AUTO_TEST_CASE(read_then_fenced_write) {
    check([](const std::string& c) { return read_then_write(c, true); },
          {{"read_old", allowed}, {"read_new", forbidden}, {"read_other", forbidden}});
}

BOOST_AUTO_TEST_CASE(read_then_unfenced_send) {
    check([](const std::string& c) { return send_after_read(c, false); },
          {{"read_before_send", allowed}, {"send_before_read", allowed, read_after_write}, {"read_other", forbidden}});
}

BOOST_AUTO_TEST_CASE(read_then_fenced_send) {
    check([](const std::string& c) { return send_after_read(c, true); },
          {{"read_before_send", allowed}, {"send_before_read", forbidden}, {"read_other", forbidden}});
}

BOOST_AUTO_TEST_CASE(read_read_one_qp) {
    check(read_read,
          {{"second_read_newer", allowed},
           {"same_count", allowed, read_after_write, false},
           {"second_read_older", forbidden}});
}

BOOST_AUTO_TEST_CASE(atomic_then_unfenced_write) {
    check([](const std::string& c) { return atomic_then_write(c, false); },
          {{"add_then_write", allowed}, {"write_then_add", allowed, read_after_write}, {"lost_update", forbidden}});
}

BOOST_AUTO_TEST_CASE(atomic_then_fenced_write) {
    check([](const std::string& c) { return atomic_then_write(c, true); },
          {{"add_then_write", allowed}, {"write_then_add", forbidden}, {"lost_update", forbidden}});
}

BOOST_AUTO_TEST_CASE(torn_last_byte) {
    check(::torn_last_byte,
          {{"last_byte_last", allowed}, {"last_byte_first", allowed, torn}, {"incomplete", forbidden}});
}

BOOST_AUTO_TEST_CASE(write_completion_implies_placement) {
    check(write_completion, {{"all_placed", allowed}, {"partly_placed", forbidden}});
}

BOOST_AUTO_TEST_CASE(write_with_imm_receive_implies_placement) {
    check(::write_with_imm, {{"all_placed", allowed}, {"partly_placed", forbidden}});
}

BOOST_AUTO_TEST_CASE(read_after_write_on_one_qp) {
    check(write_then_read, {{"read_new", allowed}, {"read_old", forbidden}, {"read_mixed", forbidden}});
}

BOOST_AUTO_TEST_SUITE_END()
