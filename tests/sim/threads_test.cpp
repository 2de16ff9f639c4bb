// The thread contract (docs/semantics.md, "Threads"): one thread at a time posts to each queue of a QP and
// one at a time polls or waits on a CQ, unless the object was created thread_safe. The simulator reports a
// program that breaks it as a misuse; the thread-safe mode serializes the calls instead.
#include "node.hpp"

#include <atomic>
#include <chrono>
#include <thread>

using namespace weft;
using weft::sim::test::link;
using weft::sim::test::Node;

namespace {

bool misuse_mentions(const Domain& dom, const std::string& what) {
    for (const auto& m : sim::Fabric::of(dom).misuse()) {
        if (m.find(what) != std::string::npos) return true;
    }
    return false;
}

// Runs `call` from two threads until the simulator reports `what` or `limit` passes; true if reported.
template <class Call>
bool two_threads_until_reported(const Domain& dom, const std::string& what, Call call,
                                std::chrono::seconds limit = std::chrono::seconds(20)) {
    std::atomic<bool> stop{false};
    auto loop = [&] {
        while (!stop.load(std::memory_order_relaxed)) call();
    };
    std::thread t1(loop), t2(loop);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    bool seen = false;
    while (!seen && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        seen = misuse_mentions(dom, what);
    }
    stop = true;
    t1.join();
    t2.join();
    return seen;
}

// Runs `call` `n` times from each of two threads at once.
template <class Call>
void two_threads(int n, Call call) {
    std::atomic<int> ready{0};
    auto body = [&] {
        ready.fetch_add(1);
        while (ready.load() < 2) {
        }
        for (int i = 0; i < n; ++i) call();
    };
    std::thread t1(body), t2(body);
    t1.join();
    t2.join();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(threads)

BOOST_AUTO_TEST_CASE(two_threads_posting_to_one_send_queue_are_reported) {
    Node a("sim:fabric=thr_send"), b("sim:fabric=thr_send");
    link(a, b);
    // A request the QP refuses (inline payload over max_inline): the call is made, nothing is queued.
    const auto refused = write(1, a.mr.slice(0, 64), b.mr.remote().slice(0, 64)).inline_data();
    BOOST_TEST(two_threads_until_reported(a.dom, "two threads posted to the send queue",
                                          [&] { (void)a.qp.post_send({refused}); }));
    sim::Fabric::of(a.dom).clear_misuse();
}

BOOST_AUTO_TEST_CASE(two_threads_polling_one_cq_are_reported) {
    Node a("sim:fabric=thr_poll");
    Completion wc[4];
    BOOST_TEST(two_threads_until_reported(a.dom, "two threads polled or waited on a completion queue",
                                          [&] { (void)a.cq.poll(wc); }));
    sim::Fabric::of(a.dom).clear_misuse();
}

BOOST_AUTO_TEST_CASE(thread_safe_objects_take_calls_from_many_threads) {
    auto dom = open("sim:fabric=thr_safe");
    auto cq = dom.create_cq({.depth = 4096, .thread_safe = true});
    auto qp = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 4096, .max_recv = 4096, .thread_safe = true});
    qp.connect(qp.address());
    std::vector<std::byte> buf(4096);
    auto mr = dom.register_memory(buf, all_access);
    // Both threads post real writes and poll their completions on the shared CQ.
    std::atomic<int> completed{0};
    constexpr int per_thread = 20000;
    two_threads(per_thread, [&] {
        Completion wc[8];
        while (!qp.post_send({write(1, mr.slice(0, 8), mr.remote().slice(64, 8))})) {
            completed.fetch_add(static_cast<int>(cq.poll(wc).size()));
        }
        completed.fetch_add(static_cast<int>(cq.poll(wc).size()));
    });
    Completion wc[64];
    for (int spins = 0; completed.load() < 2 * per_thread && spins < 1'000'000; ++spins) {
        completed.fetch_add(static_cast<int>(cq.poll(wc).size()));
    }
    BOOST_TEST(completed.load() == 2 * per_thread);
    BOOST_TEST(sim::Fabric::of(dom).misuse().empty());
}

BOOST_AUTO_TEST_CASE(a_sender_and_a_receiver_thread_are_within_the_contract) {
    auto dom = open("sim:fabric=thr_two_queues");
    auto cq = dom.create_cq({.depth = 4096});
    auto rcq = dom.create_cq({.depth = 4096});
    auto qp = dom.create_qp({.send_cq = cq, .recv_cq = rcq, .max_send = 64, .max_recv = 64});
    qp.connect(qp.address());
    std::vector<std::byte> buf(4096);
    auto mr = dom.register_memory(buf, all_access);
    // One thread posts to the send queue and polls cq; the other posts to the receive queue and polls rcq.
    std::thread receiver([&] {
        Completion wc[8];
        for (int posted = 0, got = 0; got < 2000;) {
            if (posted - got < 32 && qp.post_recv({recv(1, mr.slice(1024, 64))})) ++posted;
            got += static_cast<int>(rcq.poll(wc).size());
        }
    });
    Completion wc[8];
    for (int posted = 0, got = 0; got < 2000;) {
        if (posted < 2000 && posted - got < 32 && qp.post_send({send(1, mr.slice(0, 8))})) ++posted;
        got += static_cast<int>(cq.poll(wc).size());
    }
    receiver.join();
    BOOST_TEST(sim::Fabric::of(dom).misuse().empty());
}

BOOST_AUTO_TEST_SUITE_END()
