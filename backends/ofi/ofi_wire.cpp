// Encoding and checking the ofi backend's wire formats (ofi_wire.hpp has the layouts).
#include "ofi_wire.hpp"

#include <weft/detail/bytes.hpp>
#include <weft/detail/wire.hpp>
#include <weft/error.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace weft::ofi::wire {
namespace {

constexpr std::byte address_magic[4] = {std::byte{'w'}, std::byte{'f'}, std::byte{'O'}, std::byte{'Q'}};
constexpr std::array<char, 8> frame_magic{'w', 'e', 'f', 't', 'o', 'f', 'i', '2'};
constexpr std::string_view shm_schemes[] = {"fi_shm://", "fi_ns://"};

constexpr detail::WireContext address_context{"peer address", backend_name, "QueuePair::connect"};

[[noreturn]] void bad_address(const std::string& why) { detail::throw_bad_wire(address_context, why); }

std::uint16_t family_of(std::span<const std::byte> name) noexcept {
    std::uint16_t f = 0;
    if (name.size() >= sizeof f) std::memcpy(&f, name.data(), sizeof f);
    return f;
}

// The text of an FI_ADDR_STR name up to its terminator; empty when it has none.
std::string_view str_name(std::span<const std::byte> name) noexcept {
    const auto* p = reinterpret_cast<const char*>(name.data());
    const void* nul = std::memchr(p, 0, name.size());
    if (nul == nullptr) return {};
    return std::string_view(p, static_cast<std::size_t>(static_cast<const char*>(nul) - p));
}

std::string_view scheme_of(std::string_view text) noexcept {
    auto at = text.find("://");
    return at == std::string_view::npos ? std::string_view{} : text.substr(0, at + 3);
}

}  // namespace

// ---- QP address

std::vector<std::byte> encode_address(const PeerAddress& a) {
    if (a.provider.size() > 255 || a.name.size() > 65535) {
        throw Error(Errc::internal, "provider or endpoint name too long for a QP address", backend_name, "create_qp");
    }
    std::vector<std::byte> out(address_header + a.provider.size() + a.name.size() + address_checksum);
    std::memcpy(out.data(), address_magic, 4);
    out[4] = std::byte{address_version};
    out[5] = std::byte{static_cast<std::uint8_t>(a.ep_type == FI_EP_MSG ? 1 : 2)};
    out[6] = std::byte{a.flags};
    out[7] = std::byte{static_cast<std::uint8_t>(a.provider.size())};
    detail::put_le<std::uint32_t>(out.data() + 8, a.addr_format);
    detail::put_le<std::uint16_t>(out.data() + 12, static_cast<std::uint16_t>(a.name.size()));
    detail::put_le<std::uint16_t>(out.data() + 14, a.liveness_port);
    detail::put_le<std::uint64_t>(out.data() + 16, a.nonce);
    std::memcpy(out.data() + address_header, a.provider.data(), a.provider.size());
    if (!a.name.empty()) std::memcpy(out.data() + address_header + a.provider.size(), a.name.data(), a.name.size());
    const std::size_t body = out.size() - address_checksum;
    detail::put_le<std::uint32_t>(out.data() + body, detail::fnv1a(out.data(), body));
    return out;
}

PeerAddress decode_address(std::span<const std::byte> b) {
    detail::WireReader r(b, address_context);
    r.expect_at_least(address_header + address_checksum);
    r.expect_magic(address_magic, "not an ofi QP address (bad magic)");
    r.expect_version(4, address_version);
    const std::size_t prov_len = r.at<std::uint8_t>(7, "provider length");
    const std::size_t name_len = r.at<std::uint16_t>(12, "name length");
    if (b.size() != address_header + prov_len + name_len + address_checksum) {
        r.fail("length " + std::to_string(b.size()) + " does not match its header");
    }
    const std::size_t body = b.size() - address_checksum;
    r.expect_checksum(body, "checksum mismatch: corrupted or truncated");
    PeerAddress p;
    const auto type = r.at<std::uint8_t>(5, "endpoint type");
    if (type != 1 && type != 2) r.fail("unknown endpoint type " + std::to_string(type));
    p.ep_type = type == 1 ? FI_EP_MSG : FI_EP_RDM;
    p.flags = r.at<std::uint8_t>(6, "flags");
    p.addr_format = r.at<std::uint32_t>(8, "address format");
    p.liveness_port = r.at<std::uint16_t>(14, "liveness port");
    p.nonce = r.at<std::uint64_t>(16, "nonce");
    r.take(address_header, "header");
    const auto prov = r.take(prov_len, "provider");
    p.provider.assign(reinterpret_cast<const char*>(prov.data()), prov.size());
    const auto name = r.take(name_len, "endpoint name");
    p.name.assign(name.begin(), name.end());
    return p;
}

void check_peer(const PeerAddress& p, const LocalEnd& own) {
    constexpr std::string_view object = "QueuePair::connect";
    if (p.ep_type != own.ep_type) {
        throw Error(Errc::invalid_argument,
                    std::string("the peer QP uses ") + (p.ep_type == FI_EP_MSG ? "msg" : "rdm") +
                        " endpoints, this one " + (own.ep_type == FI_EP_MSG ? "msg" : "rdm") +
                        " (the two configurations differ in ep_type)",
                    backend_name, object);
    }
    if (p.provider != own.provider) {
        // The peer's name is any 255 bytes: the message (which a listener sends back) shows it printable.
        const std::string theirs = printable(std::as_bytes(std::span(p.provider)));
        throw Error(Errc::invalid_argument,
                    "the peer QP is on provider '" + theirs + "', this one on '" + std::string(own.provider) + "'",
                    backend_name, object);
    }
    if (p.addr_format != own.addr_format) {
        throw Error(Errc::invalid_argument, "the peer's address format differs from this domain's", backend_name,
                    object);
    }
    if (p.flags != own.flags) {
        throw Error(Errc::invalid_argument, "the peer carries immediate data differently (another libfabric build?)",
                    backend_name, object);
    }
    // The provider trusts the name's length and layout (fi_av_insert reads as many bytes as the format says,
    // fi_connect as many as a sockaddr holds): nothing it cannot parse gets there.
    if (std::string why = check_peer_name(p.addr_format, p.name, own.name); !why.empty()) bad_address(why);
}

// ---- Endpoint names

std::string check_peer_name(std::uint32_t addr_format, std::span<const std::byte> peer,
                            std::span<const std::byte> own) {
    if (peer.empty()) return "the endpoint name is empty";
    switch (addr_format) {
        case FI_SOCKADDR:
        case FI_SOCKADDR_IN:
        case FI_SOCKADDR_IN6:
        case FI_SOCKADDR_IB: {
            // A socket address of the family and size our own endpoint has (sockaddr_in: 16 bytes, AF_INET).
            if (peer.size() != own.size()) {
                return "the endpoint name has " + std::to_string(peer.size()) + " bytes; this provider's (" +
                       fi_tostr(&addr_format, FI_TYPE_ADDR_FORMAT) + ") have " + std::to_string(own.size());
            }
            if (family_of(peer) != family_of(own)) {
                return "the endpoint name's address family is " + std::to_string(family_of(peer)) + ", expected " +
                       std::to_string(family_of(own));
            }
            if (family_of(peer) == AF_INET && peer.size() == sizeof(sockaddr_in)) {
                sockaddr_in in{};
                std::memcpy(&in, peer.data(), sizeof in);
                if (in.sin_port == 0 || in.sin_addr.s_addr == htonl(INADDR_ANY)) {
                    return "the endpoint name has no address or port (0.0.0.0 or port 0)";
                }
            }
            if (family_of(peer) == AF_INET6 && peer.size() == sizeof(sockaddr_in6)) {
                sockaddr_in6 in6{};
                std::memcpy(&in6, peer.data(), sizeof in6);
                if (in6.sin6_port == 0 || IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
                    return "the endpoint name has no address or port (:: or port 0)";
                }
            }
            return {};
        }
        case FI_ADDR_STR: {
            // A terminated, printable string with the scheme of our own ("fi_shm://pid:ep:0").
            if (peer.size() > FI_NAME_MAX) {
                return "the endpoint name has " + std::to_string(peer.size()) + " bytes (at most " +
                       std::to_string(FI_NAME_MAX) + ")";
            }
            std::string_view text = str_name(peer);
            if (text.empty() || text.size() + 1 != peer.size()) {
                return "the endpoint name is not one terminated string";
            }
            if (!std::all_of(text.begin(), text.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
                return "the endpoint name holds unprintable characters";
            }
            std::string_view scheme = scheme_of(str_name(own));
            if (!scheme.empty() && scheme_of(text) != scheme) {
                return "the endpoint name does not start with '" + std::string(scheme) + "'";
            }
            if (text.size() <= scheme.size()) return "the endpoint name has nothing after its scheme";
            return {};
        }
        default:
            // A format weft has no decoder for: the same length as ours, or nothing.
            if (peer.size() != own.size()) {
                return "the endpoint name has " + std::to_string(peer.size()) + " bytes, this provider's have " +
                       std::to_string(own.size());
            }
            return {};
    }
}

bool liveness_address(std::uint32_t addr_format, std::span<const std::byte> name, sockaddr_storage& out,
                      socklen_t& len) noexcept {
    out = {};
    const std::uint16_t family = family_of(name);
    if ((addr_format == FI_SOCKADDR || addr_format == FI_SOCKADDR_IN) && family == AF_INET &&
        name.size() >= sizeof(sockaddr_in)) {
        sockaddr_in in{};
        std::memcpy(&in, name.data(), sizeof in);
        if (in.sin_addr.s_addr == htonl(INADDR_ANY)) in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        in.sin_port = 0;
        std::memcpy(&out, &in, sizeof in);
        len = sizeof in;
        return true;
    }
    if ((addr_format == FI_SOCKADDR || addr_format == FI_SOCKADDR_IN6) && family == AF_INET6 &&
        name.size() >= sizeof(sockaddr_in6)) {
        sockaddr_in6 in6{};
        std::memcpy(&in6, name.data(), sizeof in6);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) in6.sin6_addr = in6addr_loopback;
        in6.sin6_port = 0;
        std::memcpy(&out, &in6, sizeof in6);
        len = sizeof in6;
        return true;
    }
    if (addr_format == FI_ADDR_STR) {
        std::string_view text = str_name(name);
        for (std::string_view s : shm_schemes) {
            if (text.rfind(s, 0) != 0) continue;
            // Shared memory: the peer is on this host.
            sockaddr_in in{};
            in.sin_family = AF_INET;
            in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            std::memcpy(&out, &in, sizeof in);
            len = sizeof in;
            return true;
        }
    }
    return false;
}

// ---- Rendezvous frames

std::vector<std::byte> encode_frame(FrameKind kind, std::span<const std::byte> payload) {
    std::vector<std::byte> out(frame_header + payload.size());
    std::memcpy(out.data(), frame_magic.data(), frame_magic.size());
    detail::put_le<std::uint32_t>(out.data() + 8, static_cast<std::uint32_t>(kind));
    detail::put_le<std::uint32_t>(out.data() + 12, static_cast<std::uint32_t>(payload.size()));
    if (!payload.empty()) std::memcpy(out.data() + frame_header, payload.data(), payload.size());
    return out;
}

std::string read_frame(const ReadExact& read, Frame& out) {
    std::array<std::byte, frame_header> h{};
    if (auto why = read(h.data(), h.size()); !why.empty()) return why;
    const detail::WireReader r(h, {});
    std::uint32_t length = 0;
    if (auto why = detail::wire_problem([&] {
            r.expect_magic(std::as_bytes(std::span(frame_magic)),
                           "the peer does not speak weft's ofi rendezvous (bad magic)");
            const auto kind = r.at<std::uint32_t>(8, "frame kind");
            length = r.at<std::uint32_t>(12, "frame length");
            if (kind < 1 || kind > 3) r.fail("unknown frame kind " + std::to_string(kind));
            if (length > frame_max) r.fail("frame of " + std::to_string(length) + " bytes (at most 65536 accepted)");
            out.kind = static_cast<FrameKind>(kind);
        });
        !why.empty()) {
        return why;
    }
    out.payload.assign(length, std::byte{0});
    if (length == 0) return {};
    return read(out.payload.data(), length);
}

std::vector<std::byte> encode_greeting(std::span<const std::byte> address, std::span<const std::byte> private_data) {
    std::vector<std::byte> out(2 + address.size() + private_data.size());
    detail::put_le<std::uint16_t>(out.data(), static_cast<std::uint16_t>(address.size()));
    if (!address.empty()) std::memcpy(out.data() + 2, address.data(), address.size());
    if (!private_data.empty()) std::memcpy(out.data() + 2 + address.size(), private_data.data(), private_data.size());
    return out;
}

std::string split_greeting(std::span<const std::byte> payload, Greeting& out) {
    detail::WireReader r(payload, {});
    return detail::wire_problem([&] {
        if (payload.size() < 2) {
            r.fail("a greeting of " + std::to_string(payload.size()) + " bytes has no address length (2 bytes)");
        }
        const std::size_t n = r.get<std::uint16_t>("address length");
        if (n > r.remaining()) {
            r.fail("the greeting's address of " + std::to_string(n) + " bytes overruns its " +
                   std::to_string(r.remaining()) + " bytes");
        }
        const auto address = r.take(n, "address");
        if (r.remaining() > max_private_data) {
            r.fail("the greeting carries " + std::to_string(r.remaining()) + " bytes of private data (at most " +
                   std::to_string(max_private_data) + " accepted)");
        }
        out.address = address;
        out.private_data = r.take(r.remaining(), "private data");
    });
}

std::string printable(std::span<const std::byte> text) { return weft::detail::printable(text, refusal_text_max); }

}  // namespace weft::ofi::wire
