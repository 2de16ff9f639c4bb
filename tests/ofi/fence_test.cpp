// Fence emulation: on a provider without FI_FENCE a fenced request is handed over only once every earlier
// read and atomic of its QP has completed, which the backend learns when the requester's CQ reads them.
// So, for as long as the requester does not poll, a fenced write after a read must not reach the target,
// however much the target side progresses; an unfenced one does. (Providers with FI_FENCE, sockets, order
// inside the provider and let the write go once the read is done there: these cases do not apply.)
#include <weft/weft.hpp>

#include "support.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string config() { return weft::test::ofi_config(); }

struct Side : weft::test::OfiSide {
    void fill(std::size_t off, std::size_t len, std::byte v) { std::memset(buf.data() + off, static_cast<int>(v), len); }
    bool holds(std::size_t off, std::size_t len, std::byte v) const {
        for (std::size_t i = 0; i < len; ++i) {
            if (buf[off + i] != v) return false;
        }
        return true;
    }
};

struct Pair {
    Side a, b;
    Pair() {
        auto addr_a = a.qp.address();
        a.qp.connect(b.qp.address());
        b.qp.connect(addr_a);
    }
};

weft::Completion next(weft::CompletionQueue& cq) {
    weft::Completion wc[1];
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (cq.poll(wc).empty()) {
        if (std::chrono::steady_clock::now() > deadline) BOOST_FAIL("no completion within 10 s");
    }
    return wc[0];
}

// Polls only the target's CQ (which drives the provider for every QP of the process without reading the
// requester's completions) until `done` or `patience` runs out.
template <class F>
bool target_side_until(Pair& p, F done, std::chrono::milliseconds patience) {
    weft::Completion wc[4];
    auto deadline = std::chrono::steady_clock::now() + patience;
    while (std::chrono::steady_clock::now() < deadline) {
        if (!p.b.cq.poll(wc).empty()) BOOST_FAIL("the target completed " << wc[0] << " while the requester held back");
        if (done()) return true;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return done();
}

// Skips a case, with the reason, on a provider without RMA reads.
boost::test_tools::assertion_result has_read(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result r(weft::open(config()).capabilities().has(weft::Feature::read));
    if (!r) r.message() << config() << " lacks read";
    return r;
}
boost::unit_test::precondition needs_read() { return boost::unit_test::precondition(&has_read); }

constexpr std::size_t len = 512;
constexpr std::byte old_value{0x11};
constexpr std::byte new_value{0x22};

}  // namespace

BOOST_AUTO_TEST_SUITE(fence_emulation)

BOOST_AUTO_TEST_CASE(fence_is_claimed) {
    auto caps = weft::open(config()).capabilities();
    BOOST_TEST(caps.has(weft::Feature::fence), config() << " does not claim fence");
}

BOOST_AUTO_TEST_CASE(unfenced_write_after_a_read_lands_without_the_requester_polling, *needs_read()) {
    // The control: without a fence the write goes to the provider at post and reaches the target.
    Pair p;
    p.b.fill(0, len, old_value);
    p.a.fill(8192, len, new_value);
    BOOST_REQUIRE(p.a.qp.post_send({weft::read(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len)),
                                    weft::write(2, p.a.mr.slice(8192, len), p.b.mr.remote().slice(0, len))}));
    BOOST_TEST(target_side_until(p, [&] { return p.b.holds(0, len, new_value); }, std::chrono::seconds(5)),
               "the unfenced write did not land while only the target polled");
    BOOST_TEST(next(p.a.cq).id == 1u);
    BOOST_TEST(next(p.a.cq).id == 2u);
}

BOOST_AUTO_TEST_CASE(fenced_write_waits_until_the_requester_has_read_the_earlier_read, *needs_read()) {
    Pair p;
    for (int round = 0; round < 4; ++round) {
        p.b.fill(0, len, old_value);
        p.a.fill(0, len, std::byte{0});
        p.a.fill(8192, len, new_value);
        BOOST_REQUIRE(p.a.qp.post_send({weft::read(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len)),
                                        weft::write(2, p.a.mr.slice(8192, len), p.b.mr.remote().slice(0, len)).fence()}));
        BOOST_TEST(!target_side_until(p, [&] { return !p.b.holds(0, len, old_value); }, std::chrono::milliseconds(200)),
                   "the fenced write reached the target before the read's completion was read");
        auto c1 = next(p.a.cq);
        auto c2 = next(p.a.cq);
        BOOST_TEST(c1.id == 1u);
        BOOST_TEST(c1.status == weft::WcStatus::success);
        BOOST_TEST(c2.id == 2u);
        BOOST_TEST(c2.status == weft::WcStatus::success);
        BOOST_TEST(p.a.holds(0, len, old_value));
        BOOST_TEST(p.b.holds(0, len, new_value));
    }
}

BOOST_AUTO_TEST_CASE(requests_after_a_held_fence_keep_their_order, *needs_read()) {
    // A send posted behind a held fenced write waits with it; the receiver sees it after the write's data.
    Pair p;
    p.b.fill(0, len, old_value);
    p.a.fill(8192, len, new_value);
    BOOST_REQUIRE(p.b.qp.post_recv({weft::recv(10, p.b.mr.slice(4096, 64))}));
    BOOST_REQUIRE(p.a.qp.post_send({weft::read(1, p.a.mr.slice(0, len), p.b.mr.remote().slice(0, len)),
                                    weft::write(2, p.a.mr.slice(8192, len), p.b.mr.remote().slice(0, len)).fence(),
                                    weft::send(3, p.a.mr.slice(8192, 64))}));
    BOOST_TEST(!target_side_until(p, [&] { return !p.b.holds(0, len, old_value); }, std::chrono::milliseconds(200)));
    for (std::uint64_t id = 1; id <= 3; ++id) {
        auto c = next(p.a.cq);
        BOOST_TEST(c.id == id);
        BOOST_TEST(c.status == weft::WcStatus::success);
    }
    auto r = next(p.b.cq);
    BOOST_TEST(r.id == 10u);
    BOOST_TEST(r.status == weft::WcStatus::success);
    BOOST_TEST(p.b.holds(0, len, new_value));
}

BOOST_AUTO_TEST_SUITE_END()
