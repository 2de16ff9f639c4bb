// Small text helpers for setup-time messages (never used on the data path).
#pragma once

#include <range/v3/range/conversion.hpp>
#include <range/v3/view/join.hpp>
#include <range/v3/view/transform.hpp>

#include <string>
#include <string_view>

namespace weft::detail {

/// The elements of `items`, projected to text by `name`, separated by ", ": "seed, fabric, gbps".
template <class Range, class Name>
std::string join_names(const Range& items, Name name) {
    using namespace std::string_view_literals;
    return items | ranges::views::transform([&](const auto& item) { return std::string_view(name(item)); }) |
           ranges::views::join(", "sv) | ranges::to<std::string>();
}

}  // namespace weft::detail
