// weft/config.hpp — backend configuration strings.
//
// Grammar: `backend[:key=value{,key=value}]`, e.g. "sim:seed=7,fabric=a", "verbs:device=rxe0,gid_index=1",
// "ofi:provider=tcp;ofi_rxm". Names are lower-case letters, digits and '_'; a value is any text without ','.
// Spaces around names and values are ignored. Each backend declares the keys it accepts; weft::open
// rejects any other key, naming the accepted ones.
//
//   auto cfg = weft::Config::parse("sim:seed=7");
//   cfg.backend();                          // "sim"
//   cfg.get_uint("seed", 0, 0, UINT64_MAX); // 7
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft {

/// A key a backend accepts, for validation and for `weft::backends()` listings.
struct KeySpec {
    std::string_view name;  ///< the key, as written in a config string
    std::string_view help;  ///< what it means, its accepted values and its default
};

/// A parsed configuration string, `backend[:key=value{,key=value}]`.
class Config {
public:
    /// Throws weft::Error (invalid_config) naming the position and the problem.
    static Config parse(std::string_view text);

    /// The backend name, before the ':'.
    const std::string& backend() const noexcept { return backend_; }
    /// The key=value pairs in the order given.
    const std::vector<std::pair<std::string, std::string>>& entries() const noexcept { return entries_; }
    /// The text as given.
    const std::string& text() const noexcept { return text_; }

    /// Whether `key` was given.
    bool has(std::string_view key) const noexcept { return find(key) != nullptr; }
    /// The value of `key`, if given.
    std::optional<std::string_view> get(std::string_view key) const noexcept;

    /// Typed getters; a present but malformed or out-of-range value throws weft::Error (invalid_config)
    /// that names the key, the value and what is accepted.
    std::string get_string(std::string_view key, std::string_view fallback) const;
    /// An unsigned integer in [min, max]; `fallback` when the key is absent.
    std::uint64_t get_uint(std::string_view key, std::uint64_t fallback, std::uint64_t min,
                           std::uint64_t max) const;
    /// A number in [min, max]; `fallback` when the key is absent.
    double get_double(std::string_view key, double fallback, double min, double max) const;
    /// Accepts 1/0, true/false, yes/no, on/off.
    bool get_bool(std::string_view key, bool fallback) const;
    /// One of `choices`.
    std::string_view get_choice(std::string_view key, std::string_view fallback,
                                std::span<const std::string_view> choices) const;

    /// Throws weft::Error (invalid_config) for the first key not in `accepted`, listing the accepted keys.
    void check_keys(std::span<const KeySpec> accepted) const;

private:
    const std::string* find(std::string_view key) const noexcept;

    std::string text_;
    std::string backend_;
    std::vector<std::pair<std::string, std::string>> entries_;
};

}  // namespace weft
