// The verbs backend on a real device (rxe in the Soft-RoCE guest): peers that send hostile bytes to a
// listener or answer a connector with them, a dead peer with the default retry_cnt, receives posted between
// a failure and the poll that reports it, the fd() protocol round after round, shared receive queues (slots
// reused out of order, failed receives, a destroyed queue's leftovers), and configuration errors.
// Skipped, saying why, where no verbs device opens.
#include "../../backends/verbs/verbs_wire.hpp"
#include "../support/expect_error.hpp"

#include <weft/weft.hpp>

#include <boost/test/unit_test.hpp>

#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

using namespace weft;
using namespace std::chrono_literals;
namespace wire = weft::verbs::wire;
using weft::test::contains;
using weft::test::error_of;

namespace {

using Clock = std::chrono::steady_clock;

// The configuration under test: `-- --backend=CONFIG`, else "verbs".
const std::string& config() {
    static const std::string c = [] {
        auto& suite = boost::unit_test::framework::master_test_suite();
        for (int i = 1; i < suite.argc; ++i) {
            if (std::strncmp(suite.argv[i], "--backend=", 10) == 0) return std::string(suite.argv[i] + 10);
        }
        return std::string("verbs");
    }();
    return c;
}

// Why no verbs device opens here, or empty.
const std::string& unusable() {
    static const std::string why = [] {
        try {
            (void)weft::open(config());
            return std::string();
        } catch (const Error& e) {
            return std::string(e.what());
        }
    }();
    return why;
}

// A precondition: the case is skipped, saying why, where no verbs device opens.
boost::unit_test::precondition needs_device() {
    const std::string& (*why)() = &unusable;  // asked when the case is about to run, not at registration
    return boost::unit_test::precondition([why](boost::unit_test::test_unit_id) {
        boost::test_tools::assertion_result r(why().empty());
        r.message() << "no verbs device opens here (" << why() << ")";
        return r;
    });
}

// ::ffff:a.b.c.d as sysfs writes it -> "a.b.c.d"; empty when the GID is not IPv4-mapped.
std::string mapped_ipv4(const std::string& gid) {
    const std::string prefix = "0000:0000:0000:0000:0000:ffff:";
    if (gid.rfind(prefix, 0) != 0 || gid.size() < prefix.size() + 9) return {};
    const unsigned long hi = std::stoul(gid.substr(prefix.size(), 4), nullptr, 16);
    const unsigned long lo = std::stoul(gid.substr(prefix.size() + 5, 4), nullptr, 16);
    return std::to_string(hi >> 8) + "." + std::to_string(hi & 0xff) + "." + std::to_string(lo >> 8) + "." +
           std::to_string(lo & 0xff);
}

// The IPv4 address of the domain's port (the first IPv4-mapped GID), where rdma_cm reaches it.
std::string device_ipv4(const Domain& dom) {
    const std::string port = std::to_string(dom.config().get_uint("port", 1, 1, 255));
    const std::string dir = "/sys/class/infiniband/" + dom.capabilities().device + "/ports/" + port + "/gids/";
    for (unsigned i = 0; i < 16; ++i) {
        std::ifstream in(dir + std::to_string(i));
        std::string gid;
        in >> gid;
        if (auto ip = mapped_ipv4(gid); !ip.empty()) return ip;
    }
    BOOST_FAIL("no IPv4-mapped GID on " << dom.capabilities().device);
    return {};
}

// One side: domain, CQ, QP and 64 KiB of registered memory.
struct Side {
    explicit Side(QpOptions o = {}) : dom(weft::open(config())), buf(64 * 1024) {
        cq = dom.create_cq({.depth = 256});
        o.send_cq = cq;
        o.recv_cq = cq;
        qp = dom.create_qp(o);
        mr = dom.register_memory(buf.data(), buf.size(), all_access);
    }
    Domain dom;
    CompletionQueue cq;
    QueuePair qp;
    std::vector<std::byte> buf;
    MemoryRegion mr;
};

void connect_pair(Side& a, Side& b) {
    const auto aa = a.qp.address();
    const auto ba = b.qp.address();
    a.qp.connect(ba);
    b.qp.connect(aa);
}

// The next completion on `cq` within `limit`, or nullopt.
std::optional<Completion> next_within(CompletionQueue& cq, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    Completion wc[1];
    while (Clock::now() < deadline) {
        if (auto got = cq.poll(wc); !got.empty()) return got[0];
        (void)cq.wait(10ms);
    }
    return std::nullopt;
}

// ---- A raw rdma_cm peer, for bytes no weft peer would send

struct Channel {
    rdma_event_channel* ch = ::rdma_create_event_channel();
    Channel() {
        BOOST_REQUIRE_MESSAGE(ch != nullptr, "rdma_create_event_channel: " << std::strerror(errno));
        const int flags = ::fcntl(ch->fd, F_GETFL);
        ::fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK);
    }
    ~Channel() { ::rdma_destroy_event_channel(ch); }
    Channel(const Channel&) = delete;
    Channel& operator=(const Channel&) = delete;

    // The next event (which the caller acknowledges), or null after `limit`.
    rdma_cm_event* next(std::chrono::milliseconds limit) const {
        const auto deadline = Clock::now() + limit;
        for (;;) {
            rdma_cm_event* ev = nullptr;
            if (::rdma_get_cm_event(ch, &ev) == 0) return ev;
            if (Clock::now() >= deadline) return nullptr;
            pollfd p{ch->fd, POLLIN, 0};
            ::poll(&p, 1, 50);
        }
    }
};

sockaddr_in ipv4(const std::string& ip, std::uint16_t port) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    BOOST_REQUIRE(::inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) == 1);
    return sa;
}

std::uint16_t port_of(const std::string& host_port) {
    return static_cast<std::uint16_t>(std::stoul(host_port.substr(host_port.rfind(':') + 1)));
}

struct Answer {
    rdma_cm_event_type event = RDMA_CM_EVENT_ADDR_ERROR;
    std::vector<std::uint8_t> data;  // the private data that came with it
};

// Sends a connect request carrying `data` as private data and `qp_num` as its QP number to ip:port and
// returns the answer.
Answer raw_connect(const std::string& ip, std::uint16_t port, const std::vector<std::uint8_t>& data,
                   std::uint32_t qp_num = 0x1234) {
    Channel ch;
    rdma_cm_id* id = nullptr;
    BOOST_REQUIRE(::rdma_create_id(ch.ch, &id, nullptr, RDMA_PS_TCP) == 0);
    Answer out;
    auto step = [&](rdma_cm_event_type want) {
        rdma_cm_event* ev = ch.next(10s);
        BOOST_REQUIRE_MESSAGE(ev != nullptr, "no rdma_cm event within 10 s, wanted " << rdma_event_str(want));
        const auto got = ev->event;
        ::rdma_ack_cm_event(ev);
        BOOST_REQUIRE_MESSAGE(got == want, "rdma_cm: " << rdma_event_str(got) << ", wanted " << rdma_event_str(want));
    };
    sockaddr_in dst = ipv4(ip, port);
    BOOST_REQUIRE(::rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 5000) == 0);
    step(RDMA_CM_EVENT_ADDR_RESOLVED);
    BOOST_REQUIRE(::rdma_resolve_route(id, 5000) == 0);
    step(RDMA_CM_EVENT_ROUTE_RESOLVED);
    rdma_conn_param p{};
    p.private_data = data.empty() ? nullptr : data.data();
    p.private_data_len = static_cast<std::uint8_t>(data.size());
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    p.qp_num = qp_num;
    BOOST_REQUIRE_MESSAGE(::rdma_connect(id, &p) == 0, "rdma_connect: " << std::strerror(errno));
    if (rdma_cm_event* ev = ch.next(20s); ev != nullptr) {
        out.event = ev->event;
        const auto* b = static_cast<const std::uint8_t*>(ev->param.conn.private_data);
        if (b != nullptr) out.data.assign(b, b + ev->param.conn.private_data_len);
        ::rdma_ack_cm_event(ev);
    }
    ::rdma_destroy_id(id);
    return out;
}

// The text of a weft refusal in REJ private data, or what is wrong with it.
std::string refusal_text(const Answer& a) {
    std::span<const std::byte> text;
    const std::string problem = wire::decode_frame(a.data.data(), a.data.size(), wire::FrameKind::refusal, text);
    return problem.empty() ? wire::printable(text) : "(no refusal: " + problem + ")";
}

std::vector<std::uint8_t> bytes(std::initializer_list<int> v) {
    std::vector<std::uint8_t> out;
    for (int b : v) out.push_back(static_cast<std::uint8_t>(b));
    return out;
}

// A 56-byte private data field holding the frame header `w KIND version length` and then `fill`.
std::vector<std::uint8_t> field(std::uint8_t version, std::uint8_t length, std::uint8_t fill = 0, char kind = 'C') {
    std::vector<std::uint8_t> f(56, fill);
    f[0] = 'w';
    f[1] = static_cast<std::uint8_t>(kind);
    f[2] = version;
    f[3] = length;
    return f;
}

// A framed connect request: flags and MTU in one byte, a PSN, and the application's `data`.
std::vector<std::uint8_t> framed_request(std::uint8_t flags_mtu, std::vector<std::uint8_t> data = {}) {
    std::vector<std::uint8_t> f(8 + data.size());
    const std::uint8_t head[8] = {'w', 'Q', 1, static_cast<std::uint8_t>(4 + data.size()), flags_mtu, 0x21, 0x43, 0x05};
    std::copy(std::begin(head), std::end(head), f.begin());
    std::copy(data.begin(), data.end(), f.begin() + 8);
    return f;
}

// A framed QP address with fields changed (offset, new bytes) and the checksum made right again, so that the
// fields' own checks are what refuse it.
std::vector<std::uint8_t> framed_address(const QueuePair& qp,
                                         std::initializer_list<std::pair<std::size_t, std::vector<std::uint8_t>>> changes) {
    auto a = qp.address();
    for (const auto& [offset, value] : changes) {
        for (std::size_t i = 0; i < value.size(); ++i) a[offset + i] = std::byte{value[i]};
    }
    std::uint32_t h = 2166136261u;  // FNV-1a, as verbs_wire.cpp seals it
    for (std::size_t i = 0; i < 36; ++i) h = (h ^ static_cast<std::uint8_t>(a[i])) * 16777619u;
    for (int i = 0; i < 4; ++i) a[36 + i] = std::byte{static_cast<std::uint8_t>(h >> (8 * i))};
    const auto f = wire::encode_frame(wire::FrameKind::address, a, 56);
    return {f.begin(), f.end()};
}

// Bytes a written region holds, checked after a transfer.
bool same(const std::vector<std::byte>& a, std::size_t at, const std::vector<std::byte>& b, std::size_t bt,
          std::size_t n) {
    return std::memcmp(a.data() + at, b.data() + bt, n) == 0;
}

// Read system calls (syscr) and write system calls (syscw) this process has made, from /proc/self/io.
std::pair<long long, long long> io_syscalls() {
    std::ifstream in("/proc/self/io");
    std::string key;
    long long value = 0, r = -1, w = -1;
    while (in >> key >> value) {
        if (key == "syscr:") r = value;
        if (key == "syscw:") w = value;
    }
    return {r, w};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(hostile_peers)

BOOST_AUTO_TEST_CASE(listener_refuses_garbage_private_data_and_serves_the_next_client, *needs_device()) {
    Side server;
    const std::string ip = device_ipv4(server.dom);
    Listener lis = weft::listen(server.dom, ip + ":0");
    const std::uint16_t port = port_of(lis.address());
    std::exception_ptr accept_error;
    std::thread acceptor([&] {
        try {
            lis.accept(server.qp, 120s);
        } catch (...) {
            accept_error = std::current_exception();
        }
    });

    Side probe;  // an old-style frame: a whole QP address
    struct Case {
        const char* what;
        std::vector<std::uint8_t> data;
        const char* refusal;  // words the listener's refusal must hold
        std::uint32_t qp_num = 0x1234;
    };
    const std::uint8_t roce = 0x01 | (3 << 4);  // GID present, MTU 1024
    const Case cases[] = {
        {"no private data", {}, "holds no weft connect request"},
        // The listener is told the whole 56-byte field, zero-filled: three bytes read as an empty frame.
        {"3 bytes", bytes({'w', 'Q', 1}), "0-byte connect request"},
        {"another protocol's bytes", bytes({'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'}),
         "holds no weft connect request"},
        {"a whole QP address, as an answer carries", framed_address(probe.qp, {}), "holds no weft connect request"},
        {"frame version 7", field(7, 4, 0, 'Q'), "version 7"},
        {"an empty frame", field(1, 0, 0, 'Q'), "0-byte connect request"},
        {"a frame claiming 200 bytes", field(1, 200, 0xaa, 'Q'), "claims 200 bytes"},
        {"unknown flags", framed_request(0xaa), "unknown flags"},
        {"MTU code 9", framed_request(0x91), "MTU code 9"},
        {"MTU code 0", framed_request(0x01), "MTU code 0"},
        {"no GID on an Ethernet port", framed_request(3 << 4), "GID"},
        {"QP number 1", framed_request(roce, {1, 2, 3}), "QP number 1 is outside", 1},
    };
    for (const Case& c : cases) {
        BOOST_TEST_CONTEXT(c.what) {
            const Answer a = raw_connect(ip, port, c.data, c.qp_num);
            BOOST_TEST(a.event == RDMA_CM_EVENT_REJECTED, rdma_event_str(a.event));
            const std::string text = refusal_text(a);
            BOOST_TEST_MESSAGE(c.what << ": " << text);
            BOOST_TEST(contains(text, c.refusal), text);
        }
    }
    BOOST_TEST(server.qp.state() == QpState::init);  // no refused request touched it

    // A real client is served by the same accept().
    Side client;
    weft::connect(client.qp, lis.address(), 60s);
    acceptor.join();
    if (accept_error) std::rethrow_exception(accept_error);
    BOOST_TEST(server.qp.state() == QpState::rts);
    BOOST_TEST(client.qp.state() == QpState::rts);
    for (std::size_t i = 0; i < 256; ++i) client.buf[i] = std::byte{static_cast<unsigned char>(i * 7)};
    BOOST_REQUIRE(client.qp.post_send({write(1, client.mr.slice(0, 256), server.mr.remote().slice(4096, 256))}));
    auto c = next_within(client.cq, 10s);
    BOOST_REQUIRE(c.has_value());
    BOOST_TEST(c->status == WcStatus::success);
    BOOST_TEST(same(server.buf, 4096, client.buf, 0, 256));
}

BOOST_AUTO_TEST_CASE(accept_times_out_naming_the_request_it_refused, *needs_device()) {
    Side server;
    const std::string ip = device_ipv4(server.dom);
    Listener lis = weft::listen(server.dom, ip + ":0");
    std::thread garbage([&] { (void)raw_connect(ip, port_of(lis.address()), bytes({1, 2, 3, 4, 5})); });
    Error e = error_of([&] { lis.accept(server.qp, 8s); });
    garbage.join();
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == std::errc::timed_out));
    BOOST_TEST(contains(e.what(), "refused one: the connect request from " + ip), e.what());
    BOOST_TEST(server.qp.state() == QpState::init);
}

// A listener that answers with bytes of its own choosing: the connector refuses them and its QP stays
// fresh.
BOOST_AUTO_TEST_CASE(connector_refuses_a_hostile_answer_and_keeps_its_qp_fresh, *needs_device()) {
    Side client;
    const std::string ip = device_ipv4(client.dom);
    Channel ch;
    rdma_cm_id* listen_id = nullptr;
    BOOST_REQUIRE(::rdma_create_id(ch.ch, &listen_id, nullptr, RDMA_PS_TCP) == 0);
    sockaddr_in any = ipv4(ip, 0);
    BOOST_REQUIRE(::rdma_bind_addr(listen_id, reinterpret_cast<sockaddr*>(&any)) == 0);
    BOOST_REQUIRE(::rdma_listen(listen_id, 8) == 0);
    const std::string where = ip + ":" + std::to_string(ntohs(::rdma_get_src_port(listen_id)));

    struct Round {
        const char* what;
        bool accept;  // answer with a REP carrying `data`, else a REJ carrying it
        std::vector<std::uint8_t> data;
        std::errc code;
        Errc weft_code;
        const char* words;
    };
    Side other;  // a real address to spoil
    const auto junk_address = field(1, 40, 0x5a);
    const std::string evil = "go away\n\x1b[2J\x07";
    std::vector<std::uint8_t> evil_frame = bytes({'w', 'R', 1, static_cast<int>(evil.size())});
    evil_frame.insert(evil_frame.end(), evil.begin(), evil.end());
    const Round rounds[] = {
        {"a REP with no weft frame", true, bytes({'x', 'y'}), std::errc{}, Errc::bad_descriptor, "not a weft listener's"},
        {"a REP with 40 bytes of junk", true, junk_address, std::errc{}, Errc::bad_descriptor, "bad magic"},
        {"a REP with QP number 0", true, framed_address(other.qp, {{28, {0, 0, 0, 0}}}), std::errc{}, Errc::bad_descriptor,
         "QP number 0"},
        {"a REJ with control characters", false, evil_frame, std::errc::connection_refused, Errc{}, "go away??[2J?"},
        {"a REJ with no weft frame", false, bytes({0, 0, 0}), std::errc::connection_refused, Errc{}, "IB CM reason"},
    };
    for (const Round& r : rounds) {
        BOOST_TEST_CONTEXT(r.what) {
            std::thread hostile([&] {
                rdma_cm_event* ev = ch.next(30s);
                if (ev == nullptr || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
                    if (ev != nullptr) ::rdma_ack_cm_event(ev);
                    return;
                }
                rdma_cm_id* id = ev->id;
                ::rdma_ack_cm_event(ev);
                if (r.accept) {
                    rdma_conn_param p{};
                    p.private_data = r.data.data();
                    p.private_data_len = static_cast<std::uint8_t>(r.data.size());
                    p.responder_resources = 1;
                    p.initiator_depth = 1;
                    p.qp_num = 0x4321;
                    ::rdma_accept(id, &p);
                } else {
                    ::rdma_reject(id, r.data.data(), static_cast<std::uint8_t>(r.data.size()));
                }
                // Whatever follows for this connection (the connector's REJ, a disconnect) is read and dropped.
                while (rdma_cm_event* more = ch.next(2s)) ::rdma_ack_cm_event(more);
                ::rdma_destroy_id(id);
            });
            Error e = error_of([&] { weft::connect(client.qp, where, 20s); });
            hostile.join();
            BOOST_TEST_MESSAGE(r.what << ": " << e.what());
            if (r.weft_code != Errc{}) {
                BOOST_TEST((e.code() == r.weft_code));
            } else {
                BOOST_TEST((e.code() == r.code));
            }
            BOOST_TEST(contains(e.what(), r.words), e.what());
            BOOST_TEST(client.qp.state() == QpState::init);
        }
    }
    ::rdma_destroy_id(listen_id);
}

BOOST_AUTO_TEST_CASE(malformed_address_leaves_the_qp_fresh_for_a_good_one, *needs_device()) {
    Side a, b;
    auto addr = b.qp.address();
    addr.resize(39);
    Error e = error_of([&] { a.qp.connect(addr); });
    BOOST_TEST((e.code() == Errc::bad_descriptor));
    BOOST_TEST(contains(e.what(), "expected 40 bytes, got 39"), e.what());
    BOOST_TEST(a.qp.state() == QpState::init);
    connect_pair(a, b);
    BOOST_TEST(a.qp.state() == QpState::rts);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(completions)

// rxe treats retry_cnt 7 as "retry forever"; weft programs 6 there, so the default reports a dead peer.
BOOST_AUTO_TEST_CASE(dead_peer_is_reported_with_the_default_retry_cnt, *needs_device()) {
    Side a, b;  // default QpOptions: timeout 14 (about 67 ms), retry_cnt 7
    BOOST_TEST(QpOptions{}.retry_cnt == 7);
    connect_pair(a, b);
    b.qp = QueuePair();  // the peer QP is destroyed
    const auto start = Clock::now();
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8), b.mr.remote().slice(0, 8))}));
    auto c = next_within(a.cq, 60s);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    BOOST_REQUIRE_MESSAGE(c.has_value(), "no completion within 60 s: the dead peer was never reported");
    BOOST_TEST_MESSAGE("transport_retry_exceeded after " << took.count() << " ms");
    BOOST_TEST(c->id == 1u);
    BOOST_TEST(c->status == WcStatus::transport_retry_exceeded);
    BOOST_TEST(took >= 200ms);  // retried, not refused at once
    BOOST_TEST(a.qp.state() == QpState::error);
}

// A receive posted after the QP failed but before anything reported it, then state(), then poll: the
// receive is flushed (rxe does not flush it by itself; whoever learns of the error first re-runs the flush).
BOOST_AUTO_TEST_CASE(state_between_a_failure_and_its_poll_leaves_no_receive_unflushed, *needs_device()) {
    Side a, b;
    connect_pair(a, b);
    const RemoteRegion bogus(b.mr.remote().addr(), 64, b.mr.rkey() ^ 0x5a5a00, b.mr.remote().backend());
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8), bogus)}));
    std::this_thread::sleep_for(500ms);  // the NAK arrives: a is in error, no one has looked
    BOOST_REQUIRE(a.qp.post_recv({recv(71, a.mr.slice(0, 64))}));
    BOOST_TEST(a.qp.state() == QpState::error);
    std::vector<Completion> got;
    for (int i = 0; i < 2; ++i) {
        if (auto c = next_within(a.cq, 10s)) got.push_back(*c);
    }
    BOOST_REQUIRE_MESSAGE(got.size() == 2u, "completions within 10 s: " << got.size() << " (the receive was not flushed)");
    for (const auto& c : got) {
        if (c.id == 1) BOOST_TEST(c.status == WcStatus::remote_access);
        if (c.id == 71) BOOST_TEST(c.status == WcStatus::flushed);
    }
    BOOST_TEST((got[0].id + got[1].id == 72u));
    // And one posted afterwards.
    BOOST_REQUIRE(a.qp.post_recv({recv(72, a.mr.slice(0, 64))}));
    auto c = next_within(a.cq, 10s);
    BOOST_REQUIRE(c.has_value());
    BOOST_TEST(c->id == 72u);
    BOOST_TEST(c->status == WcStatus::flushed);
}

// rxe moves the responder of a request with a bad rkey to error without a completion: state() finds it out
// and flushes the receive posted before it.
BOOST_AUTO_TEST_CASE(responder_in_error_without_a_completion_flushes_once_state_sees_it, *needs_device()) {
    Side a, b;
    connect_pair(a, b);
    const RemoteRegion bogus(b.mr.remote().addr(), 64, b.mr.rkey() ^ 0x5a5a00, b.mr.remote().backend());
    BOOST_REQUIRE(a.qp.post_send({write(1, a.mr.slice(0, 8), bogus)}));
    auto ca = next_within(a.cq, 10s);
    BOOST_REQUIRE(ca.has_value());
    BOOST_TEST(ca->status == WcStatus::remote_access);
    BOOST_REQUIRE(b.qp.post_recv({recv(81, b.mr.slice(0, 64))}));
    const QpState s = b.qp.state();
    BOOST_TEST_MESSAGE("responder state: " << s);
    if (s != QpState::error) {
        BOOST_TEST_MESSAGE("this device keeps the responder usable: nothing to flush");
        return;
    }
    auto cb = next_within(b.cq, 10s);
    BOOST_REQUIRE_MESSAGE(cb.has_value(), "the receive posted before state() was not flushed within 10 s");
    BOOST_TEST(cb->id == 81u);
    BOOST_TEST(cb->status == WcStatus::flushed);
}

// fd() mode, round after round: wait for the fd, poll until empty, post more. A poll that returns
// completions makes no system call; the empty poll that ends a round arms the CQ again.
BOOST_AUTO_TEST_CASE(fd_protocol_holds_round_after_round_without_system_calls_on_full_polls, *needs_device()) {
    Side a, b;
    connect_pair(a, b);
    const int fd = a.cq.fd();
    BOOST_REQUIRE(fd >= 0);
    const long long self = [] {
        const auto x = io_syscalls();
        const auto y = io_syscalls();
        return (y.first - x.first) + (y.second - x.second);
    }();
    long long calls_in_full_polls = 0;
    int full_polls = 0;
    Completion wc[4];
    std::uint64_t next_id = 1, seen = 0;
    for (int round = 0; round < 40; ++round) {
        const int n = 1 + round % 3;
        for (int i = 0; i < n; ++i) {
            BOOST_REQUIRE(a.qp.post_send({write(next_id++, a.mr.slice(0, 8), b.mr.remote().slice(8u * i, 8))}));
        }
        pollfd p{fd, POLLIN, 0};
        BOOST_REQUIRE_MESSAGE(::poll(&p, 1, 10000) == 1, "round " << round << ": the fd did not become readable");
        for (;;) {
            const auto before = io_syscalls();
            const auto got = a.cq.poll(wc);
            const auto after = io_syscalls();
            if (got.empty()) break;
            ++full_polls;
            calls_in_full_polls += (after.first - before.first) + (after.second - before.second) - self;
            for (const auto& c : got) {
                BOOST_TEST(c.status == WcStatus::success);
                seen += 1;
            }
        }
        // Completions that came after the emptying poll armed the CQ make the fd readable again: the next
        // round finds them.
    }
    while (seen < next_id - 1) {
        pollfd p{fd, POLLIN, 0};
        BOOST_REQUIRE(::poll(&p, 1, 10000) == 1);
        while (true) {
            const auto got = a.cq.poll(wc);
            if (got.empty()) break;
            seen += got.size();
        }
    }
    BOOST_TEST(seen == next_id - 1);
    BOOST_TEST_MESSAGE(full_polls << " polls returned completions, with " << calls_in_full_polls << " system calls in all");
    BOOST_TEST(calls_in_full_polls == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(shared_receive_queues)

namespace {

// A server domain with one shared receive queue and `n` QPs on it, QP i completing its receives on CQ i, each
// connected to a client Side of its own.
struct SrqServer {
    explicit SrqServer(std::size_t n, SrqOptions o = {.max_recv = 8}) : dom(weft::open(config())), buf(64 * 1024) {
        mr = dom.register_memory(buf.data(), buf.size(), all_access);
        srq = dom.create_srq(o);
        for (std::size_t i = 0; i < n; ++i) {
            cqs.push_back(dom.create_cq({.depth = 256}));
            qps.push_back(dom.create_qp({.send_cq = cqs.back(), .recv_cq = cqs.back(), .srq = srq}));
            clients.push_back(std::make_unique<Side>());
            const auto sa = qps.back().address();
            qps.back().connect(clients.back()->qp.address());
            clients.back()->qp.connect(sa);
        }
    }
    // Client `i` sends `len` bytes and waits for the send's completion.
    Completion send_from(std::size_t i, std::uint64_t id, std::uint32_t len) {
        Side& c = *clients[i];
        BOOST_REQUIRE(c.qp.post_send({send(id, c.mr.slice(0, len))}));
        auto done = next_within(c.cq, 10s);
        BOOST_REQUIRE_MESSAGE(done.has_value(), "client " << i << ": no send completion within 10 s");
        return *done;
    }

    Domain dom;
    std::vector<std::byte> buf;
    MemoryRegion mr;
    SharedReceiveQueue srq;
    std::vector<CompletionQueue> cqs;
    std::vector<QueuePair> qps;
    std::vector<std::unique_ptr<Side>> clients;
};

}  // namespace

// Receives of one queue complete on two CQs, polled one CQ after the other, so slots come back out of the
// order they were posted in; round after round the whole queue is posted again (every slot came back) and
// every completion carries the id of the receive its message took.
BOOST_AUTO_TEST_CASE(slots_come_back_out_of_order_across_cqs, *needs_device()) {
    SrqServer s(2);
    const std::uint32_t depth = s.srq.max_recv();
    BOOST_TEST_MESSAGE("shared receive queue of " << depth << " receives");
    std::uint64_t next_id = 1000;
    for (int round = 0; round < 4; ++round) {
        BOOST_TEST_CONTEXT("round " << round) {
            std::vector<RecvRequest> batch;
            for (std::uint32_t i = 0; i < depth; ++i) batch.push_back(recv(next_id + i, s.mr.slice(64u * i, 64)));
            BOOST_REQUIRE(s.srq.post_recv(batch));
            BOOST_TEST((s.srq.post_recv({recv(1, s.mr.slice(0, 8))}).code() == PostStatus::Code::queue_full));
            // Message k comes from client (k + round) % 3 == 0 ? 0 : 1, with k + 1 bytes, and takes receive k.
            std::vector<std::size_t> from(depth);
            for (std::uint32_t k = 0; k < depth; ++k) {
                from[k] = (k + static_cast<std::uint32_t>(round)) % 3 == 0 ? 0 : 1;
                BOOST_REQUIRE(s.send_from(from[k], k, k + 1).status == WcStatus::success);
            }
            // CQ 1 first, then CQ 0.
            std::uint32_t seen = 0;
            for (std::size_t q : {std::size_t{1}, std::size_t{0}}) {
                for (std::uint32_t k = 0; k < depth; ++k) {
                    if (from[k] != q) continue;
                    auto c = next_within(s.cqs[q], 10s);
                    BOOST_REQUIRE_MESSAGE(c.has_value(), "message " << k << ": no receive completion on CQ " << q);
                    BOOST_TEST(c->id == next_id + k);
                    BOOST_TEST(c->status == WcStatus::success);
                    BOOST_TEST((c->opcode == Opcode::recv));
                    BOOST_TEST(c->byte_len == k + 1);
                    BOOST_TEST(c->qp_num == s.qps[q].qp_num());
                    ++seen;
                }
            }
            BOOST_TEST(seen == depth);
            next_id += depth;
        }
    }
}

// A message longer than the receive it takes fails there: the server's completion carries that receive's id
// and an error, the failed QP takes no more, and the queue serves the other QP. Whether the device reports
// Last WQE Reached for the failed QP is printed (rxe does not).
BOOST_AUTO_TEST_CASE(a_failed_receive_keeps_its_id_and_the_queue_serves_on, *needs_device()) {
    SrqServer s(2);
    BOOST_REQUIRE(s.srq.post_recv({recv(70, s.mr.slice(0, 16)), recv(71, s.mr.slice(64, 64)), recv(72, s.mr.slice(128, 64))}));
    const Completion sent = s.send_from(0, 1, 48);  // into 16 bytes
    BOOST_TEST_MESSAGE("requester: " << sent.status);
    auto bad = next_within(s.cqs[0], 10s);
    BOOST_REQUIRE(bad.has_value());
    BOOST_TEST(bad->id == 70u);
    BOOST_TEST(bad->status != WcStatus::success);
    BOOST_TEST_MESSAGE("responder: " << bad->status);
    BOOST_TEST((bad->opcode == Opcode::recv));
    BOOST_TEST(bad->qp_num == s.qps[0].qp_num());
    BOOST_TEST(s.qps[0].state() == QpState::error);
    BOOST_TEST(!next_within(s.cqs[0], 100ms).has_value());  // the queue's other receives were not flushed
    const auto until = Clock::now() + 300ms;
    while (Clock::now() < until) {
        if (auto e = s.dom.next_event()) BOOST_TEST_MESSAGE("event: " << to_string(e->type) << " (" << e->what << ") qp " << e->qp_num);
        std::this_thread::sleep_for(1ms);
    }
    BOOST_TEST(s.send_from(1, 2, 32).status == WcStatus::success);
    auto good = next_within(s.cqs[1], 10s);
    BOOST_REQUIRE(good.has_value());
    BOOST_TEST(good->id == 71u);
    BOOST_TEST(good->status == WcStatus::success);
    BOOST_TEST(good->byte_len == 32u);
    BOOST_TEST(good->qp_num == s.qps[1].qp_num());
}

// Completions of a destroyed queue's receives left in a CQ are dropped, not taken for those of the queue
// created after it (which gets the same table entry, of a new generation).
BOOST_AUTO_TEST_CASE(a_destroyed_queue_leaves_nothing_for_the_next, *needs_device()) {
    Domain dom = weft::open(config());
    std::vector<std::byte> buf(4096);
    MemoryRegion mr = dom.register_memory(buf.data(), buf.size(), all_access);
    CompletionQueue cq = dom.create_cq({.depth = 64});
    Side client;
    {
        SharedReceiveQueue first = dom.create_srq({.max_recv = 8});
        QueuePair qp = dom.create_qp({.send_cq = cq, .recv_cq = cq, .srq = first});
        const auto qa = qp.address();
        qp.connect(client.qp.address());
        client.qp.connect(qa);
        BOOST_REQUIRE(first.post_recv({recv(1, mr.slice(0, 64)), recv(2, mr.slice(64, 64))}));
        for (std::uint64_t id : {11, 12}) {
            BOOST_REQUIRE(client.qp.post_send({send(id, client.mr.slice(0, 8))}));
            auto c = next_within(client.cq, 10s);
            BOOST_REQUIRE(c.has_value());
            BOOST_TEST(c->status == WcStatus::success);
        }
    }  // the QP and the queue go, their two completions unpolled
    SharedReceiveQueue second = dom.create_srq({.max_recv = 8});
    QueuePair qp = dom.create_qp({.send_cq = cq, .recv_cq = cq, .srq = second});
    Side client2;
    const auto qa = qp.address();
    qp.connect(client2.qp.address());
    client2.qp.connect(qa);
    BOOST_REQUIRE(second.post_recv({recv(90, mr.slice(0, 64))}));
    BOOST_REQUIRE(client2.qp.post_send({send(13, client2.mr.slice(0, 24))}));
    auto c = next_within(cq, 10s);
    BOOST_REQUIRE(c.has_value());
    BOOST_TEST(c->id == 90u);
    BOOST_TEST(c->byte_len == 24u);
    BOOST_TEST(c->qp_num == qp.qp_num());
    BOOST_TEST(!next_within(cq, 100ms).has_value());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(configuration)

BOOST_AUTO_TEST_CASE(unknown_device_port_and_gid_index_name_what_exists, *needs_device()) {
    Domain dom = weft::open(config());
    const std::string device = dom.capabilities().device;

    Error e = error_of([] { (void)weft::open("verbs:device=nosuch9"); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == std::errc::no_such_device));
    BOOST_TEST(contains(e.what(), "no RDMA device named 'nosuch9' (found: "), e.what());
    BOOST_TEST(contains(e.what(), device), e.what());
    BOOST_TEST(contains(e.what(), std::system_category().message(ENODEV)), e.what());
    BOOST_TEST(e.backend() == "verbs");

    e = error_of([&] { (void)weft::open("verbs:device=" + device + ",port=9"); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == std::errc::invalid_argument));
    BOOST_TEST(contains(e.what(), "port 9 is out of range: " + device + " has ports 1.."), e.what());
    BOOST_TEST(contains(e.what(), std::system_category().message(EINVAL)), e.what());

    e = error_of([&] { (void)weft::open("verbs:device=" + device + ",gid_index=9"); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST(contains(e.what(), "gid_index 9 of " + device + " port 1 is not valid"), e.what());
    BOOST_TEST(contains(e.what(), "valid entries: 0 "), e.what());
    BOOST_TEST((e.code().category() == std::system_category()));
    BOOST_TEST(contains(e.what(), std::system_category().message(e.code().value())), e.what());

    e = error_of([&] { (void)weft::open("verbs:device=" + device + ",gid_index=100000"); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == Errc::invalid_config));
    BOOST_TEST(contains(e.what(), "accepted: an integer in 0.."), e.what());

    e = error_of([&] { (void)weft::open("verbs:device=" + device + ",mtu=1000"); });
    BOOST_TEST((e.code() == Errc::invalid_config));
    BOOST_TEST(contains(e.what(), "4096"), e.what());

    e = error_of([] { (void)weft::open("verbs:devcie=rxe0"); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == Errc::invalid_config));
    BOOST_TEST(contains(e.what(), "devcie"), e.what());
    BOOST_TEST(contains(e.what(), "gid_index"), e.what());  // the keys that exist
}

BOOST_AUTO_TEST_SUITE_END()
