// Queue pairs are independent (reorder=qp_paths, on in `all`): the IB specification orders the messages of
// one QP only, so data written on one QP and a "ready" message sent after it on another QP between the same
// two nodes may arrive first. Within one QP the order stays exactly as the contract says.
#include "node.hpp"

#include <weft/testing.hpp>

#include <algorithm>
#include <iostream>

using namespace weft;
using weft::sim::test::link;
using weft::sim::test::next;
using weft::sim::test::Node;

namespace {

// A writes 64 KiB to B, then sends a flag on the same QP or on a second QP between the same nodes. True
// when B's receive of the flag completes while the 64 KiB have not all landed.
bool flag_overtakes_data(const std::string& cfg, bool same_qp) {
    Node a(cfg), b(cfg);
    link(a, b);
    auto a2 = a.dom.create_qp({.send_cq = a.cq, .recv_cq = a.cq});
    auto b2 = b.dom.create_qp({.send_cq = b.cq, .recv_cq = b.cq});
    a2.connect(b2.address());
    b2.connect(a2.address());
    std::fill(a.buf.begin(), a.buf.begin() + 65536, std::byte{0xab});
    auto& flag_rx = same_qp ? b.qp : b2;
    auto& flag_tx = same_qp ? a.qp : a2;
    BOOST_REQUIRE(flag_rx.post_recv({recv(9, b.mr.slice(900000, 64))}));
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 65536), b.mr.remote().slice(0, 65536))}));
    BOOST_REQUIRE(flag_tx.post_send({send(2, a.mr.slice(70000, 8))}));
    const Completion flag = next(b.cq);
    BOOST_TEST_REQUIRE(flag.ok(), flag);
    const bool landed = std::all_of(b.buf.begin(), b.buf.begin() + 65536, [](std::byte x) { return x == std::byte{0xab}; });
    for (int k = 0; k < 2; ++k) BOOST_TEST(next(a.cq).ok());
    BOOST_TEST(std::all_of(b.buf.begin(), b.buf.begin() + 65536, [](std::byte x) { return x == std::byte{0xab}; }));
    return !landed;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(qp_paths)

BOOST_AUTO_TEST_CASE(a_flag_on_another_qp_may_overtake_the_data) {
    testing::SweepOptions o;
    o.base = "sim:fabric=qp_paths_two";
    o.honour_environment = false;
    auto seed = testing::find_seed([](const testing::Seed& s) { return flag_overtakes_data(s.config, false); }, o);
    BOOST_TEST_REQUIRE(seed.has_value(), "no seed of 100 let the flag on QP 2 overtake the data on QP 1");
    std::cout << "qp_paths: the flag on a second QP overtook the data at seed " << seed->value << '\n';
}

BOOST_AUTO_TEST_CASE(never_with_reorder_none_nor_on_one_qp) {
    testing::sweep([](const testing::Seed& s) { BOOST_TEST(!flag_overtakes_data(s.config, false)); },
                   {.base = "sim:fabric=qp_paths_none,reorder=none"});
    testing::sweep([](const testing::Seed& s) { BOOST_TEST(!flag_overtakes_data(s.config, true)); },
                   {.base = "sim:fabric=qp_paths_one"});
}

BOOST_AUTO_TEST_CASE(the_behaviour_has_a_name) {
    // Alone, it is enough for the flag to overtake.
    testing::SweepOptions o;
    o.base = "sim:fabric=qp_paths_named,reorder=qp_paths";
    o.honour_environment = false;
    BOOST_TEST(testing::find_seed([](const testing::Seed& s) { return flag_overtakes_data(s.config, false); }, o).has_value());
    std::string what;
    try {
        (void)open("sim:fabric=qp_paths_bad,reorder=qp_path");
    } catch (const weft::Error& e) {
        what = e.what();
    }
    BOOST_TEST(what.find("torn, read_after_write, jitter, qp_paths") != std::string::npos, what);
}

BOOST_AUTO_TEST_SUITE_END()
