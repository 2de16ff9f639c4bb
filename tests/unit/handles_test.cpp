// Handles: move-only ownership, release on assignment, setup validation with clear errors.
#include <weft/detail/options.hpp>
#include <weft/weft.hpp>

#include <boost/test/unit_test.hpp>

#include "../support/expect_error.hpp"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

using namespace weft;
using weft::test::contains;
using weft::test::error_of;
using weft::test::what_of;

static_assert(!std::is_copy_constructible_v<Domain> && std::is_nothrow_move_constructible_v<Domain>);
static_assert(!std::is_copy_constructible_v<QueuePair> && std::is_nothrow_move_assignable_v<QueuePair>);
static_assert(!std::is_copy_constructible_v<MemoryRegion> && std::is_nothrow_move_assignable_v<MemoryRegion>);
static_assert(!std::is_copy_constructible_v<CompletionQueue>);
static_assert(std::is_trivially_copyable_v<RemoteRegion> && std::is_trivially_copyable_v<SendRequest>);

BOOST_AUTO_TEST_SUITE(handles)

BOOST_AUTO_TEST_CASE(memory_region_slices_are_bounds_checked) {
    auto dom = open("sim:fabric=handles1");
    std::vector<std::byte> buf(4096);
    auto mr = dom.register_memory(buf, Access::local_write);
    auto s = mr.slice(100, 200);
    BOOST_TEST(s.addr == reinterpret_cast<std::uint64_t>(buf.data()) + 100);
    BOOST_TEST(s.length == 200u);
    BOOST_TEST(s.lkey == mr.lkey());
    BOOST_TEST(contains(what_of([&] { (void)mr.slice(4000, 200); }), "outside the region of 4096 bytes"));
    BOOST_TEST(mr.segment().length == 4096u);
}

BOOST_AUTO_TEST_CASE(unchecked_slices_equal_checked_ones_and_post_like_them) {
    auto dom = open("sim:fabric=handles_unchecked");
    std::vector<std::byte> buf(4096);
    auto mr = dom.register_memory(buf, Access::local_write | Access::remote_write);
    static_assert(noexcept(mr.slice_unchecked(0, 8)));
    for (std::size_t off : {0u, 100u, 4088u}) {
        BOOST_TEST((mr.slice_unchecked(off, 8) == mr.slice(off, 8)));
    }
    BOOST_TEST((mr.slice_unchecked(0, 4096) == mr.segment()));
    auto cq = dom.create_cq({.depth = 8});
    auto qp = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    qp.connect(qp.address());
    std::fill(buf.begin(), buf.begin() + 8, std::byte{0x5a});
    BOOST_REQUIRE(qp.post_send({write(1, mr.slice_unchecked(0, 8), mr.remote().slice_unchecked(64, 8))}));
    Completion wc[1];
    while (cq.poll(wc).empty()) {
    }
    BOOST_TEST(wc[0].ok(), wc[0]);
    BOOST_TEST((buf[64] == std::byte{0x5a} && buf[71] == std::byte{0x5a}));
}

// The simulator's QP address names fabric, node and QP number; an address whose node does not hold that QP
// is forged or corrupted, and connect refuses it (found by tests/fuzz/sim_address).
BOOST_AUTO_TEST_CASE(sim_connect_refuses_an_address_with_the_wrong_node) {
    auto dom = open("sim:fabric=handles_node");
    auto cq = dom.create_cq({.depth = 8});
    auto a = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    auto b = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    auto forged = b.address();
    BOOST_REQUIRE(forged.size() == 24u);
    forged[19] = std::byte{0x31};  // the node field's top byte
    BOOST_TEST(contains(what_of([&] { a.connect(forged); }), "the address says node"));
    BOOST_TEST((a.state() == QpState::init));  // nothing changed: the QP still connects to the real address
    a.connect(b.address());
    BOOST_TEST((a.state() == QpState::rts));
}

BOOST_AUTO_TEST_CASE(registration_rejects_empty_buffers) {
    auto dom = open("sim:fabric=handles2");
    BOOST_TEST(contains(what_of([&] { dom.register_memory(nullptr, 10, Access::local_write); }), "null address"));
    std::vector<std::byte> buf(8);
    BOOST_TEST(contains(what_of([&] { dom.register_memory(buf.data(), 0, Access::local_write); }), "zero bytes"));
}

BOOST_AUTO_TEST_CASE(registration_rejects_unmapped_memory) {
    auto dom = open("sim:fabric=handles_unmapped");
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    // Three pages with a hole in the middle: the region would span memory a peer's write cannot land in.
    void* map = ::mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    BOOST_REQUIRE(map != MAP_FAILED);
    auto* base = static_cast<std::byte*>(map);
    ::munmap(base + page, page);
    auto err = error_of([&] { dom.register_memory(base, 3 * page, Access::local_write); });
    BOOST_TEST((err.code() == std::errc::bad_address));
    BOOST_TEST(contains(what_of([&] { dom.register_memory(base, 3 * page, Access::local_write); }),
                        "not all mapped"));
    BOOST_TEST((error_of([&] { dom.register_memory(reinterpret_cast<void*>(0x1000), 4096, Access::local_write); })
                    .code() == std::errc::bad_address));
    // Each mapped part alone registers.
    auto first = dom.register_memory(base, page, Access::local_write);
    auto last = dom.register_memory(base + 2 * page, page, Access::local_write);
    BOOST_TEST(first.segment().length == page);
    BOOST_TEST(last.segment().length == page);
    ::munmap(base, page);
    ::munmap(base + 2 * page, page);
}

BOOST_AUTO_TEST_CASE(remote_write_implies_local_write) {
    auto dom = open("sim:fabric=handles3");
    std::vector<std::byte> buf(64);
    auto mr = dom.register_memory(buf, Access::remote_write);
    BOOST_TEST(has(mr.access(), Access::local_write));
}

BOOST_AUTO_TEST_CASE(move_assignment_releases_the_old_region) {
    auto dom = open("sim:fabric=handles4");
    auto cq = dom.create_cq();
    auto qp = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    auto peer = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    qp.connect(peer.address());
    peer.connect(qp.address());
    std::vector<std::byte> a(64), b(64);
    auto mr = dom.register_memory(a, all_access);
    auto old_remote = mr.remote();
    mr = dom.register_memory(b, all_access);  // the first region is deregistered here
    BOOST_REQUIRE(qp.post_send({write(1, mr.slice(0, 8), old_remote.slice(0, 8))}));
    Completion wc[1];
    std::span<Completion> got;
    for (int i = 0; i < 100 && got.empty(); ++i) got = cq.poll(wc);
    BOOST_REQUIRE(got.size() == 1u);
    BOOST_TEST(got[0].status == WcStatus::remote_access);
}

BOOST_AUTO_TEST_CASE(qp_options_out_of_range_are_named) {
    auto dom = open("sim:fabric=handles5");
    auto cq = dom.create_cq();
    BOOST_TEST(contains(what_of([&] { dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 0}); }),
                        "max_send = 0 is outside the accepted range 1.."));
    BOOST_TEST(contains(what_of([&] { dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_sge = 1000}); }), "max_sge"));
    QpOptions o;
    o.send_cq = cq;
    o.recv_cq = cq;
    o.rnr_retry = 8;
    BOOST_TEST(contains(what_of([&] { dom.create_qp(o); }), "rnr_retry = 8"));
    BOOST_TEST(contains(what_of([&] { dom.create_qp({.send_cq = cq}); }), "recv_cq is not set"));
    BOOST_TEST(contains(what_of([&] { dom.create_cq({.depth = 0}); }), "depth 0 is outside"));
}

BOOST_AUTO_TEST_CASE(option_structs_carry_their_size) {
    BOOST_TEST(CqOptions{}.struct_size == sizeof(CqOptions));
    BOOST_TEST((QpOptions{.max_send = 4}.struct_size == sizeof(QpOptions)));
    BOOST_TEST(SrqOptions{}.struct_size == sizeof(SrqOptions));
    auto dom = open("sim:fabric=handles_sized");
    // A program built against a newer weft passes a longer struct: refused, saying so, and nothing created.
    struct Longer {
        CqOptions known;
        std::uint64_t added = 0;
    } longer;
    longer.known.struct_size = sizeof(Longer);
    const Error newer = error_of([&] { (void)dom.create_cq(longer.known); });
    BOOST_TEST(newer.code() == make_error_code(Errc::invalid_argument));
    BOOST_TEST(contains(newer.what(), "CqOptions of " + std::to_string(sizeof(Longer)) + " bytes"));
    BOOST_TEST(contains(newer.what(), "built against a newer weft"));
    // A size the struct never had (written by hand): refused with the sizes it had.
    QpOptions bad;
    bad.struct_size = 7;
    const Error never = error_of([&] { (void)dom.create_qp(bad); });
    BOOST_TEST(contains(never.what(), "QpOptions::struct_size is 7, a size QpOptions never had (" +
                                          std::to_string(sizeof(QpOptions)) + ")"));
    SrqOptions srq;
    srq.struct_size = sizeof(SrqOptions) - 4;
    BOOST_TEST(contains(what_of([&] { (void)dom.create_srq(srq); }), "SrqOptions::struct_size is"));
    // The struct's own size goes through as before.
    auto cq = dom.create_cq({.depth = 8});
    BOOST_TEST(cq.depth() >= 8u);
}

// What an older program gets: the bytes it filled, and the defaults of the members added since.
BOOST_AUTO_TEST_CASE(a_shorter_option_struct_is_read_with_the_defaults_of_later_members) {
    struct Grown {
        std::uint32_t struct_size = sizeof(Grown);
        std::uint32_t depth = 256;
        std::uint32_t added = 7;     // a member a later weft appended
        std::uint32_t added2 = 9;
    };
    constexpr std::uint32_t sizes[] = {8, 12, 16};
    // The older program's struct ends after `depth`; what lies beyond it in memory is not its.
    Grown given;
    given.struct_size = 8;
    given.depth = 64;
    given.added = 0xdead;
    given.added2 = 0xbeef;
    Grown out;
    out.depth = 1;
    BOOST_TEST(!weft::detail::read_sized(given, sizes, "Grown", out).has_value());
    BOOST_TEST(out.struct_size == sizeof(Grown));
    BOOST_TEST(out.depth == 64u);
    BOOST_TEST(out.added == 7u);
    BOOST_TEST(out.added2 == 9u);
    given.struct_size = 12;
    BOOST_TEST(!weft::detail::read_sized(given, sizes, "Grown", out).has_value());
    BOOST_TEST(out.added == 0xdeadu);
    BOOST_TEST(out.added2 == 9u);
    given.struct_size = 10;
    const auto problem = weft::detail::read_sized(given, sizes, "Grown", out);
    BOOST_TEST((problem && contains(*problem, "a size Grown never had (8, 12, 16)")));
}

BOOST_AUTO_TEST_CASE(empty_handles_fail_clearly) {
    QueuePair qp;
    auto st = qp.post_send({});
    BOOST_TEST((st.code() == PostStatus::Code::not_connected));
    BOOST_TEST(contains(what_of([&] { (void)qp.address(); }), "handle is empty"));
    Domain dom;
    BOOST_TEST(contains(what_of([&] { dom.create_cq(); }), "handle is empty"));
}

BOOST_AUTO_TEST_CASE(children_keep_their_domain_alive) {
    CompletionQueue cq;
    QueuePair qp;
    {
        auto dom = open("sim:fabric=handles6");
        cq = dom.create_cq();
        qp = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    }  // the Domain handle is gone; the QP and CQ still work
    qp.connect(qp.address());
    std::vector<std::byte> buf(16);
    BOOST_TEST(qp.post_send({send(1, std::span<const LocalSegment>{})}).is_ok());
}

BOOST_AUTO_TEST_CASE(connect_rejects_malformed_and_foreign_addresses) {
    auto dom = open("sim:fabric=handles7");
    auto cq = dom.create_cq();
    auto qp = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    std::vector<std::byte> junk(24, std::byte{1});
    BOOST_TEST(contains(what_of([&] { qp.connect(junk); }), "bad magic"));
    BOOST_TEST(contains(what_of([&] { qp.connect(std::span(junk).first(3)); }), "got 3"));
    auto other = open("sim:fabric=handles7b");
    auto ocq = other.create_cq();
    auto oqp = other.create_qp({.send_cq = ocq, .recv_cq = ocq});
    BOOST_TEST(contains(what_of([&] { qp.connect(oqp.address()); }), "another simulated fabric"));
    qp.connect(qp.address());
    BOOST_TEST(contains(what_of([&] { qp.connect(qp.address()); }), "connect needs a fresh QP"));
}

BOOST_AUTO_TEST_SUITE_END()
