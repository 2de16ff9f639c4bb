// Encoding and checking the verbs backend's wire formats (verbs_wire.hpp has the layouts).
#include "verbs_wire.hpp"

#include <weft/detail/bytes.hpp>
#include <weft/detail/wire.hpp>
#include <weft/error.hpp>

#include <algorithm>
#include <cstring>

namespace weft::verbs::wire {
namespace {

constexpr std::byte address_magic[4] = {std::byte{'w'}, std::byte{'f'}, std::byte{'V'}, std::byte{'Q'}};
constexpr std::uint8_t address_version = 1;
constexpr std::uint8_t flag_has_gid = 1;
constexpr std::uint32_t max_24bit = 0xffffff;
constexpr std::uint16_t max_unicast_lid = 0xbfff;
constexpr std::size_t max_refusal_text = 160;

constexpr char frame_magic(FrameKind kind) noexcept {
    return kind == FrameKind::address ? 'C' : kind == FrameKind::request ? 'Q' : 'R';
}

constexpr detail::WireContext address_context{"malformed peer QP address", "verbs", "QueuePair::connect"};

std::string hex(std::uint32_t v) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out = "0x";
    bool started = false;
    for (int shift = 28; shift >= 0; shift -= 4) {
        const unsigned d = (v >> shift) & 0xf;
        if (d != 0 || started || shift == 0) {
            out += digits[d];
            started = true;
        }
    }
    return out;
}

}  // namespace

std::array<std::byte, address_size> encode_address(const QpAddress& a) noexcept {
    std::array<std::byte, address_size> out{};
    detail::WireWriter w(out);
    w.bytes(address_magic);
    w.u8(address_version);
    w.u8(a.has_gid ? flag_has_gid : std::uint8_t{0});
    w.u8(a.port);
    w.u8(static_cast<std::uint8_t>(a.mtu));
    w.bytes(std::as_bytes(std::span(a.gid.raw)));
    w.put<std::uint16_t>(a.lid);
    w.skip(2);
    w.put<std::uint32_t>(a.qp_num);
    w.put<std::uint32_t>(a.psn);
    w.checksum();
    return out;
}

QpAddress decode_address(std::span<const std::byte> b) {
    const detail::WireReader r(b, address_context);
    const bool foreign = b.size() >= 4 && std::memcmp(b.data(), address_magic, 4) != 0;
    r.expect_size(address_size, foreign ? " (not a verbs QP address: is it from another backend?)" : "");
    r.expect_magic(address_magic, "bad magic: not a verbs QP address (is it from another backend?)");
    r.expect_version(4, address_version);
    r.expect_checksum(36, "checksum mismatch: the address was corrupted or truncated in transit");
    QpAddress a;
    const auto flags = r.at<std::uint8_t>(5, "flags");
    if ((flags & ~flag_has_gid) != 0) {
        r.fail("unknown flag bits " + hex(flags) + " (accepted: " + hex(flag_has_gid) + ", a GID is present)");
    }
    r.expect_zero(26, 2);
    a.has_gid = (flags & flag_has_gid) != 0;
    a.port = r.at<std::uint8_t>(6, "port");
    if (a.port == 0) r.fail("port 0 (ports are numbered from 1)");
    const auto mtu = r.at<std::uint8_t>(7, "MTU");
    if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) {
        r.fail("MTU code " + std::to_string(mtu) + " is not one of 1..5 (256..4096 bytes)");
    }
    a.mtu = static_cast<ibv_mtu>(mtu);
    std::memcpy(a.gid.raw, r.span(8, 16, "GID").data(), 16);
    a.lid = r.at<std::uint16_t>(24, "LID");
    a.qp_num = r.at<std::uint32_t>(28, "QP number");
    a.psn = r.at<std::uint32_t>(32, "PSN");
    if (a.qp_num > max_24bit || a.qp_num < 2) {
        r.fail("QP number " + std::to_string(a.qp_num) + " is outside 2..16777215 (0 and 1 are the "
               "management QPs)");
    }
    if (a.psn > max_24bit) r.fail("PSN " + std::to_string(a.psn) + " does not fit in 24 bits");
    if (a.has_gid) {
        if (std::all_of(std::begin(a.gid.raw), std::end(a.gid.raw), [](std::uint8_t x) { return x == 0; })) {
            r.fail("the GID is all zeros: no port has it");
        }
        if (a.gid.raw[0] == 0xff) r.fail("the GID is a multicast address: an RC peer has a unicast one");
    } else if (a.lid == 0) {
        r.fail("neither a GID nor a LID: the peer cannot be addressed");
    } else if (a.lid > max_unicast_lid) {
        r.fail("LID " + hex(a.lid) + " is not a unicast LID (accepted: 0x1..0xbfff)");
    }
    return a;
}

std::vector<std::uint8_t> encode_frame(FrameKind kind, std::span<const std::byte> payload, std::size_t limit) {
    const std::size_t n = std::min({payload.size(), limit - frame_header, std::size_t{255}});
    std::vector<std::uint8_t> out(frame_header + n);
    out[0] = 'w';
    out[1] = static_cast<std::uint8_t>(frame_magic(kind));
    out[2] = frame_version;
    out[3] = static_cast<std::uint8_t>(n);
    if (n != 0) std::memcpy(out.data() + frame_header, payload.data(), n);
    return out;
}

std::string decode_frame(const void* data, std::size_t size, FrameKind kind, std::span<const std::byte>& payload) {
    payload = {};
    const std::string what = kind == FrameKind::address   ? "weft QP address"
                             : kind == FrameKind::request ? "weft connect request"
                                                          : "weft refusal";
    if (data == nullptr || size == 0) return "no private data, so no " + what + " (a peer that is not weft?)";
    const detail::WireReader r({static_cast<const std::byte*>(data), size}, {});
    std::span<const std::byte> found;
    std::string problem = detail::wire_problem([&] {
        if (size < frame_header || r.at<std::uint8_t>(0, "magic") != 'w' ||
            r.at<std::uint8_t>(1, "magic") != static_cast<std::uint8_t>(frame_magic(kind))) {
            r.fail("private data of " + std::to_string(size) + " bytes that holds no " + what +
                   " (a peer that is not weft?)");
        }
        if (const auto v = r.at<std::uint8_t>(2, "version"); v != frame_version) {
            r.fail("private data framed in version " + std::to_string(v) + " (accepted: " +
                   std::to_string(frame_version) + ")");
        }
        const std::size_t claimed = r.at<std::uint8_t>(3, "payload length");
        if (claimed > size - frame_header) {
            r.fail("private data that claims " + std::to_string(claimed) + " bytes of payload but holds " +
                   std::to_string(size - frame_header));
        }
        if (kind == FrameKind::address && (claimed < address_size || claimed > address_size + max_private_data)) {
            r.fail("private data with a " + std::to_string(claimed) + "-byte answer (accepted: a " +
                   std::to_string(address_size) + "-byte QP address and at most " +
                   std::to_string(max_private_data) + " bytes of reply)");
        }
        if (kind == FrameKind::request && (claimed < request_fixed || claimed > request_fixed + max_private_data)) {
            r.fail("private data with a " + std::to_string(claimed) + "-byte connect request (accepted: " +
                   std::to_string(request_fixed) + " to " + std::to_string(request_fixed + max_private_data) +
                   " bytes)");
        }
        found = r.span(frame_header, claimed, "payload");
    });
    if (problem.empty()) payload = found;
    return problem;
}

std::vector<std::byte> encode_request(const Request& r) {
    std::vector<std::byte> out(request_fixed + r.private_data.size());
    out[0] = static_cast<std::byte>((r.has_gid ? 1u : 0u) | (static_cast<unsigned>(r.mtu) << 4));
    out[1] = static_cast<std::byte>(r.psn & 0xff);
    out[2] = static_cast<std::byte>((r.psn >> 8) & 0xff);
    out[3] = static_cast<std::byte>((r.psn >> 16) & 0xff);
    if (!r.private_data.empty()) std::memcpy(out.data() + request_fixed, r.private_data.data(), r.private_data.size());
    return out;
}

std::string decode_request(std::span<const std::byte> payload, Request& out) {
    const detail::WireReader r(payload, {});
    return detail::wire_problem([&] {
        if (payload.size() < request_fixed || payload.size() > request_fixed + max_private_data) {
            r.fail("a connect request of " + std::to_string(payload.size()) + " bytes (accepted: " +
                   std::to_string(request_fixed) + " to " + std::to_string(request_fixed + max_private_data) + ")");
        }
        const unsigned flags = r.at<std::uint8_t>(0, "flags");
        if ((flags & 0x0e) != 0) r.fail("a connect request with unknown flags " + hex(flags & 0x0fu));
        const unsigned mtu = flags >> 4;
        if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) {
            r.fail("a connect request with MTU code " + std::to_string(mtu) + " (accepted: 1..5)");
        }
        out.has_gid = (flags & 1) != 0;
        out.mtu = static_cast<ibv_mtu>(mtu);
        out.psn = r.at<std::uint8_t>(1, "PSN") | (std::uint32_t{r.at<std::uint8_t>(2, "PSN")} << 8) |
                  (std::uint32_t{r.at<std::uint8_t>(3, "PSN")} << 16);
        out.private_data = r.span(request_fixed, payload.size() - request_fixed, "private data");
    });
}

std::string printable(std::span<const std::byte> text) { return weft::detail::printable(text, max_refusal_text); }

}  // namespace weft::verbs::wire
