// Simulator profiles: `profile=spec` follows the IB specification, `profile=rxe` reproduces the statuses
// and orders Soft-RoCE was measured to report (docs/backends/verbs.md).
#include "node.hpp"

using namespace weft;
using weft::sim::Fabric;
using weft::sim::test::link;
using weft::sim::test::next;
using weft::sim::test::Node;

BOOST_AUTO_TEST_SUITE(profiles)

BOOST_AUTO_TEST_CASE(capabilities_name_the_profile) {
    BOOST_TEST(open("sim:fabric=prof1").capabilities().profile == "spec");
    BOOST_TEST(open("sim:fabric=prof2,profile=spec").capabilities().profile == "spec");
    BOOST_TEST(open("sim:fabric=prof3,profile=rxe").capabilities().profile == "rxe");
}

BOOST_AUTO_TEST_CASE(an_unknown_profile_is_a_configuration_error) {
    BOOST_CHECK_THROW(open("sim:fabric=prof4,profile=mlx5"), Error);
}

BOOST_AUTO_TEST_CASE(bad_lkey_is_local_qp_operation_on_rxe_and_local_protection_in_spec) {
    for (const char* profile : {"spec", "rxe"}) {
        const std::string cfg = std::string("sim:fabric=lkey_") + profile + ",profile=" + profile;
        Node a(cfg), b(cfg);
        link(a, b);
        LocalSegment bad = a.mr.slice(0, 64);
        bad.lkey ^= 0x5a5a00;
        BOOST_REQUIRE(a.qp.post_send({write(1, bad, b.mr.remote().slice(0, 64))}));
        auto c = next(a.cq);
        BOOST_TEST(c.status == (std::string(profile) == "rxe" ? WcStatus::local_qp_operation : WcStatus::local_protection));
        // A known key with a segment past its region is local_protection on both.
        Node c2(cfg), d(cfg);
        link(c2, d);
        LocalSegment past = c2.mr.slice((1 << 20) - 32, 32);
        past.length = 64;
        BOOST_REQUIRE(c2.qp.post_send({write(1, past, d.mr.remote().slice(0, 64))}));
        BOOST_TEST(next(c2.cq).status == WcStatus::local_protection);
    }
}

BOOST_AUTO_TEST_CASE(receive_too_small_statuses_follow_the_profile) {
    for (const char* profile : {"spec", "rxe"}) {
        const std::string cfg = std::string("sim:fabric=small_") + profile + ",profile=" + profile;
        const bool rxe = std::string(profile) == "rxe";
        Node a(cfg), b(cfg);
        link(a, b);
        BOOST_REQUIRE(b.qp.post_recv({recv(5, b.mr.slice(0, 16))}));
        BOOST_REQUIRE(a.qp.post_send({send(1, a.mr.slice(0, 64))}));
        auto rc = next(b.cq);
        BOOST_TEST(rc.status == (rxe ? WcStatus::local_qp_operation : WcStatus::local_length));
        auto sc = next(a.cq);
        BOOST_TEST(sc.status == (rxe ? WcStatus::remote_operation : WcStatus::remote_invalid_request));
    }
}

BOOST_AUTO_TEST_CASE(send_queue_byte_len_is_the_length_on_rxe_and_zero_in_spec_for_sends_and_writes) {
    for (const char* profile : {"spec", "rxe"}) {
        const std::string cfg = std::string("sim:fabric=blen_") + profile + ",profile=" + profile;
        const bool rxe = std::string(profile) == "rxe";
        Node a(cfg), b(cfg);
        link(a, b);
        BOOST_REQUIRE(b.qp.post_recv({recv(9, b.mr.slice(0, 4096))}));
        BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 4096), b.mr.remote().slice(0, 4096)),
                                      send(2, a.mr.slice(0, 100)),
                                      read(3, a.mr.slice(0, 300), b.mr.remote().slice(0, 300)),
                                      fetch_add(4, a.mr.slice(512, 8), b.mr.remote().slice(8192, 8), 1)}));
        BOOST_TEST(next(a.cq).byte_len == (rxe ? 4096u : 0u));
        BOOST_TEST(next(a.cq).byte_len == (rxe ? 100u : 0u));
        BOOST_TEST(next(a.cq).byte_len == 300u);  // reads and atomics report their length on both
        BOOST_TEST(next(a.cq).byte_len == 8u);
        BOOST_TEST(next(b.cq).byte_len == 100u);  // receives always do
    }
}

BOOST_AUTO_TEST_CASE(rxe_flushes_the_receive_queue_before_the_send_queue) {
    for (const char* profile : {"spec", "rxe"}) {
        const std::string cfg = std::string("sim:fabric=flush_") + profile + ",profile=" + profile;
        Node a(cfg), b(cfg);
        link(a, b);
        BOOST_REQUIRE(a.qp.post_recv({recv(200, a.mr.slice(0, 8)), recv(201, a.mr.slice(8, 8))}));
        RemoteRegion bogus(b.mr.remote().addr(), 8, b.mr.rkey() ^ 0x5a5a00, BackendKind::sim);
        BOOST_REQUIRE(a.qp.post_send({write(10, a.mr.slice(0, 8), bogus), write(11, a.mr.slice(0, 8), b.mr.remote().slice(0, 8)),
                                      write(12, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
        std::vector<std::uint64_t> ids;
        for (int i = 0; i < 5; ++i) ids.push_back(next(a.cq).id);
        const std::vector<std::uint64_t> rxe_order{10, 200, 201, 11, 12}, spec_order{10, 11, 12, 200, 201};
        BOOST_TEST(ids == (std::string(profile) == "rxe" ? rxe_order : spec_order), boost::test_tools::per_element());
    }
}

BOOST_AUTO_TEST_SUITE_END()
