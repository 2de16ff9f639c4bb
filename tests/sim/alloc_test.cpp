// Simulator cost: posting and polling allocate nothing in steady state, with every legal reordering and
// multi-packet messages on. Counts calls of the global operator new (replaced in this test binary, which
// also catches allocations inside libweft) while a counting flag is set.
#include "node.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> counting{false};
std::atomic<std::size_t> allocations{0};
}  // namespace

// The replacements pair malloc with free on purpose; GCC cannot see that both halves are replaced together.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
    if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

using namespace weft;
using weft::sim::Fabric;
using weft::sim::test::link;
using weft::sim::test::Node;

BOOST_AUTO_TEST_SUITE(cost)

BOOST_AUTO_TEST_CASE(posting_and_polling_allocate_nothing_in_steady_state) {
    const std::string cfg = "sim:fabric=alloc,mtu=1024,reorder=all";
    Node a(cfg), b(cfg);
    link(a, b);
    SendRequest batch[8];
    RecvRequest rbatch[2];
    Completion wc[32];
    auto round = [&](std::uint64_t r) {
        rbatch[0] = recv(r, b.mr.slice(600000, 4096));
        rbatch[1] = recv(r + 1, b.mr.slice(610000, 64));
        batch[0] = write(r, a.mr.slice(0, 8), b.mr.remote().slice(0, 8)).unsignaled();
        batch[1] = write(r, a.mr.slice(0, 65536), b.mr.remote().slice(65536, 65536)).unsignaled();
        batch[2] = send(r, a.mr.slice(0, 4096)).unsignaled();
        batch[3] = read(r, a.mr.slice(200000, 4096), b.mr.remote().slice(0, 4096)).unsignaled();
        batch[4] = fetch_add(r, a.mr.slice(300000, 8), b.mr.remote().slice(300000, 8), 1).unsignaled();
        batch[5] = write(r, a.mr.slice(0, 8), b.mr.remote().slice(8, 8)).with_imm(7).unsignaled();
        batch[6] = write(r, a.mr.slice(0, 3000), b.mr.remote().slice(0, 3000)).fence().unsignaled();
        batch[7] = write(r, a.mr.slice(0, 8), b.mr.remote().slice(16, 8));
        bool ok = static_cast<bool>(b.qp.post_recv(rbatch)) && static_cast<bool>(a.qp.post_send(batch));
        int got = 0;
        while (got < 3) {
            got += static_cast<int>(a.cq.poll(wc).size());
            got += static_cast<int>(b.cq.poll(wc).size());
        }
        return ok;
    };
    bool ok = true;
    for (std::uint64_t r = 0; r < 200; ++r) ok &= round(r);  // warm up: the event heap reaches its size
    allocations = 0;
    counting = true;
    for (std::uint64_t r = 200; r < 2200; ++r) ok &= round(r);
    counting = false;
    BOOST_TEST(ok);
    BOOST_TEST(allocations.load() == 0u);
    BOOST_TEST(Fabric::of(a.dom).misuse().empty());
}

BOOST_AUTO_TEST_SUITE_END()
