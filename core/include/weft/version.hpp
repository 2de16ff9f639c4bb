// weft/version.hpp — the library version.
//
//   static_assert(WEFT_VERSION_MAJOR == 0);
//   std::cout << weft::version();   // "0.1.0"
#pragma once

#include <string_view>

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

namespace weft {
/// The version of the library that is linked (may differ from the header's when loaded dynamically).
std::string_view version() noexcept;
}  // namespace weft
