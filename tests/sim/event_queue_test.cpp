// The simulator's event queue (sim/src/event_queue.hpp) against a binary heap on (time, seq), the order it
// must reproduce exactly for a seed's run to stay the same: random workloads that push while popping, look
// at the front between pushes, push before the cursor (times the wheel has cascaded past, near and far), and
// span every level of the wheel.
#include "event_queue.hpp"

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

struct Item {
    std::uint64_t time = 0;
    std::uint64_t seq = 0;
};

bool later(const Item& a, const Item& b) { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }

// A reference queue: std::push_heap/pop_heap, as the simulator's queue was before the wheel.
struct Heap {
    std::vector<Item> v;
    void push(Item i) {
        v.push_back(i);
        std::push_heap(v.begin(), v.end(), later);
    }
    Item pop() {
        std::pop_heap(v.begin(), v.end(), later);
        Item i = v.back();
        v.pop_back();
        return i;
    }
};

struct Rng {
    std::uint64_t s;
    std::uint64_t next() {
        std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    std::uint64_t below(std::uint64_t n) { return next() % n; }
};

// Runs `ops` random operations on both queues; pushes land at `now` plus a delay drawn from a mix of scales
// (ties, the same 256 ns, microseconds, seconds, far future), and `now` follows the popped items the way the
// simulator's clock does: only some pops advance it (the others are cancelled timers).
// Returns the number of pops whose item differed.
std::size_t compare(std::uint64_t seed, std::size_t ops, std::uint64_t start) {
    Rng rng{seed};
    weft::sim::detail::EventQueue<Item> wheel;
    Heap heap;
    std::uint64_t now = start, seq = 0;
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < ops; ++k) {
        if (heap.v.empty() || rng.below(100) < 55) {
            // Looking at the front before a push, as the simulator does between events: the queue keeps what
            // it found for the next pop only while nothing earlier arrives.
            if (!heap.v.empty() && rng.below(2) == 0) BOOST_REQUIRE_EQUAL(wheel.top().time, heap.v.front().time);
            static constexpr std::uint64_t scales[] = {1, 4, 256, 5000, 70000, 1u << 24, 1ull << 40, 1ull << 62};
            const std::uint64_t scale = scales[rng.below(std::size(scales))];
            Item i{now + rng.below(scale), seq++};
            heap.push(i);
            wheel.push(i);
        } else {
            BOOST_REQUIRE_EQUAL(wheel.top().time, heap.v.front().time);
            const Item want = heap.pop();
            const Item got = wheel.pop();
            if (got.time != want.time || got.seq != want.seq) ++wrong;
            if (rng.below(4) != 0) now = std::max(now, got.time);
        }
        BOOST_REQUIRE_EQUAL(wheel.size(), heap.v.size());
    }
    while (!heap.v.empty()) {
        const Item want = heap.pop();
        const Item got = wheel.pop();
        if (got.time != want.time || got.seq != want.seq) ++wrong;
    }
    BOOST_TEST(wheel.empty());
    return wrong;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(event_queue)

BOOST_AUTO_TEST_CASE(pops_in_time_then_sequence_order_like_a_heap) {
    for (std::uint64_t seed = 1; seed <= 20; ++seed) BOOST_TEST(compare(seed, 20000, 0) == 0u);
}

BOOST_AUTO_TEST_CASE(keeps_the_order_across_the_top_of_the_time_range) {
    for (std::uint64_t seed = 1; seed <= 5; ++seed) BOOST_TEST(compare(seed, 20000, (1ull << 63) + seed) == 0u);
}

// Events pushed before the cursor (the clock lags behind a cascade): after a far timer is looked at, work
// scheduled nearer comes out first, ties in push order.
BOOST_AUTO_TEST_CASE(an_event_earlier_than_a_cascaded_one_comes_first) {
    weft::sim::detail::EventQueue<Item> q;
    q.push({5'000'000, 0});
    BOOST_TEST(q.top().time == 5'000'000u);  // cascades the wheel towards 5 ms
    q.push({1'000, 1});
    q.push({1'000, 2});
    q.push({5'000'000, 3});
    q.push({999, 4});
    const std::uint64_t want[][2] = {{999, 4}, {1'000, 1}, {1'000, 2}, {5'000'000, 0}, {5'000'000, 3}};
    for (const auto& w : want) {
        const Item i = q.pop();
        BOOST_TEST(i.time == w[0]);
        BOOST_TEST(i.seq == w[1]);
    }
    BOOST_TEST(q.empty());
}

// The simulator's steady state at scale: every message was answered, so a look at the front cascaded the
// wheel to one of many far ACK timers, and new work then arrives far before the cursor while the timers keep
// being re-armed ahead of it; everything still comes out as from a heap.
BOOST_AUTO_TEST_CASE(work_after_a_cascade_to_many_far_timers_keeps_the_order) {
    constexpr std::uint64_t timeout = 67'108'864;
    Rng rng{7};
    weft::sim::detail::EventQueue<Item> wheel;
    Heap heap;
    std::uint64_t now = 0, seq = 0;
    auto push = [&](std::uint64_t t) {
        heap.push({t, seq});
        wheel.push({t, seq++});
    };
    for (int timer = 0; timer < 2000; ++timer) push(timeout + rng.below(100'000));
    BOOST_REQUIRE_EQUAL(wheel.top().time, heap.v.front().time);  // cascades towards the first timer
    std::size_t wrong = 0;
    for (int k = 0; k < 50000; ++k) {
        if (rng.below(100) < 50) {
            // A message and its acknowledgement a few microseconds on; now and then a timer re-armed.
            push(rng.below(20) == 0 ? now + timeout + rng.below(100'000) : now + 1000 + rng.below(5000));
        } else {
            BOOST_REQUIRE_EQUAL(wheel.top().time, heap.v.front().time);
            const Item want = heap.pop();
            const Item got = wheel.pop();
            if (got.time != want.time || got.seq != want.seq) ++wrong;
            now = std::max(now, got.time);
        }
    }
    while (!heap.v.empty()) {
        const Item want = heap.pop();
        const Item got = wheel.pop();
        if (got.time != want.time || got.seq != want.seq) ++wrong;
    }
    BOOST_TEST(wrong == 0u);
    BOOST_TEST(wheel.empty());
}

BOOST_AUTO_TEST_SUITE_END()
