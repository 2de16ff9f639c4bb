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
// Private data frame: magic "wC" (a QP address) or "wR" (a refusal: text), version (1), payload length n,
// then n bytes. The receiver of rdma_cm private data is told the size of the whole field (56 bytes on a REQ),
// not what was sent, hence the length byte.
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

enum class FrameKind : std::uint8_t { address, refusal };

inline constexpr std::size_t frame_header = 4;
inline constexpr std::uint8_t frame_version = 1;

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
