// weft/log.hpp — what weft says about its setup decisions, and where it goes.
//
// Nothing is logged unless asked: by $WEFT_LOG (read when libweft loads), or by the program.
//
//   WEFT_LOG=info ./app                  # backend chosen and why, plugin loaded, device/provider picked
//   WEFT_LOG=debug:ofi,core ./app        # debug for two subsystems, nothing from the others
//   WEFT_LOG="warn;trace:sim" ./app      # items apply left to right
//
//   weft::set_log_function([](weft::LogLevel level, weft::LogSubsystem sub, std::string_view msg, void* ctx) {
//       static_cast<MyLogger*>(ctx)->write(weft::to_string(level), weft::to_string(sub), msg);
//   }, &my_logger);
//   weft::set_log_level(weft::LogLevel::info);            // every subsystem
//   weft::set_log_level(weft::LogSubsystem::ofi, weft::LogLevel::debug);
//
// Messages come from setup calls (open, plugin loading, create_*, register_memory, connect, listen) and,
// at `warn`, from the ofi backend's connection events (a handshake that failed, a request from another
// peer refused, a peer found gone), which a call finishing a handshake or the service thread may meet: a
// post or poll of a connected QP never logs. While a subsystem's level is below a message's, the message
// costs one load and one compare, and its text is never built.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace weft {

/// How much to say: each level includes the ones before it. `off` says nothing.
enum class LogLevel : std::uint8_t {
    off,
    error,  ///< a setup call failed (the exception says the same)
    warn,   ///< something works, but not as asked or not as it should (a fallback, a setting ignored)
    info,   ///< decisions: backend opened and why, plugin loaded, device or provider picked, listening
    debug,  ///< each setup object (CQ, QP, memory region, connection) and each plugin directory searched
    trace,  ///< details of the above (the provider's attributes, every handshake step)
};

/// Where a message comes from; each has its own level.
enum class LogSubsystem : std::uint8_t {
    core,    ///< libweft: configuration, plugin loading, handles, listeners
    sim,     ///< the simulator backend
    verbs,   ///< the verbs backend
    ofi,     ///< the ofi backend
    compat,  ///< the libibverbs-compatible front end
};
inline constexpr int log_subsystem_count = 5;

std::string_view to_string(LogLevel level) noexcept;
std::string_view to_string(LogSubsystem subsystem) noexcept;

/// A log sink. `message` is one line without a newline, valid during the call only. Called from the thread
/// that made the setup call; may be called from several threads at once.
using LogFunction = void (*)(LogLevel level, LogSubsystem subsystem, std::string_view message, void* context);

/// Sends every message to `function` with `context`; null restores the default, which writes
/// "weft[SUBSYSTEM] LEVEL: MESSAGE" lines to stderr. Does not change any level.
void set_log_function(LogFunction function, void* context = nullptr) noexcept;

/// Sets the level of every subsystem.
void set_log_level(LogLevel level) noexcept;
/// Sets the level of one subsystem.
void set_log_level(LogSubsystem subsystem, LogLevel level) noexcept;
/// The level of `subsystem` now.
LogLevel log_level(LogSubsystem subsystem) noexcept;

/// Applies a $WEFT_LOG-style specification: items separated by ';', each `LEVEL` (every subsystem) or
/// `LEVEL:SUBSYSTEM{,SUBSYSTEM}`, applied left to right; LEVEL is off, error, warn, info, debug or trace.
/// Throws weft::Error (Errc::invalid_argument) naming the accepted words, and changes nothing, when any
/// item is malformed.
void set_log_levels(std::string_view spec);

namespace detail {
/// Per-subsystem levels, read on every check. Relaxed atomics: a plain load on every target weft runs on.
extern std::atomic<std::uint8_t> log_levels[log_subsystem_count];
}  // namespace detail

/// True when a message of `level` from `subsystem` would be delivered.
inline bool log_enabled(LogSubsystem subsystem, LogLevel level) noexcept {
    return detail::log_levels[static_cast<std::size_t>(subsystem)].load(std::memory_order_relaxed) >=
           static_cast<std::uint8_t>(level);
}

namespace detail {
/// Delivers `message` to the sink (out of line; call only when log_enabled). For backends.
void log_write(LogSubsystem subsystem, LogLevel level, std::string_view message) noexcept;
/// printf-style formatting, out of line. For backends.
void log_printf(LogSubsystem subsystem, LogLevel level, const char* format, ...) noexcept
    __attribute__((format(printf, 3, 4)));
}  // namespace detail

}  // namespace weft

/// For weft and its backends: `WEFT_LOGF(ofi, info, "picked provider %s", name.c_str())`. The arguments are
/// evaluated, and the text formatted, only when the subsystem's level allows the message.
#define WEFT_LOGF(subsystem, level, ...)                                                                 \
    do {                                                                                                 \
        if (::weft::log_enabled(::weft::LogSubsystem::subsystem, ::weft::LogLevel::level))              \
            ::weft::detail::log_printf(::weft::LogSubsystem::subsystem, ::weft::LogLevel::level, __VA_ARGS__); \
    } while (0)

/// Like WEFT_LOGF with a message built by a string expression, evaluated only when the message is wanted:
/// `WEFT_LOGS(core, debug, "searching " + dir)`.
#define WEFT_LOGS(subsystem, level, text)                                                                \
    do {                                                                                                 \
        if (::weft::log_enabled(::weft::LogSubsystem::subsystem, ::weft::LogLevel::level))              \
            ::weft::detail::log_write(::weft::LogSubsystem::subsystem, ::weft::LogLevel::level, (text)); \
    } while (0)
