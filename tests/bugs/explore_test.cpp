// weft::testing::explore: systematic exploration of the simulator's choice points.
#include <weft/sim/fabric.hpp>
#include <weft/testing.hpp>
#include <weft/weft.hpp>

#include "bugs.hpp"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace ut = boost::unit_test;
using weft::testing::ExploreOptions;
using weft::testing::Schedule;

namespace {

// A reads word X (1) and writes X := 2, unfenced, in one batch: the read returns 1 or, when the write
// passes it, 2.
std::string read_then_write(const std::string& config) {
    auto a = weft::open(config), b = weft::open(config);
    auto acq = a.create_cq({.depth = 16}), bcq = b.create_cq({.depth = 16});
    auto aqp = a.create_qp({.send_cq = acq, .recv_cq = acq}), bqp = b.create_qp({.send_cq = bcq, .recv_cq = bcq});
    std::vector<std::uint64_t> abuf(4, 0), bbuf(4, 0);
    auto amr = a.register_memory(abuf.data(), 32, weft::all_access);
    auto bmr = b.register_memory(bbuf.data(), 32, weft::all_access);
    aqp.connect(bqp.address());
    bqp.connect(aqp.address());
    bbuf[0] = 1;
    abuf[1] = 2;
    const auto x = bmr.remote().slice(0, 8);
    BOOST_TEST_REQUIRE(aqp.post_send({weft::read(1, amr.slice(0, 8), x), weft::write(2, amr.slice(8, 8), x)}));
    weft::Completion wc[2];
    for (int got = 0; got < 2;) got += static_cast<int>(acq.poll(wc).size());
    return abuf[0] == 1 ? "read_old" : abuf[0] == 2 ? "read_new" : "read_other";
}

struct ScopedEnv {
    const char* name;
    ScopedEnv(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
    ~ScopedEnv() { ::unsetenv(name); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(explore)

BOOST_AUTO_TEST_CASE(every_outcome_of_a_small_scenario_is_reached) {
    ExploreOptions o;
    o.budget = 400;
    o.honour_environment = false;
    auto r = weft::testing::explore([](const Schedule& s) { return read_then_write(s.config); }, o);
    BOOST_TEST(r.ok());
    BOOST_TEST(r.choice_points > 0u);
    BOOST_TEST(r.outcomes.count("read_old") == 1u);
    BOOST_TEST(r.outcomes.count("read_new") == 1u);
    BOOST_TEST(r.outcomes.count("read_other") == 0u);
    // The same exploration again gives the same counts: schedules are deterministic.
    auto again = weft::testing::explore([](const Schedule& s) { return read_then_write(s.config); }, o);
    BOOST_TEST(again.schedules == r.schedules);
    BOOST_TEST((again.outcomes == r.outcomes));
}

BOOST_AUTO_TEST_CASE(an_in_order_fabric_has_one_schedule_and_no_choice_point) {
    ExploreOptions o;
    o.base = "sim:reorder=none";
    o.honour_environment = false;
    auto r = weft::testing::explore([](const Schedule& s) { return read_then_write(s.config); }, o);
    BOOST_TEST(r.schedules == 1u);
    BOOST_TEST(r.choice_points == 0u);
    BOOST_TEST(r.exhausted);
    BOOST_TEST(r.outcomes.size() == 1u);
    BOOST_TEST(r.outcomes.count("read_old") == 1u);
}

BOOST_AUTO_TEST_CASE(a_bounded_exploration_is_exhausted_within_its_deviations) {
    ExploreOptions o;
    o.max_deviations = 1;
    o.budget = 100000;
    o.honour_environment = false;
    auto r = weft::testing::explore([](const Schedule& s) { return read_then_write(s.config); }, o);
    BOOST_TEST(r.exhausted);
    // One deviation: the default schedule, and each alternative of each of its choice points (later points
    // of a deviating schedule are its children, which a bound of one does not run).
    BOOST_TEST(r.schedules >= 1 + r.choice_points);
    BOOST_TEST(r.schedules <= 1 + 2 * r.choice_points);
}

BOOST_AUTO_TEST_CASE(a_schedule_token_replays_its_outcome) {
    std::vector<std::pair<std::string, std::string>> seen;
    ExploreOptions o;
    o.budget = 400;
    o.honour_environment = false;
    weft::testing::explore(
        [&](const Schedule& s) {
            auto outcome = read_then_write(s.config);
            seen.emplace_back(s.token, outcome);
            return outcome;
        },
        o);
    int checked = 0;
    for (const auto& run : seen) {
        if (run.first.empty() || checked == 20) continue;
        ++checked;
        BOOST_TEST(read_then_write("sim:seed=1,fabric=weft-replay,schedule=" + run.first) == run.second, run.first);
    }
    BOOST_TEST(checked > 0);
    // $WEFT_SIM_SCHEDULE runs the one schedule it names.
    const std::string token = seen.back().first, outcome = seen.back().second;
    ScopedEnv env("WEFT_SIM_SCHEDULE", token.c_str());
    ExploreOptions replay;
    auto r = weft::testing::explore([](const Schedule& s) { return read_then_write(s.config); }, replay);
    BOOST_TEST(r.schedules == 1u);
    BOOST_TEST(r.outcomes.count(outcome) == 1u);
}

BOOST_AUTO_TEST_CASE(a_bad_schedule_token_is_refused_saying_what_is_accepted) {
    try {
        (void)weft::open("sim:fabric=weft-bad-schedule,schedule=01x");
        BOOST_FAIL("a token with 'x' was accepted");
    } catch (const weft::Error& e) {
        BOOST_TEST(std::strstr(e.what(), "digits 0, 1 or 2") != nullptr, e.what());
    }
}

// The zoo's reply_then_repost, found by exploration instead of random seeds.
BOOST_AUTO_TEST_CASE(exploration_finds_reply_then_repost) {
    const auto* bug = weft::bugs::find("reply_then_repost");
    BOOST_TEST_REQUIRE(bug != nullptr);
    ExploreOptions o;
    o.budget = 3000;
    o.max_deviations = 1;
    o.honour_environment = false;
    std::string first;
    auto r = weft::testing::explore(
        [&](const Schedule& s) {
            const bool shown = bug->buggy(s.config);
            if (shown && first.empty()) first = s.token;
            return shown ? "bug" : "fine";
        },
        o);
    BOOST_TEST(r.outcomes.count("bug") == 1u);
    std::cout << "explore: reply_then_repost shows with schedule " << first << "\n";
    // Its fix passes every schedule of the same exploration.
    auto fixed = weft::testing::explore([&](const Schedule& s) { return bug->fixed(s.config) ? "bug" : "fine"; }, o);
    BOOST_TEST(fixed.outcomes.count("bug") == 0u);
}

// A failing schedule stops the exploration and is named; the one failure is expected.
BOOST_AUTO_TEST_CASE_EXPECTED_FAILURES(a_failing_schedule_stops_the_exploration, 1)
BOOST_AUTO_TEST_CASE(a_failing_schedule_stops_the_exploration) {
    std::cerr << "(the schedule report below is expected)\n";
    ExploreOptions o;
    o.budget = 400;
    o.honour_environment = false;
    auto r = weft::testing::explore(
        [](const Schedule& s) {
            const auto outcome = read_then_write(s.config);
            BOOST_TEST(outcome == "read_old");
            return outcome;
        },
        o);
    BOOST_TEST_REQUIRE(r.failed.has_value());
    BOOST_TEST(read_then_write("sim:seed=1,fabric=weft-replay,schedule=" + *r.failed) == "read_new");
}

BOOST_AUTO_TEST_SUITE_END()
