// Shared by the fuzz targets (libFuzzer): a failed property aborts with what was wrong, so the fuzzer saves
// the input and the run fails.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <span>

namespace weft::fuzz {

[[noreturn]] inline void property_failed(const char* target, const char* what) {
    std::fprintf(stderr, "%s: property violated: %s\n", target, what);
    std::abort();
}

inline std::span<const std::byte> bytes(const unsigned char* data, std::size_t size) {
    return {reinterpret_cast<const std::byte*>(data), size};
}

}  // namespace weft::fuzz
