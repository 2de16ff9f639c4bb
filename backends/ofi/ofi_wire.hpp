// The ofi backend's wire formats, the bytes that arrive from a peer: the QP address (QueuePair::address(),
// exchanged by the program or by weft::listen / weft::connect) with the endpoint name inside it, and the
// frames of the listener's TCP rendezvous (ofi_cm.cpp). Every decoder checks each length, field and range
// before a value reaches a provider or a socket, and says what it found. Nothing here opens a provider, so
// tests run it on any machine (tests/ofi/wire_test.cpp) and fuzz targets call it (tests/fuzz/ofi_*_fuzz.cpp).
//
// QP address, version 2 (little-endian):
//   0  magic "wfOQ"   4  version (2)   5  endpoint type (1 msg, 2 rdm)   6  immediate transport (bit 0
//   emulated, bit 1 native)   7  provider name length P   8  addr_format (u32)   12 endpoint name length N
//   (u16)   14 liveness port (u16, 0: none)   16 nonce (u64)   24 provider name   24+P endpoint name
//   24+P+N FNV-1a of everything before (u32)
//
// Rendezvous frame: magic "weftofi2" (8 bytes), kind (u32), payload length (u32, at most 64 KiB), payload.
// A hello's or an accepted frame's payload is a greeting: the QP address's length (u16), the QP address, then
// the private data (the rest, at most max_private_data bytes).
#pragma once

#include <rdma/fabric.h>

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace weft::ofi {

inline constexpr std::string_view backend_name = "ofi";

namespace wire {

inline constexpr std::uint8_t address_version = 2;
inline constexpr std::size_t address_header = 24;
inline constexpr std::size_t address_checksum = 4;

// A QP address, decoded (a peer's) or about to be encoded (our own).
struct PeerAddress {
    fi_ep_type ep_type = FI_EP_MSG;
    std::uint8_t flags = 0;           // immediate transport
    std::uint32_t addr_format = 0;
    std::uint64_t nonce = 0;
    std::uint16_t liveness_port = 0;  // 0: the peer has no liveness socket
    std::string provider;
    std::vector<std::byte> name;
};

// Throws weft::Error (Errc::internal, create_qp) when the provider or endpoint name does not fit its length
// field.
std::vector<std::byte> encode_address(const PeerAddress& a);

// Decodes a peer's QP address. Throws weft::Error (backend ofi, Errc::bad_descriptor, call
// QueuePair::connect) naming the first problem: size, magic, version, lengths that disagree with the size,
// checksum, endpoint type.
PeerAddress decode_address(std::span<const std::byte> bytes);

// What a peer's address must match: this QP's side of the connection.
struct LocalEnd {
    fi_ep_type ep_type = FI_EP_MSG;
    std::string_view provider;
    std::uint32_t addr_format = 0;
    std::uint8_t flags = 0;
    std::span<const std::byte> name;  // this QP's own endpoint name
};

// The checks QueuePair::connect makes of a decoded address before anything reaches the provider. Throws
// weft::Error (QueuePair::connect): Errc::invalid_argument when the peer is of another configuration
// (endpoint type, provider, address format, immediate transport), Errc::bad_descriptor when its endpoint name
// is not one the provider can parse (check_peer_name).
void check_peer(const PeerAddress& p, const LocalEnd& own);

// Checks a peer's endpoint name against the address format both sides use and the shape of our own name
// (same length for socket addresses, same family, an address and a port; a terminated printable string with
// the same scheme for FI_ADDR_STR; the same length for formats weft has no decoder for). Returns an empty
// string when it is acceptable, else what is wrong with it.
std::string check_peer_name(std::uint32_t addr_format, std::span<const std::byte> peer,
                            std::span<const std::byte> own);

// The IP address to listen on for a QP whose endpoint (or passive endpoint) name is `name` in `addr_format`,
// or to reach a peer's liveness socket at: the name's own IP for socket addresses (loopback for a wildcard
// one), loopback for shm's names; port 0. False when neither applies.
bool liveness_address(std::uint32_t addr_format, std::span<const std::byte> name, sockaddr_storage& out,
                      socklen_t& len) noexcept;

// ---- Rendezvous frames

enum class FrameKind : std::uint32_t { hello = 1, accepted = 2, refused = 3 };

inline constexpr std::size_t frame_header = 16;
inline constexpr std::uint32_t frame_max = 64 * 1024;
// At most this many characters of a refusal's text reach an error message.
inline constexpr std::size_t refusal_text_max = 512;

struct Frame {
    FrameKind kind = FrameKind::hello;
    std::vector<std::byte> payload;
};

std::vector<std::byte> encode_frame(FrameKind kind, std::span<const std::byte> payload);

// Fills `n` bytes at `dst` from the connection; returns an empty string on success, else what went wrong.
using ReadExact = std::function<std::string(std::byte* dst, std::size_t n)>;

// Reads one frame through `read`: the header first, whose magic, kind and length are checked before any
// payload is read (nor memory set aside for it). Returns an empty string on success, else what was wrong
// (or what `read` said).
std::string read_frame(const ReadExact& read, Frame& out);

// What the ofi backend carries of the private data of weft::connect and Listener::accept, each way.
inline constexpr std::size_t max_private_data = 56;

// A hello's or accepted frame's payload, split: views into the payload.
struct Greeting {
    std::span<const std::byte> address;
    std::span<const std::byte> private_data;
};

// The payload of a greeting; the caller has checked the private data's size, the address is our own.
std::vector<std::byte> encode_greeting(std::span<const std::byte> address, std::span<const std::byte> private_data);

// Splits a peer's greeting payload. Returns an empty string on success, else what is wrong with it (too short
// for the length, an address length beyond the payload, more private data than max_private_data).
std::string split_greeting(std::span<const std::byte> payload, Greeting& out);

// A peer's text (a refusal, a provider name) fit for an error message: at most refusal_text_max characters,
// anything but printable ASCII shown as '?'.
std::string printable(std::span<const std::byte> text);

}  // namespace wire
}  // namespace weft::ofi
