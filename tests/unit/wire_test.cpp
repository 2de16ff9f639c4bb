// weft/detail/wire.hpp: the reader checks the length before every field and names the field, the length
// received and the length expected; the writer lays fields out little-endian with a checksum the reader takes.
#include <weft/detail/wire.hpp>
#include <weft/error.hpp>

#include <boost/test/unit_test.hpp>

#include "../support/expect_error.hpp"

#include <array>
#include <string>
#include <vector>

using weft::Errc;
using weft::Error;
using weft::detail::WireContext;
using weft::detail::WireReader;
using weft::detail::WireWriter;
using weft::test::contains;

namespace {

constexpr WireContext context{"test frame", "sim", "Test::decode"};

template <class F>
std::string failure(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        BOOST_TEST((e.code() == Errc::bad_descriptor));
        BOOST_TEST(e.backend() == "sim");
        BOOST_TEST(e.object() == "Test::decode");
        return e.message();
    }
    return {};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(wire)

BOOST_AUTO_TEST_CASE(what_the_writer_writes_the_reader_reads_back) {
    std::array<std::byte, 4 + 1 + 2 + 8 + 4> buf{};
    const std::byte magic[4] = {std::byte{'w'}, std::byte{'f'}, std::byte{'T'}, std::byte{'T'}};
    WireWriter w(buf);
    w.bytes(magic);
    w.u8(3);
    w.skip(2);
    w.put<std::uint64_t>(0x0102030405060708ull);
    w.checksum();
    BOOST_TEST(w.offset() == buf.size());
    BOOST_TEST(static_cast<unsigned>(buf[7]) == 0x08u);  // little-endian

    WireReader r(buf, context);
    r.expect_size(buf.size());
    r.expect_magic(magic, "bad magic");
    r.expect_version(4, 3);
    r.expect_zero(5, 2);
    r.expect_checksum(15, "checksum mismatch");
    BOOST_TEST(r.at<std::uint64_t>(7, "value") == 0x0102030405060708ull);
    r.take(7, "header");
    BOOST_TEST(r.get<std::uint64_t>("value") == 0x0102030405060708ull);
    BOOST_TEST(r.get<std::uint32_t>("checksum") == weft::detail::fnv1a(buf.data(), 15));
    r.expect_end();
}

BOOST_AUTO_TEST_CASE(a_field_past_the_end_is_named_with_both_lengths) {
    const std::vector<std::byte> six(6);
    WireReader r(six, context);
    const std::string msg = failure([&] { (void)r.at<std::uint32_t>(4, "QP number"); });
    BOOST_TEST(contains(msg, "test frame: "), msg);
    BOOST_TEST(contains(msg, "QP number"), msg);
    BOOST_TEST(contains(msg, "expected at least 8 bytes, got 6"), msg);
    // Reading in order: the cursor does not move past a field that is not there.
    WireReader s(six, context);
    (void)s.get<std::uint32_t>("first");
    BOOST_TEST(contains(failure([&] { (void)s.take(3, "name"); }), "name field needs bytes 4..6"));
    BOOST_TEST(s.offset() == 4u);
    BOOST_TEST(contains(failure([&] { s.expect_end(); }), "expected 4 bytes, got 6"));
}

BOOST_AUTO_TEST_CASE(an_offset_beyond_the_bytes_does_not_wrap) {
    const std::vector<std::byte> two(2);
    WireReader r(two, context);
    BOOST_TEST(contains(failure([&] { (void)r.span(SIZE_MAX - 1, 4, "far"); }), "far"));
    BOOST_TEST(contains(failure([&] { (void)r.at<std::uint16_t>(3, "late"); }), "got 2"));
}

BOOST_AUTO_TEST_CASE(size_magic_version_reserved_and_checksum_checks_say_what_failed) {
    std::vector<std::byte> b(12);
    WireReader r(b, context);
    BOOST_TEST(failure([&] { r.expect_size(13, " (a hint)"); }) == "test frame: expected 13 bytes, got 12 (a hint)");
    BOOST_TEST(failure([&] { r.expect_at_least(20); }) == "test frame: expected at least 20 bytes, got 12");
    const std::byte magic[2] = {std::byte{'w'}, std::byte{'f'}};
    BOOST_TEST(failure([&] { r.expect_magic(magic, "not ours"); }) == "test frame: not ours");
    BOOST_TEST(failure([&] { r.expect_version(0, 1); }) == "test frame: version 0 is not supported (accepted: 1)");
    b[3] = std::byte{1};
    BOOST_TEST(failure([&] { r.expect_zero(2, 2); }) == "test frame: reserved bytes are not zero");
    BOOST_TEST(failure([&] { r.expect_checksum(8, "corrupted"); }) == "test frame: corrupted");
    // An empty encoding name: the message is the reason alone.
    WireReader bare(b, {{}, "sim", "Test::decode"});
    BOOST_TEST(failure([&] { bare.expect_size(1); }) == "expected 1 bytes, got 12");
}

BOOST_AUTO_TEST_SUITE_END()
