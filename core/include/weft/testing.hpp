// weft/testing.hpp — seed sweeps and determinism checks for users' Boost.Test tests on the simulator.
//
// A test of RDMA logic runs on the `sim` backend; every legal behaviour the simulator may show (torn
// placement, reads seeing later unfenced writes, completion jitter) is chosen by its seed. Sweeping seeds
// finds the interleavings a single run misses; a failing seed replays exactly.
//
//   #include <weft/testing.hpp>
//
//   WEFT_SEED_SWEEP_TEST_CASE(my_protocol_survives_every_seed, "sim:mtu=1024") {
//       auto a = weft::open(seed.config);          // "sim:seed=N,mtu=1024"
//       ...BOOST_TEST(...) as usual...
//   }
//
//   BOOST_AUTO_TEST_CASE(same_seed_same_trace) {
//       weft::testing::check_determinism([](const weft::testing::Seed& s) { return run_and_trace(s.config); });
//   }
//
// The number of seeds is the sweep's default (100) unless $WEFT_SIM_SEEDS says otherwise; $WEFT_SIM_SEED=k
// runs seed k alone. The first failing seed stops the sweep, which prints the seed and the command that
// replays it:
//
//   weft::testing: seed 17 of 100 failed (config sim:seed=17,mtu=1024); replay with
//     WEFT_SIM_SEED=17 ./tests/my-tests --run_test=suite/my_protocol_survives_every_seed
//
// Header-only; needs Boost.Test (the test's own module) and a build with the `sim` backend.
#pragma once

#include <boost/test/unit_test.hpp>
#include <boost/test/results_collector.hpp>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <weft/sim/fabric.hpp>

namespace weft::testing {

/// One run of a sweep: the seed and the configuration string to open (the base config with `seed=N`).
struct Seed {
    std::uint64_t value = 1;  ///< the seed
    std::string config;   ///< e.g. "sim:seed=17,mtu=1024"; open every node of the run with it
    std::uint64_t index = 0;  ///< 0-based position in the sweep
    std::uint64_t count = 1;  ///< seeds the sweep runs
};

/// What weft::testing::sweep runs.
struct SweepOptions {
    /// Base configuration: `sim` or `sim:key=value,...` without `seed`.
    std::string base = "sim";
    /// Seeds to run (first, first + 1, ...); $WEFT_SIM_SEEDS overrides it, $WEFT_SIM_SEED=k runs only k.
    std::uint64_t seeds = 100;
    std::uint64_t first = 1;  ///< the first seed
    /// Whether $WEFT_SIM_SEEDS / $WEFT_SIM_SEED apply (off for searches that must cover a fixed range).
    bool honour_environment = true;
    /// A seed during which the simulator recorded a misuse of the API (weft::sim::Fabric::misuse(): memory
    /// released while in use, a CQ overrun, a source buffer changed in flight...) fails, naming it, unless
    /// this is set: for tests that misuse on purpose.
    bool allow_misuse = false;
};

/// What a sweep did.
struct SweepResult {
    std::uint64_t runs = 0;                  ///< seeds run (including a failing one)
    std::optional<std::uint64_t> failed;     ///< the first failing seed
    /// True when no seed failed.
    bool ok() const noexcept { return !failed; }
};

namespace detail {

inline std::optional<std::uint64_t> env_uint(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) return std::nullopt;
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (*end != '\0') {
        throw std::invalid_argument(std::string("weft::testing: $") + name + "=\"" + v +
                                    "\" is not a non-negative integer");
    }
    return n;
}

inline std::string with_seed(std::string_view base, std::uint64_t seed) {
    if (base.find("seed=") != std::string_view::npos) {
        throw std::invalid_argument("weft::testing: the base config \"" + std::string(base) +
                                    "\" sets seed= itself; the sweep chooses the seed");
    }
    const auto colon = base.find(':');
    std::string out(base.substr(0, colon));
    out += ":seed=" + std::to_string(seed);
    if (colon != std::string_view::npos && colon + 1 < base.size()) {
        out += ',';
        out += base.substr(colon + 1);
    }
    return out;
}

/// The seeds a sweep runs: [first, first + count), or the one $WEFT_SIM_SEED names.
inline std::pair<std::uint64_t, std::uint64_t> seed_range(const SweepOptions& o) {
    if (o.honour_environment) {
        if (auto one = env_uint("WEFT_SIM_SEED")) return {*one, 1};
        if (auto n = env_uint("WEFT_SIM_SEEDS")) return {o.first, *n};
    }
    return {o.first, o.seeds};
}

inline std::string shell_quote(std::string_view s) {
    if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                          "_-./=:,+@%") == std::string_view::npos) {
        return std::string(s);
    }
    std::string out = "'";
    for (char c : s) {
        if (c == '\'') out += "'\\''";
        else out += c;
    }
    return out + "'";
}

/// Assertion failures recorded so far in the running test case.
/// Where two traces first differ, as "line N: <a> | <b>".
inline std::string first_difference(const std::string& a, const std::string& b) {
    std::istringstream sa(a), sb(b);
    std::string la, lb;
    for (int line = 1;; ++line) {
        const bool ha = static_cast<bool>(std::getline(sa, la)), hb = static_cast<bool>(std::getline(sb, lb));
        if (!ha && !hb) return "no difference";
        if (!ha || !hb || la != lb) {
            return "line " + std::to_string(line) + ": \"" + (ha ? la : "<end>") + "\" then \"" + (hb ? lb : "<end>") + "\"";
        }
    }
}

inline std::size_t failures_so_far() {
    namespace ut = boost::unit_test;
    const auto& r = ut::results_collector.results(ut::framework::current_test_case().p_id);
    return r.p_assertions_failed;
}

}  // namespace detail

/// The command line that reruns the current Boost.Test case with seed `seed` alone:
/// `WEFT_SIM_SEED=k ARGV0 --run_test=FULL_NAME [-- ARGS...]`.
inline std::string replay_command(std::uint64_t seed) {
    namespace ut = boost::unit_test;
    const auto& master = ut::framework::master_test_suite();
    std::string cmd = "WEFT_SIM_SEED=" + std::to_string(seed) + " ";
    cmd += master.argc > 0 ? detail::shell_quote(master.argv[0]) : std::string("<test binary>");
    cmd += " --run_test=" + detail::shell_quote(ut::framework::current_test_case().full_name());
    if (master.argc > 1) {
        cmd += " --";
        for (int i = 1; i < master.argc; ++i) cmd += " " + detail::shell_quote(master.argv[i]);
    }
    return cmd;
}

/// Runs `body(seed)` for each seed of the sweep inside the current Boost.Test case. A seed fails when the
/// body records a failed assertion (BOOST_TEST, BOOST_CHECK, ...) or throws, or when the simulator records
/// a misuse of the API while it runs (unless options.allow_misuse); the sweep then stops, prints
/// the seed and the replay command to stderr, and rethrows what the body threw. Assertion messages carry
/// the seed as context.
template <class Body>
SweepResult sweep(Body&& body, const SweepOptions& options = {}) {
    const auto range = detail::seed_range(options);
    const std::uint64_t first = range.first, count = range.second;
    SweepResult result;
    for (std::uint64_t i = 0; i < count; ++i) {
        Seed s{first + i, detail::with_seed(options.base, first + i), i, count};
        const std::size_t before = detail::failures_so_far();
        const std::uint64_t misuses_before = weft::sim::Fabric::misuse_tally().count;
        ++result.runs;
        auto report = [&](std::string_view why) {
            result.failed = s.value;
            std::ostringstream os;
            os << "weft::testing: seed " << s.value << " (" << i + 1 << " of " << count << ") failed" << why
               << " (config " << s.config << "); replay with\n  " << replay_command(s.value) << "\n";
            std::cerr << os.str() << std::flush;
            BOOST_TEST_MESSAGE(os.str());
        };
        try {
            BOOST_TEST_CONTEXT("seed " << s.value << " (" << s.config << ")") { body(static_cast<const Seed&>(s)); }
        } catch (...) {
            report(": the body threw");
            throw;
        }
        if (!options.allow_misuse) {
            const auto tally = weft::sim::Fabric::misuse_tally();
            if (tally.count != misuses_before) {
                BOOST_ERROR("seed " << s.value << ": the simulator recorded " << tally.count - misuses_before
                                    << " misuse(s) of the API, the last: " << tally.last
                                    << " (SweepOptions::allow_misuse accepts them)");
            }
        }
        if (detail::failures_so_far() != before) {
            report("");
            break;
        }
    }
    if (result.ok()) {
        BOOST_TEST_MESSAGE("weft::testing: " << result.runs << " seed(s) from " << first << " passed ("
                                             << options.base << ")");
    }
    return result;
}

/// The first seed in the sweep's range for which `predicate(seed)` is true (e.g. "the bug showed"), or
/// nothing. Does not touch Boost.Test's results; $WEFT_SIM_SEED(S) apply only with honour_environment.
template <class Predicate>
std::optional<Seed> find_seed(Predicate&& predicate, SweepOptions options = {}) {
    const auto range = detail::seed_range(options);
    const std::uint64_t first = range.first, count = range.second;
    for (std::uint64_t i = 0; i < count; ++i) {
        Seed s{first + i, detail::with_seed(options.base, first + i), i, count};
        if (predicate(static_cast<const Seed&>(s))) return s;
    }
    return std::nullopt;
}

/// Runs `body(seed)` twice per seed and compares what it returns (a trace: completions, clock, data
/// digest — anything printable with operator== such as std::string); any difference fails the current
/// test case with the seed and the replay command. Returns the number of seeds checked before a
/// difference, or all of them.
template <class Body>
SweepResult check_determinism(Body&& body, const SweepOptions& options = {}) {
    return sweep(
        [&](const Seed& s) {
            auto one = body(s);
            auto two = body(s);
            if constexpr (std::is_convertible_v<decltype(one), std::string>) {
                BOOST_TEST(one == two, "seed " << s.value << ": two runs of the same program differ at "
                                                << detail::first_difference(one, two));
            } else {
                BOOST_TEST(one == two, "seed " << s.value << ": two runs of the same program differ");
            }
        },
        options);
}

/// Accumulates a run's observable behaviour as text, for check_determinism: completions, values,
/// digests of buffers, virtual time.
class Trace {
public:
    /// Appends `value` as an ostream prints it.
    template <class T>
    Trace& operator<<(const T& value) {
        out_ << value;
        return *this;
    }
    /// Appends an FNV-1a digest of `bytes`.
    Trace& digest(const void* bytes, std::size_t length) {
        std::uint64_t h = 0xcbf29ce484222325ull;
        const auto* p = static_cast<const unsigned char*>(bytes);
        for (std::size_t i = 0; i < length; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
        out_ << "digest=" << std::hex << h << std::dec << '\n';
        return *this;
    }
    /// The text so far.
    std::string str() const { return out_.str(); }

private:
    std::ostringstream out_;
};

}  // namespace weft::testing

/// A Boost.Test case whose body runs once per seed of a sweep over `base_config` (e.g. "sim" or
/// "sim:mtu=1024"); the body sees `const weft::testing::Seed& seed`.
#define WEFT_SEED_SWEEP_TEST_CASE(name, base_config)                                                  \
    static void name##_weft_seed_body(const ::weft::testing::Seed& seed);                             \
    BOOST_AUTO_TEST_CASE(name) {                                                                       \
        ::weft::testing::SweepOptions weft_sweep_options_;                                             \
        weft_sweep_options_.base = (base_config);                                                      \
        ::weft::testing::sweep(&name##_weft_seed_body, weft_sweep_options_);                           \
    }                                                                                                  \
    static void name##_weft_seed_body([[maybe_unused]] const ::weft::testing::Seed& seed)
