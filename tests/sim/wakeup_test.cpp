// The simulator from several threads (docs/simulator.md, "Threads"): a wait() on an idle fabric returns when
// another thread posts, and one thread may post on a QP while another polls or waits on its CQ. What the
// application sees is checked here; ThreadSanitizer (tools/test) checks that the calls share nothing
// outside the fabric's lock.
#include "node.hpp"

#include <poll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

using namespace weft;
using weft::sim::test::link;
using weft::sim::test::next;
using weft::sim::test::Node;

BOOST_AUTO_TEST_SUITE(sim_threads)

BOOST_AUTO_TEST_CASE(a_wait_on_an_idle_fabric_returns_when_another_thread_posts) {
    for (int round = 0; round < 20; ++round) {
        const std::string cfg = "sim:fabric=threads_wait,seed=" + std::to_string(round + 1);
        Node a(cfg), b(cfg);
        link(a, b);
        BOOST_REQUIRE(b.qp.post_recv({recv(1, b.mr.slice(0, 64))}));
        a.set_word(0, 0x5eed0000u + static_cast<unsigned>(round));
        std::atomic<bool> woke{false};
        std::thread waiter([&] {
            // Nothing is in flight: the wait blocks in real time until the main thread's send. The bound only
            // ends a failing run.
            woke.store(b.cq.wait(std::chrono::seconds(60)), std::memory_order_release);
        });
        // Sometimes the waiter is asleep before the post, sometimes not yet in wait(): both must work.
        std::this_thread::sleep_for(std::chrono::microseconds(round % 4 * 500));
        // Checked once the waiter is joined (a refused post leaves it to its bound).
        const bool posted = static_cast<bool>(a.qp.post_send({send(2, a.mr.slice(0, 64))}));
        waiter.join();
        BOOST_REQUIRE(posted);
        BOOST_TEST_REQUIRE(woke.load(std::memory_order_acquire), "round " << round << ": the wait timed out");
        Completion c = next(b.cq);
        BOOST_TEST(c.ok(), c);
        BOOST_TEST(c.id == 1u);
        BOOST_TEST(b.word(0) == 0x5eed0000u + static_cast<unsigned>(round));
        BOOST_TEST(next(a.cq).id == 2u);
    }
}

// Writes, one in four signaled, posted by the main thread as fast as a second thread, sleeping on fd() and
// polling, frees their slots.
BOOST_AUTO_TEST_CASE(a_poster_and_a_poller_waiting_on_fd_share_a_qp) {
    QpOptions o;
    o.max_send = 64;
    Node a("sim:fabric=threads_fd", o), b("sim:fabric=threads_fd", o);
    link(a, b);
    constexpr std::uint64_t requests = 4000;
    constexpr std::uint64_t signal_every = 4;
    constexpr std::size_t words = 256;  // more than the queue holds: a source word is reused once it is free
    std::atomic<std::uint64_t> seen{0};
    std::atomic<bool> failed{false};
    std::thread poller([&] {
        const int fd = a.cq.fd();
        Completion wc[16];
        std::uint64_t n = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
        while (n < requests / signal_every && std::chrono::steady_clock::now() < deadline) {
            auto got = a.cq.poll(wc);
            if (got.empty()) {
                pollfd pfd{fd, POLLIN, 0};
                ::poll(&pfd, 1, 10);
                continue;
            }
            for (const Completion& c : got) {
                if (!c.ok() || c.id != (n + 1) * signal_every) {
                    failed.store(true, std::memory_order_release);
                    return;
                }
                seen.store(++n, std::memory_order_release);
            }
        }
        if (n < requests / signal_every) failed.store(true, std::memory_order_release);  // the deadline passed
    });
    const char* refused = nullptr;  // checked once the poller is joined
    for (std::uint64_t id = 1; id <= requests && refused == nullptr && !failed.load(std::memory_order_acquire); ++id) {
        const std::size_t at = id % words * 8;
        a.set_word(at, id);
        auto w = write(id, a.mr.slice(at, 8), b.mr.remote().slice(at, 8));
        const std::array<SendRequest, 1> one{id % signal_every == 0 ? w : w.unsignaled()};
        for (;;) {
            PostStatus st = a.qp.post_send(one);
            if (st) break;
            if (st.code() != PostStatus::Code::queue_full) refused = st.reason();
            if (refused != nullptr || failed.load(std::memory_order_acquire)) break;
            std::this_thread::yield();
        }
    }
    poller.join();
    BOOST_REQUIRE_MESSAGE(refused == nullptr, "post refused: " << refused);
    BOOST_REQUIRE_MESSAGE(!failed.load(std::memory_order_acquire),
                          "after " << seen.load() << " completions: one out of order, failed, or none for 120 s");
    BOOST_TEST(seen.load() == requests / signal_every);
    for (std::uint64_t id = requests - words + 1; id <= requests; ++id) BOOST_TEST(b.word(id % words * 8) == id);
}

BOOST_AUTO_TEST_SUITE_END()
