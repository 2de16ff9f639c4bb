// Simulator faults: lost, duplicated and delayed packets hidden by RC retransmission; cut links, ports
// down, crashed and stalled nodes; injected setup failures. From config keys (so unmodified programs can be swept) and from
// the weft::sim::Fabric control API.
#include "node.hpp"

#include <algorithm>

using namespace weft;
using weft::sim::Fabric;
using weft::sim::test::link;
using weft::sim::test::next;
using weft::sim::test::Node;

namespace {

// An ordinary workload: writes, sends, reads and fetch_adds; checks every completion and byte, and returns
// the completion stream and the final clock as text.
std::string workload(const std::string& cfg) {
    QpOptions o;
    o.timeout = 8;  // ~1 ms: losses are recovered quickly in virtual time
    Node a(cfg, o), b(cfg, o);
    link(a, b);
    for (std::size_t i = 0; i < 64 * 1024; ++i) a.buf[i] = static_cast<std::byte>(i * 7 + 3);
    std::string log;
    for (std::uint64_t round = 0; round < 40; ++round) {
        BOOST_REQUIRE(b.qp.post_recv({recv(round, b.mr.slice(500000 + round * 256, 256))}));
        BOOST_REQUIRE(a.qp.post_send({
            write(round * 10, a.mr.slice(round * 512, 6000), b.mr.remote().slice(100000 + round * 6000, 6000)).unsignaled(),
            send(round * 10 + 1, a.mr.slice(round * 8, 200)),
            fetch_add(round * 10 + 2, a.mr.slice(900000 + round * 8, 8), b.mr.remote().slice(800000, 8), 1),
            read(round * 10 + 3, a.mr.slice(700000 + round * 64, 64), b.mr.remote().slice(100000 + round * 6000, 64)),
        }));
        for (int k = 0; k < 4; ++k) {
            auto c = next(k < 3 ? a.cq : b.cq);
            BOOST_TEST(c.ok(), c);
            log += weft::sim::test::text(c) + "\n";
        }
    }
    for (std::uint64_t round = 0; round < 40; ++round) {
        BOOST_TEST(std::memcmp(&b.buf[100000 + round * 6000], &a.buf[round * 512], 6000) == 0);
        BOOST_TEST(std::memcmp(&b.buf[500000 + round * 256], &a.buf[round * 8], 200) == 0);
        BOOST_TEST(a.word(900000 + round * 8) == round);  // each fetch_add executed exactly once
        BOOST_TEST(std::memcmp(&a.buf[700000 + round * 64], &a.buf[round * 512], 64) == 0);
    }
    BOOST_TEST(b.word(800000) == 40u);
    const auto st = Fabric::of(a.dom).stats();
    log += "t=" + std::to_string(Fabric::of(a.dom).now()) + " dropped=" + std::to_string(st.dropped) +
           " duplicated=" + std::to_string(st.duplicated) + " delayed=" + std::to_string(st.delayed) +
           " retransmitted=" + std::to_string(st.retransmitted) + "\n";
    return log;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(faults)

BOOST_AUTO_TEST_CASE(lost_packets_are_retransmitted_and_invisible_to_the_program) {
    const auto log = workload("sim:fabric=drop,seed=3,drop=0.05");
    BOOST_TEST_MESSAGE(log.substr(log.rfind("t=")));
    const auto stats = log.substr(log.rfind("t="));
    BOOST_TEST(stats.find("dropped=0 ") == std::string::npos);
    BOOST_TEST(stats.find("retransmitted=0") == std::string::npos);
    BOOST_TEST(log == workload("sim:fabric=drop,seed=3,drop=0.05"));  // deterministic from the seed
}

BOOST_AUTO_TEST_CASE(duplicated_and_delayed_packets_are_invisible_to_the_program) {
    const auto log = workload("sim:fabric=dupdelay,seed=4,duplicate=0.2,delay=0.2,delay_ns=3000");
    const auto stats = log.substr(log.rfind("t="));
    BOOST_TEST_MESSAGE(stats);
    BOOST_TEST(stats.find("duplicated=0 ") == std::string::npos);
    BOOST_TEST(stats.find("delayed=0 ") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(every_fault_at_once_across_seeds) {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
        workload("sim:fabric=sweep,mtu=1024,drop=0.03,duplicate=0.05,delay=0.05,seed=" + std::to_string(seed));
    }
}

BOOST_AUTO_TEST_CASE(faults_can_be_set_from_code) {
    Node a("sim:fabric=setfaults"), b("sim:fabric=setfaults");
    link(a, b);
    auto fab = Fabric::of(a.dom);
    fab.set_faults({.drop = 0.2});
    BOOST_TEST(fab.faults().drop == 0.2);
    for (std::uint64_t i = 0; i < 20; ++i) {
        BOOST_REQUIRE(a.qp.post_send({write(i, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
        BOOST_TEST(next(a.cq).ok());
    }
    BOOST_TEST(fab.stats().dropped > 0u);
    BOOST_CHECK_THROW(fab.set_faults({.drop = 1.5}), Error);
}

BOOST_AUTO_TEST_CASE(a_cut_link_gives_transport_retry_exceeded_after_timeout_times_retries) {
    QpOptions o;
    o.timeout = 8;    // 4.096 us * 2^8 = 1048576 ns
    o.retry_cnt = 2;
    Node a("sim:fabric=cut,reorder=none", o), b("sim:fabric=cut,reorder=none", o);
    link(a, b);
    auto fab = Fabric::of(a.dom);
    fab.cut(a.dom, b.dom);
    const auto t0 = fab.now();
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
    auto c = next(a.cq);
    BOOST_TEST(c.status == WcStatus::transport_retry_exceeded);
    BOOST_TEST(fab.now() - t0 == 3u * 1048576u);  // the first try and two retries, each timing out
    BOOST_TEST(a.qp.state() == QpState::error);
}

BOOST_AUTO_TEST_CASE(a_link_cut_for_less_than_the_retries_recovers) {
    QpOptions o;
    o.timeout = 8;
    o.retry_cnt = 3;
    Node a("sim:fabric=cutshort", o), b("sim:fabric=cutshort", o);
    link(a, b);
    auto fab = Fabric::of(a.dom);
    fab.cut(a.dom, b.dom, std::chrono::milliseconds(2));
    a.buf[0] = std::byte{5};
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
    BOOST_TEST(next(a.cq).ok());
    BOOST_TEST((b.buf[0] == std::byte{5}));
    BOOST_TEST(fab.now() > 2'000'000u);
    // heal() ends a cut for good at once.
    fab.cut(a.dom, b.dom);
    fab.heal(a.dom, b.dom);
    BOOST_REQUIRE(a.qp.post_send({write(2, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
    BOOST_TEST(next(a.cq).ok());
}

// A port down for less than the retry budget: the node's domain hears port_error at once and port_active
// when the port comes back; a write posted meanwhile is retransmitted and lands after it. The peer hears
// nothing (its port stayed up).
BOOST_AUTO_TEST_CASE(a_port_down_for_a_while_is_two_events_and_its_traffic_recovers) {
    QpOptions o;
    o.timeout = 8;  // ~1 ms, 3 retries: 4 ms of patience
    o.retry_cnt = 3;
    Node a("sim:fabric=port,reorder=none", o), b("sim:fabric=port,reorder=none", o);
    link(a, b);
    auto fab = Fabric::of(a.dom);
    BOOST_TEST(!b.dom.next_event().has_value());
    const auto t0 = fab.now();
    fab.port_down(b.dom, std::chrono::milliseconds(2));
    const auto down = b.dom.next_event();
    BOOST_REQUIRE(down.has_value());
    BOOST_TEST((down->type == EventType::port_error));
    BOOST_TEST(down->qp_num == 0u);
    a.buf[0] = std::byte{9};
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
    BOOST_TEST(next(a.cq).ok());
    BOOST_TEST((b.buf[0] == std::byte{9}));
    BOOST_TEST(fab.now() - t0 > 2'000'000u);  // it landed only once the port was back
    const auto up = b.dom.next_event();
    BOOST_REQUIRE(up.has_value());
    BOOST_TEST((up->type == EventType::port_active));
    BOOST_TEST(!b.dom.next_event().has_value());
    BOOST_TEST(!a.dom.next_event().has_value());
    BOOST_TEST(a.qp.state() == QpState::rts);
    BOOST_TEST(b.qp.state() == QpState::rts);
}

// A port down for good: the peer's requests end in transport_retry_exceeded, and the QPs of the node whose
// port is down stay as they are. port_up() brings it back at once; a second port_down while down makes no
// second port_error, and the coming-back of the outage it replaced is not reported.
BOOST_AUTO_TEST_CASE(a_port_down_for_good_fails_the_peers_requests_until_port_up) {
    QpOptions o;
    o.timeout = 8;
    o.retry_cnt = 2;
    Node a("sim:fabric=portgood,reorder=none", o), b("sim:fabric=portgood,reorder=none", o);
    link(a, b);
    auto fab = Fabric::of(a.dom);
    fab.port_down(b.dom, std::chrono::microseconds(100));
    fab.port_down(b.dom);  // now for good
    const auto t0 = fab.now();
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
    auto c = next(a.cq);
    BOOST_TEST(c.status == WcStatus::transport_retry_exceeded);
    BOOST_TEST(fab.now() - t0 == 3u * 1048576u);  // the first try and two retries, each timing out
    BOOST_TEST(b.qp.state() == QpState::rts);
    const auto down = b.dom.next_event();
    BOOST_REQUIRE(down.has_value());
    BOOST_TEST((down->type == EventType::port_error));
    BOOST_TEST(!b.dom.next_event().has_value());  // one outage, although port_down was called twice
    fab.port_up(b.dom);
    const auto up = b.dom.next_event();
    BOOST_REQUIRE(up.has_value());
    BOOST_TEST((up->type == EventType::port_active));
    fab.port_up(b.dom);  // up already: nothing
    BOOST_TEST(!b.dom.next_event().has_value());
}

BOOST_AUTO_TEST_CASE(a_message_cut_in_the_middle_leaves_what_landed_and_is_sent_again) {
    QpOptions o;
    o.timeout = 8;
    o.retry_cnt = 3;
    const std::string cfg = "sim:fabric=midcut,mtu=1024,reorder=none,gbps=8";
    Node a(cfg, o), b(cfg, o);
    link(a, b);
    std::fill_n(a.buf.begin(), 8192, std::byte{0x5c});
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8192), b.mr.remote().slice(0, 8192))}));
    auto fab = Fabric::of(a.dom);
    while (b.buf[0] != std::byte{0x5c}) fab.run_until_idle(1);  // the first packet has landed
    fab.cut(a.dom, b.dom, std::chrono::microseconds(100));
    fab.run_for(std::chrono::microseconds(50));
    BOOST_TEST((b.buf[1023] == std::byte{0x5c}));  // what landed stays
    BOOST_TEST((b.buf[8191] == std::byte{0}));     // the rest was lost with the link
    auto c = next(a.cq);                            // the ACK timeout sends it again once the link is back
    BOOST_TEST(c.ok());
    BOOST_TEST((std::all_of(b.buf.begin(), b.buf.begin() + 8192, [](std::byte x) { return x == std::byte{0x5c}; })));
    BOOST_TEST(fab.stats().retransmitted == 1u);
}

BOOST_AUTO_TEST_CASE(a_crashed_node_gives_its_peers_transport_retry_exceeded) {
    QpOptions o;
    o.timeout = 8;
    o.retry_cnt = 1;
    Node a("sim:fabric=crash", o), b("sim:fabric=crash", o);
    link(a, b);
    Fabric::of(a.dom).crash(b.dom);
    BOOST_REQUIRE(a.qp.post_send({send(1, a.mr.slice(0, 8))}));
    BOOST_TEST(next(a.cq).status == WcStatus::transport_retry_exceeded);
    // The crashed node completes nothing, even its receives.
    BOOST_REQUIRE(b.qp.post_recv({recv(1, b.mr.slice(0, 8))}));
    Completion wc[1];
    BOOST_TEST(b.cq.poll(wc).empty());
}

// Regression (the fault soak, seed 2): tearing down a crashed node's QPs, whose sends can no longer
// complete, was reported as a misuse, though the crash left the program no way to drain them.
BOOST_AUTO_TEST_CASE(destroying_a_crashed_nodes_qp_with_sends_in_flight_is_no_misuse) {
    Node a("sim:fabric=crashdestroy"), b("sim:fabric=crashdestroy");
    link(a, b);
    auto fab = Fabric::of(a.dom);
    fab.clear_misuse();
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
    fab.crash(a.dom);
    a.qp = QueuePair();
    BOOST_TEST(fab.misuse().empty());
    // A live node's QP destroyed with a send in flight is still reported.
    BOOST_REQUIRE(b.qp.post_send({write(2, b.mr.slice(0, 8), a.mr.remote().slice(0, 8))}));
    b.qp = QueuePair();
    BOOST_TEST(fab.misuse().size() == 1u);
    fab.clear_misuse();
}

// Regression (the fault soak, seed 1783): a read or atomic the responder executed after its requester had
// crashed (deferred: reorder=read_after_write) still wrote its result into the crashed node's memory.
BOOST_AUTO_TEST_CASE(a_crashed_node_takes_no_read_or_atomic_result_in) {
    int crashed_with_a_result_pending[2] = {0, 0};
    for (std::uint64_t seed = 1; seed <= 64; ++seed) {
        const bool atomic = seed % 2 == 0;
        const std::string cfg = "sim:fabric=crashresult,reorder=read_after_write,seed=" + std::to_string(seed);
        Node a(cfg), b(cfg);
        link(a, b);
        a.set_word(0, 0x5a5a);  // where the result would land
        b.set_word(64, 0x77);   // what the read would fetch
        BOOST_REQUIRE(a.qp.post_send({atomic ? fetch_add(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8), 1)
                                             : read(1, a.mr.slice(0, 8), b.mr.remote().slice(64, 8))}));
        auto fab = Fabric::of(a.dom);
        BOOST_REQUIRE(fab.run_until_idle(1) == 1u);  // the request arrives at b
        // Executed at once (the result landed as the response left): not the case this test is about.
        if (atomic ? b.word(0) != 0 : a.word(0) != 0x5a5a) continue;
        fab.crash(a.dom);
        fab.run_until_idle();  // b executes the request it deferred
        BOOST_TEST(a.word(0) == 0x5a5au, "seed " << seed << ": the crashed node's buffer changed");
        if (atomic) BOOST_TEST(b.word(0) == 1u);  // the responder executed it all the same
        ++crashed_with_a_result_pending[atomic];
    }
    BOOST_TEST(crashed_with_a_result_pending[0] > 0);
    BOOST_TEST(crashed_with_a_result_pending[1] > 0);
}

BOOST_AUTO_TEST_CASE(a_stalled_responder_takes_requests_up_later_in_order) {
    Node a("sim:fabric=stall,reorder=none"), b("sim:fabric=stall,reorder=none");
    link(a, b);
    auto fab = Fabric::of(a.dom);
    fab.stall(b.dom, std::chrono::microseconds(50));
    const auto t0 = fab.now();
    std::vector<SendRequest> batch;
    for (std::uint8_t k = 0; k < 8; ++k) {
        a.buf[k * 8] = std::byte{static_cast<unsigned char>(k + 1)};
        batch.push_back(write(k, a.mr.slice(k * 8, 8), b.mr.remote().slice(0, 8)).signaled(k == 7));
    }
    BOOST_REQUIRE(a.qp.post_send(batch));
    BOOST_TEST(next(a.cq).id == 7u);
    BOOST_TEST(fab.now() - t0 >= 50'000u + 1000u);  // the stall, then the acknowledgement's latency
    BOOST_TEST((b.buf[0] == std::byte{8}));          // the last write posted is the one that stays
}

BOOST_AUTO_TEST_CASE(registration_and_qp_creation_fail_when_told_to) {
    auto dom = open("sim:fabric=failsetup");
    auto fab = Fabric::of(dom);
    std::vector<std::byte> buf(64);
    fab.fail_next_registration();
    try {
        (void)dom.register_memory(buf, Access::local_write);
        BOOST_FAIL("expected an injected failure");
    } catch (const Error& e) {
        BOOST_TEST(e.code() == make_error_code(Errc::resource_exhausted));
        BOOST_TEST(std::string(e.what()).find("injected") != std::string::npos);
    }
    auto mr = dom.register_memory(buf, Access::local_write);  // only the next one failed
    auto cq = dom.create_cq({.depth = 8});
    fab.fail_next_qp_creation(2);
    BOOST_CHECK_THROW(dom.create_qp({.send_cq = cq, .recv_cq = cq}), Error);
    BOOST_CHECK_THROW(dom.create_qp({.send_cq = cq, .recv_cq = cq}), Error);
    BOOST_CHECK_NO_THROW(dom.create_qp({.send_cq = cq, .recv_cq = cq}));
}

BOOST_AUTO_TEST_SUITE_END()

// Shared receive queue under loss: multi-packet sends from three clients, some packets lost mid-message and
// duplicated. A QP keeps the receive it took for a message that must be sent again, so every message lands
// whole in exactly one receive, every receive completes once, and the queue hands them out in posted order.
BOOST_AUTO_TEST_CASE(a_shared_receive_queue_loses_no_receive_to_lost_packets) {
    for (std::uint64_t seed = 1; seed <= 12; ++seed) {
        BOOST_TEST_CONTEXT("seed " << seed) {
            const std::string cfg = "sim:fabric=srqloss" + std::to_string(seed) + ",seed=" + std::to_string(seed) +
                                    ",mtu=1024,drop=0.05,duplicate=0.03";
            Domain server = open(cfg);
            CompletionQueue scq = server.create_cq({.depth = 1024});
            std::vector<std::byte> sbuf(256 * 1024);
            MemoryRegion smr = server.register_memory(sbuf, all_access);
            SharedReceiveQueue srq = server.create_srq({.max_recv = 64});
            constexpr std::size_t clients = 3, rounds = 8, size = 5000, slot = 8192;
            std::vector<QueuePair> sqp;
            std::vector<Node> cl;
            cl.reserve(clients);
            for (std::size_t i = 0; i < clients; ++i) {
                sqp.push_back(server.create_qp({.send_cq = scq, .recv_cq = scq, .timeout = 8, .srq = srq}));
                cl.emplace_back(cfg, QpOptions{.timeout = 8});
                sqp.back().connect(cl.back().qp.address());
                cl.back().qp.connect(sqp.back().address());
                for (std::size_t k = 0; k < size * rounds; ++k) {
                    cl.back().buf[k] = static_cast<std::byte>(k * 13 + i * 101 + 1);
                }
            }
            std::vector<RecvRequest> rr;
            for (std::uint64_t r = 0; r < clients * rounds; ++r) rr.push_back(recv(r, smr.slice(r * slot, slot)));
            BOOST_REQUIRE(srq.post_recv(rr));
            for (std::size_t round = 0; round < rounds; ++round) {
                for (std::size_t i = 0; i < clients; ++i) {
                    BOOST_REQUIRE(cl[i].qp.post_send({send(round, cl[i].mr.slice(round * size, size))}));
                }
            }
            for (std::size_t i = 0; i < clients; ++i) {
                for (std::size_t round = 0; round < rounds; ++round) BOOST_TEST(next(cl[i].cq).ok());
            }
            // Each receive holds one whole message of the QP its completion names; the next message of that
            // QP comes in a later receive (QPs overtake each other, so across QPs the order is free).
            std::vector<std::size_t> seen(clients, 0);
            std::vector<std::uint64_t> last_id(clients, 0);
            for (std::size_t n = 0; n < clients * rounds; ++n) {
                const Completion c = next(scq);
                BOOST_REQUIRE(c.ok());
                BOOST_TEST(c.byte_len == size);
                const auto it = std::find_if(sqp.begin(), sqp.end(), [&](const QueuePair& q) { return q.qp_num() == c.qp_num; });
                BOOST_REQUIRE(it != sqp.end());
                const std::size_t i = static_cast<std::size_t>(it - sqp.begin());
                const std::size_t round = seen[i]++;
                if (round > 0) BOOST_TEST(c.id > last_id[i]);  // one QP takes the queue's receives in order
                last_id[i] = c.id;
                BOOST_TEST(std::memcmp(&sbuf[c.id * slot], &cl[i].buf[round * size], size) == 0);
            }
            Completion extra[1];
            BOOST_TEST(scq.poll(extra).empty());
        }
    }
}
