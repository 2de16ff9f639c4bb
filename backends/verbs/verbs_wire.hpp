// The verbs backend's wire formats, the bytes that arrive from a peer: the QP address (QueuePair::address(),
// exchanged by the program or carried by rdma_cm) and the frames of rdma_cm private data. Every decoder checks
// each length, field and range before a value reaches a provider, and says what it found and what it accepts.
// Nothing here touches a device, so tests run it on any machine (tests/verbs/wire_test.cpp).
//
// QP address, version 1: 40 bytes, little-endian, checksummed like RemoteRegion's:
//   0  magic "wfVQ"     4  version (1)      5  flags (bit 0: GID present)   6  port (1..255)
//   7  MTU (ibv_mtu, 1..5)                  8  GID (16 bytes, network order as in the GID table)
//   24 LID (u16)        26 reserved (0)     28 QP number (u32, 2..2^24-1)   32 start PSN (u32, < 2^24)
//   36 FNV-1a of bytes 0..35 (u32)
//
// Private data frame: magic "wQ" (a connect request), "wC" (an answer) or "wR" (a refusal: text), version
// (1), payload length n, then n bytes. The receiver of rdma_cm private data is told the size of the whole
// field (56 bytes on a REQ), not what was sent, hence the length byte. Payloads:
//   connect request  flags (bit 0: GID present) | MTU << 4 (ibv_mtu, 1..5), PSN (u24), the application's
//                    private data (at most max_private_data bytes). The QP number travels in the REQ itself
//                    (rdma_conn_param::qp_num) and the GID or LID in its path; the listener reads both from
//                    rdma_cm, which leaves 56 - 8 bytes of a REQ to the application.
//   answer           the listener QP's address (address_size bytes), then the application's reply.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft::verbs::wire {

inline constexpr std::size_t address_size = 40;

struct QpAddress {
    bool has_gid = false;
    std::uint8_t port = 0;
    ibv_mtu mtu = IBV_MTU_1024;
    ibv_gid gid{};
    std::uint16_t lid = 0;
    std::uint32_t qp_num = 0;
    std::uint32_t psn = 0;
};

std::array<std::byte, address_size> encode_address(const QpAddress& a) noexcept;

// Decodes a peer's QP address. Throws weft::Error (backend verbs, Errc::bad_descriptor, call
// QueuePair::connect) naming the first problem: size, magic, version, checksum, flags, reserved bytes, port
// 0, MTU code, QP number outside 2..2^24-1, PSN of more than 24 bits, a GID that cannot be a peer's (zero,
// multicast) or, without one, a LID that cannot (0, multicast 0xc000..0xfffe, permissive 0xffff).
QpAddress decode_address(std::span<const std::byte> bytes);

enum class FrameKind : std::uint8_t { address, refusal, request };

inline constexpr std::size_t frame_header = 4;
inline constexpr std::uint8_t frame_version = 1;
inline constexpr std::size_t request_fixed = 4;  // flags and MTU, PSN
// What weft::connect and Listener::accept carry of the application's private data, each way: what a REQ
// (56 bytes) leaves after the frame header and the connect request's fixed part.
inline constexpr std::size_t max_private_data = 56 - frame_header - request_fixed;

// A connect request's own fields; the QP number, GID and LID come from rdma_cm.
struct Request {
    bool has_gid = false;
    ibv_mtu mtu = IBV_MTU_1024;
    std::uint32_t psn = 0;
    std::span<const std::byte> private_data;
};

// A connect request's payload (to be framed with FrameKind::request); the caller has checked the private
// data's size.
std::vector<std::byte> encode_request(const Request& r);

// Decodes a connect request's payload (as decode_frame returned it). Returns an empty string on success, with
// `out.private_data` a view into `payload`, else what is wrong (size, flags, MTU code).
std::string decode_request(std::span<const std::byte> payload, Request& out);

// The frame of `payload` (at most `limit` bytes in all; a longer refusal text is cut, a longer address is a
// bug the caller rules out).
std::vector<std::uint8_t> encode_frame(FrameKind kind, std::span<const std::byte> payload, std::size_t limit);

// Decodes `size` bytes of private data at `data` (null when there are none) as a frame of `kind`. On
// success sets `payload` to view the payload inside `data` and returns an empty string; otherwise returns
// what is wrong, for a message ("its private data holds ...").
std::string decode_frame(const void* data, std::size_t size, FrameKind kind, std::span<const std::byte>& payload);

// A peer's refusal text, fit for an error message: at most 160 characters, anything but printable ASCII
// shown as '?'.
std::string printable(std::span<const std::byte> text);

}  // namespace weft::verbs::wire
