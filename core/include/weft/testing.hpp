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

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
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

/// One schedule of an exploration: the token naming its choices and the configuration to open.
struct Schedule {
    std::string token;      ///< digits 0-2, one per choice point from the first; later points take 0
    std::string config;     ///< e.g. "sim:seed=1,fabric=weft-explore,schedule=0012"; open every node with it
    std::uint64_t index = 0;  ///< 0-based position in the exploration
};

/// What weft::testing::explore runs.
struct ExploreOptions {
    /// Base configuration: `sim` or `sim:key=value,...` without `seed`, `fabric` or `schedule`.
    std::string base = "sim";
    std::uint64_t budget = 1000;   ///< schedules to run at most
    /// Choice points a schedule may take off their default alternative (0 runs the default schedule only).
    unsigned max_deviations = 2;
    /// Whether $WEFT_SIM_SCHEDULE=TOKEN (replay) runs that schedule alone.
    bool honour_environment = true;
    bool allow_misuse = false;  ///< as SweepOptions::allow_misuse
};

/// What an exploration did.
struct ExploreResult {
    std::uint64_t schedules = 0;       ///< schedules run (including a failing one)
    std::uint64_t choice_points = 0;   ///< met by the default schedule
    std::uint64_t most_choice_points = 0;  ///< met by the longest schedule
    bool exhausted = false;  ///< every schedule within max_deviations ran (the budget was not the limit)
    std::map<std::string, std::uint64_t> outcomes;  ///< what the body returned, and how many schedules did
    std::optional<std::string> failed;               ///< the token of the first failing schedule
    /// True when no schedule failed.
    bool ok() const noexcept { return !failed; }
};

/// Enumerates the simulator's seeded choices in a small scenario, systematically rather than at random.
/// Every choice the seed would make (a pause of a program, a deferred read, a permutation of packets, a
/// jitter, a fault) becomes a choice point with two or three alternatives: the extremes and the middle of
/// a range, both outcomes of a chance. The default schedule takes alternative 0 everywhere; the
/// exploration then runs every schedule that differs from it in at most `max_deviations` choice points,
/// those with fewer deviations first (breadth first over deviations, the idea of delay-bounded
/// scheduling: most concurrency bugs need few unusual choices, and the count of schedules stays
/// polynomial in the number of choice points), until `budget` schedules ran.
///
/// `body(const Schedule&)` opens every node with `schedule.config`, runs the scenario and returns its
/// outcome (anything convertible to std::string; void counts as one outcome). A schedule fails as a
/// sweep's seed does (a failed assertion, an exception, a misuse); the exploration then stops and prints
/// the token and the command that replays it ($WEFT_SIM_SCHEDULE=TOKEN, or open `sim:schedule=TOKEN,...`
/// by hand). Prints the schedules run, the choice points seen and the distinct outcomes.
template <class Body>
ExploreResult explore(Body&& body, const ExploreOptions& options = {}) {
    namespace ut = boost::unit_test;
    for (std::string_view key : {"fabric=", "schedule="}) {
        if (options.base.find(key) != std::string::npos) {
            throw std::invalid_argument("weft::testing::explore: the base config \"" + options.base + "\" sets " +
                                        std::string(key) + " itself; the exploration chooses it");
        }
    }
    const std::string fabric = "weft-explore";
    const std::string prefix = detail::with_seed(options.base, 1) + ",fabric=" + fabric + ",schedule=";
    ExploreResult result;
    std::deque<std::string> pending{""};
    bool replay = false;
    if (options.honour_environment) {
        if (const char* t = std::getenv("WEFT_SIM_SCHEDULE"); t && *t) {
            pending = {t};
            replay = true;
        }
    }
    while (!pending.empty() && result.schedules < options.budget) {
        Schedule s{std::move(pending.front()), {}, result.schedules};
        pending.pop_front();
        s.config = prefix + (s.token.empty() ? "0" : s.token);
        const std::size_t before = detail::failures_so_far();
        const std::uint64_t misuses_before = weft::sim::Fabric::misuse_tally().count;
        ++result.schedules;
        auto report = [&](std::string_view why) {
            result.failed = s.token.empty() ? "0" : s.token;
            const auto& master = ut::framework::master_test_suite();
            std::ostringstream os;
            os << "weft::testing: schedule " << *result.failed << " (" << result.schedules
               << " run) failed" << why << " (config " << s.config << "); replay with\n  WEFT_SIM_SCHEDULE="
               << *result.failed << " "
               << (master.argc > 0 ? detail::shell_quote(master.argv[0]) : std::string("<test binary>"))
               << " --run_test=" << detail::shell_quote(ut::framework::current_test_case().full_name()) << "\n";
            std::cerr << os.str() << std::flush;
            BOOST_TEST_MESSAGE(os.str());
        };
        try {
            BOOST_TEST_CONTEXT("schedule " << (s.token.empty() ? "0" : s.token) << " (" << s.config << ")") {
                if constexpr (std::is_void_v<decltype(body(static_cast<const Schedule&>(s)))>) {
                    body(static_cast<const Schedule&>(s));
                    ++result.outcomes[""];
                } else {
                    ++result.outcomes[std::string(body(static_cast<const Schedule&>(s)))];
                }
            }
        } catch (...) {
            report(": the body threw");
            throw;
        }
        const std::vector<std::uint8_t> arity = weft::sim::Fabric::explored_choices(fabric);
        if (result.schedules == 1) result.choice_points = arity.size();
        result.most_choice_points = std::max<std::uint64_t>(result.most_choice_points, arity.size());
        if (!options.allow_misuse) {
            const auto tally = weft::sim::Fabric::misuse_tally();
            if (tally.count != misuses_before) {
                BOOST_ERROR("schedule " << s.token << ": the simulator recorded " << tally.count - misuses_before
                                        << " misuse(s) of the API, the last: " << tally.last
                                        << " (ExploreOptions::allow_misuse accepts them)");
            }
        }
        if (detail::failures_so_far() != before) {
            report("");
            return result;
        }
        if (replay) break;
        // The children of this schedule: one more deviation at a choice point it left at its default.
        const auto deviations = static_cast<unsigned>(std::count_if(s.token.begin(), s.token.end(), [](char c) { return c != '0'; }));
        if (deviations >= options.max_deviations) continue;
        for (std::size_t i = s.token.size(); i < arity.size(); ++i) {
            for (unsigned alt = 1; alt < arity[i]; ++alt) {
                if (pending.size() + result.schedules >= options.budget) break;
                std::string child = s.token;
                child.resize(i, '0');
                child += static_cast<char>('0' + alt);
                pending.push_back(std::move(child));
            }
        }
    }
    result.exhausted = pending.empty() && !replay;
    std::ostringstream os;
    os << "weft::testing: explored " << result.schedules << " schedule(s) (" << options.base << ", up to "
       << options.max_deviations << " deviation(s), budget " << options.budget << ", "
       << (replay ? "the one $WEFT_SIM_SCHEDULE names" : result.exhausted ? "all of them" : "stopped by the budget")
       << "); choice points: "
       << result.choice_points << " on the default schedule, " << result.most_choice_points << " at most; "
       << result.outcomes.size() << " distinct outcome(s):";
    for (const auto& [outcome, n] : result.outcomes) os << " [" << outcome << "] x" << n;
    std::cout << os.str() << "\n" << std::flush;
    BOOST_TEST_MESSAGE(os.str());
    return result;
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
