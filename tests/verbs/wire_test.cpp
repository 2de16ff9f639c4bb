// The verbs backend's decoders of peer bytes, without a device: QP addresses and rdma_cm private-data frames,
// malformed in every way a peer (or a stray client of a listener) can send them.
#include "../../backends/verbs/verbs_wire.hpp"
#include "../support/expect_error.hpp"

#include <weft/detail/bytes.hpp>
#include <weft/error.hpp>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

using namespace weft;
namespace wire = weft::verbs::wire;
using weft::test::contains;
using weft::test::error_of;

namespace {

wire::QpAddress roce_address() {
    wire::QpAddress a;
    a.has_gid = true;
    a.port = 1;
    a.mtu = IBV_MTU_1024;
    const std::uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1};
    std::memcpy(a.gid.raw, gid, 16);
    a.qp_num = 0x11;
    a.psn = 0xabcdef;
    return a;
}

std::vector<std::byte> encoded(const wire::QpAddress& a) {
    const auto bytes = wire::encode_address(a);
    return {bytes.begin(), bytes.end()};
}

// Re-seals the checksum after a field was changed, so that the decoder reaches the field's own check.
std::vector<std::byte> resealed(std::vector<std::byte> b) {
    detail::put_le<std::uint32_t>(b.data() + 36, detail::fnv1a(b.data(), 36));
    return b;
}

// The message of the error decode_address throws for `b`; checks it is a bad_descriptor of QueuePair::connect.
std::string refusal(const std::vector<std::byte>& b) {
    Error e = error_of([&] { (void)wire::decode_address(b); });
    BOOST_TEST((e.code() == Errc::bad_descriptor));
    BOOST_TEST(e.backend() == "verbs");
    BOOST_TEST(e.object() == "QueuePair::connect");
    return e.what();
}

std::vector<std::uint8_t> frame_bytes(std::initializer_list<int> bytes) {
    std::vector<std::uint8_t> out;
    for (int b : bytes) out.push_back(static_cast<std::uint8_t>(b));
    return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(wire_address)

BOOST_AUTO_TEST_CASE(an_encoded_address_decodes_to_the_same_fields) {
    const wire::QpAddress a = roce_address();
    const wire::QpAddress d = wire::decode_address(encoded(a));
    BOOST_TEST(d.has_gid);
    BOOST_TEST(d.port == 1);
    BOOST_TEST(d.mtu == IBV_MTU_1024);
    BOOST_TEST(std::memcmp(d.gid.raw, a.gid.raw, 16) == 0);
    BOOST_TEST(d.qp_num == 0x11u);
    BOOST_TEST(d.psn == 0xabcdefu);

    wire::QpAddress ib;  // InfiniBand, LID routing
    ib.port = 2;
    ib.mtu = IBV_MTU_4096;
    ib.lid = 0x1f;
    ib.qp_num = 0xffffff;
    const wire::QpAddress e = wire::decode_address(encoded(ib));
    BOOST_TEST(!e.has_gid);
    BOOST_TEST(e.lid == 0x1f);
    BOOST_TEST(e.qp_num == 0xffffffu);
}

BOOST_AUTO_TEST_CASE(empty_short_and_long_addresses_are_refused_by_size) {
    const auto good = encoded(roce_address());
    BOOST_TEST(contains(refusal({}), "expected 40 bytes, got 0"));
    BOOST_TEST(contains(refusal({good.begin(), good.begin() + 3}), "got 3"));
    BOOST_TEST(contains(refusal({good.begin(), good.end() - 1}), "got 39"));
    auto longer = good;
    longer.push_back(std::byte{0});
    BOOST_TEST(contains(refusal(longer), "got 41"));
    BOOST_TEST(contains(refusal(std::vector<std::byte>(4096, std::byte{0x41})), "another backend"));
}

BOOST_AUTO_TEST_CASE(magic_version_and_checksum_are_checked) {
    auto b = encoded(roce_address());
    b[0] = std::byte{'x'};
    BOOST_TEST(contains(refusal(b), "bad magic"));
    b = encoded(roce_address());
    b[4] = std::byte{2};
    BOOST_TEST(contains(refusal(resealed(b)), "version 2 is not supported"));
    b = encoded(roce_address());
    b[20] ^= std::byte{1};  // a GID bit flipped in transit
    BOOST_TEST(contains(refusal(b), "checksum mismatch"));
}

BOOST_AUTO_TEST_CASE(every_field_is_range_checked) {
    struct Case {
        const char* what;
        std::size_t offset;
        std::vector<std::uint8_t> bytes;
        const char* expect;
    };
    const Case cases[] = {
        {"unknown flag", 5, {0x03}, "unknown flag bits 0x3"},
        {"port 0", 6, {0}, "port 0"},
        {"MTU code 0", 7, {0}, "MTU code 0"},
        {"MTU code 6", 7, {6}, "MTU code 6"},
        {"reserved bytes", 26, {1, 0}, "reserved bytes"},
        {"QP number 0", 28, {0, 0, 0, 0}, "QP number 0 is outside 2..16777215"},
        {"QP number 1", 28, {1, 0, 0, 0}, "QP number 1 is outside"},
        {"QP number 2^24", 28, {0, 0, 0, 1}, "QP number 16777216 is outside"},
        {"PSN 2^24", 32, {0, 0, 0, 1}, "PSN 16777216 does not fit"},
        {"zero GID", 8, std::vector<std::uint8_t>(16, 0), "all zeros"},
        {"multicast GID", 8, {0xff, 0x02}, "multicast"},
    };
    for (const Case& c : cases) {
        BOOST_TEST_CONTEXT(c.what) {
            auto b = encoded(roce_address());
            for (std::size_t i = 0; i < c.bytes.size(); ++i) b[c.offset + i] = std::byte{c.bytes[i]};
            const std::string msg = refusal(resealed(b));
            BOOST_TEST(contains(msg, c.expect), msg);
            BOOST_TEST(contains(msg, "malformed peer QP address"), msg);
        }
    }
}

BOOST_AUTO_TEST_CASE(lid_routing_needs_a_unicast_lid) {
    wire::QpAddress ib;
    ib.port = 1;
    ib.qp_num = 5;
    ib.lid = 0;
    BOOST_TEST(contains(refusal(encoded(ib)), "neither a GID nor a LID"));
    ib.lid = 0xc000;  // multicast
    BOOST_TEST(contains(refusal(encoded(ib)), "LID 0xc000 is not a unicast LID"));
    ib.lid = 0xffff;  // permissive
    BOOST_TEST(contains(refusal(encoded(ib)), "not a unicast LID"));
    ib.lid = 0xbfff;
    BOOST_TEST(wire::decode_address(encoded(ib)).lid == 0xbfff);
}

BOOST_AUTO_TEST_CASE(every_single_bit_flip_is_refused_or_decodes_within_range) {
    // A peer can send anything; no flip may get a value out of range past the decoder.
    const auto good = encoded(roce_address());
    for (std::size_t bit = 0; bit < good.size() * 8; ++bit) {
        auto b = good;
        b[bit / 8] ^= std::byte{static_cast<unsigned char>(1u << (bit % 8))};
        for (const auto& candidate : {b, resealed(b)}) {
            try {
                const wire::QpAddress a = wire::decode_address(candidate);
                BOOST_TEST(a.qp_num >= 2u);
                BOOST_TEST(a.qp_num <= 0xffffffu);
                BOOST_TEST(a.psn <= 0xffffffu);
                BOOST_TEST(a.port != 0);
                BOOST_TEST((a.mtu >= IBV_MTU_256 && a.mtu <= IBV_MTU_4096));
            } catch (const Error& e) {
                BOOST_TEST((e.code() == Errc::bad_descriptor));
            }
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(wire_frame)

BOOST_AUTO_TEST_CASE(an_address_frame_round_trips) {
    const auto address = encoded(roce_address());
    const auto f = wire::encode_frame(wire::FrameKind::address, address, 56);
    BOOST_TEST(f.size() == 44u);
    // The receiver sees the whole 56-byte field of a REQ: the rest is zeros.
    std::vector<std::uint8_t> field(56, 0);
    std::memcpy(field.data(), f.data(), f.size());
    std::span<const std::byte> payload;
    BOOST_TEST(wire::decode_frame(field.data(), field.size(), wire::FrameKind::address, payload).empty());
    BOOST_TEST(payload.size() == 40u);
    BOOST_TEST(std::memcmp(payload.data(), address.data(), 40) == 0);
    BOOST_TEST(payload.data() == reinterpret_cast<const std::byte*>(field.data() + 4));  // a view, not a copy
}

BOOST_AUTO_TEST_CASE(missing_short_and_foreign_private_data_is_refused) {
    std::span<const std::byte> payload;
    // No private data at all: a null pointer with length 0, or a pointer with length 0.
    BOOST_TEST(contains(wire::decode_frame(nullptr, 0, wire::FrameKind::address, payload), "no private data"));
    const std::uint8_t one = 'w';
    BOOST_TEST(contains(wire::decode_frame(&one, 0, wire::FrameKind::address, payload), "no private data"));
    BOOST_TEST(contains(wire::decode_frame(nullptr, 56, wire::FrameKind::address, payload), "no private data"));
    const auto three = frame_bytes({'w', 'C', 1});
    BOOST_TEST(contains(wire::decode_frame(three.data(), three.size(), wire::FrameKind::address, payload),
                        "3 bytes that holds no weft QP address"));
    const std::vector<std::uint8_t> zeros(56, 0);
    BOOST_TEST(contains(wire::decode_frame(zeros.data(), zeros.size(), wire::FrameKind::address, payload),
                        "56 bytes that holds no weft QP address"));
    const auto refusal = frame_bytes({'w', 'R', 1, 2, 'n', 'o'});
    BOOST_TEST(contains(wire::decode_frame(refusal.data(), refusal.size(), wire::FrameKind::address, payload),
                        "holds no weft QP address"));
    BOOST_TEST(payload.empty());
}

BOOST_AUTO_TEST_CASE(version_and_length_are_checked) {
    std::span<const std::byte> payload;
    std::vector<std::uint8_t> f(56, 0);
    f[0] = 'w';
    f[1] = 'C';
    f[2] = 9;
    f[3] = 40;
    BOOST_TEST(contains(wire::decode_frame(f.data(), f.size(), wire::FrameKind::address, payload), "version 9"));
    f[2] = 1;
    f[3] = 200;  // more than the field holds
    BOOST_TEST(contains(wire::decode_frame(f.data(), f.size(), wire::FrameKind::address, payload),
                        "claims 200 bytes of payload but holds 52"));
    f[3] = 39;  // too short for an address
    BOOST_TEST(contains(wire::decode_frame(f.data(), f.size(), wire::FrameKind::address, payload),
                        "39-byte answer (accepted: a 40-byte QP address and at most 48 bytes of reply)"));
    f[3] = 0;  // an empty frame
    BOOST_TEST(contains(wire::decode_frame(f.data(), f.size(), wire::FrameKind::address, payload),
                        "0-byte answer"));
    std::vector<std::uint8_t> rep(196, 0);  // a REP's field: room for more than an answer may hold
    std::memcpy(rep.data(), f.data(), 3);
    rep[3] = 40 + 49;
    BOOST_TEST(contains(wire::decode_frame(rep.data(), rep.size(), wire::FrameKind::address, payload),
                        "89-byte answer"));
    rep[3] = 40 + 48;
    BOOST_TEST(wire::decode_frame(rep.data(), rep.size(), wire::FrameKind::address, payload).empty());
    BOOST_TEST(payload.size() == 88u);
    payload = {};
    BOOST_TEST(payload.empty());
    // An empty refusal is a refusal with no words.
    BOOST_TEST(wire::decode_frame(f.data(), 4, wire::FrameKind::address, payload) != "");
    const auto empty_refusal = frame_bytes({'w', 'R', 1, 0});
    BOOST_TEST(wire::decode_frame(empty_refusal.data(), 4, wire::FrameKind::refusal, payload).empty());
    BOOST_TEST(payload.empty());
}

BOOST_AUTO_TEST_CASE(a_connect_request_round_trips_with_its_private_data) {
    std::vector<std::byte> data(wire::max_private_data);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(255 - i);
    wire::Request r;
    r.has_gid = true;
    r.mtu = IBV_MTU_4096;
    r.psn = 0xabcdef;
    r.private_data = data;
    const auto payload = wire::encode_request(r);
    BOOST_TEST(payload.size() == wire::request_fixed + wire::max_private_data);
    const auto f = wire::encode_frame(wire::FrameKind::request, payload, 56);
    BOOST_TEST(f.size() == 56u);  // the whole of a REQ's private data
    std::span<const std::byte> got;
    BOOST_REQUIRE(wire::decode_frame(f.data(), f.size(), wire::FrameKind::request, got).empty());
    wire::Request back;
    BOOST_REQUIRE(wire::decode_request(got, back).empty());
    BOOST_TEST(back.has_gid);
    BOOST_TEST(back.mtu == IBV_MTU_4096);
    BOOST_TEST(back.psn == 0xabcdefu);
    BOOST_TEST(std::equal(back.private_data.begin(), back.private_data.end(), data.begin(), data.end()));
    // No private data: four bytes of request.
    r.private_data = {};
    r.has_gid = false;
    BOOST_REQUIRE(wire::decode_request(wire::encode_request(r), back).empty());
    BOOST_TEST(!back.has_gid);
    BOOST_TEST(back.private_data.empty());
}

BOOST_AUTO_TEST_CASE(a_malformed_connect_request_is_refused_naming_the_field) {
    wire::Request r;
    const auto flags_mtu = [](std::uint8_t b) { return std::vector<std::byte>{std::byte{b}, std::byte{1}, std::byte{2}, std::byte{3}}; };
    BOOST_TEST(wire::decode_request(flags_mtu(0x31), r).empty());
    BOOST_TEST(contains(wire::decode_request(flags_mtu(0x33), r), "unknown flags"));
    BOOST_TEST(contains(wire::decode_request(flags_mtu(0x01), r), "MTU code 0 (accepted: 1..5)"));
    BOOST_TEST(contains(wire::decode_request(flags_mtu(0x61), r), "MTU code 6"));
    BOOST_TEST(contains(wire::decode_request(std::vector<std::byte>(3), r), "a connect request of 3 bytes"));
    BOOST_TEST(contains(wire::decode_request(std::vector<std::byte>(4 + wire::max_private_data + 1), r),
                        "of 53 bytes (accepted: 4 to 52)"));
    // A request framed as an answer, or the other way round, is not taken.
    std::span<const std::byte> payload;
    const auto req = wire::encode_frame(wire::FrameKind::request, flags_mtu(0x31), 56);
    BOOST_TEST(contains(wire::decode_frame(req.data(), req.size(), wire::FrameKind::address, payload),
                        "holds no weft QP address"));
}

BOOST_AUTO_TEST_CASE(refusal_text_is_cut_to_the_field_and_shown_printable) {
    const std::string long_reason(400, 'x');
    const auto f = wire::encode_frame(wire::FrameKind::refusal, std::as_bytes(std::span(long_reason)), 148);
    BOOST_TEST(f.size() == 148u);
    std::span<const std::byte> payload;
    BOOST_TEST(wire::decode_frame(f.data(), f.size(), wire::FrameKind::refusal, payload).empty());
    BOOST_TEST(payload.size() == 144u);
    const char hostile[] = {'o', 'k', '\n', '\x1b', '[', '2', 'J', '\0', '\x80'};
    BOOST_TEST(wire::printable(std::as_bytes(std::span(hostile))) == "ok??[2J??");
    const std::string many(400, 'y');
    const std::string shown = wire::printable(std::as_bytes(std::span(many)));
    BOOST_TEST(shown.size() == 163u);
    BOOST_TEST(shown.substr(160) == "...");
}

BOOST_AUTO_TEST_SUITE_END()
