// The ofi backend's decoders of peer bytes, without a provider (backends/ofi/ofi_wire.hpp): QP addresses, the
// endpoint names inside them, and the frames of the listener rendezvous, malformed in every way a peer (or a
// stray client of a listener) can send them.
#include "ofi_wire.hpp"

#include "../support/expect_error.hpp"

#include <weft/detail/bytes.hpp>
#include <weft/error.hpp>

#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using namespace weft;
namespace wire = weft::ofi::wire;
using weft::test::contains;
using weft::test::error_of;

namespace {

template <class T>
std::vector<std::byte> raw(const T& v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    return {p, p + sizeof v};
}

std::vector<std::byte> bytes_of(std::string_view s) {
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    return {p, p + s.size()};
}

// A name of FI_ADDR_STR: the text and its terminator.
std::vector<std::byte> str_name(std::string_view s) {
    auto b = bytes_of(s);
    b.push_back(std::byte{0});
    return b;
}

std::vector<std::byte> in4(const char* ip, std::uint16_t port) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    ::inet_pton(AF_INET, ip, &in.sin_addr);
    return raw(in);
}

std::vector<std::byte> in6(const char* ip, std::uint16_t port) {
    sockaddr_in6 in{};
    in.sin6_family = AF_INET6;
    in.sin6_port = htons(port);
    ::inet_pton(AF_INET6, ip, &in.sin6_addr);
    return raw(in);
}

// A tcp QP's address, as a peer on 192.0.2.7 would send it.
wire::PeerAddress tcp_peer() {
    wire::PeerAddress a;
    a.ep_type = FI_EP_MSG;
    a.flags = 1;
    a.addr_format = FI_SOCKADDR_IN;
    a.nonce = 0x0123456789abcdefull;
    a.liveness_port = 40001;
    a.provider = "tcp";
    a.name = in4("192.0.2.7", 5001);
    return a;
}

// The side of a tcp QP on 127.0.0.1 that receives tcp_peer().
struct Own {
    std::vector<std::byte> name = in4("127.0.0.1", 5000);
    wire::LocalEnd end{FI_EP_MSG, "tcp", FI_SOCKADDR_IN, 1, name};
};

// Re-seals the checksum after a field was changed, so that the decoder reaches the field's own check.
std::vector<std::byte> resealed(std::vector<std::byte> b) {
    const std::size_t body = b.size() - wire::address_checksum;
    detail::put_le<std::uint32_t>(b.data() + body, detail::fnv1a(b.data(), body));
    return b;
}

// The error decode_address throws for `b`; checks it is a bad_descriptor of QueuePair::connect.
std::string refusal(const std::vector<std::byte>& b) {
    Error e = error_of([&] { (void)wire::decode_address(b); });
    BOOST_TEST((e.code() == Errc::bad_descriptor));
    BOOST_TEST(e.backend() == "ofi");
    BOOST_TEST(e.object() == "QueuePair::connect");
    return e.what();
}

// The error check_peer throws for `p` against `own`, which must have `code`.
std::string mismatch(const wire::PeerAddress& p, const wire::LocalEnd& own, Errc code) {
    Error e = error_of([&] { wire::check_peer(p, own); });
    BOOST_TEST((e.code() == code), e.what());
    BOOST_TEST(e.backend() == "ofi");
    BOOST_TEST(e.object() == "QueuePair::connect");
    return e.what();
}

bool printable_text(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

// A connection that holds `bytes` and closes after them, and what was asked of it.
struct Stream {
    std::vector<std::byte> bytes;
    std::size_t at = 0;
    std::vector<std::size_t> asked;

    wire::ReadExact reader() {
        return [this](std::byte* dst, std::size_t n) -> std::string {
            asked.push_back(n);
            if (bytes.size() - at < n) return "the peer closed the rendezvous connection";
            std::memcpy(dst, bytes.data() + at, n);
            at += n;
            return {};
        };
    }
};

std::vector<std::byte> header(std::uint32_t kind, std::uint32_t length) {
    std::vector<std::byte> h = bytes_of("weftofi2");
    h.resize(wire::frame_header);
    detail::put_le<std::uint32_t>(h.data() + 8, kind);
    detail::put_le<std::uint32_t>(h.data() + 12, length);
    return h;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ofi_wire_address)

BOOST_AUTO_TEST_CASE(an_encoded_address_decodes_to_the_same_fields_and_bytes) {
    const wire::PeerAddress a = tcp_peer();
    const auto bytes = wire::encode_address(a);
    BOOST_TEST(bytes.size() == wire::address_header + 3 + sizeof(sockaddr_in) + wire::address_checksum);
    const wire::PeerAddress d = wire::decode_address(bytes);
    BOOST_TEST((d.ep_type == FI_EP_MSG));
    BOOST_TEST(d.flags == 1);
    BOOST_TEST(d.addr_format == std::uint32_t{FI_SOCKADDR_IN});
    BOOST_TEST(d.nonce == 0x0123456789abcdefull);
    BOOST_TEST(d.liveness_port == 40001);
    BOOST_TEST(d.provider == "tcp");
    BOOST_TEST((d.name == a.name));
    BOOST_TEST((wire::encode_address(d) == bytes));

    wire::PeerAddress shm;  // rdm, a string name, no liveness socket
    shm.ep_type = FI_EP_RDM;
    shm.flags = 2;
    shm.addr_format = FI_ADDR_STR;
    shm.nonce = 7;
    shm.provider = "shm";
    shm.name = str_name("fi_shm://777:0:0");
    const wire::PeerAddress e = wire::decode_address(wire::encode_address(shm));
    BOOST_TEST((e.ep_type == FI_EP_RDM));
    BOOST_TEST(e.liveness_port == 0);
    BOOST_TEST((e.name == shm.name));
}

BOOST_AUTO_TEST_CASE(short_and_inconsistent_lengths_are_refused) {
    const auto good = wire::encode_address(tcp_peer());
    BOOST_TEST(contains(refusal({}), "expected at least 28 bytes, got 0"));
    BOOST_TEST(contains(refusal({good.begin(), good.begin() + 27}), "expected at least 28 bytes, got 27"));
    auto cut = good;
    cut.pop_back();
    BOOST_TEST(contains(refusal(cut), "length 46 does not match its header"));
    auto longer = good;
    longer.push_back(std::byte{0});
    BOOST_TEST(contains(refusal(longer), "length 48 does not match its header"));
    auto name_len = good;
    detail::put_le<std::uint16_t>(name_len.data() + 12, 17);  // one more name byte than there are
    BOOST_TEST(contains(refusal(resealed(name_len)), "does not match its header"));
}

BOOST_AUTO_TEST_CASE(magic_version_checksum_and_endpoint_type_are_checked) {
    const auto good = wire::encode_address(tcp_peer());
    auto magic = good;
    magic[2] = std::byte{'V'};  // a verbs address
    BOOST_TEST(contains(refusal(resealed(magic)), "not an ofi QP address (bad magic)"));
    auto version = good;
    version[4] = std::byte{1};
    BOOST_TEST(contains(refusal(resealed(version)), "version 1 is not supported (accepted: 2)"));
    auto flipped = good;
    flipped[30] ^= std::byte{0x40};  // a bit of the endpoint name
    BOOST_TEST(contains(refusal(flipped), "checksum mismatch"));
    auto type = good;
    type[5] = std::byte{3};
    BOOST_TEST(contains(refusal(resealed(type)), "unknown endpoint type 3"));
}

BOOST_AUTO_TEST_CASE(an_address_whose_names_do_not_fit_is_not_encoded) {
    wire::PeerAddress a = tcp_peer();
    a.provider.assign(256, 'p');
    Error e = error_of([&] { (void)wire::encode_address(a); });
    BOOST_TEST((e.code() == Errc::internal));
    BOOST_TEST(contains(e.what(), "too long for a QP address"));
    a = tcp_peer();
    a.name.assign(65536, std::byte{1});
    BOOST_TEST(contains(error_of([&] { (void)wire::encode_address(a); }).what(), "too long"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ofi_wire_peer)

BOOST_AUTO_TEST_CASE(a_peer_of_the_same_configuration_is_accepted) {
    Own own;
    wire::check_peer(tcp_peer(), own.end);

    wire::PeerAddress v6 = tcp_peer();
    v6.addr_format = FI_SOCKADDR;
    v6.name = in6("2001:db8::7", 5001);
    const auto own6 = in6("::1", 5000);
    wire::check_peer(v6, {FI_EP_MSG, "tcp", FI_SOCKADDR, 1, own6});

    wire::PeerAddress shm = tcp_peer();
    shm.ep_type = FI_EP_RDM;
    shm.provider = "shm";
    shm.addr_format = FI_ADDR_STR;
    shm.name = str_name("fi_shm://777:0:0");
    const auto own_shm = str_name("fi_shm://4242:0:0");
    wire::check_peer(shm, {FI_EP_RDM, "shm", FI_ADDR_STR, 1, own_shm});
}

BOOST_AUTO_TEST_CASE(a_peer_of_another_configuration_is_refused_saying_what_differs) {
    Own own;
    wire::PeerAddress p = tcp_peer();
    p.ep_type = FI_EP_RDM;
    BOOST_TEST(contains(mismatch(p, own.end, Errc::invalid_argument), "uses rdm endpoints, this one msg"));
    p = tcp_peer();
    p.provider = "sockets";
    BOOST_TEST(contains(mismatch(p, own.end, Errc::invalid_argument),
                        "the peer QP is on provider 'sockets', this one on 'tcp'"));
    p = tcp_peer();
    p.addr_format = FI_SOCKADDR_IN6;
    BOOST_TEST(contains(mismatch(p, own.end, Errc::invalid_argument), "address format differs"));
    p = tcp_peer();
    p.flags = 2;
    BOOST_TEST(contains(mismatch(p, own.end, Errc::invalid_argument), "carries immediate data differently"));
}

// A peer's provider name is up to 255 bytes of anything; the error (which the listener also sends back to
// the connector) shows it as printable text.
BOOST_AUTO_TEST_CASE(a_foreign_provider_name_reaches_the_message_printable) {
    Own own;
    wire::PeerAddress p = tcp_peer();
    p.provider = std::string("tc\x1b[2Jp\0\n", 9);
    const std::string what = mismatch(p, own.end, Errc::invalid_argument);
    BOOST_TEST(printable_text(what), what);
    BOOST_TEST(contains(what, "provider 'tc?[2Jp?" "?', this one on 'tcp'"), what);
}

BOOST_AUTO_TEST_CASE(a_socket_address_of_another_size_family_or_without_address_is_refused) {
    Own own;
    wire::PeerAddress p = tcp_peer();
    p.name.clear();
    BOOST_TEST(contains(mismatch(p, own.end, Errc::bad_descriptor), "the endpoint name is empty"));
    p.name = in4("192.0.2.7", 5001);
    p.name.resize(8);
    BOOST_TEST(contains(mismatch(p, own.end, Errc::bad_descriptor),
                        "the endpoint name has 8 bytes; this provider's (FI_SOCKADDR_IN) have 16"));
    p.name = in4("192.0.2.7", 5001);
    p.name[0] = std::byte{AF_INET6};
    BOOST_TEST(contains(mismatch(p, own.end, Errc::bad_descriptor), "address family is 10, expected 2"));
    p.name = in4("0.0.0.0", 5001);
    BOOST_TEST(contains(mismatch(p, own.end, Errc::bad_descriptor), "no address or port (0.0.0.0 or port 0)"));
    p.name = in4("192.0.2.7", 0);
    BOOST_TEST(contains(mismatch(p, own.end, Errc::bad_descriptor), "no address or port (0.0.0.0 or port 0)"));

    const auto own6 = in6("::1", 5000);
    const wire::LocalEnd end6{FI_EP_MSG, "tcp", FI_SOCKADDR_IN6, 1, own6};
    p.addr_format = FI_SOCKADDR_IN6;
    p.name = in6("::", 5001);
    BOOST_TEST(contains(mismatch(p, end6, Errc::bad_descriptor), "no address or port (:: or port 0)"));
    p.name = in6("2001:db8::7", 0);
    BOOST_TEST(contains(mismatch(p, end6, Errc::bad_descriptor), "no address or port (:: or port 0)"));
}

BOOST_AUTO_TEST_CASE(a_string_name_must_be_one_printable_terminated_string_of_our_scheme) {
    const auto own_name = str_name("fi_shm://4242:0:0");
    const wire::LocalEnd own{FI_EP_RDM, "shm", FI_ADDR_STR, 2, own_name};
    wire::PeerAddress p;
    p.ep_type = FI_EP_RDM;
    p.flags = 2;
    p.addr_format = FI_ADDR_STR;
    p.provider = "shm";
    auto said = [&](std::vector<std::byte> name) {
        p.name = std::move(name);
        return mismatch(p, own, Errc::bad_descriptor);
    };
    BOOST_TEST(contains(said(bytes_of("fi_shm://777:0:0")), "not one terminated string"));
    BOOST_TEST(contains(said(str_name(std::string_view("fi_shm://7\0a", 12))), "not one terminated string"));
    BOOST_TEST(contains(said(str_name("fi_shm://77 7")), "unprintable characters"));
    BOOST_TEST(contains(said(str_name("fi_ns://777")), "does not start with 'fi_shm://'"));
    BOOST_TEST(contains(said(str_name("fi_shm://")), "nothing after its scheme"));
    BOOST_TEST(contains(said(str_name("fi_shm://" + std::string(FI_NAME_MAX, '7'))),
                        "bytes (at most " + std::to_string(FI_NAME_MAX) + ")"));
    p.name = str_name("fi_shm://777:0:0");
    wire::check_peer(p, own);
}

BOOST_AUTO_TEST_CASE(a_name_of_a_format_without_decoder_must_have_our_length) {
    const std::vector<std::byte> own_name(32, std::byte{1});
    const wire::LocalEnd own{FI_EP_RDM, "efa", FI_ADDR_EFA, 2, own_name};
    wire::PeerAddress p;
    p.ep_type = FI_EP_RDM;
    p.flags = 2;
    p.addr_format = FI_ADDR_EFA;
    p.provider = "efa";
    p.name.assign(31, std::byte{2});
    BOOST_TEST(contains(mismatch(p, own, Errc::bad_descriptor), "has 31 bytes, this provider's have 32"));
    p.name.assign(32, std::byte{2});
    wire::check_peer(p, own);
}

BOOST_AUTO_TEST_CASE(the_liveness_address_is_the_names_ip_without_port) {
    sockaddr_storage ip{};
    socklen_t len = 0;
    BOOST_REQUIRE(wire::liveness_address(FI_SOCKADDR_IN, in4("192.0.2.7", 5001), ip, len));
    BOOST_TEST(len == sizeof(sockaddr_in));
    BOOST_TEST((raw(reinterpret_cast<const sockaddr_in&>(ip)) == in4("192.0.2.7", 0)));
    BOOST_REQUIRE(wire::liveness_address(FI_SOCKADDR, in4("0.0.0.0", 5001), ip, len));  // wildcard: loopback
    BOOST_TEST((raw(reinterpret_cast<const sockaddr_in&>(ip)) == in4("127.0.0.1", 0)));
    BOOST_REQUIRE(wire::liveness_address(FI_SOCKADDR_IN6, in6("2001:db8::7", 5001), ip, len));
    BOOST_TEST(len == sizeof(sockaddr_in6));
    BOOST_TEST((raw(reinterpret_cast<const sockaddr_in6&>(ip)) == in6("2001:db8::7", 0)));
    BOOST_REQUIRE(wire::liveness_address(FI_ADDR_STR, str_name("fi_shm://777:0:0"), ip, len));
    BOOST_TEST((raw(reinterpret_cast<const sockaddr_in&>(ip)) == in4("127.0.0.1", 0)));

    BOOST_TEST(!wire::liveness_address(FI_SOCKADDR_IN6, in4("192.0.2.7", 5001), ip, len));  // family and format
    auto cut = in4("192.0.2.7", 5001);
    cut.resize(8);
    BOOST_TEST(!wire::liveness_address(FI_SOCKADDR_IN, cut, ip, len));
    BOOST_TEST(!wire::liveness_address(FI_ADDR_STR, bytes_of("fi_shm://777"), ip, len));  // unterminated
    BOOST_TEST(!wire::liveness_address(FI_ADDR_STR, str_name("fi_sockets://1"), ip, len));
    BOOST_TEST(!wire::liveness_address(FI_ADDR_EFA, std::vector<std::byte>(32), ip, len));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(ofi_wire_frame)

BOOST_AUTO_TEST_CASE(a_greeting_splits_into_the_address_and_the_private_data) {
    const auto address = wire::encode_address(tcp_peer());
    std::vector<std::byte> data(wire::max_private_data);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(200 + i);
    const auto payload = wire::encode_greeting(address, data);
    BOOST_TEST(payload.size() == 2 + address.size() + data.size());
    wire::Greeting g;
    BOOST_REQUIRE(wire::split_greeting(payload, g) == "");
    BOOST_TEST(std::equal(g.address.begin(), g.address.end(), address.begin(), address.end()));
    BOOST_TEST(std::equal(g.private_data.begin(), g.private_data.end(), data.begin(), data.end()));
    BOOST_TEST(g.address.data() == payload.data() + 2);  // views, not copies
    const auto bare = wire::encode_greeting(address, {});
    BOOST_REQUIRE(wire::split_greeting(bare, g) == "");
    BOOST_TEST(g.private_data.empty());
}

BOOST_AUTO_TEST_CASE(a_malformed_greeting_is_refused_naming_the_problem) {
    const auto address = wire::encode_address(tcp_peer());
    wire::Greeting g;
    BOOST_TEST(contains(wire::split_greeting({}, g), "a greeting of 0 bytes has no address length"));
    BOOST_TEST(contains(wire::split_greeting(std::vector<std::byte>(1), g), "of 1 bytes"));
    auto overrun = wire::encode_greeting(address, {});
    overrun.pop_back();
    BOOST_TEST(contains(wire::split_greeting(overrun, g), "overruns"));
    const auto too_much = wire::encode_greeting(address, std::vector<std::byte>(wire::max_private_data + 1));
    BOOST_TEST(contains(wire::split_greeting(too_much, g), "57 bytes of private data (at most 56 accepted)"));
    BOOST_TEST(g.address.empty());  // nothing set on failure
    BOOST_TEST(g.private_data.empty());
}

BOOST_AUTO_TEST_CASE(a_frame_of_each_kind_reads_back_its_payload) {
    const auto address = wire::encode_address(tcp_peer());
    for (auto kind : {wire::FrameKind::hello, wire::FrameKind::accepted, wire::FrameKind::refused}) {
        Stream s{wire::encode_frame(kind, address)};
        BOOST_TEST(s.bytes.size() == wire::frame_header + address.size());
        wire::Frame f;
        BOOST_TEST(wire::read_frame(s.reader(), f) == "");
        BOOST_TEST((f.kind == kind));
        BOOST_TEST((f.payload == address));
        BOOST_TEST(s.at == s.bytes.size());
    }
    Stream empty{wire::encode_frame(wire::FrameKind::refused, {})};
    wire::Frame f;
    BOOST_TEST(wire::read_frame(empty.reader(), f) == "");
    BOOST_TEST(f.payload.empty());
    BOOST_TEST(empty.asked.size() == 1u);  // no read of an empty payload
}

BOOST_AUTO_TEST_CASE(another_protocol_or_kind_is_refused_before_any_payload_is_read) {
    wire::Frame f;
    Stream http{bytes_of("GET / HTTP/1.0\r\n\r\n")};
    BOOST_TEST(wire::read_frame(http.reader(), f) == "the peer does not speak weft's ofi rendezvous (bad magic)");
    BOOST_TEST((http.asked == std::vector<std::size_t>{wire::frame_header}));
    for (std::uint32_t kind : {0u, 4u, 0xffffffffu}) {
        Stream s{header(kind, 0)};
        BOOST_TEST(wire::read_frame(s.reader(), f) == "unknown frame kind " + std::to_string(kind));
    }
}

BOOST_AUTO_TEST_CASE(a_payload_of_more_than_64_KiB_is_refused_unread) {
    wire::Frame f;
    Stream big{header(1, wire::frame_max + 1)};
    BOOST_TEST(wire::read_frame(big.reader(), f) == "frame of 65537 bytes (at most 65536 accepted)");
    BOOST_TEST((big.asked == std::vector<std::size_t>{wire::frame_header}));
    BOOST_TEST(f.payload.empty());
    Stream huge{header(3, 0xffffffffu)};
    BOOST_TEST(contains(wire::read_frame(huge.reader(), f), "frame of 4294967295 bytes"));

    Stream most{wire::encode_frame(wire::FrameKind::refused, std::vector<std::byte>(wire::frame_max, std::byte{'x'}))};
    BOOST_TEST(wire::read_frame(most.reader(), f) == "");
    BOOST_TEST(f.payload.size() == wire::frame_max);
}

BOOST_AUTO_TEST_CASE(a_connection_that_closes_early_says_so) {
    wire::Frame f;
    Stream half{header(1, 0)};
    half.bytes.resize(9);
    BOOST_TEST(wire::read_frame(half.reader(), f) == "the peer closed the rendezvous connection");
    Stream cut{header(1, 40)};
    cut.bytes.resize(cut.bytes.size() + 39, std::byte{0});
    BOOST_TEST(wire::read_frame(cut.reader(), f) == "the peer closed the rendezvous connection");
    BOOST_TEST((cut.asked == std::vector<std::size_t>{wire::frame_header, 40}));
}

BOOST_AUTO_TEST_CASE(a_refusal_text_is_shown_printable_and_cut) {
    BOOST_TEST(wire::printable(bytes_of("peer address: bad magic")) == "peer address: bad magic");
    BOOST_TEST(wire::printable(bytes_of(std::string_view("a\x1b[2J\0\xff\n", 8))) == "a?[2J???");
    const std::string long_text = wire::printable(std::vector<std::byte>(100000, std::byte{'y'}));
    BOOST_TEST(long_text == std::string(wire::refusal_text_max, 'y') + "...");
}

BOOST_AUTO_TEST_SUITE_END()
