// weft/detail/bytes.hpp — little-endian field access and a checksum for weft's wire encodings
// (RemoteRegion descriptors, QP addresses of every backend). For implementers; not part of the user API.
//
//   std::byte buf[12];
//   weft::detail::put_le<std::uint32_t>(buf, qpn);
//   auto qpn2 = weft::detail::get_le<std::uint32_t>(buf);
#pragma once

#include <cstddef>
#include <cstdint>
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

}  // namespace weft::detail
