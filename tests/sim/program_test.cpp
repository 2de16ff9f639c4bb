// Program time (reorder=program, on in `all`): every API call takes effect after a seeded pause of the
// calling program, and the NIC goes on meanwhile. With programs=one every call follows the one before it;
// with programs=per_node (the default) each domain is a program of its own.
#include "node.hpp"

#include <weft/testing.hpp>

#include <iostream>

using namespace weft;
using weft::sim::test::link;
using weft::sim::test::next;
using weft::sim::test::Node;

namespace {

std::string cfg(const std::string& fabric, std::uint64_t seed, const std::string& extra) {
    return "sim:seed=" + std::to_string(seed) + ",fabric=" + fabric + (extra.empty() ? "" : "," + extra);
}

// A posts an 8-byte write to B and, in the very next call, a receive of its own. True when the write had
// landed at B by then: nothing but the pause between the two calls moved the NIC.
bool write_lands_between_two_posts(const std::string& config) {
    Node a(config), b(config);
    link(a, b);
    a.set_word(0, 0x5eed);
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
    BOOST_REQUIRE(a.qp.post_recv({recv(2, a.mr.slice(64, 8))}));
    const bool landed = b.word(0) == 0x5eed;
    BOOST_TEST(next(a.cq).ok());
    BOOST_TEST(b.word(0) == 0x5eedu);
    return landed;
}

// B posts a receive, then A (rnr_retry=0) sends to it: in the thread's order the receive comes first. True
// when the send found no receive (rnr_retry_exceeded). `now` gets the virtual time at the end.
bool send_beats_receive(const std::string& config, std::uint64_t* now = nullptr) {
    Node a(config, {.rnr_retry = 0}), b(config);
    link(a, b);
    // Each side's program did something since the handshake.
    BOOST_REQUIRE(a.qp.post_recv({recv(7, a.mr.slice(128, 8))}));
    BOOST_REQUIRE(b.qp.post_recv({recv(1, b.mr.slice(0, 64))}));
    BOOST_REQUIRE(a.qp.post_send({send(2, a.mr.slice(0, 8))}));
    const Completion c = next(a.cq);
    if (c.ok()) BOOST_TEST(next(b.cq).ok());
    else BOOST_TEST(c.status == WcStatus::rnr_retry_exceeded, c);
    if (now) *now = sim::Fabric::of(a.dom).now();
    return !c.ok();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(program)

BOOST_AUTO_TEST_CASE(the_nic_progresses_between_two_back_to_back_calls) {
    std::uint64_t first = 0, shown = 0;
    for (std::uint64_t seed = 1; seed <= 100; ++seed) {
        if (write_lands_between_two_posts(cfg("p_between", seed, "programs=one"))) {
            ++shown;
            if (!first) first = seed;
        }
        BOOST_TEST(!write_lands_between_two_posts(cfg("p_between_none", seed, "programs=one,reorder=none")),
                   "seed " << seed << ": the NIC moved between two calls with program time off");
    }
    std::cout << "program: a write landed between two back-to-back posts at seed " << first << " (" << shown
              << " of 100 seeds)\n";
    BOOST_TEST(shown > 0u);
}

BOOST_AUTO_TEST_CASE(another_nodes_program_may_lag_behind_the_order_of_calls) {
    std::uint64_t first = 0, shown = 0;
    for (std::uint64_t seed = 1; seed <= 200; ++seed) {
        if (send_beats_receive(cfg("p_lag", seed, ""))) {
            ++shown;
            if (!first) first = seed;
        }
        BOOST_TEST(!send_beats_receive(cfg("p_lag_one", seed, "programs=one")),
                   "seed " << seed << ": one program took a call effect before an earlier one");
        BOOST_TEST(!send_beats_receive(cfg("p_lag_none", seed, "reorder=none")),
                   "seed " << seed << ": a receive posted first was missing with program time off");
    }
    std::cout << "program: a send beat a receive posted before it on another node at seed " << first << " ("
              << shown << " of 200 seeds)\n";
    BOOST_TEST(shown > 0u);
}

BOOST_AUTO_TEST_CASE(program_pauses_are_the_same_for_the_same_seed) {
    for (std::uint64_t seed = 1; seed <= 50; ++seed) {
        std::uint64_t t1 = 0, t2 = 0;
        const bool r1 = send_beats_receive(cfg("p_same1", seed, ""), &t1);
        const bool r2 = send_beats_receive(cfg("p_same2", seed, ""), &t2);
        BOOST_TEST(r1 == r2, "seed " << seed);
        BOOST_TEST(t1 == t2, "seed " << seed);
    }
}

BOOST_AUTO_TEST_CASE(a_bad_programs_value_names_the_accepted_ones) {
    try {
        (void)open("sim:fabric=p_bad,programs=two");
        BOOST_FAIL("programs=two was accepted");
    } catch (const Error& e) {
        const std::string what = e.what();
        BOOST_TEST(what.find("programs") != std::string::npos, what);
        BOOST_TEST(what.find("per_node") != std::string::npos, what);
        BOOST_TEST(what.find("one") != std::string::npos, what);
    }
}

BOOST_AUTO_TEST_SUITE_END()
