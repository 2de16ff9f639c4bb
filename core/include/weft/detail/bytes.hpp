// weft/detail/bytes.hpp — little-endian field access, a checksum and a printable view of peer text for weft's
// wire encodings (RemoteRegion descriptors, QP addresses and handshake frames of every backend). For
// implementers; not part of the user API.
//
//   std::byte buf[12];
//   weft::detail::put_le<std::uint32_t>(buf, qpn);
//   auto qpn2 = weft::detail::get_le<std::uint32_t>(buf);
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

namespace weft::detail {

/// Stores `v` at `p` in little-endian byte order.
template <class T>
constexpr void put_le(std::byte* p, T v) noexcept {
    static_assert(std::is_unsigned_v<T>);
    for (std::size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<std::byte>(static_cast<std::uint64_t>(v) >> (8 * i));
}

/// Loads a little-endian `T` from `p`.
template <class T>
constexpr T get_le(const std::byte* p) noexcept {
    static_assert(std::is_unsigned_v<T>);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
    return static_cast<T>(v);
}

/// 32-bit FNV-1a of `n` bytes: detects corrupted or truncated encodings (not an integrity guarantee).
constexpr std::uint32_t fnv1a(const std::byte* p, std::size_t n) noexcept {
    std::uint32_t h = 2166136261u;
    for (std::size_t i = 0; i < n; ++i) {
        h ^= static_cast<std::uint32_t>(p[i]);
        h *= 16777619u;
    }
    return h;
}

/// A peer's text (a refusal, a provider name) fit for an error message: its first `max` bytes, anything but
/// printable ASCII shown as '?', and "..." when it was longer.
inline std::string printable(std::span<const std::byte> text, std::size_t max) {
    std::string out;
    const std::size_t n = std::min(text.size(), max);
    out.reserve(n + 3);
    for (std::size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
    }
    if (text.size() > n) out += "...";
    return out;
}

}  // namespace weft::detail
