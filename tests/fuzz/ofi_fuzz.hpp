// Shared by the ofi fuzz targets: what QueuePair::connect does with a peer's QP address on the ofi backend
// before the provider sees it (wire::decode_address, then wire::check_peer against this QP's side), and the
// properties of what it accepts. The sides below stand for the providers' address formats: a socket address
// of each family, a string (shm), and a format weft has no decoder for (efa). tests/fuzz/make_ofi_seeds.py
// writes seed addresses of these same sides; keep the two in step.
#pragma once

#include "fuzz.hpp"

#include "ofi_wire.hpp"

#include <weft/error.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace weft::fuzz::ofi {

namespace wire = weft::ofi::wire;

template <class T>
std::vector<std::byte> raw(const T& v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    return {p, p + sizeof v};
}

inline std::vector<std::byte> text_name(std::string_view s) {
    std::vector<std::byte> out(s.size() + 1, std::byte{0});
    std::memcpy(out.data(), s.data(), s.size());
    return out;
}

struct Side {
    fi_ep_type ep_type;
    std::string provider;
    std::uint32_t addr_format;
    std::uint8_t flags;
    std::vector<std::byte> name;

    wire::LocalEnd end() const { return {ep_type, provider, addr_format, flags, name}; }
};

inline const std::vector<Side>& sides() {
    static const std::vector<Side> all = [] {
        sockaddr_in in{};
        in.sin_family = AF_INET;
        in.sin_port = htons(5000);
        in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sockaddr_in6 in6{};
        in6.sin6_family = AF_INET6;
        in6.sin6_port = htons(6000);
        in6.sin6_addr = in6addr_loopback;
        std::vector<std::byte> efa(32, std::byte{0x11});
        return std::vector<Side>{
            {FI_EP_MSG, "tcp", FI_SOCKADDR_IN, 1, raw(in)},
            {FI_EP_RDM, "tcp;ofi_rxm", FI_SOCKADDR_IN, 2, raw(in)},
            {FI_EP_MSG, "sockets", FI_SOCKADDR, 1, raw(in6)},
            {FI_EP_RDM, "shm", FI_ADDR_STR, 2, text_name("fi_shm://4242:0:0")},
            {FI_EP_RDM, "efa", FI_ADDR_EFA, 2, efa},
        };
    }();
    return all;
}

inline bool printable_text(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

// An error QueuePair::connect throws on a peer's address: weft::Error of the ofi backend about
// QueuePair::connect, with one of `codes`, whose message shows the peer's bytes only as printable text.
inline void check_refusal(const char* target, const Error& e, std::initializer_list<Errc> codes) {
    if (e.backend() != "ofi" || e.object() != "QueuePair::connect") {
        property_failed(target, "a refused address gives an error of another backend or call");
    }
    if (std::none_of(codes.begin(), codes.end(), [&](Errc c) { return e.code() == c; })) {
        property_failed(target, "a refused address gives an unexpected error code");
    }
    if (!printable_text(e.message())) property_failed(target, "an error message holds unprintable bytes");
}

// What the provider is handed for an accepted address: an endpoint name of the length and shape its address
// format has (fi_av_insert and fi_connect read that many bytes), and a liveness address of the name's family.
inline void check_accepted(const char* target, const wire::PeerAddress& p, const Side& own) {
    if (p.ep_type != own.ep_type || p.provider != own.provider || p.addr_format != own.addr_format ||
        p.flags != own.flags) {
        property_failed(target, "an address of another configuration was accepted");
    }
    switch (p.addr_format) {
        case FI_SOCKADDR:
        case FI_SOCKADDR_IN:
        case FI_SOCKADDR_IN6:
        case FI_SOCKADDR_IB: {
            if (p.name.size() != own.name.size() || std::memcmp(p.name.data(), own.name.data(), 2) != 0) {
                property_failed(target, "an accepted socket address differs from ours in size or family");
            }
            sa_family_t family = 0;
            std::memcpy(&family, p.name.data(), sizeof family);
            if (family == AF_INET) {
                sockaddr_in in{};
                std::memcpy(&in, p.name.data(), sizeof in);
                if (in.sin_port == 0 || in.sin_addr.s_addr == 0) property_failed(target, "accepted 0.0.0.0 or port 0");
            }
            break;
        }
        case FI_ADDR_STR: {
            const void* nul = std::memchr(p.name.data(), 0, p.name.size());
            if (p.name.size() > FI_NAME_MAX || nul != p.name.data() + p.name.size() - 1) {
                property_failed(target, "an accepted string name is not one terminated string of at most FI_NAME_MAX");
            }
            break;
        }
        default:
            if (p.name.size() != own.name.size()) property_failed(target, "an accepted name differs from ours in size");
    }
    sockaddr_storage ip{};
    socklen_t len = 0;
    if (wire::liveness_address(p.addr_format, p.name, ip, len)) {
        const bool v4 = ip.ss_family == AF_INET && len == sizeof(sockaddr_in) &&
                        reinterpret_cast<const sockaddr_in*>(&ip)->sin_port == 0;
        const bool v6 = ip.ss_family == AF_INET6 && len == sizeof(sockaddr_in6) &&
                        reinterpret_cast<const sockaddr_in6*>(&ip)->sin6_port == 0;
        if (!v4 && !v6) property_failed(target, "a liveness address of another size or family, or with a port");
    }
}

// QueuePair::connect's decoding and checks on `bytes`, offered to a QP of every side. Properties: only
// weft::Error (check_refusal); an accepted address encodes back to exactly `bytes`; what is accepted passes
// check_accepted. Returns whether the address decoded.
inline bool connect_checks(const char* target, std::span<const std::byte> bytes) {
    wire::PeerAddress p;
    try {
        p = wire::decode_address(bytes);
    } catch (const Error& e) {
        check_refusal(target, e, {Errc::bad_descriptor});
        return false;
    }
    const auto again = wire::encode_address(p);
    if (again.size() != bytes.size() || !std::equal(again.begin(), again.end(), bytes.begin())) {
        property_failed(target, "an accepted QP address does not encode back to its bytes");
    }
    for (const Side& own : sides()) {
        try {
            wire::check_peer(p, own.end());
        } catch (const Error& e) {
            check_refusal(target, e, {Errc::bad_descriptor, Errc::invalid_argument});
            continue;
        }
        check_accepted(target, p, own);
    }
    return true;
}

}  // namespace weft::fuzz::ofi
