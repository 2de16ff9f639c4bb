// Conformance: every operation moves the right bytes and reports the right completion.
#include "harness.hpp"

#include <array>
#include <cstring>

using namespace weft;
using weft::test::needs;
using weft::test::next;
using weft::test::Pair;

BOOST_AUTO_TEST_SUITE(data_movement)

BOOST_AUTO_TEST_CASE(send_lands_in_posted_receive) {
    Pair p;
    p.a.fill(0, 100, 11);
    BOOST_REQUIRE(p.b.qp.post_recv({recv(7, p.b.seg(1000, 256))}));
    BOOST_REQUIRE(p.a.qp.post_send({send(3, p.a.seg(0, 100))}));
    auto sc = next(p.a.cq);
    BOOST_TEST(sc.id == 3u);
    BOOST_TEST(sc.status == WcStatus::success);
    BOOST_TEST(sc.opcode == Opcode::send);
    BOOST_TEST(sc.qp_num == p.a.qp.qp_num());
    auto rc = next(p.b.cq);
    BOOST_TEST(rc.id == 7u);
    BOOST_TEST(rc.status == WcStatus::success);
    BOOST_TEST(rc.opcode == Opcode::recv);
    BOOST_TEST(rc.byte_len == 100u);
    BOOST_TEST(!rc.has_imm);
    BOOST_TEST(rc.qp_num == p.b.qp.qp_num());
    BOOST_TEST(p.b.holds(1000, 100, 11));
}

BOOST_AUTO_TEST_CASE(send_with_imm_delivers_immediate_in_host_order, *needs(Feature::send_with_imm)) {
    Pair p;
    p.a.fill(0, 32, 5);
    BOOST_REQUIRE(p.b.qp.post_recv({recv(1, p.b.seg(0, 64))}));
    BOOST_REQUIRE(p.a.qp.post_send({send(2, p.a.seg(0, 32)).with_imm(0x01020304)}));
    auto sc = next(p.a.cq);
    BOOST_TEST(sc.status == WcStatus::success);
    BOOST_TEST(sc.opcode == Opcode::send);
    auto rc = next(p.b.cq);
    BOOST_TEST(rc.status == WcStatus::success);
    BOOST_TEST(rc.opcode == Opcode::recv);
    BOOST_TEST(rc.has_imm);
    BOOST_TEST(rc.imm == 0x01020304u);
    BOOST_TEST(rc.byte_len == 32u);
    BOOST_TEST(p.b.holds(0, 32, 5));
}

BOOST_AUTO_TEST_CASE(write_places_bytes_without_a_receive) {
    Pair p;
    p.a.fill(0, 4096, 9);
    BOOST_REQUIRE(p.a.qp.post_send({write(4, p.a.seg(0, 4096), p.b.remote(8192, 4096))}));
    auto sc = next(p.a.cq);
    BOOST_TEST(sc.id == 4u);
    BOOST_TEST(sc.status == WcStatus::success);
    BOOST_TEST(sc.opcode == Opcode::write);
    BOOST_TEST(p.b.holds(8192, 4096, 9));
    weft::test::expect_empty(p.b.cq);
}

BOOST_AUTO_TEST_CASE(write_with_imm_consumes_a_receive, *needs(Feature::write_with_imm)) {
    Pair p;
    p.a.fill(0, 512, 3);
    BOOST_REQUIRE(p.b.qp.post_recv({recv(10, p.b.seg(0, 16))}));
    BOOST_REQUIRE(p.a.qp.post_send({write(5, p.a.seg(0, 512), p.b.remote(4096, 512)).with_imm(42)}));
    auto sc = next(p.a.cq);
    BOOST_TEST(sc.status == WcStatus::success);
    BOOST_TEST(sc.opcode == Opcode::write);
    auto rc = next(p.b.cq);
    BOOST_TEST(rc.id == 10u);
    BOOST_TEST(rc.status == WcStatus::success);
    BOOST_TEST(rc.opcode == Opcode::recv_rdma_with_imm);
    BOOST_TEST(rc.byte_len == 512u);
    BOOST_TEST(rc.has_imm);
    BOOST_TEST(rc.imm == 42u);
    BOOST_TEST(p.b.holds(4096, 512, 3));
    // The receive buffer itself is untouched by a write_with_imm.
    for (int i = 0; i < 16; ++i) BOOST_TEST(static_cast<int>(p.b.buf[i]) == 0);
}

BOOST_AUTO_TEST_CASE(read_fetches_remote_bytes, *needs(Feature::read)) {
    Pair p;
    p.b.fill(2048, 1000, 77);
    BOOST_REQUIRE(p.a.qp.post_send({read(6, p.a.seg(100, 1000), p.b.remote(2048, 1000))}));
    auto sc = next(p.a.cq);
    BOOST_TEST(sc.id == 6u);
    BOOST_TEST(sc.status == WcStatus::success);
    BOOST_TEST(sc.opcode == Opcode::read);
    BOOST_TEST(sc.byte_len == 1000u);
    BOOST_TEST(p.a.holds(100, 1000, 77));
}

BOOST_AUTO_TEST_CASE(fetch_add_returns_old_value_and_adds, *needs(Feature::atomics)) {
    Pair p;
    std::uint64_t initial = 1000;
    std::memcpy(&p.b.buf[64], &initial, 8);
    BOOST_REQUIRE(p.a.qp.post_send({fetch_add(8, p.a.seg(0, 8), p.b.remote(64, 8), 5)}));
    auto sc = next(p.a.cq);
    BOOST_TEST(sc.status == WcStatus::success);
    BOOST_TEST(sc.opcode == Opcode::fetch_add);
    std::uint64_t old = 0, now = 0;
    std::memcpy(&old, &p.a.buf[0], 8);
    std::memcpy(&now, &p.b.buf[64], 8);
    BOOST_TEST(old == 1000u);
    BOOST_TEST(now == 1005u);
}

BOOST_AUTO_TEST_CASE(compare_swap_swaps_only_when_equal, *needs(Feature::atomics)) {
    Pair p;
    std::uint64_t initial = 7;
    std::memcpy(&p.b.buf[128], &initial, 8);
    BOOST_REQUIRE(p.a.qp.post_send({
        compare_swap(1, p.a.seg(0, 8), p.b.remote(128, 8), 7, 99),   // equal: swaps
        compare_swap(2, p.a.seg(8, 8), p.b.remote(128, 8), 7, 55),   // no longer equal: keeps 99
    }));
    BOOST_TEST(next(p.a.cq).status == WcStatus::success);
    BOOST_TEST(next(p.a.cq).status == WcStatus::success);
    std::uint64_t first = 0, second = 0, now = 0;
    std::memcpy(&first, &p.a.buf[0], 8);
    std::memcpy(&second, &p.a.buf[8], 8);
    std::memcpy(&now, &p.b.buf[128], 8);
    BOOST_TEST(first == 7u);
    BOOST_TEST(second == 99u);
    BOOST_TEST(now == 99u);
}

BOOST_AUTO_TEST_CASE(gather_list_writes_segments_back_to_back) {
    QpOptions o;
    o.max_sge = 3;
    Pair p(o);
    p.a.fill(0, 100, 1);
    p.a.fill(1000, 200, 2);
    p.a.fill(5000, 300, 3);
    std::array<LocalSegment, 3> gather{p.a.seg(0, 100), p.a.seg(1000, 200), p.a.seg(5000, 300)};
    BOOST_REQUIRE(p.a.qp.post_send({write(1, gather, p.b.remote(0, 600))}));
    auto sc = next(p.a.cq);
    BOOST_TEST(sc.status == WcStatus::success);
    BOOST_TEST(std::memcmp(&p.b.buf[0], &p.a.buf[0], 100) == 0);
    BOOST_TEST(std::memcmp(&p.b.buf[100], &p.a.buf[1000], 200) == 0);
    BOOST_TEST(std::memcmp(&p.b.buf[300], &p.a.buf[5000], 300) == 0);
}

BOOST_AUTO_TEST_CASE(scatter_list_receive_fills_segments_in_order) {
    QpOptions o;
    o.max_sge = 2;
    Pair p(o);
    p.a.fill(0, 150, 4);
    std::array<LocalSegment, 2> scatter{p.b.seg(0, 100), p.b.seg(4096, 100)};
    BOOST_REQUIRE(p.b.qp.post_recv({recv(1, scatter)}));
    BOOST_REQUIRE(p.a.qp.post_send({send(2, p.a.seg(0, 150))}));
    BOOST_TEST(next(p.a.cq).status == WcStatus::success);
    auto rc = next(p.b.cq);
    BOOST_TEST(rc.byte_len == 150u);
    BOOST_TEST(std::memcmp(&p.b.buf[0], &p.a.buf[0], 100) == 0);
    BOOST_TEST(std::memcmp(&p.b.buf[4096], &p.a.buf[100], 50) == 0);
}

BOOST_AUTO_TEST_CASE(inline_send_buffer_is_reusable_at_once, *needs(Feature::inline_data)) {
    QpOptions o;
    o.max_inline = 64;
    Pair p(o);
    BOOST_REQUIRE(p.a.qp.caps().max_inline >= 64u);
    p.a.fill(0, 48, 21);
    BOOST_REQUIRE(p.b.qp.post_recv({recv(1, p.b.seg(0, 64))}));
    BOOST_REQUIRE(p.a.qp.post_send({send(2, p.a.seg(0, 48)).inline_data()}));
    p.a.fill(0, 48, 99);  // overwrite right after posting: the payload was already copied
    BOOST_TEST(next(p.a.cq).status == WcStatus::success);
    auto rc = next(p.b.cq);
    BOOST_TEST(rc.byte_len == 48u);
    BOOST_TEST(p.b.holds(0, 48, 21));
}

BOOST_AUTO_TEST_CASE(zero_length_write_skips_rkey_check, *needs(Feature::zero_length)) {
    Pair p;
    SendRequest w = write(1, std::span<const LocalSegment>{}, RemoteRegion(0, 0, 0xdeadbeef, weft::test::backend_caps().kind));
    BOOST_REQUIRE(p.a.qp.post_send({w}));
    auto sc = next(p.a.cq);
    BOOST_TEST(sc.status == WcStatus::success);
    BOOST_TEST(p.a.qp.state() == QpState::rts);
}

BOOST_AUTO_TEST_CASE(zero_length_send_consumes_a_receive, *needs(Feature::zero_length)) {
    Pair p;
    BOOST_REQUIRE(p.b.qp.post_recv({recv(3, p.b.seg(0, 64))}));
    BOOST_REQUIRE(p.a.qp.post_send({send(4, std::span<const LocalSegment>{})}));
    BOOST_TEST(next(p.a.cq).status == WcStatus::success);
    auto rc = next(p.b.cq);
    BOOST_TEST(rc.id == 3u);
    BOOST_TEST(rc.status == WcStatus::success);
    BOOST_TEST(rc.byte_len == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
