// Conformance: weft::listen / weft::connect by host:port (Feature::listener), and the checks the core makes
// before any backend is asked (malformed addresses, a QP that is not fresh).
//
// Where to listen: $WEFT_CONFORMANCE_LISTEN (host:port) when set; otherwise "conformance:0" on the simulator,
// 127.0.0.1:0 on ofi, and on verbs the IPv4 address of the domain's RoCE v2 GID, read from sysfs (on the
// Soft-RoCE guest, 192.0.2.1:0). accept() and connect() both block, so the connector runs in a second thread.
// In two-process mode (--peer=process) the connecting side lives in the peer process; listeners stay in this
// one.
#include "harness.hpp"
#include "../support/expect_error.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

using namespace weft;
using namespace std::chrono_literals;
using weft::test::contains;
using weft::test::error_of;
using weft::test::needs;
using weft::test::listen_address;
using weft::test::next;

namespace {

using weft::test::handshake_timeout;

// A side of the suite's Pair, not connected, on `dom` (the accepting QP must come from the listener's
// domain).
void open_side(test::Side& s, Domain& dom) {
    s.cq = dom.create_cq({.depth = 256});
    s.qp = dom.create_qp({.send_cq = s.cq, .recv_cq = s.cq});
    s.storage = test::Memory(dom, 4096);
    s.buf = s.storage.bytes();
    s.mr = dom.register_memory(s.buf, all_access);
}

// A listening or accepting side, on its own domain in this process.
void open_side(test::Side& s) {
    s.domain = open(test::backend_config());
    open_side(s, s.domain);
}

// A connecting side, on its own domain: in the peer process in two-process mode.
void open_connecting_side(test::Side& s) {
    s.domain = test::open_side_b();
    open_side(s, s.domain);
}

// For cases with no connecting side: in two-process mode they still run in this process alone.
void note_one_process() {
    if (test::peer::active()) BOOST_TEST_MESSAGE("this case has no connecting side: it runs in this process only");
}

// What each side of a handshake received of the other's private data.
struct Handshake {
    std::vector<std::byte> at_listener;   // the connector's, as accept() returned it
    std::vector<std::byte> at_connector;  // the listener's reply, as connect() returned it
};

// Runs connect(qp, address, private_data) in a thread while this one accepts into `accepting`, answering with
// `decide` (no reply when empty); rethrows either's error, the listener's first.
Handshake connect_in_thread(Listener& lis, QueuePair& accepting, QueuePair& connecting,
                            std::span<const std::byte> private_data = {}, const AcceptReply& decide = {}) {
    const std::string address = lis.address();
    Handshake h;
    std::exception_ptr connect_error;
    std::thread connector([&] {
        try {
            h.at_connector = weft::connect(connecting, address, handshake_timeout, private_data);
        } catch (...) {
            connect_error = std::current_exception();
        }
    });
    std::exception_ptr accept_error;
    try {
        h.at_listener = decide ? lis.accept(accepting, handshake_timeout, decide) : lis.accept(accepting, handshake_timeout);
    } catch (...) {
        accept_error = std::current_exception();
    }
    connector.join();
    if (accept_error) std::rethrow_exception(accept_error);
    if (connect_error) std::rethrow_exception(connect_error);
    return h;
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
    std::vector<std::byte> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(seed + 37 * i);
    return out;
}

std::uint32_t private_data_limit() {
    const std::uint32_t limit = test::backend_caps().max_private_data;
    BOOST_TEST_MESSAGE(test::backend_caps().backend << " carries " << limit << " bytes of private data each way");
    return limit;
}

// a writes to b with an immediate (or, where write_with_imm is missing, writes and then sends the
// immediate), b sends to a: both directions move bytes.
void exchange_data(test::Side& a, test::Side& b) {
    const bool write_imm = test::backend_caps().has(Feature::write_with_imm);
    a.fill(0, 256, 11);
    b.fill(1024, 128, 23);
    BOOST_REQUIRE(b.qp.post_recv({recv(100, b.seg(2048, 8))}));
    BOOST_REQUIRE(a.qp.post_recv({recv(200, a.seg(512, 256))}));
    if (write_imm) {
        BOOST_REQUIRE(a.qp.post_send({write(1, a.seg(0, 256), b.remote(0, 256)).with_imm(0x1234)}));
    } else {
        BOOST_REQUIRE(a.qp.post_send({write(1, a.seg(0, 256), b.remote(0, 256)), send(3, a.seg(0, 8)).with_imm(0x1234)}));
    }
    auto wa = next(a.cq);
    BOOST_TEST(wa.id == 1u);
    BOOST_TEST(wa.status == WcStatus::success);
    if (!write_imm) {
        auto wa2 = next(a.cq);
        BOOST_TEST(wa2.id == 3u);
        BOOST_TEST(wa2.status == WcStatus::success);
    }
    auto rb = next(b.cq);
    BOOST_TEST(rb.id == 100u);
    BOOST_TEST(rb.status == WcStatus::success);
    BOOST_TEST(rb.imm == 0x1234u);
    BOOST_TEST(b.holds(0, 256, 11));

    BOOST_REQUIRE(b.qp.post_send({send(2, b.seg(1024, 128))}));
    auto wb = next(b.cq);
    BOOST_TEST(wb.id == 2u);
    BOOST_TEST(wb.status == WcStatus::success);
    auto ra = next(a.cq);
    BOOST_TEST(ra.id == 200u);
    BOOST_TEST(ra.status == WcStatus::success);
    BOOST_TEST(ra.byte_len == 128u);
    bool same = true;
    for (std::size_t i = 0; i < 128; ++i) same = same && a.buf[512 + i] == b.buf[1024 + i];
    BOOST_TEST(same);
}


}  // namespace

BOOST_AUTO_TEST_SUITE(listener)

BOOST_AUTO_TEST_CASE(connect_and_accept_then_data_moves_both_ways, *needs(Feature::listener)) {
    test::Side a, b;
    open_side(a);
    open_connecting_side(b);
    Listener lis = weft::listen(a.domain, listen_address(a.domain));
    BOOST_TEST_MESSAGE("listening on " << lis.address());
    BOOST_TEST(!contains(lis.address(), ":0"));  // the port the system chose, not the 0 asked for
    const Handshake h = connect_in_thread(lis, a.qp, b.qp);
    BOOST_TEST(a.qp.state() == QpState::rts);
    BOOST_TEST(b.qp.state() == QpState::rts);
    // Nothing sent, nothing received: no padding, no framing shows through.
    BOOST_TEST(h.at_listener.size() == 0u);
    BOOST_TEST(h.at_connector.size() == 0u);
    exchange_data(a, b);
}

// Private data, as rdma_cm carries it: the connector sends its memory descriptor, the listener answers with
// its own; each side then writes into the other's memory through the descriptor it received.
BOOST_AUTO_TEST_CASE(private_data_carries_descriptors_both_ways, *needs(Feature::listener)) {
    test::Side a, b;
    open_side(a);
    open_connecting_side(b);
    const std::uint32_t limit = private_data_limit();
    BOOST_TEST(limit >= RemoteRegion::encoded_size);
    const auto b_descriptor = b.remote(0, 4096).encode();
    const std::vector<std::byte> sent(b_descriptor.begin(), b_descriptor.end());
    std::vector<std::byte> seen_by_decide;
    Listener lis = weft::listen(a.domain, listen_address(a.domain));
    const Handshake h = connect_in_thread(lis, a.qp, b.qp, sent, [&](std::span<const std::byte> request) {
        seen_by_decide.assign(request.begin(), request.end());
        const auto mine = a.remote(0, 4096).encode();
        return std::vector<std::byte>(mine.begin(), mine.end());
    });
    BOOST_TEST(seen_by_decide == sent);
    BOOST_TEST(h.at_listener == sent);
    BOOST_REQUIRE(h.at_connector.size() == RemoteRegion::encoded_size);

    const RemoteRegion to_b = RemoteRegion::decode(h.at_listener);
    const RemoteRegion to_a = RemoteRegion::decode(h.at_connector);
    a.fill(0, 64, 5);
    b.fill(128, 64, 9);
    BOOST_REQUIRE(a.qp.post_send({write(1, a.seg(0, 64), to_b.slice(256, 64))}));
    BOOST_REQUIRE(b.qp.post_send({write(2, b.seg(128, 64), to_a.slice(512, 64))}));
    auto wa = next(a.cq);
    auto wb = next(b.cq);
    BOOST_TEST(wa.status == WcStatus::success);
    BOOST_TEST(wb.status == WcStatus::success);
    bool same_b = true, same_a = true;
    for (std::size_t i = 0; i < 64; ++i) {
        same_b = same_b && b.buf[256 + i] == a.buf[i];
        same_a = same_a && a.buf[512 + i] == b.buf[128 + i];
    }
    BOOST_TEST(same_b);
    BOOST_TEST(same_a);
}

// The full limit each way, every byte value, arrives exactly; one byte more is refused with the limit named,
// before anything is sent, and the QP stays fresh.
BOOST_AUTO_TEST_CASE(private_data_up_to_the_limit_arrives_exactly_and_more_is_refused, *needs(Feature::listener)) {
    test::Side a, b;
    open_side(a);
    open_connecting_side(b);
    const std::uint32_t limit = private_data_limit();
    BOOST_TEST(limit >= 48u);  // a descriptor and a little more, on every backend
    Listener lis = weft::listen(a.domain, listen_address(a.domain));

    const auto too_long = pattern(limit + 1, 3);
    Error e = error_of([&] { weft::connect(b.qp, lis.address(), 1s, too_long); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == Errc::invalid_argument));
    BOOST_TEST(contains(e.what(), std::to_string(limit)), e.what());
    BOOST_TEST(contains(e.what(), "max_private_data"), e.what());
    BOOST_TEST(b.qp.state() == QpState::init);
    Error r = error_of([&] { lis.accept(a.qp, handshake_timeout, too_long); });
    BOOST_TEST((r.code() == Errc::invalid_argument));  // at once, not after the timeout
    BOOST_TEST(a.qp.state() == QpState::init);

    const auto request = pattern(limit, 0x80);
    const auto reply = pattern(limit, 0x11);
    const Handshake h = connect_in_thread(lis, a.qp, b.qp, request,
                                          [&](std::span<const std::byte>) { return reply; });
    BOOST_TEST(h.at_listener == request);
    BOOST_TEST(h.at_connector == reply);
    exchange_data(a, b);
}

// A listener that throws from its AcceptReply refuses that connector, which is told why, and keeps its QP
// fresh for the next one.
BOOST_AUTO_TEST_CASE(a_listener_refuses_by_private_data_and_accepts_the_next, *needs(Feature::listener)) {
    test::Side a, b, c;
    open_side(a);
    open_connecting_side(b);
    open_connecting_side(c);
    Listener lis = weft::listen(a.domain, listen_address(a.domain));
    const auto wants_in = [](std::span<const std::byte> request) {
        if (request.size() != 1 || request[0] != std::byte{1}) {
            throw Error(Errc::invalid_argument, "wrong protocol version", "test", "decide");
        }
        return std::vector<std::byte>{std::byte{7}};
    };
    const std::vector<std::byte> old_version{std::byte{0}}, new_version{std::byte{1}};
    std::exception_ptr accept_error;
    try {
        connect_in_thread(lis, a.qp, b.qp, old_version, wants_in);
    } catch (...) {
        accept_error = std::current_exception();
    }
    BOOST_REQUIRE(accept_error);
    Error thrown = error_of([&] { std::rethrow_exception(accept_error); });
    BOOST_TEST(contains(thrown.what(), "wrong protocol version"), thrown.what());
    BOOST_TEST(a.qp.state() == QpState::init);
    // The connector's side: refused, with the listener's reason.
    Error refused = error_of([&] {
        test::Side d;
        open_connecting_side(d);
        std::thread t([&] {
            try {
                lis.accept(a.qp, handshake_timeout, wants_in);
            } catch (...) {
                accept_error = std::current_exception();
            }
        });
        try {
            weft::connect(d.qp, lis.address(), handshake_timeout, old_version);
        } catch (...) {
            t.join();
            throw;
        }
        t.join();
    });
    BOOST_TEST_MESSAGE(refused.what());
    BOOST_TEST((refused.code() == std::errc::connection_refused));
    BOOST_TEST(contains(refused.what(), "wrong protocol version"), refused.what());
    BOOST_TEST(a.qp.state() == QpState::init);

    const Handshake h = connect_in_thread(lis, a.qp, c.qp, new_version, wants_in);
    BOOST_TEST(h.at_listener == new_version);
    BOOST_TEST(h.at_connector == std::vector<std::byte>{std::byte{7}});
    exchange_data(a, c);
}

BOOST_AUTO_TEST_CASE(one_listener_accepts_connections_one_after_another, *needs(Feature::listener)) {
    test::Side server;
    open_side(server);
    Listener lis = weft::listen(server.domain, listen_address(server.domain));
    for (int round = 0; round < 2; ++round) {
        BOOST_TEST_CONTEXT("connection " << round) {
            test::Side a, b;
            open_side(a, server.domain);
            open_connecting_side(b);
            connect_in_thread(lis, a.qp, b.qp);
            exchange_data(a, b);
        }
    }
}

BOOST_AUTO_TEST_CASE(connect_where_nobody_listens_is_refused_in_time, *needs(Feature::listener)) {
    test::Side a, b;
    open_side(a);
    open_connecting_side(b);
    std::string address;
    {
        Listener lis = weft::listen(a.domain, listen_address(a.domain));
        address = lis.address();
    }  // closed: nothing listens there any more
    const auto timeout = 5s;
    const auto start = std::chrono::steady_clock::now();
    Error e = error_of([&] { weft::connect(b.qp, address, timeout); });
    const auto took = std::chrono::steady_clock::now() - start;
    BOOST_TEST_MESSAGE("connect to " << address << ": " << e.what());
    BOOST_TEST((e.code() == std::errc::connection_refused));
    BOOST_TEST(took < timeout + 1s);
    BOOST_TEST(b.qp.state() == QpState::init);  // untouched: it may still be connected another way
}

BOOST_AUTO_TEST_CASE(accept_without_a_peer_times_out, *needs(Feature::listener)) {
    note_one_process();
    test::Side a;
    open_side(a);
    Listener lis = weft::listen(a.domain, listen_address(a.domain));
    const auto start = std::chrono::steady_clock::now();
    Error e = error_of([&] { lis.accept(a.qp, 200ms); });
    const auto took = std::chrono::steady_clock::now() - start;
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == std::errc::timed_out));
    BOOST_TEST(took >= 190ms);
    BOOST_TEST(took < 5s);
    BOOST_TEST(a.qp.state() == QpState::init);
}

BOOST_AUTO_TEST_CASE(listening_twice_on_one_address_is_refused, *needs(Feature::listener)) {
    note_one_process();
    test::Side a;
    open_side(a);
    Listener first = weft::listen(a.domain, listen_address(a.domain));
    Error e = error_of([&] { auto second = weft::listen(a.domain, first.address()); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == std::errc::address_in_use));
}

BOOST_AUTO_TEST_CASE(malformed_listen_address_names_the_accepted_forms) {
    note_one_process();
    test::Side a;
    open_side(a);
    for (const char* bad : {"no-port", "host:", ":7471", "host:65536", "host:12a", "[::1", "[::1]7471", "::1:7471",
                            "host:-1"}) {
        BOOST_TEST_CONTEXT("address '" << bad << "'") {
            Error e = error_of([&] { auto l = weft::listen(a.domain, bad); });
            BOOST_TEST((e.code() == Errc::invalid_argument));
            BOOST_TEST(contains(e.what(), "accepted forms"), e.what());
            BOOST_TEST(contains(e.what(), "[IPV6]:PORT"), e.what());
        }
    }
}

BOOST_AUTO_TEST_CASE(connect_needs_a_fresh_queue_pair) {
    test::Pair p;  // connected: rts
    Error e = error_of([&] { weft::connect(p.a.qp, "somewhere:7471", 1s); });
    BOOST_TEST((e.code() == Errc::invalid_state));
    BOOST_TEST(contains(e.what(), "fresh QP"), e.what());
}

BOOST_AUTO_TEST_SUITE_END()
