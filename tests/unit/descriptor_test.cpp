// RemoteRegion: slicing, the wire encoding, and rejection of malformed descriptors.
#include <weft/error.hpp>
#include <weft/memory.hpp>

#include <boost/test/unit_test.hpp>

#include "../support/expect_error.hpp"

#include <string>
#include <vector>

using weft::BackendKind;
using weft::Errc;
using weft::Error;
using weft::RemoteRegion;

namespace {

std::string decode_error(std::span<const std::byte> bytes) {
    try {
        RemoteRegion::decode(bytes);
    } catch (const Error& e) {
        BOOST_TEST((e.code() == Errc::bad_descriptor));
        return e.what();
    }
    return {};
}

using weft::test::contains;

// Re-seals a tampered encoding with a valid checksum, so the check under test is the one that fires.
void reseal(RemoteRegion::Encoded& e) {
    std::uint32_t h = 2166136261u;
    for (int i = 0; i < 32; ++i) {
        h ^= static_cast<std::uint32_t>(e[i]);
        h *= 16777619u;
    }
    for (int i = 0; i < 4; ++i) e[32 + i] = static_cast<std::byte>(h >> (8 * i));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(descriptor)

BOOST_AUTO_TEST_CASE(round_trips_every_field) {
    RemoteRegion r(0x7f00'1234'5678ull, 1ull << 33, 0xfeed'beef'0000'0001ull, BackendKind::ofi);
    auto bytes = r.encode();
    auto back = RemoteRegion::decode(bytes);
    BOOST_TEST(back.addr() == r.addr());
    BOOST_TEST(back.length() == r.length());
    BOOST_TEST(back.rkey() == r.rkey());
    BOOST_TEST((back.backend() == BackendKind::ofi));
    BOOST_TEST((back == r));
}

BOOST_AUTO_TEST_CASE(encoding_is_little_endian_and_fixed) {
    RemoteRegion r(0x0102030405060708ull, 16, 0xaabb, BackendKind::verbs);
    auto b = r.encode();
    BOOST_TEST(b.size() == RemoteRegion::encoded_size);
    BOOST_TEST(static_cast<int>(b[0]) == 'w');
    BOOST_TEST(static_cast<int>(b[4]) == 1);   // version
    BOOST_TEST(static_cast<int>(b[5]) == 2);   // verbs
    BOOST_TEST(static_cast<int>(b[8]) == 0x08);
    BOOST_TEST(static_cast<int>(b[15]) == 0x01);
    BOOST_TEST(static_cast<int>(b[24]) == 0xbb);
}

BOOST_AUTO_TEST_CASE(wrong_size_is_rejected) {
    RemoteRegion r(4096, 64, 1, BackendKind::sim);
    auto b = r.encode();
    BOOST_TEST(contains(decode_error(std::span(b).first(35)), "expected 36 bytes, got 35"));
    std::vector<std::byte> longer(b.begin(), b.end());
    longer.push_back(std::byte{0});
    BOOST_TEST(contains(decode_error(longer), "got 37"));
    BOOST_TEST(contains(decode_error({}), "got 0"));
}

BOOST_AUTO_TEST_CASE(each_malformed_field_is_named) {
    RemoteRegion r(4096, 64, 1, BackendKind::sim);
    auto bad_magic = r.encode();
    bad_magic[0] = std::byte{'x'};
    BOOST_TEST(contains(decode_error(bad_magic), "bad magic"));

    auto bad_version = r.encode();
    bad_version[4] = std::byte{9};
    reseal(bad_version);
    BOOST_TEST(contains(decode_error(bad_version), "version 9 is not supported"));

    auto bad_kind = r.encode();
    bad_kind[5] = std::byte{7};
    reseal(bad_kind);
    BOOST_TEST(contains(decode_error(bad_kind), "unknown backend kind 7"));

    auto reserved = r.encode();
    reserved[6] = std::byte{1};
    reseal(reserved);
    BOOST_TEST(contains(decode_error(reserved), "reserved bytes"));

    auto corrupted = r.encode();
    corrupted[20] ^= std::byte{0x40};
    BOOST_TEST(contains(decode_error(corrupted), "checksum mismatch"));
}

BOOST_AUTO_TEST_CASE(overflowing_range_is_rejected) {
    RemoteRegion r(~0ull - 10, 64, 1, BackendKind::sim);
    auto b = r.encode();
    BOOST_TEST(contains(decode_error(b), "overflows"));
}

BOOST_AUTO_TEST_CASE(slice_stays_inside_the_region) {
    RemoteRegion r(1000, 100, 5, BackendKind::sim);
    auto s = r.slice(10, 20);
    BOOST_TEST(s.addr() == 1010u);
    BOOST_TEST(s.length() == 20u);
    BOOST_TEST(s.rkey() == 5u);
    BOOST_TEST(r.slice(40).length() == 60u);
    BOOST_TEST(r.slice(100, 0).length() == 0u);
    BOOST_CHECK_THROW(r.slice(90, 11), Error);
    BOOST_CHECK_THROW(r.slice(101), Error);
    BOOST_CHECK_THROW(r.slice(~0ull, 2), Error);
}

BOOST_AUTO_TEST_SUITE_END()
