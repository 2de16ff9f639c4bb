// Conformance: the data path allocates nothing. Once a connection runs, posting sends and writes, polling
// their completions, and idle polls and zero-timeout waits of a connected pair with nothing in flight make
// no heap allocation anywhere in the process: not in libweft, the backend, the provider or a thread of
// theirs (alloc_count.cpp counts every malloc of the process). Only side a's calls run while counting: in
// two-process mode side b's are proxies, which allocate for their messages.
#include "alloc_count.hpp"
#include "harness.hpp"

#include <chrono>
#include <cstdint>
#include <string>

using namespace weft;
using weft::test::Pair;

namespace {

bool counted() { return weft::test::allocations_counted(); }

// libfabric's rxm over its verbs provider reads its connection event queue inside every fi_cq_read, and
// librdmacm's rdma_get_cm_event allocates the event before it learns there is none (a call stack of
// WEFT_ALLOC_BACKTRACES: CompletionQueue::poll, fi_cq_read, ..., rdma_get_cm_event, malloc): ~75 a second
// while idle, whoever calls fi_cq_read.
bool not_rxm_over_verbs() {
    const std::string& config = weft::test::backend_config();
    return config.find("verbs;ofi_rxm") == std::string::npos;
}

constexpr std::uint32_t warm_rounds = 64, counted_rounds = 64;
constexpr std::size_t message = 64;

// Posts a send and a write from a to b and polls a's CQ until both complete. False when one fails, a post
// is refused or nothing comes for the deadline.
bool round_trip(Pair& p, std::uint64_t r) {
    const std::size_t slot = (r % 128) * message;
    const SendRequest batch[] = {send(2 * r, p.a.seg(slot, message)),
                                 write(2 * r + 1, p.a.seg(slot, message), p.b.remote(16384 + slot, message))};
    if (!p.a.qp.post_send(batch)) return false;
    Completion wc[4];
    int got = 0;
    const auto deadline = std::chrono::steady_clock::now() + weft::test::completion_deadline;
    while (got < 2) {
        for (const Completion& c : p.a.cq.poll(wc)) {
            if (!c.ok()) return false;
            ++got;
        }
        if (std::chrono::steady_clock::now() > deadline) return false;
    }
    return true;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cost)

BOOST_AUTO_TEST_CASE(posting_and_polling_allocate_nothing_in_steady_state,
                     *weft::test::only_if(counted, "a sanitizer replaces the allocator: allocations are not counted") *
                         weft::test::only_if(not_rxm_over_verbs,
                                             "libfabric's rxm over verbs allocates inside every fi_cq_read "
                                             "(librdmacm's rdma_get_cm_event)")) {
    const weft::test::Unrecorded unrecorded;  // polls directly
    QpOptions o;
    o.max_send = 16;
    o.max_recv = 2 * (warm_rounds + counted_rounds);
    Pair p(o);
    for (std::uint32_t k = 0; k < warm_rounds + counted_rounds; ++k) {
        BOOST_REQUIRE(p.b.qp.post_recv({recv(k, p.b.seg(32768 + (k % 256) * message, message))}));
    }
    for (std::uint32_t r = 0; r < warm_rounds; ++r) BOOST_REQUIRE(round_trip(p, r));

    // Sends and writes with their completions.
    bool all_done = true;
    weft::test::AllocationCount busy;
    for (std::uint32_t r = warm_rounds; r < warm_rounds + counted_rounds && all_done; ++r) all_done = round_trip(p, r);
    const std::uint64_t busy_allocations = busy.stop();
    BOOST_TEST(all_done);
    BOOST_TEST(busy_allocations == 0u, busy_allocations << " allocations in " << counted_rounds
                                                        << " rounds of a send and a write with their completions");

    // Idle: nothing in flight, the program polls (and waits for no time) for 200 ms, long enough for any
    // periodic work of the backend (watches of the peer, connection events) to come round many times.
    const bool can_wait = weft::test::backend_caps().has(Feature::wait);
    Completion wc[4];
    std::uint64_t stray = 0, polls = 0;
    weft::test::AllocationCount idle;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (std::chrono::steady_clock::now() < until) {
        stray += p.a.cq.poll(wc).size();
        if (can_wait) stray += p.a.cq.wait(std::chrono::nanoseconds(0)) ? 1 : 0;
        ++polls;
    }
    const std::uint64_t idle_allocations = idle.stop();
    BOOST_TEST(stray == 0u);
    BOOST_TEST(idle_allocations == 0u, idle_allocations << " allocations in " << polls << " idle polls over 200 ms");
    BOOST_TEST_MESSAGE("cost: " << busy_allocations << " allocations in " << counted_rounds << " busy rounds, "
                                << idle_allocations << " in " << polls << " idle polls");

    // Every send reached a receive.
    std::uint32_t received = 0;
    while (auto c = weft::test::maybe_next(p.b.cq, std::chrono::milliseconds(200))) {
        BOOST_TEST(c->ok(), c->status);
        ++received;
    }
    BOOST_TEST(received == warm_rounds + counted_rounds);
}

BOOST_AUTO_TEST_SUITE_END()
