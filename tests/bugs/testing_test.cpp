// <weft/testing.hpp>: seed sweeps, the replay command, and the determinism self-check over 1,000 seeds.
#include <weft/sim/fabric.hpp>
#include <weft/testing.hpp>
#include <weft/weft.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace ut = boost::unit_test;
using weft::testing::Seed;
using weft::testing::SweepOptions;

namespace {

// Sets (or, with null, unsets) an environment variable for the life of the object, then restores it.
struct ScopedEnv {
    const char* name;
    std::optional<std::string> saved;
    ScopedEnv(const char* n, const char* value) : name(n) {
        if (const char* v = std::getenv(n)) saved = v;
        if (value) ::setenv(n, value, 1);
        else ::unsetenv(n);
    }
    ~ScopedEnv() {
        if (saved) ::setenv(name, saved->c_str(), 1);
        else ::unsetenv(name);
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;
};

// One short scenario exercising every seeded choice: a 3-packet write (torn placement), a read followed by
// an unfenced write to the same word (read-after-write), an atomic, a send with immediate, and the
// acknowledgements (jitter). The trace holds every completion, the value the read returned, both buffers'
// digests, the virtual clock and the number of events.
std::string scenario(const Seed& s) {
    constexpr std::size_t size = 16 * 1024;
    auto open_node = [&](std::vector<std::byte>& buf, weft::CompletionQueue& cq, weft::QueuePair& qp) {
        auto dom = weft::open(s.config);
        cq = dom.create_cq({.depth = 64});
        qp = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 16, .max_recv = 16});
        buf.assign(size, std::byte{0});
        return dom;
    };
    std::vector<std::byte> abuf, bbuf;
    weft::CompletionQueue acq, bcq;
    weft::QueuePair aqp, bqp;
    auto a = open_node(abuf, acq, aqp);
    auto b = open_node(bbuf, bcq, bqp);
    auto amr = a.register_memory(abuf, weft::all_access);
    auto bmr = b.register_memory(bbuf, weft::all_access);
    aqp.connect(bqp.address());
    bqp.connect(aqp.address());
    for (std::size_t i = 0; i < 12 * 1024; ++i) abuf[i] = static_cast<std::byte>(i * 7 + s.value);
    std::uint64_t one = 1, two = 2;
    std::memcpy(&bbuf[15000], &one, 8);
    std::memcpy(&abuf[15008], &two, 8);
    BOOST_TEST_REQUIRE(bqp.post_recv({weft::recv(9, bmr.slice(14000, 64))}));
    auto remote = bmr.remote();
    BOOST_TEST_REQUIRE(aqp.post_send({
        weft::write(1, amr.slice(0, 12 * 1024), remote.slice(0, 12 * 1024)),
        weft::read(2, amr.slice(15016, 8), remote.slice(15000, 8)),
        weft::write(3, amr.slice(15008, 8), remote.slice(15000, 8)),
        weft::fetch_add(4, amr.slice(15024, 8), remote.slice(15000, 8), 5),
        weft::send(5, amr.slice(0, 32)).with_imm(77),
    }));
    weft::testing::Trace trace;
    weft::Completion wc[8];
    int got = 0;
    for (int spins = 0; got < 6 && spins < 1000; ++spins) {
        for (const auto& c : acq.poll(wc)) trace << c << '\n', ++got;
        for (const auto& c : bcq.poll(wc)) trace << c << '\n', ++got;
    }
    auto fab = weft::sim::Fabric::of(a);
    fab.run_until_idle();
    std::uint64_t seen = 0;
    std::memcpy(&seen, &abuf[15016], 8);
    trace << "read=" << seen << " now=" << fab.now() << " events=" << fab.events_processed()
          << " misuse=" << fab.misuse().size() << '\n';
    trace.digest(abuf.data(), abuf.size()).digest(bbuf.data(), bbuf.size());
    return trace.str();
}

// Skips a test, visibly, when this build's simulator lacks the fidelity features (the `reorder` key).
boost::test_tools::assertion_result simulator_reorders(ut::test_unit_id) {
    try {
        (void)weft::open("sim:fabric=weft-testing-probe,reorder=none");
    } catch (const weft::Error& e) {
        boost::test_tools::assertion_result r(false);
        r.message() << "the simulator of this build has no seeded reordering (" << e.what() << ")";
        return r;
    }
    return true;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(testing)

BOOST_AUTO_TEST_CASE(sweep_builds_each_config_from_the_base) {
    std::vector<std::string> configs;
    SweepOptions o;
    o.base = "sim:mtu=1024,reorder=torn";
    o.seeds = 3;
    o.first = 5;
    o.honour_environment = false;
    auto r = weft::testing::sweep([&](const Seed& s) { configs.push_back(s.config); }, o);
    BOOST_TEST(r.ok());
    BOOST_TEST(r.runs == 3u);
    BOOST_TEST(configs == (std::vector<std::string>{"sim:seed=5,mtu=1024,reorder=torn",
                                                    "sim:seed=6,mtu=1024,reorder=torn",
                                                    "sim:seed=7,mtu=1024,reorder=torn"}),
               boost::test_tools::per_element());
    o.base = "sim";
    o.seeds = 1;
    weft::testing::sweep([&](const Seed& s) { BOOST_TEST(s.config == "sim:seed=5"); }, o);
}

BOOST_AUTO_TEST_CASE(weft_sim_seeds_sets_the_count_and_weft_sim_seed_picks_one) {
    std::vector<std::uint64_t> seen;
    ScopedEnv no_seed("WEFT_SIM_SEED", nullptr);
    {
        ScopedEnv env("WEFT_SIM_SEEDS", "7");
        auto r = weft::testing::sweep([&](const Seed& s) { seen.push_back(s.value); });
        BOOST_TEST(r.runs == 7u);
        BOOST_TEST(seen.back() == 7u);
    }
    seen.clear();
    {
        ScopedEnv env("WEFT_SIM_SEED", "4242");
        auto r = weft::testing::sweep([&](const Seed& s) { seen.push_back(s.value); });
        BOOST_TEST(r.runs == 1u);
        BOOST_TEST(seen == std::vector<std::uint64_t>{4242}, boost::test_tools::per_element());
    }
    ScopedEnv env("WEFT_SIM_SEEDS", "lots");
    BOOST_CHECK_THROW(weft::testing::sweep([](const Seed&) {}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_base_config_with_its_own_seed_is_refused) {
    SweepOptions o;
    o.base = "sim:seed=3";
    BOOST_CHECK_THROW(weft::testing::sweep([](const Seed&) {}, o), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(the_replay_command_names_the_binary_the_test_and_the_seed) {
    const auto cmd = weft::testing::replay_command(17);
    const auto& master = ut::framework::master_test_suite();
    BOOST_TEST(cmd.rfind("WEFT_SIM_SEED=17 ", 0) == 0u, cmd);
    BOOST_TEST(cmd.find(master.argv[0]) != std::string::npos, cmd);
    BOOST_TEST(cmd.find("--run_test=testing/the_replay_command_names_the_binary_the_test_and_the_seed") !=
                   std::string::npos,
               cmd);
}

// The sweep stops at the first failing seed (3 here) and reports it with the replay command on stderr; the
// one failure is expected.
BOOST_AUTO_TEST_CASE_EXPECTED_FAILURES(a_sweep_stops_at_the_first_failing_seed, 1)
BOOST_AUTO_TEST_CASE(a_sweep_stops_at_the_first_failing_seed) {
    std::cerr << "(the seed-3 report below is expected)\n";
    SweepOptions o;
    o.seeds = 10;
    o.honour_environment = false;
    auto r = weft::testing::sweep([](const Seed& s) { BOOST_TEST(s.value != 3u); }, o);
    BOOST_TEST(r.runs == 3u);
    BOOST_TEST(r.failed.value_or(0) == 3u);
}

namespace {
// A program error the simulator reports as a misuse: the source of a write changed before it completed.
void change_a_source_in_flight(const Seed& s) {
    auto dom = weft::open(s.config);
    auto cq = dom.create_cq({.depth = 4});
    auto qp = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    qp.connect(qp.address());
    std::vector<std::byte> buf(64);
    auto mr = dom.register_memory(buf, weft::all_access);
    BOOST_REQUIRE(qp.post_send({weft::write(1, mr.slice(0, 8), mr.remote().slice(32, 8))}));
    buf[0] = std::byte{1};
    weft::Completion wc[1];
    while (cq.poll(wc).empty()) {
    }
}
}  // namespace

// A seed during which the simulator recorded a misuse fails, naming it, though the body asserted nothing.
BOOST_AUTO_TEST_CASE_EXPECTED_FAILURES(a_misuse_fails_the_seed, 1)
BOOST_AUTO_TEST_CASE(a_misuse_fails_the_seed) {
    std::cerr << "(the seed-2 misuse report below is expected)\n";
    SweepOptions o;
    o.base = "sim:fabric=sweep_misuse";
    o.seeds = 5;
    o.honour_environment = false;
    auto r = weft::testing::sweep(
        [](const Seed& s) {
            if (s.value == 2) change_a_source_in_flight(s);
        },
        o);
    BOOST_TEST(r.runs == 2u);
    BOOST_TEST(r.failed.value_or(0) == 2u);
}

BOOST_AUTO_TEST_CASE(allow_misuse_lets_a_test_misuse_on_purpose) {
    std::cerr << "(the misuse reports below are expected)\n";
    SweepOptions o;
    o.base = "sim:fabric=sweep_misuse_allowed";
    o.seeds = 3;
    o.honour_environment = false;
    o.allow_misuse = true;
    const auto before = weft::sim::Fabric::misuse_tally().count;
    auto r = weft::testing::sweep(change_a_source_in_flight, o);
    BOOST_TEST(r.ok());
    BOOST_TEST(r.runs == 3u);
    BOOST_TEST(weft::sim::Fabric::misuse_tally().count >= before + 3);
}

BOOST_AUTO_TEST_CASE(find_seed_returns_the_first_seed_that_shows_it) {
    SweepOptions o;
    o.seeds = 50;
    o.honour_environment = false;
    auto s = weft::testing::find_seed([](const Seed& x) { return x.value % 7 == 0; }, o);
    BOOST_TEST_REQUIRE(s.has_value());
    BOOST_TEST(s->value == 7u);
    BOOST_TEST(s->index == 6u);
    BOOST_TEST(!weft::testing::find_seed([](const Seed&) { return false; }, o).has_value());
}

WEFT_SEED_SWEEP_TEST_CASE(the_sweep_macro_runs_its_body_per_seed, "sim:reorder=none") {
    BOOST_TEST(seed.config == "sim:seed=" + std::to_string(seed.value) + ",reorder=none");
    BOOST_TEST(seed.index < seed.count);
}

BOOST_AUTO_TEST_CASE(different_seeds_give_different_traces, *ut::precondition(simulator_reorders)) {
    // The check below is only meaningful when the seed changes what the scenario shows.
    const auto one = scenario(Seed{1, "sim:seed=1"});
    int differ = 0;
    for (std::uint64_t s = 2; s <= 8; ++s) differ += scenario(Seed{s, "sim:seed=" + std::to_string(s)}) != one;
    BOOST_TEST(differ > 0);
}

// A body whose trace changes from one run to the next fails the check, at the first seed.
BOOST_AUTO_TEST_CASE_EXPECTED_FAILURES(a_nondeterministic_body_fails_the_check, 1)
BOOST_AUTO_TEST_CASE(a_nondeterministic_body_fails_the_check) {
    std::cerr << "(the seed-1 report below is expected)\n";
    int run = 0;
    SweepOptions o;
    o.seeds = 5;
    o.honour_environment = false;
    auto r = weft::testing::check_determinism(
        [&](const Seed&) { return "same first line\nrun " + std::to_string(++run) + "\n"; }, o);
    BOOST_TEST(r.failed.value_or(0) == 1u);
}

// The done criterion: the determinism self-check passes over 1,000 seeds.
BOOST_AUTO_TEST_CASE(determinism_holds_over_1000_seeds) {
    SweepOptions o;
    o.seeds = 1000;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = weft::testing::check_determinism(scenario, o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    BOOST_TEST(r.ok());
    std::cout << "testing: determinism checked over " << r.runs << " seeds (two runs each) in " << s << " s\n";
}

// The same check with packet faults on (drop, duplicate, delay: retransmissions and sequence NAKs).
BOOST_AUTO_TEST_CASE(determinism_holds_with_packet_faults, *ut::precondition(simulator_reorders)) {
    SweepOptions o;
    o.base = "sim:drop=0.05,duplicate=0.05,delay=0.1";
    o.seeds = 200;
    BOOST_TEST(weft::testing::check_determinism(scenario, o).ok());
}

BOOST_AUTO_TEST_SUITE_END()
