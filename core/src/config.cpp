// Parsing and typed access for `backend[:key=value{,key=value}]` configuration strings.
#include <weft/config.hpp>
#include <weft/error.hpp>

#include "text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <unordered_set>

namespace weft {
namespace {

bool is_name_char(char c) noexcept {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

[[noreturn]] void fail(std::string_view text, std::string message) {
    throw Error(Errc::invalid_config, std::move(message) + " in \"" + std::string(text) + "\"", {}, "config");
}

void check_name(std::string_view text, std::string_view name, std::string_view what) {
    if (name.empty()) fail(text, "empty " + std::string(what));
    for (char c : name) {
        if (!is_name_char(c)) {
            fail(text, std::string(what) + " \"" + std::string(name) + "\" has character '" + std::string(1, c) +
                           "'; names use a-z, 0-9 and _");
        }
    }
}

[[noreturn]] void bad_value(const Config& cfg, std::string_view key, std::string_view value,
                            const std::string& accepted) {
    throw Error(Errc::invalid_config,
                "bad value \"" + std::string(value) + "\" for key '" + std::string(key) + "' of backend '" +
                    cfg.backend() + "'; accepted: " + accepted,
                cfg.backend(), "config");
}

}  // namespace

Config Config::parse(std::string_view text) {
    Config cfg;
    cfg.text_ = std::string(text);
    std::string_view rest = text;
    auto colon = rest.find(':');
    std::string_view backend = trim(rest.substr(0, colon));
    check_name(text, backend, "backend name");
    cfg.backend_ = std::string(backend);
    if (colon == std::string_view::npos) return cfg;
    rest.remove_prefix(colon + 1);
    if (trim(rest).empty()) return cfg;

    std::unordered_set<std::string_view> seen;  // views into `text`: duplicates found in linear time
    // Sized once from the separators: no rehash, and no copy of the entries as they grow.
    const auto items = static_cast<std::size_t>(std::count(rest.begin(), rest.end(), ',')) + 1;
    seen.reserve(items);
    cfg.entries_.reserve(items);
    while (true) {
        auto comma = rest.find(',');
        std::string_view item = rest.substr(0, comma);
        auto eq = item.find('=');
        if (eq == std::string_view::npos) {
            fail(text, "\"" + std::string(trim(item)) + "\" is not key=value");
        }
        std::string_view key = trim(item.substr(0, eq));
        std::string_view value = trim(item.substr(eq + 1));
        check_name(text, key, "key");
        if (value.empty()) fail(text, "key '" + std::string(key) + "' has an empty value");
        if (!seen.insert(key).second) fail(text, "key '" + std::string(key) + "' given twice");
        cfg.entries_.emplace_back(std::string(key), std::string(value));
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
    }
    return cfg;
}

const std::string* Config::find(std::string_view key) const noexcept {
    for (const auto& [k, v] : entries_) {
        if (k == key) return &v;
    }
    return nullptr;
}

std::optional<std::string_view> Config::get(std::string_view key) const noexcept {
    if (const auto* v = find(key)) return std::string_view(*v);
    return std::nullopt;
}

std::string Config::get_string(std::string_view key, std::string_view fallback) const {
    if (const auto* v = find(key)) return *v;
    return std::string(fallback);
}

std::uint64_t Config::get_uint(std::string_view key, std::uint64_t fallback, std::uint64_t min,
                               std::uint64_t max) const {
    const auto* v = find(key);
    if (!v) return fallback;
    std::uint64_t out = 0;
    const char* first = v->data();
    const char* last = v->data() + v->size();
    int base = 10;
    if (v->size() > 2 && (*v)[0] == '0' && ((*v)[1] == 'x' || (*v)[1] == 'X')) {
        first += 2;
        base = 16;
    }
    auto [ptr, ec] = std::from_chars(first, last, out, base);
    std::string range = "an integer in " + std::to_string(min) + ".." + std::to_string(max);
    if (ec != std::errc() || ptr != last || out < min || out > max) bad_value(*this, key, *v, range);
    return out;
}

double Config::get_double(std::string_view key, double fallback, double min, double max) const {
    const auto* v = find(key);
    if (!v) return fallback;
    double out = 0;
    auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
    if (ec != std::errc() || ptr != v->data() + v->size() || !std::isfinite(out) || out < min || out > max) {
        bad_value(*this, key, *v, "a number in " + std::to_string(min) + ".." + std::to_string(max));
    }
    return out;
}

bool Config::get_bool(std::string_view key, bool fallback) const {
    const auto* v = find(key);
    if (!v) return fallback;
    if (*v == "1" || *v == "true" || *v == "yes" || *v == "on") return true;
    if (*v == "0" || *v == "false" || *v == "no" || *v == "off") return false;
    bad_value(*this, key, *v, "1/0, true/false, yes/no, on/off");
}

std::string_view Config::get_choice(std::string_view key, std::string_view fallback,
                                    std::span<const std::string_view> choices) const {
    const auto* v = find(key);
    if (!v) return fallback;
    for (auto c : choices) {
        if (c == *v) return c;
    }
    bad_value(*this, key, *v, detail::join_names(choices, [](std::string_view c) { return c; }));
}

void Config::check_keys(std::span<const KeySpec> accepted) const {
    for (const auto& entry : entries_) {
        const std::string& k = entry.first;
        bool known = std::any_of(accepted.begin(), accepted.end(), [&](const KeySpec& s) { return s.name == k; });
        if (known) continue;
        std::string list = detail::join_names(accepted, [](const KeySpec& s) { return s.name; });
        throw Error(Errc::invalid_config,
                    "unknown key '" + k + "' for backend '" + backend_ + "'; accepted keys: " +
                        (list.empty() ? std::string("none") : list),
                    backend_, "config");
    }
}

}  // namespace weft
