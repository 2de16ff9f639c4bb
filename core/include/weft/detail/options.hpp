// weft/detail/options.hpp — reads an option struct that carries its own size (CqOptions, QpOptions,
// SrqOptions: the member `struct_size`, first) as the program that filled it was compiled. For implementers;
// not part of the user API.
//
//   constexpr std::uint32_t sizes[] = {12};          // every size CqOptions has had, oldest first
//   CqOptions opts;
//   if (auto problem = read_sized(given, sizes, "CqOptions", opts)) throw Error(..., *problem, ...);
//
// An option struct grows only by members added at its end. A program built against an older weft passes a
// shorter struct: its bytes are taken as they are and the members it lacks keep their defaults. A program
// built against a newer weft passes a longer one, which this libweft cannot read: refused, and so is a size
// the struct never had (struct_size written by hand, or memory that is not an option struct).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

namespace weft::detail {

/// Reads `given` into `out` (default-constructed members where `given` is shorter); the problem, or nothing.
/// `sizes` lists every size T has had, oldest first, the last being sizeof(T).
template <class T>
std::optional<std::string> read_sized(const T& given, std::span<const std::uint32_t> sizes, const char* type,
                                      T& out) {
    static_assert(std::is_trivially_copyable_v<T> && offsetof(T, struct_size) == 0,
                  "a sized option struct starts with its size and is copied as bytes");
    const std::uint32_t size = given.struct_size;
    if (size == sizeof(T)) {
        out = given;
        return std::nullopt;
    }
    const auto known = [&] {
        std::string text;
        for (const std::uint32_t s : sizes) text += (text.empty() ? "" : ", ") + std::to_string(s);
        return text;
    };
    if (size > sizeof(T)) {
        return std::string(type) + " of " + std::to_string(size) + " bytes: the program was built against a newer "
               "weft than this libweft, which knows " + std::to_string(sizeof(T)) + " bytes; rebuild it against "
               "this weft or install the newer libweft";
    }
    if (std::find(sizes.begin(), sizes.end(), size) == sizes.end()) {
        return std::string(type) + "::struct_size is " + std::to_string(size) + ", a size " + type +
               " never had (" + known() + "); it is set by the struct's default: do not write it";
    }
    out = T{};
    std::memcpy(static_cast<void*>(&out), static_cast<const void*>(&given), size);
    out.struct_size = sizeof(T);
    return std::nullopt;
}

}  // namespace weft::detail
