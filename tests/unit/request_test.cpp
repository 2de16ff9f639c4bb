// Request builders: opcodes, flags, segments and remote addressing.
#include <weft/request.hpp>

#include <boost/test/unit_test.hpp>

#include <array>
#include <type_traits>
#include <utility>
#include <vector>

using namespace weft;

namespace {
const LocalSegment seg{0x1000, 64, 7, nullptr};
const RemoteRegion dst(0x9000, 4096, 0xabc, BackendKind::sim);
}  // namespace

BOOST_AUTO_TEST_SUITE(requests)

BOOST_AUTO_TEST_CASE(send_is_signaled_by_default) {
    auto r = send(5, seg);
    BOOST_TEST(r.id == 5u);
    BOOST_TEST((r.opcode == Opcode::send));
    BOOST_TEST(has(r.flags, SendFlags::signaled));
    BOOST_TEST(r.num_sge == 1u);
    BOOST_TEST(r.sg_list == nullptr);
    BOOST_TEST((r.segments()[0] == seg));
    BOOST_TEST(r.length() == 64u);
}

BOOST_AUTO_TEST_CASE(with_imm_turns_send_and_write_into_their_imm_forms) {
    auto s = send(1, seg).with_imm(9);
    BOOST_TEST((s.opcode == Opcode::send_with_imm));
    BOOST_TEST(s.imm == 9u);
    auto w = write(2, seg, dst).with_imm(10);
    BOOST_TEST((w.opcode == Opcode::write_with_imm));
    BOOST_TEST(w.remote_addr == 0x9000u);
    BOOST_TEST(w.rkey == 0xabcu);
    // A read cannot carry immediate data: weft::read(...).with_imm() does not compile (see below); a plain
    // SendRequest holding a read still can be given one, and the result is no longer a send-queue opcode,
    // so post rejects it.
    BOOST_TEST(!is_request_opcode(SendRequest(read(3, seg, dst)).with_imm(1).opcode));
}

namespace {
template <class R>
concept takes_imm = requires(const R& r) { r.with_imm(1u); };
template <class R>
concept takes_inline = requires(const R& r) { r.inline_data(); };
template <class R>
concept takes_solicited = requires(const R& r) { r.solicited(); };
template <class L>
concept writes_from = requires(L&& l) { weft::write(1, std::forward<L>(l), dst); };
template <class L>
concept sends_from = requires(L&& l) { weft::send(1, std::forward<L>(l)); };
template <class L>
concept reads_into = requires(L&& l) { weft::read(1, std::forward<L>(l), dst); };
template <class L>
concept receives_into = requires(L&& l) { weft::recv(1, std::forward<L>(l)); };
using Gather = std::array<LocalSegment, 2>;
}  // namespace

// Reads and atomics are ReadRequests: immediate data, inline and solicited do not compile on them, and the
// flags that apply keep the type through a chain.
static_assert(takes_imm<SendRequest> && takes_inline<SendRequest> && takes_solicited<SendRequest>);
static_assert(!takes_imm<ReadRequest> && !takes_inline<ReadRequest> && !takes_solicited<ReadRequest>);
static_assert(std::is_same_v<decltype(read(1, seg, dst).fence().unsignaled().signaled()), ReadRequest>);
static_assert(std::is_same_v<decltype(fetch_add(1, seg, dst, 1)), ReadRequest>);
static_assert(std::is_same_v<decltype(compare_swap(1, seg, dst, 1, 2)), ReadRequest>);
static_assert(takes_imm<decltype(write(1, seg, dst))> && takes_imm<decltype(send(1, seg))>);
// A gather or scatter list the request would outlive does not compile; a named one does.
static_assert(writes_from<Gather&> && !writes_from<Gather> && !writes_from<std::vector<LocalSegment>>);
static_assert(sends_from<Gather&> && !sends_from<Gather> && !sends_from<std::vector<LocalSegment>>);
static_assert(reads_into<Gather&> && !reads_into<Gather> && !reads_into<std::vector<LocalSegment>>);
static_assert(receives_into<Gather&> && !receives_into<Gather> && !receives_into<std::vector<LocalSegment>>);
static_assert(writes_from<std::vector<LocalSegment>&> && receives_into<const std::vector<LocalSegment>&>);

BOOST_AUTO_TEST_CASE(read_requests_convert_to_send_requests_in_a_batch) {
    std::array<SendRequest, 3> batch{write(1, seg, dst), read(2, seg, dst).fence(),
                                     fetch_add(3, seg, dst.slice(8, 8), 1).unsignaled()};
    BOOST_TEST((batch[1].opcode == Opcode::read));
    BOOST_TEST(has(batch[1].flags, SendFlags::fence));
    BOOST_TEST(has(batch[1].flags, SendFlags::signaled));
    BOOST_TEST((batch[2].opcode == Opcode::fetch_add));
    BOOST_TEST(!has(batch[2].flags, SendFlags::signaled));
    BOOST_TEST(batch[2].remote_addr == 0x9008u);
}

BOOST_AUTO_TEST_CASE(unchecked_remote_slices_equal_checked_ones) {
    for (std::uint64_t off : {0u, 8u, 4000u}) {
        for (std::uint64_t len : {0u, 8u, 96u}) {
            BOOST_TEST((dst.slice_unchecked(off, len) == dst.slice(off, len)));
        }
    }
    static_assert(noexcept(dst.slice_unchecked(0, 8)));
}

BOOST_AUTO_TEST_CASE(flags_chain_and_return_copies) {
    auto base = write(1, seg, dst);
    auto r = base.fence().inline_data().solicited().unsignaled();
    BOOST_TEST(has(r.flags, SendFlags::fence));
    BOOST_TEST(has(r.flags, SendFlags::inline_data));
    BOOST_TEST(has(r.flags, SendFlags::solicited));
    BOOST_TEST(!has(r.flags, SendFlags::signaled));
    BOOST_TEST((base.flags == SendFlags::signaled));  // the original is unchanged
    BOOST_TEST(has(r.signaled().flags, SendFlags::signaled));
    BOOST_TEST(!has(r.signaled(false).flags, SendFlags::signaled));
}

BOOST_AUTO_TEST_CASE(gather_lists_are_borrowed_not_copied) {
    std::array<LocalSegment, 3> g{seg, seg, seg};
    g[1].length = 100;
    auto r = write(1, g, dst);
    BOOST_TEST(r.num_sge == 3u);
    BOOST_TEST(r.sg_list == g.data());
    BOOST_TEST(r.length() == 228u);
    auto one = write(1, std::span<const LocalSegment>(g.data(), 1), dst);
    BOOST_TEST(one.sg_list == nullptr);  // a single segment is held by value
    auto none = send(1, std::span<const LocalSegment>{});
    BOOST_TEST(none.num_sge == 0u);
    BOOST_TEST(none.length() == 0u);
}

BOOST_AUTO_TEST_CASE(atomics_carry_their_operands) {
    auto fa = fetch_add(1, seg, dst.slice(8, 8), 5);
    BOOST_TEST((fa.opcode == Opcode::fetch_add));
    BOOST_TEST(fa.compare_add == 5u);
    BOOST_TEST(fa.remote_addr == 0x9008u);
    auto cs = compare_swap(2, seg, dst, 3, 4);
    BOOST_TEST((cs.opcode == Opcode::compare_swap));
    BOOST_TEST(cs.compare_add == 3u);
    BOOST_TEST(cs.swap == 4u);
}

BOOST_AUTO_TEST_CASE(receives_take_one_or_many_segments) {
    auto r = recv(4, seg);
    BOOST_TEST(r.id == 4u);
    BOOST_TEST(r.num_sge == 1u);
    std::array<LocalSegment, 2> s{seg, seg};
    auto rs = recv(5, s);
    BOOST_TEST(rs.num_sge == 2u);
    BOOST_TEST(rs.length() == 128u);
}

BOOST_AUTO_TEST_CASE(completion_opcodes_follow_verbs) {
    BOOST_TEST((completion_opcode(Opcode::send_with_imm) == Opcode::send));
    BOOST_TEST((completion_opcode(Opcode::write_with_imm) == Opcode::write));
    BOOST_TEST((completion_opcode(Opcode::read) == Opcode::read));
    BOOST_TEST(consumes_receive(Opcode::write_with_imm));
    BOOST_TEST(!consumes_receive(Opcode::write));
}

BOOST_AUTO_TEST_SUITE_END()
