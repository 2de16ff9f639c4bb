// The threading mode docs/backends/ofi.md ("Threads") allows: one thread posts on a QP while another waits on
// its CQ through fd() and polls it. The poller's empty polls drive QPs that asked for attention (a fenced
// request held back) and kick the in-process peer; with fd() in use the service thread progresses the CQ
// too. Each case checks what the application sees (every signaled request completes once, successfully, in
// posting order; the data lands), and under ThreadSanitizer (tools/test) that no memory the poster touches
// is touched by the other threads without synchronisation.
#include <weft/weft.hpp>

#include "support.hpp"

#include <boost/test/unit_test.hpp>

#include <poll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>

namespace {

using namespace weft;
using Clock = std::chrono::steady_clock;

struct Pair {
    test::OfiSide a, b;
    Pair() {
        auto addr_a = a.qp.address();
        a.qp.connect(b.qp.address());
        b.qp.connect(addr_a);
    }
};

// Skips a case, with the reason, on a provider where writes and reads are refused (shm without
// unchecked_rma=on) or CQs have no descriptor.
boost::test_tools::assertion_result has_rma(boost::unit_test::test_unit_id) {
    const std::string config = test::ofi_config();
    auto caps = open(config).capabilities();
    boost::test_tools::assertion_result r(caps.has(Feature::read) && caps.has(Feature::cq_fd));
    if (!r) r.message() << config << " refuses remote writes and reads, or has no CQ descriptor";
    return r;
}
boost::unit_test::precondition needs_rma() { return boost::unit_test::precondition(&has_rma); }

constexpr std::size_t word = sizeof(std::uint64_t);
// Each case cycles through `words` words of a and b, more than the QP's default 128-deep send queue holds:
// a word is written again only after the request that last used it has finished.
constexpr std::size_t words = 512;
constexpr std::size_t read_base = words * word;  // a's words the reads fill
// A failure bound only: the run takes well under a second without sanitizers.
constexpr auto patience = std::chrono::seconds(120);

// What the poller thread saw: signaled completions in posting order, all successful.
struct Seen {
    std::atomic<std::uint64_t> count{0};
    std::atomic<bool> failed{false};
    std::string what;  // the first failure (written by the poller before `failed`)
};

// The poller: sleeps on the CQ's descriptor, polls until empty (which re-arms it), and checks every
// completion against `expected_id(n)`, the id of the n-th signaled request, until `total` came.
void poll_through_fd(CompletionQueue& cq, std::uint64_t total, const std::function<std::uint64_t(std::uint64_t)>& expected_id,
                     Seen& seen) {
    const int fd = cq.fd();
    const auto deadline = Clock::now() + patience;
    Completion wc[16];
    std::uint64_t n = 0;
    while (n < total) {
        if (Clock::now() > deadline) {
            seen.what = "only " + std::to_string(n) + " of " + std::to_string(total) + " completions came";
            seen.failed.store(true, std::memory_order_release);
            return;
        }
        auto got = cq.poll(wc);
        if (got.empty()) {
            pollfd pfd{fd, POLLIN, 0};
            ::poll(&pfd, 1, 10);
            continue;
        }
        for (const Completion& c : got) {
            if (!c.ok() || c.id != expected_id(n)) {
                seen.what = "completion " + std::to_string(n) + ": id " + std::to_string(c.id) + " (expected " +
                            std::to_string(expected_id(n)) + "), status " + std::to_string(static_cast<int>(c.status));
                seen.failed.store(true, std::memory_order_release);
                return;
            }
            ++n;
            seen.count.store(n, std::memory_order_release);
        }
    }
}

// Posts `batch` from the poster thread, retrying while the queue is full (the poller frees slots). Returns
// what went wrong, or nothing; the caller fails the test once the poller has been joined.
std::string post_until_taken(QueuePair& qp, std::span<const SendRequest> batch, const Seen& seen) {
    const auto deadline = Clock::now() + patience;
    for (;;) {
        PostStatus st = qp.post_send(batch);
        if (st) return {};
        if (st.code() != PostStatus::Code::queue_full) return std::string("post refused: ") + st.reason();
        if (seen.failed.load(std::memory_order_acquire)) return "the poller failed";
        if (Clock::now() > deadline) return "the queue stayed full";
        std::this_thread::yield();
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(threads)

// Batches of a read and seven writes, the last signaled, each write leaving its id in one word of b: the
// poster refills slots as fast as the poller frees them, so the two threads meet on every slot, and a read
// often completes (the poller reads its completion) while the poster is still handing the rest of a batch
// to the provider.
BOOST_AUTO_TEST_CASE(a_poster_and_a_poller_waiting_on_fd_share_a_qp, *needs_rma()) {
    Pair p;
    constexpr std::uint64_t batch = 8;
    constexpr std::uint64_t batches = 1500;
    auto* src = reinterpret_cast<std::uint64_t*>(p.a.buf.data());
    Seen seen;
    std::thread poller(poll_through_fd, std::ref(p.a.cq), batches, [](std::uint64_t n) { return (n + 1) * batch; },
                       std::ref(seen));
    std::string poster_error;
    for (std::uint64_t b = 0; b < batches && poster_error.empty(); ++b) {
        std::array<SendRequest, batch> reqs;
        for (std::uint64_t i = 0; i < batch; ++i) {
            const std::uint64_t id = b * batch + i + 1;
            // The request that last used this word has finished: the queue (128 deep) held it `words`
            // requests ago.
            const std::size_t at = id % words;
            if (i == 0) {
                reqs[i] = read(id, p.a.mr.slice(read_base + at * word, word), p.b.mr.remote().slice(at * word, word))
                              .unsignaled();
                continue;
            }
            src[at] = id;
            auto w = write(id, p.a.mr.slice(at * word, word), p.b.mr.remote().slice(at * word, word));
            reqs[i] = i + 1 == batch ? w : w.unsignaled();
        }
        poster_error = post_until_taken(p.a.qp, reqs, seen);
    }
    poller.join();
    BOOST_REQUIRE_MESSAGE(!seen.failed.load(std::memory_order_acquire), seen.what);
    BOOST_REQUIRE_MESSAGE(poster_error.empty(), poster_error);
    BOOST_TEST(seen.count.load() == batches);
    // Every write has landed (the last request is signaled): the word of each holds its last writer's id.
    const auto* dst = reinterpret_cast<const std::uint64_t*>(p.b.buf.data());
    for (std::uint64_t id = batches * batch - words + 1; id <= batches * batch; ++id) {
        if (id % batch != 1) BOOST_TEST(dst[id % words] == id);
    }
}

// Reads each followed by a fenced write: on a provider without FI_FENCE the write waits in the ring until
// the poller has read the read's completion, and then the poller's thread hands it over (the QP asks for
// attention) while the poster keeps posting on the same ring.
BOOST_AUTO_TEST_CASE(fenced_writes_released_by_the_poller_while_the_poster_posts, *needs_rma()) {
    Pair p;
    constexpr std::uint64_t pairs = 1500;
    auto* words_a = reinterpret_cast<std::uint64_t*>(p.a.buf.data());
    const auto* words_b = reinterpret_cast<const std::uint64_t*>(p.b.buf.data());
    Seen seen;
    // Ids: the read of pair k is 2k + 1, its fenced write 2k + 2; both signaled.
    std::thread poller(poll_through_fd, std::ref(p.a.cq), pairs * 2, [](std::uint64_t n) { return n + 1; },
                       std::ref(seen));
    std::string poster_error;
    for (std::uint64_t k = 0; k < pairs && poster_error.empty(); ++k) {
        const std::size_t at = k % words;
        words_a[at] = k + 1;
        const std::array<SendRequest, 2> pair{
            read(2 * k + 1, p.a.mr.slice(read_base + at * word, word), p.b.mr.remote().slice(at * word, word)),
            write(2 * k + 2, p.a.mr.slice(at * word, word), p.b.mr.remote().slice(at * word, word)).fence()};
        poster_error = post_until_taken(p.a.qp, pair, seen);
    }
    poller.join();
    BOOST_REQUIRE_MESSAGE(!seen.failed.load(std::memory_order_acquire), seen.what);
    BOOST_REQUIRE_MESSAGE(poster_error.empty(), poster_error);
    BOOST_TEST(seen.count.load() == pairs * 2);
    for (std::uint64_t k = pairs - words; k < pairs; ++k) {
        BOOST_TEST(words_b[k % words] == k + 1);
    }
}

// A program that sleeps on fd() with no timeout of its own: each side's thread waits on its CQ's descriptor
// alone, and polls only when it fires. The send is posted right after connect(), before the connection is
// established, so it waits in the QP for the handshake to finish; whatever the QP still needs (driving the
// handshake, handing the send over) must make a descriptor fire, since no thread polls otherwise. The
// descriptor wait's bound is a failure bound only.
BOOST_AUTO_TEST_CASE(a_send_posted_during_the_handshake_completes_for_threads_that_only_wait_on_fd) {
    if (!open(test::ofi_config()).capabilities().has(Feature::cq_fd)) {
        BOOST_TEST_MESSAGE("skipped: " << test::ofi_config() << " has no CQ descriptor");
        return;
    }
    test::OfiSide a, b;
    BOOST_REQUIRE(b.qp.post_recv({recv(1, b.mr.slice(0, 64))}));
    auto addr_a = a.qp.address();
    a.qp.connect(b.qp.address());
    std::memcpy(a.buf.data(), "hello through the handshake", 28);
    BOOST_REQUIRE(a.qp.post_send({send(7, a.mr.slice(0, 28))}));
    b.qp.connect(addr_a);
    struct Outcome {
        Completion c{};
        std::string failure;
    };
    auto wait_for_one = [](CompletionQueue& cq, Outcome& out) {
        const int fd = cq.fd();
        Completion wc[1];
        for (;;) {
            if (auto got = cq.poll(wc); !got.empty()) {
                out.c = got[0];
                return;
            }
            pollfd pfd{fd, POLLIN, 0};
            if (::poll(&pfd, 1, static_cast<int>(std::chrono::milliseconds(std::chrono::seconds(30)).count())) == 0) {
                out.failure = "the descriptor never fired";
                return;
            }
        }
    };
    Outcome sent, received;
    std::thread ta(wait_for_one, std::ref(a.cq), std::ref(sent));
    std::thread tb(wait_for_one, std::ref(b.cq), std::ref(received));
    ta.join();
    tb.join();
    BOOST_REQUIRE_MESSAGE(sent.failure.empty(), "sender: " << sent.failure);
    BOOST_REQUIRE_MESSAGE(received.failure.empty(), "receiver: " << received.failure);
    BOOST_TEST(sent.c.id == 7u);
    BOOST_TEST(sent.c.ok());
    BOOST_TEST(received.c.id == 1u);
    BOOST_TEST(received.c.ok());
    BOOST_TEST(std::memcmp(b.buf.data(), "hello through the handshake", 28) == 0);
}

BOOST_AUTO_TEST_SUITE_END()
