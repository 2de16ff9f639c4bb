// The simulator forgets a fabric when the last domain on it closes: a process that opens domains on ever new
// fabric names (a test per seed, a fabric per test) keeps a flat footprint. The registry of fabrics by name
// used to keep an entry per name for good, and with it the fabric's whole allocation (its control block
// and state live in one block, which a weak reference keeps): 100,000 names took 1.76 GB of RSS (about
// 17 KB each) and 2.5 s; now 0 bytes and 0.4 s.
#include <weft/sim/fabric.hpp>
#include <weft/weft.hpp>

#include "support.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>

namespace {

using namespace weft;
using Clock = std::chrono::steady_clock;

// Resident memory 100,000 names may leave behind, at most: 20 bytes per name. The registry's entry alone
// (a tree node, the name, a weak reference) is over 80 bytes, and it used to keep the fabric's state too.
constexpr long bound_per_name = 20;

void open_and_close(const std::string& prefix, int count) {
    for (int i = 0; i < count; ++i) {
        Domain d = open("sim:fabric=" + prefix + std::to_string(i));
        BOOST_REQUIRE(d);
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fabrics)

BOOST_AUTO_TEST_CASE(fabrics_of_100000_names_leave_no_memory_behind) {
    const int names = test::sanitized ? 10'000 : 100'000;
    open_and_close("warm-", names / 10);
    const test::Usage before = test::usage();
    const auto t0 = Clock::now();
    open_and_close("name-", names);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const test::Usage after = test::usage();
    const long grown = after.rss_bytes - before.rss_bytes;
    const long heap_grown = after.heap_bytes - before.heap_bytes;
    BOOST_TEST_MESSAGE(names << " fabric names opened and closed in " << seconds << " s; RSS "
                             << before.rss_bytes / 1024 << " -> " << after.rss_bytes / 1024 << " KiB (" << grown
                             << " B); heap in use " << before.heap_bytes << " -> " << after.heap_bytes << " B ("
                             << heap_grown << " B)");
    BOOST_TEST(after.fds == before.fds);
    if (!test::sanitized) {
        BOOST_TEST(grown < bound_per_name * names);
        BOOST_TEST(heap_grown < bound_per_name * names);
    }
}

BOOST_AUTO_TEST_CASE(a_name_opened_again_after_its_last_domain_closed_gets_a_fresh_fabric) {
    std::uint64_t events = 0;
    {
        Domain a = open("sim:fabric=again,seed=3");
        Domain b = open("sim:fabric=again,seed=3");
        auto cq_a = a.create_cq();
        auto cq_b = b.create_cq();
        auto qa = a.create_qp({.send_cq = cq_a, .recv_cq = cq_a});
        auto qb = b.create_qp({.send_cq = cq_b, .recv_cq = cq_b});
        auto address = qa.address();
        qa.connect(qb.address());
        qb.connect(address);
        std::vector<std::byte> buf(64);
        auto mr = a.register_memory(buf, all_access);
        BOOST_REQUIRE(qa.post_send({write(1, mr.slice(0, 8), mr.remote().slice(8, 8))}));
        BOOST_REQUIRE(sim::Fabric::of(a).run_until_idle() > 0);
        events = sim::Fabric::of(a).events_processed();
        // The second domain keeps the fabric while the first goes: a third joins the same one.
        a = Domain();
        qa = QueuePair();
        mr = MemoryRegion();
        cq_a = CompletionQueue();
        Domain c = open("sim:fabric=again,seed=3");
        BOOST_TEST(sim::Fabric::of(c).events_processed() == events);
        // Parameters still have to match the fabric while it lives.
        BOOST_CHECK_THROW(open("sim:fabric=again,seed=4"), Error);
    }
    BOOST_REQUIRE(events > 0);
    // Every domain closed: the name is free, with other parameters too, and the fabric starts from nothing.
    Domain d = open("sim:fabric=again,seed=4");
    BOOST_TEST(sim::Fabric::of(d).events_processed() == 0u);
    BOOST_TEST(sim::Fabric::of(d).seed() == 4u);
}

BOOST_AUTO_TEST_SUITE_END()
