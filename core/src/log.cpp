// Logging: per-subsystem levels, the sink, $WEFT_LOG. Only setup paths log; nothing here is on the data path.
#include <weft/error.hpp>
#include <weft/log.hpp>

#include <array>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace weft {

namespace detail {
std::atomic<std::uint8_t> log_levels[log_subsystem_count]{};
}  // namespace detail

namespace {

constexpr std::array<std::string_view, 6> level_names{"off", "error", "warn", "info", "debug", "trace"};
constexpr std::array<std::string_view, log_subsystem_count> subsystem_names{"core", "sim", "verbs", "ofi",
                                                                              "compat"};

void write_stderr(LogLevel level, LogSubsystem subsystem, std::string_view message, void*) {
    std::string line = "weft[";
    line += to_string(subsystem);
    line += "] ";
    line += to_string(level);
    line += ": ";
    line += message;
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stderr);  // one write per line: lines of threads do not mix
}

struct Sink {
    std::mutex mu;
    LogFunction function = &write_stderr;
    void* context = nullptr;
};

Sink& sink() {
    static Sink s;
    return s;
}

std::string accepted_words() {
    std::string out = "items LEVEL or LEVEL:SUBSYSTEM[,SUBSYSTEM...] separated by ';', LEVEL one of ";
    for (std::size_t i = 0; i < level_names.size(); ++i) out += (i ? "|" : "") + std::string(level_names[i]);
    out += ", SUBSYSTEM one of ";
    for (std::size_t i = 0; i < subsystem_names.size(); ++i) out += (i ? "|" : "") + std::string(subsystem_names[i]);
    return out;
}

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

[[noreturn]] void bad_spec(std::string_view spec, const std::string& why) {
    throw Error(Errc::invalid_argument, "log specification \"" + std::string(spec) + "\": " + why + "; accepted: " +
                                            accepted_words(),
                {}, "set_log_levels");
}

// $WEFT_LOG, applied when libweft loads. A malformed value is reported once on stderr (there is no caller
// to throw to) and leaves logging off.
[[maybe_unused]] const bool environment_applied = [] {
    const char* env = std::getenv("WEFT_LOG");
    if (env == nullptr || *env == '\0') return false;
    try {
        set_log_levels(env);
    } catch (const Error& e) {
        std::fprintf(stderr, "weft: WEFT_LOG ignored: %s\n", e.message().c_str());
        return false;
    }
    return true;
}();

}  // namespace

std::string_view to_string(LogLevel level) noexcept {
    const auto i = static_cast<std::size_t>(level);
    return i < level_names.size() ? level_names[i] : "unknown_level";
}

std::string_view to_string(LogSubsystem subsystem) noexcept {
    const auto i = static_cast<std::size_t>(subsystem);
    return i < subsystem_names.size() ? subsystem_names[i] : "unknown_subsystem";
}

void set_log_function(LogFunction function, void* context) noexcept {
    auto& s = sink();
    std::lock_guard lock(s.mu);
    s.function = function ? function : &write_stderr;
    s.context = function ? context : nullptr;
}

void set_log_level(LogLevel level) noexcept {
    for (auto& l : detail::log_levels) l.store(static_cast<std::uint8_t>(level), std::memory_order_relaxed);
}

void set_log_level(LogSubsystem subsystem, LogLevel level) noexcept {
    const auto i = static_cast<std::size_t>(subsystem);
    if (i < std::size(detail::log_levels)) {
        detail::log_levels[i].store(static_cast<std::uint8_t>(level), std::memory_order_relaxed);
    }
}

LogLevel log_level(LogSubsystem subsystem) noexcept {
    const auto i = static_cast<std::size_t>(subsystem);
    if (i >= std::size(detail::log_levels)) return LogLevel::off;
    return static_cast<LogLevel>(detail::log_levels[i].load(std::memory_order_relaxed));
}

void set_log_levels(std::string_view spec) {
    // Parsed whole before anything changes, so a bad item leaves every level as it was.
    std::array<std::uint8_t, log_subsystem_count> levels{};
    for (std::size_t i = 0; i < levels.size(); ++i) levels[i] = static_cast<std::uint8_t>(log_level(static_cast<LogSubsystem>(i)));
    std::string_view rest = spec;
    if (trim(rest).empty()) bad_spec(spec, "it is empty");
    while (true) {
        const auto semi = rest.find(';');
        const std::string_view item = trim(rest.substr(0, semi));
        if (item.empty()) bad_spec(spec, "an item is empty");
        const auto colon = item.find(':');
        const std::string_view level_word = trim(item.substr(0, colon));
        std::size_t level = level_names.size();
        for (std::size_t i = 0; i < level_names.size(); ++i) {
            if (level_names[i] == level_word) level = i;
        }
        if (level == level_names.size()) bad_spec(spec, "\"" + std::string(level_word) + "\" is not a level");
        if (colon == std::string_view::npos) {
            levels.fill(static_cast<std::uint8_t>(level));
        } else {
            std::string_view subs = item.substr(colon + 1);
            while (true) {
                const auto comma = subs.find(',');
                const std::string_view name = trim(subs.substr(0, comma));
                std::size_t sub = subsystem_names.size();
                for (std::size_t i = 0; i < subsystem_names.size(); ++i) {
                    if (subsystem_names[i] == name) sub = i;
                }
                if (sub == subsystem_names.size()) {
                    bad_spec(spec, "\"" + std::string(name) + "\" is not a subsystem");
                }
                levels[sub] = static_cast<std::uint8_t>(level);
                if (comma == std::string_view::npos) break;
                subs.remove_prefix(comma + 1);
            }
        }
        if (semi == std::string_view::npos) break;
        rest.remove_prefix(semi + 1);
    }
    for (std::size_t i = 0; i < levels.size(); ++i) {
        detail::log_levels[i].store(levels[i], std::memory_order_relaxed);
    }
}

namespace detail {

void log_write(LogSubsystem subsystem, LogLevel level, std::string_view message) noexcept {
    LogFunction function = nullptr;
    void* context = nullptr;
    {
        auto& s = sink();
        std::lock_guard lock(s.mu);
        function = s.function;
        context = s.context;
    }
    // The sink runs outside the lock, so it may itself call set_log_function or log.
    try {
        function(level, subsystem, message, context);
    } catch (...) {
        // A sink that throws loses its message; a setup call does not fail because of its log.
    }
}

void log_printf(LogSubsystem subsystem, LogLevel level, const char* format, ...) noexcept {
    char small[512];
    va_list args;
    va_start(args, format);
    va_list again;
    va_copy(again, args);
    const int n = std::vsnprintf(small, sizeof small, format, args);
    va_end(args);
    if (n < 0) {
        va_end(again);
        return;
    }
    if (static_cast<std::size_t>(n) < sizeof small) {
        va_end(again);
        log_write(subsystem, level, std::string_view(small, static_cast<std::size_t>(n)));
        return;
    }
    try {
        std::string big(static_cast<std::size_t>(n) + 1, '\0');
        std::vsnprintf(big.data(), big.size(), format, again);
        va_end(again);
        big.pop_back();
        log_write(subsystem, level, big);
    } catch (...) {
        va_end(again);
    }
}

}  // namespace detail
}  // namespace weft
