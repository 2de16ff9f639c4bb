// The key-value store of examples/kv on the simulator: over seed sweeps (torn placement, reads over time,
// program time, packet faults) every GET returns a value some PUT wrote, versions never go backwards, no
// operation misses a PUT completed before it started, and torn bucket reads do happen and are read again;
// the slot checksum rejects every mix of two versions; the history checker catches each kind of anomaly
// it names.
#define BOOST_TEST_MODULE weft_kv
#include <weft/testing.hpp>
#include <weft/weft.hpp>

#include "kv.hpp"

#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using weft::testing::Seed;

namespace {

// A server and `clients` clients on two nodes of the fabric `config` opens, running `w` to the end.
kv::Report run_store(const std::string& config, const kv::ServerOptions& table, const kv::Workload& w,
                     std::size_t clients) {
    kv::Server server(weft::open(config), table);
    auto dom = weft::open(config);
    std::vector<kv::Client> cs;
    cs.reserve(clients);
    for (std::size_t i = 0; i < clients; ++i) kv::link(server, cs.emplace_back(dom));
    return kv::run(w, cs, dom, &server);
}

// One bucket of 8 slots holding 6 hot keys, read as three 256-byte packets: slots 2 and 5 straddle a
// packet boundary, so a PUT the server's program stores while a GET's response is leaving tears them.
// At 10 Gbit/s the response takes 0.6 us to leave, which puts more stores inside reads than 100 would.
const kv::ServerOptions hot_bucket{.slots = 8, .bucket_slots = 8, .max_clients = 4};
const kv::Workload hot_workload{.ops = 200, .keys = 6, .put_percent = 50};

void check(const kv::Report& r, const kv::Workload& w, std::size_t clients) {
    BOOST_TEST(r.gets + r.puts == w.ops * clients);
    BOOST_TEST(r.full == 0u);
    BOOST_TEST(r.violations.empty(), r.violations.size() << " violation(s), the first: "
                                                         << (r.violations.empty() ? "" : r.violations.front()));
}

// Drives `server` and `client` until the client's operation completes; its result.
const kv::Result& complete(kv::Server& server, kv::Client& client) {
    for (int step = 0; step < 100000; ++step) {
        server.progress();
        if (client.progress()) return client.result();
    }
    throw std::runtime_error("the operation did not complete");
}

// One server and one client on two nodes of a default fabric, connected and greeted.
struct Pair {
    kv::Server server;
    weft::Domain dom = weft::open("sim");
    kv::Client client{dom};

    explicit Pair(const kv::ServerOptions& table) : server(weft::open("sim"), table) {
        kv::link(server, client);
        while (!client.ready()) {
            server.progress();
            client.progress();
        }
    }
    // Says goodbye and lets the server answer, so that no request is in flight when the QPs go.
    void close() {
        client.close();
        complete(server, client);
        while (!server.done()) server.progress();
    }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_store)

BOOST_AUTO_TEST_CASE(a_get_returns_what_the_last_put_stored) {
    Pair p({.slots = 64, .bucket_slots = 8, .max_clients = 1});
    p.client.get(7);
    BOOST_TEST((complete(p.server, p.client).status == kv::Status::not_found));
    p.client.put(7, "seven");
    BOOST_TEST(complete(p.server, p.client).version == 1u);
    p.client.put(7, std::string(kv::max_value, 'x'));
    BOOST_TEST(complete(p.server, p.client).version == 2u);
    p.client.get(7);
    const auto& r = complete(p.server, p.client);
    BOOST_TEST((r.status == kv::Status::ok));
    BOOST_TEST(r.version == 2u);
    BOOST_TEST(r.value == std::string(kv::max_value, 'x'));
    // The server's own stores are what clients read too.
    BOOST_TEST(p.server.store(8, "eight").value() == 1u);
    p.client.get(8);
    BOOST_TEST(complete(p.server, p.client).value == "eight");
    p.close();
}

BOOST_AUTO_TEST_CASE(a_put_into_a_full_bucket_is_refused) {
    Pair p({.slots = 2, .bucket_slots = 2, .max_clients = 1});
    for (std::uint64_t key : {1, 2}) {
        p.client.put(key, "v");
        BOOST_TEST((complete(p.server, p.client).status == kv::Status::ok));
    }
    p.client.put(3, "v");
    BOOST_TEST((complete(p.server, p.client).status == kv::Status::full));
    p.client.put(1, "w");  // a key already there still has its slot
    BOOST_TEST(complete(p.server, p.client).version == 2u);
    p.client.get(3);
    BOOST_TEST((complete(p.server, p.client).status == kv::Status::not_found));
    p.close();
}

BOOST_AUTO_TEST_CASE(gets_are_linearizable_and_torn_reads_are_read_again) {
    std::uint64_t torn = 0, gets = 0;
    const auto result = weft::testing::sweep(
        [&](const Seed& s) {
            const auto r = run_store(s.config, hot_bucket, hot_workload, 4);
            check(r, hot_workload, 4);
            torn += r.torn_reads;
            gets += r.gets;
        },
        {.base = "sim:mtu=256,gbps=10", .seeds = 50});
    BOOST_TEST_MESSAGE(torn << " torn bucket reads taken again in " << gets << " GETs over " << result.runs
                            << " seeds");
    // The checksum was put to work, so the sweep cannot pass for want of torn reads.
    if (result.runs >= 50) BOOST_TEST(torn > 0u);
}

BOOST_AUTO_TEST_CASE(gets_are_linearizable_under_packet_faults) {
    weft::testing::sweep(
        [&](const Seed& s) { check(run_store(s.config, hot_bucket, hot_workload, 4), hot_workload, 4); },
        {.base = "sim:mtu=256,drop=0.02,duplicate=0.02,delay=0.05", .seeds = 50});
}

BOOST_AUTO_TEST_CASE(gets_are_linearizable_over_a_larger_table) {
    const kv::ServerOptions table{.slots = 256, .bucket_slots = 8, .max_clients = 8};
    const kv::Workload w{.ops = 100, .keys = 64, .put_percent = 20};
    weft::testing::sweep([&](const Seed& s) { check(run_store(s.config, table, w, 8), w, 8); },
                         {.base = "sim", .seeds = 20});
}

BOOST_AUTO_TEST_CASE(a_run_is_deterministic) {
    weft::testing::check_determinism(
        [](const Seed& s) {
            const auto r = run_store(s.config, hot_bucket, hot_workload, 4);
            std::ostringstream os;
            os << r.gets << ' ' << r.puts << ' ' << r.not_found << ' ' << r.torn_reads << ' ' << r.virtual_ns;
            return os.str();
        },
        {.base = "sim:mtu=256", .seeds = 10});
}

BOOST_AUTO_TEST_CASE(the_checksum_rejects_every_mix_of_two_versions) {
    std::byte before[kv::slot_size], after[kv::slot_size], mixed[kv::slot_size];
    kv::encode_slot({.version = 4, .key = 9, .value = "an older value of key nine"}, before);
    kv::encode_slot({.version = 5, .key = 9, .value = "the new one"}, after);
    BOOST_TEST(kv::decode_slot(before)->value == "an older value of key nine");
    BOOST_TEST(kv::decode_slot(after)->version == 5u);
    // A read that took the first `cut` bytes before the store and the rest after it, or the other way.
    int mixes = 0;
    for (std::size_t cut = 1; cut < kv::slot_size; ++cut) {
        for (bool old_first : {true, false}) {
            std::memcpy(mixed, old_first ? before : after, cut);
            std::memcpy(mixed + cut, (old_first ? after : before) + cut, kv::slot_size - cut);
            const bool whole = std::memcmp(mixed, before, kv::slot_size) == 0 ||
                               std::memcmp(mixed, after, kv::slot_size) == 0;
            if (whole) continue;  // the two versions agree on the bytes around the cut
            ++mixes;
            BOOST_TEST(!kv::decode_slot(mixed).has_value(), "a mix cut at byte " << cut << " was taken as a slot");
        }
    }
    BOOST_TEST(mixes > 100);
}

BOOST_AUTO_TEST_CASE(the_checker_accepts_a_linearizable_history) {
    kv::Checker c;
    c.get_started(0, 1);
    c.completed(0, {.status = kv::Status::not_found, .key = 1});
    c.put_started(0, 1, "a");
    c.get_started(1, 1);  // concurrent with the PUT: may see it or not
    c.completed(1, {.key = 1, .version = 1, .value = "a"});
    c.completed(0, {.key = 1, .version = 1});
    c.get_started(1, 1);
    c.completed(1, {.key = 1, .version = 1, .value = "a"});
    BOOST_TEST(c.violations().empty());
}

BOOST_AUTO_TEST_CASE(the_checker_catches_a_value_no_put_wrote) {
    kv::Checker c;
    c.put_started(0, 1, "a");
    c.completed(0, {.key = 1, .version = 1});
    c.get_started(1, 1);
    c.completed(1, {.key = 1, .version = 1, .value = "a torn mix"});
    BOOST_TEST(c.violations().size() >= 1u);
}

BOOST_AUTO_TEST_CASE(the_checker_catches_a_version_going_back) {
    kv::Checker c;
    c.put_started(0, 1, "a");
    c.put_started(1, 1, "b");
    c.get_started(2, 1);
    c.completed(2, {.key = 1, .version = 2, .value = "b"});
    c.get_started(2, 1);
    c.completed(2, {.key = 1, .version = 1, .value = "a"});
    BOOST_TEST(c.violations().size() == 1u);
}

BOOST_AUTO_TEST_CASE(the_checker_catches_a_read_that_misses_a_completed_put) {
    kv::Checker c;
    c.put_started(0, 1, "a");
    c.completed(0, {.key = 1, .version = 1});
    c.get_started(1, 1);
    c.completed(1, {.status = kv::Status::not_found, .key = 1});
    BOOST_TEST(c.violations().size() == 1u);
}

BOOST_AUTO_TEST_CASE(the_checker_catches_two_values_for_one_version) {
    kv::Checker c;
    c.put_started(0, 1, "a");
    c.put_started(1, 1, "b");
    c.completed(0, {.key = 1, .version = 1});
    c.completed(1, {.key = 1, .version = 1});
    BOOST_TEST(c.violations().size() >= 1u);
}

BOOST_AUTO_TEST_SUITE_END()
