// The bug zoo (examples/bugs): each buggy program is caught by the simulator's default config within a
// documented number of seeds, never shows on an in-order fabric (reorder=none), and its fixed version passes
// every seed of the sweep. A bug whose simulator feature is missing from this build is skipped, visibly.
#include <weft/testing.hpp>
#include <weft/weft.hpp>

#include "bugs.hpp"

#include <chrono>
#include <iostream>
#include <string>

namespace ut = boost::unit_test;
using weft::testing::Seed;
using weft::testing::SweepOptions;

namespace {

// Whether this build's simulator accepts the configuration key a bug needs to become visible.
struct Needs {
    std::string_view bug;
    boost::test_tools::assertion_result operator()(ut::test_unit_id) const {
        const auto* b = weft::bugs::find(bug);
        if (!b || b->needs.empty()) return true;
        const std::string probe = "sim:fabric=weft-bugs-probe," + std::string(b->needs) +
                                  (b->needs == "reorder" ? "=none" : b->needs == "program_ns" ? "=5000" : "=1");
        try {
            (void)weft::open(probe);
        } catch (const weft::Error& e) {
            boost::test_tools::assertion_result r(false);
            r.message() << "the simulator of this build lacks the '" << b->needs << "' key " << bug
                        << " needs to be visible (" << e.what() << ")";
            return r;
        }
        return true;
    }
};

const weft::bugs::Bug& bug(std::string_view name) {
    const auto* b = weft::bugs::find(name);
    BOOST_TEST_REQUIRE(b != nullptr, "no bug named " << name);
    return *b;
}

// The buggy version shows within `within` seeds of the default config; prints the seed that did.
void caught_within(std::string_view name, std::uint64_t within) {
    const auto& b = bug(name);
    SweepOptions o;
    o.seeds = within;
    o.honour_environment = false;
    const auto t0 = std::chrono::steady_clock::now();
    auto found = weft::testing::find_seed([&](const Seed& s) { return b.buggy(s.config); }, o);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    BOOST_TEST_REQUIRE(found.has_value(), name << " was not caught within " << within << " seeds");
    std::cout << "bugs: " << name << " caught at seed " << found->value << " (" << found->config << "), "
              << found->index + 1 << " seed(s) run, " << ms << " ms\n";
    BOOST_TEST(b.buggy(found->config), "seed " << found->value << " shows " << name << " again when replayed");
}

void never_in_order(std::string_view name) {
    const auto& b = bug(name);
    SweepOptions o;
    o.base = "sim:reorder=none";
    weft::testing::sweep([&](const Seed& s) { BOOST_TEST(!b.buggy(s.config), name << " showed in order"); }, o);
}

void fixed_passes(std::string_view name) {
    const auto& b = bug(name);
    weft::testing::sweep([&](const Seed& s) { BOOST_TEST(!b.fixed(s.config), "the fixed " << name << " failed"); });
}

}  // namespace

// Seeds each bug needs at most, documented in docs/testing.md (the measured first seed is printed).
#define WEFT_BUG_CASES(name, within)                                                                       \
    BOOST_AUTO_TEST_CASE(name##_is_caught_within_##within##_seeds, *ut::precondition(Needs{#name})) {     \
        caught_within(#name, within);                                                                      \
    }                                                                                                      \
    BOOST_AUTO_TEST_CASE(name##_is_not_seen_in_order, *ut::precondition(Needs{#name})) {                   \
        never_in_order(#name);                                                                             \
    }                                                                                                      \
    BOOST_AUTO_TEST_CASE(name##_fixed_passes_every_seed) { fixed_passes(#name); }

BOOST_AUTO_TEST_SUITE(zoo)

WEFT_BUG_CASES(torn_flag, 10)
WEFT_BUG_CASES(read_after_write, 10)
WEFT_BUG_CASES(send_buffer_reuse, 10)
WEFT_BUG_CASES(late_receive, 10)
WEFT_BUG_CASES(ignored_errors, 10)
WEFT_BUG_CASES(reply_then_repost, 100)
WEFT_BUG_CASES(credit_off_by_one, 100)
WEFT_BUG_CASES(cross_qp_notification, 100)
WEFT_BUG_CASES(lock_without_fence, 100)
WEFT_BUG_CASES(cpu_writer_racing_read, 100)

BOOST_AUTO_TEST_CASE(every_bug_of_the_zoo_is_tested) {
    BOOST_TEST(weft::bugs::all().size() == 10u);
}

BOOST_AUTO_TEST_SUITE_END()
