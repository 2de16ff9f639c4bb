// Simulator misuse detection: deregistering memory that posted work uses, CQ overrun, destroying a QP with
// sends in flight; reported through Fabric::misuse() and stderr, fatal with strict=1.
#include "node.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>

using namespace weft;
using weft::sim::Fabric;
using weft::sim::test::link;
using weft::sim::test::next;
using weft::sim::test::Node;

namespace {

bool mentions(const std::vector<std::string>& log, const std::string& what) {
    for (const auto& l : log) {
        if (l.find(what) != std::string::npos) return true;
    }
    return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(misuse)

BOOST_AUTO_TEST_CASE(a_clean_program_reports_nothing) {
    Node a("sim:fabric=clean"), b("sim:fabric=clean");
    link(a, b);
    BOOST_REQUIRE(b.qp.post_recv({recv(1, b.mr.slice(0, 64))}));
    BOOST_REQUIRE(a.qp.post_send({send(1, a.mr.slice(0, 64)), write(2, a.mr.slice(0, 64), b.mr.remote().slice(64, 64))}));
    next(a.cq);
    next(a.cq);
    next(b.cq);
    BOOST_TEST(Fabric::of(a.dom).misuse().empty());
}

BOOST_AUTO_TEST_CASE(deregistering_a_region_a_posted_write_uses_is_reported_and_the_write_fails) {
    Node a("sim:fabric=dereg,mtu=1024"), b("sim:fabric=dereg,mtu=1024");
    link(a, b);
    std::vector<std::byte> src(8192, std::byte{7});
    auto src_mr = a.dom.register_memory(src, Access::local_write);
    BOOST_REQUIRE(a.qp.post_send({write(42, src_mr.slice(0, 8192), b.mr.remote().slice(0, 8192))}));
    src_mr = MemoryRegion();  // released while the write is in flight
    auto log = Fabric::of(a.dom).misuse();
    BOOST_REQUIRE(log.size() == 1u);
    BOOST_TEST(log[0].find("deregistered while posted work still uses it") != std::string::npos);
    BOOST_TEST(log[0].find("id=42") != std::string::npos);
    auto c = next(a.cq);
    BOOST_TEST(c.id == 42u);
    BOOST_TEST(c.status == WcStatus::local_protection);
    BOOST_TEST(a.qp.state() == QpState::error);
}

BOOST_AUTO_TEST_CASE(deregistering_a_region_mid_message_stops_the_placement) {
    // The write is already on the wire (its first packet landed) when its source goes away.
    Node a("sim:fabric=midmsg,mtu=1024,reorder=none"), b("sim:fabric=midmsg,mtu=1024,reorder=none");
    link(a, b);
    std::vector<std::byte> src(8192, std::byte{7});
    auto src_mr = a.dom.register_memory(src, Access::local_write);
    BOOST_REQUIRE(a.qp.post_send({write(43, src_mr.slice(0, 8192), b.mr.remote().slice(0, 8192))}));
    auto fab = Fabric::of(a.dom);
    while (b.buf[0] != std::byte{7}) fab.run_until_idle(1);
    src_mr = MemoryRegion();
    BOOST_TEST(fab.misuse().size() == 1u);
    auto c = next(a.cq);
    BOOST_TEST(c.status == WcStatus::local_protection);
    BOOST_TEST((b.buf[8191] == std::byte{0}));  // the rest never landed
    BOOST_TEST(b.qp.state() == QpState::rts);  // the responder did nothing wrong
}

BOOST_AUTO_TEST_CASE(a_message_into_a_receive_whose_region_was_deregistered_is_reported) {
    Node a("sim:fabric=recvdereg"), b("sim:fabric=recvdereg");
    link(a, b);
    std::vector<std::byte> dst(64);
    auto dst_mr = b.dom.register_memory(dst, Access::local_write);
    BOOST_REQUIRE(b.qp.post_recv({recv(5, dst_mr.slice(0, 64))}));
    dst_mr = MemoryRegion();
    BOOST_TEST(Fabric::of(a.dom).misuse().empty());  // a posted receive alone is not yet a problem
    BOOST_REQUIRE(a.qp.post_send({send(1, a.mr.slice(0, 8))}));
    auto rc = next(b.cq);
    BOOST_TEST(rc.status == WcStatus::local_protection);
    BOOST_TEST(next(a.cq).status == WcStatus::remote_operation);
    BOOST_TEST(mentions(Fabric::of(a.dom).misuse(), "receive id=5"));
}

BOOST_AUTO_TEST_CASE(cq_overrun_is_reported_and_moves_its_qps_to_error) {
    Node a("sim:fabric=overrun", {}, 4), b("sim:fabric=overrun");
    link(a, b);
    std::vector<SendRequest> batch;
    for (std::uint64_t i = 0; i < 8; ++i) batch.push_back(write(i, a.mr.slice(0, 8), b.mr.remote().slice(0, 8)));
    BOOST_REQUIRE(a.qp.post_send(batch));
    auto fab = Fabric::of(a.dom);
    fab.run_until_idle();
    auto log = fab.misuse();
    BOOST_REQUIRE(log.size() == 1u);
    BOOST_TEST(log[0].find("completion queue of depth 4 overran") != std::string::npos);
    BOOST_TEST(a.qp.state() == QpState::error);
    // The four that fit are there; nothing after the overrun is.
    Completion wc[16];
    auto got = a.cq.poll(wc);
    BOOST_TEST(got.size() == 4u);
    BOOST_TEST(a.cq.poll(wc).empty());
}

BOOST_AUTO_TEST_CASE(destroying_a_qp_with_sends_in_flight_is_reported) {
    Node a("sim:fabric=qpgone"), b("sim:fabric=qpgone");
    link(a, b);
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
    a.qp = QueuePair();
    BOOST_TEST(mentions(Fabric::of(b.dom).misuse(), "destroyed with 1 send request(s) still in flight"));
    Fabric::of(b.dom).clear_misuse();
    BOOST_TEST(Fabric::of(b.dom).misuse().empty());
}

BOOST_AUTO_TEST_CASE(a_source_buffer_changed_before_completion_is_reported) {
    for (const char* check : {"1", "0"}) {
        const std::string cfg = std::string("sim:fabric=srcchange") + check + ",check_sources=" + check;
        Node a(cfg), b(cfg);
        link(a, b);
        BOOST_REQUIRE(b.qp.post_recv({recv(1, b.mr.slice(0, 4096))}));
        BOOST_REQUIRE(a.qp.post_send({send(7, a.mr.slice(0, 4096)), write(8, a.mr.slice(8192, 64), b.mr.remote().slice(8192, 64))}));
        a.buf[100] = std::byte{1};  // the program reuses the buffer before the send completed
        BOOST_TEST(next(a.cq).ok());
        BOOST_TEST(next(a.cq).ok());
        BOOST_TEST((b.buf[100] == std::byte{1}));  // changed before its packet left: sent as changed
        const auto log = Fabric::of(a.dom).misuse();
        if (std::string(check) == "1") {
            BOOST_REQUIRE(log.size() == 1u);  // only the send: the write's source did not change
            BOOST_TEST(log[0].find("source buffer of send request id=7 (send, 4096 bytes)") != std::string::npos);
        } else {
            BOOST_TEST(log.empty());
        }
    }
}

// The digest has a path for the words of whole 64-byte blocks and one for the rest, and a change in either,
// of one byte or by swapping two words, must show; every change here is reported, once.
BOOST_AUTO_TEST_CASE(a_change_anywhere_in_a_source_of_any_length_is_reported) {
    Node a("sim:fabric=srcany"), b("sim:fabric=srcany");
    link(a, b);
    std::uint64_t id = 0;
    std::size_t reports = 0;
    for (std::size_t len : {std::size_t{1}, std::size_t{8}, std::size_t{63}, std::size_t{64}, std::size_t{100},
                            std::size_t{4096 + 13}, std::size_t{65536}}) {
        std::vector<std::size_t> at = {0, len / 2, len - 1};
        for (std::size_t off : at) {
            for (std::size_t k = 0; k < len; ++k) a.buf[k] = std::byte(k * 7 + len);
            BOOST_REQUIRE(a.qp.post_send({write(++id, a.mr.slice(0, len), b.mr.remote().slice(0, len))}));
            a.buf[off] ^= std::byte{0x10};
            BOOST_TEST(next(a.cq).ok());
            BOOST_TEST(Fabric::of(a.dom).misuse().size() == ++reports, "length " << len << ", byte " << off);
        }
        if (len >= 16) {
            BOOST_REQUIRE(a.qp.post_send({write(++id, a.mr.slice(0, len), b.mr.remote().slice(0, len))}));
            std::swap_ranges(a.buf.begin(), a.buf.begin() + 8, a.buf.begin() + 8);  // same bytes, other order
            BOOST_TEST(next(a.cq).ok());
            BOOST_TEST(Fabric::of(a.dom).misuse().size() == ++reports, "length " << len << ", swapped words");
        }
    }
}

// A large source is digested as its packets are read, and not read again at the acknowledgement when
// nothing can have changed it since. 100 Gb/s, 1000 ns of latency: the last packet of a write lands at
// 1000 ns plus 0.08 ns a byte (6243 ns for 64 KiB), its acknowledgement 1000 ns later.
BOOST_AUTO_TEST_CASE(a_source_changed_after_its_packets_landed_and_before_the_ack_is_reported) {
    const std::string cfg = "sim:fabric=srclate,reorder=none,latency_ns=1000,gbps=100,mtu=4096";
    Node a(cfg), b(cfg);
    link(a, b);
    auto fab = Fabric::of(a.dom);
    for (const std::size_t len : {std::size_t{65536}, std::size_t{4096 + 13}}) {
        BOOST_TEST_CONTEXT("length " << len) {
            fab.clear_misuse();
            for (std::size_t k = 0; k < len; ++k) a.buf[k] = std::byte(k * 13 + len);
            BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, len), b.mr.remote().slice(0, len))}));
            const auto landed = std::chrono::nanoseconds(1000 + len * 8 / 100 + 200);
            fab.run_for(landed);  // every packet has landed, the ack has not
            BOOST_REQUIRE(std::equal(a.buf.begin(), a.buf.begin() + static_cast<std::ptrdiff_t>(len), b.buf.begin()));
            a.buf[len - 1] ^= std::byte{0x20};
            BOOST_TEST(next(a.cq).ok());
            BOOST_TEST(fab.misuse().size() == 1u);
            // Unchanged: nothing to report.
            BOOST_REQUIRE(a.qp.post_send({write(2, a.mr.slice(0, len), b.mr.remote().slice(0, len))}));
            fab.run_for(landed);
            BOOST_TEST(next(a.cq).ok());
            BOOST_TEST(fab.misuse().size() == 1u);
        }
    }
}

// The fabric's own stores count too: a peer's write landing in a source after its packets were read, while
// the fabric runs on in one call, before the acknowledgement.
BOOST_AUTO_TEST_CASE(a_source_overwritten_by_a_peer_after_its_packets_landed_is_reported) {
    const std::string cfg = "sim:fabric=srcpeer,reorder=none,latency_ns=1000,gbps=100,mtu=4096";
    Node a(cfg), b(cfg);
    link(a, b);
    auto fab = Fabric::of(a.dom);
    b.set_word(300000, 0x1234);
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 65536), b.mr.remote().slice(0, 65536))}));
    // b's link first carries 68 KiB elsewhere (5571 ns), so its 8-byte write lands in a's source at about
    // 6572 ns: after the last packet of a's write (6243 ns), before its acknowledgement (7243 ns).
    BOOST_REQUIRE(b.qp.post_send({write(2, b.mr.slice(0, 69632), a.mr.remote().slice(200000, 69632)).unsignaled(),
                                  write(3, b.mr.slice(300000, 8), a.mr.remote().slice(100, 8))}));
    fab.run_until_idle();
    BOOST_TEST(a.word(100) == 0x1234u);
    BOOST_TEST(next(a.cq).ok());
    BOOST_TEST(next(b.cq).ok());
    const auto log = fab.misuse();
    BOOST_REQUIRE(log.size() == 1u);
    BOOST_TEST(log[0].find("source buffer of send request id=1 (write, 65536 bytes)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_inline_source_may_change_at_once) {
    Node a("sim:fabric=inlinesrc", QpOptions{.max_inline = 64}), b("sim:fabric=inlinesrc");
    link(a, b);
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 64), b.mr.remote().slice(0, 64)).inline_data()}));
    a.buf[0] = std::byte{9};
    BOOST_TEST(next(a.cq).ok());
    BOOST_TEST(Fabric::of(a.dom).misuse().empty());
}

BOOST_AUTO_TEST_CASE(strict_mode_aborts_on_the_first_misuse) {
    std::fflush(nullptr);
    pid_t pid = fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(2);  // keep the child's report out of the test log
        std::signal(SIGABRT, SIG_DFL);  // Boost.Test's monitor would catch it
        Node a("sim:fabric=strict,strict=1"), b("sim:fabric=strict,strict=1");
        link(a, b);
        std::vector<std::byte> src(64);
        auto src_mr = a.dom.register_memory(src, Access::local_write);
        (void)a.qp.post_send({write(1, src_mr.slice(0, 64), b.mr.remote().slice(0, 64))});
        src_mr = MemoryRegion();
        _exit(0);
    }
    int status = 0;
    BOOST_REQUIRE(waitpid(pid, &status, 0) == pid);
    BOOST_TEST(WIFSIGNALED(status));
    BOOST_TEST(WTERMSIG(status) == SIGABRT);
}

BOOST_AUTO_TEST_SUITE_END()
