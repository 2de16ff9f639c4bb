// How the ofi backend learns that a peer is gone (docs/backends/ofi.md, "Peer loss"): a TCP connection to a
// socket the peer QP holds, kept by the two kernels, breaks when the peer QP is destroyed, goes to error or
// its process ends. A peer that is merely slow, descheduled or stopped keeps it, so nothing here depends on
// the peer's program running: a stopped peer is never declared lost, signaled or unsignaled, however short
// the QP's timeout. It must not touch what real RC does not time out either: a send waiting for a receive
// (RNR, which these providers wait for forever). timeout = 0 means infinite, as on a real QP.
#include <weft/weft.hpp>

#include "support.hpp"

#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string config() { return weft::test::ofi_config(); }

// About 2 ms: 4.096 us x 2^8 per try, two tries.
weft::QpOptions short_deadline() {
    weft::QpOptions o;
    o.timeout = 8;
    o.retry_cnt = 1;
    return o;
}

using Side = weft::test::OfiSide;

// Polls `cq` for up to `limit`; false when nothing came.
bool poll_for(weft::CompletionQueue& cq, weft::Completion& out, std::chrono::milliseconds limit) {
    weft::Completion wc[1];
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (cq.poll(wc).empty()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
    }
    out = wc[0];
    return true;
}

// A precondition: the deadline exists only on RDM endpoints.
boost::test_tools::assertion_result rdm_only(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result r(weft::open(config()).capabilities().device.ends_with("(rdm)"));
    if (!r) r.message() << config() << " has MSG endpoints, which report a lost peer themselves";
    return r;
}

void write_all(int fd, const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    while (n > 0) {
        ssize_t w = ::write(fd, b, n);
        if (w <= 0) throw std::runtime_error("pipe write failed");
        b += w;
        n -= static_cast<std::size_t>(w);
    }
}

void read_all(int fd, void* p, std::size_t n) {
    auto* b = static_cast<std::byte*>(p);
    while (n > 0) {
        ssize_t r = ::read(fd, b, n);
        if (r <= 0) throw std::runtime_error("pipe read failed");
        b += r;
        n -= static_cast<std::size_t>(r);
    }
}

void send_blob(int fd, const std::vector<std::byte>& v) {
    auto n = static_cast<std::uint32_t>(v.size());
    write_all(fd, &n, sizeof n);
    write_all(fd, v.data(), v.size());
}

std::vector<std::byte> receive_blob(int fd) {
    std::uint32_t n = 0;
    read_all(fd, &n, sizeof n);
    std::vector<std::byte> v(n);
    read_all(fd, v.data(), n);
    return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(peer_loss)

BOOST_AUTO_TEST_CASE(writes_to_a_peer_that_answers_outlive_a_short_deadline) {
    Side a(config(), short_deadline()), b;
    a.qp.connect(b.qp.address());
    b.qp.connect(a.qp.address());
    weft::Completion c;
    for (std::uint64_t i = 0; i < 300; ++i) {
        BOOST_REQUIRE(a.qp.post_send({weft::write(i, a.mr.slice(0, 64), b.mr.remote().slice(64, 64))}));
        BOOST_REQUIRE(poll_for(a.cq, c, std::chrono::seconds(10)));
        BOOST_REQUIRE_MESSAGE(c.ok(), "write " << i << ": " << c);
    }
    BOOST_TEST(a.qp.state() == weft::QpState::rts);
}

BOOST_AUTO_TEST_CASE(a_send_waiting_for_a_receive_is_not_timed_out) {
    Side a(config(), short_deadline()), b;
    a.qp.connect(b.qp.address());
    b.qp.connect(a.qp.address());
    // A first request that finishes: the deadline then applies in full (see OfiQp::watch).
    weft::Completion c;
    BOOST_REQUIRE(a.qp.post_send({weft::write(0, a.mr.slice(0, 8), b.mr.remote().slice(64, 8))}));
    BOOST_REQUIRE(poll_for(a.cq, c, std::chrono::seconds(10)));
    BOOST_REQUIRE(c.ok());
    BOOST_REQUIRE(a.qp.post_send({weft::send(1, a.mr.slice(0, 32))}));
    // Both sides poll (so every provider progresses) for 25 deadlines without a receive. Providers that
    // buffer the message complete the send; none may fail it.
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    bool sent = false, target_completed = false;
    while (std::chrono::steady_clock::now() < until) {
        if (!sent && poll_for(a.cq, c, std::chrono::milliseconds(1))) {
            BOOST_TEST_REQUIRE(c.ok(), "the send waiting for a receive failed: " << c);
            sent = true;
        }
        weft::Completion wc[1];
        target_completed |= !b.cq.poll(wc).empty();
    }
    BOOST_TEST(!target_completed);
    BOOST_TEST(a.qp.state() == weft::QpState::rts);
    BOOST_REQUIRE(b.qp.post_recv({weft::recv(2, b.mr.slice(0, 64))}));
    BOOST_REQUIRE(poll_for(b.cq, c, std::chrono::seconds(10)));
    BOOST_TEST(c.ok());
    BOOST_TEST(c.byte_len == 32u);
    if (!sent) {
        BOOST_REQUIRE(poll_for(a.cq, c, std::chrono::seconds(10)));
        BOOST_TEST(c.ok());
        BOOST_TEST(c.id == 1u);
    }
}

// Unsignaled requests complete silently; once delivered they are behind the consumer even though no
// reported completion has freed their slots yet. None of them may later count as unanswered.
BOOST_AUTO_TEST_CASE(an_unsignaled_write_never_puts_the_qp_in_error) {
    Side a(config(), short_deadline()), b;
    a.qp.connect(b.qp.address());
    b.qp.connect(a.qp.address());
    weft::Completion c;
    BOOST_REQUIRE(a.qp.post_send({weft::write(0, a.mr.slice(0, 8), b.mr.remote().slice(64, 8))}));
    BOOST_REQUIRE(poll_for(a.cq, c, std::chrono::seconds(10)));
    BOOST_REQUIRE(c.ok());
    BOOST_REQUIRE(a.qp.post_send({weft::write(1, a.mr.slice(0, 8), b.mr.remote().slice(64, 8)).unsignaled()}));
    // Many deadlines of idle polling on both sides.
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (std::chrono::steady_clock::now() < until) {
        weft::Completion wc[1];
        if (!a.cq.poll(wc).empty()) BOOST_FAIL("unexpected completion: " << wc[0]);
        (void)b.cq.poll(wc);
    }
    BOOST_TEST(a.qp.state() == weft::QpState::rts);
    BOOST_REQUIRE(a.qp.post_send({weft::write(2, a.mr.slice(0, 8), b.mr.remote().slice(64, 8))}));
    BOOST_REQUIRE(poll_for(a.cq, c, std::chrono::seconds(10)));
    BOOST_TEST(c.id == 2u);
    BOOST_TEST(c.ok(), c);
}

// The peer side of the tests below runs in a process of its own. It is a fresh execution of this binary
// (fork, then exec), never a bare fork: a child forked after the earlier cases opened fabrics inherits
// the providers' process-wide state (rxm over verbs keeps its fabric and progress in it) and cannot reach
// its parent. The child's mode, pipes and configuration travel in argv, ahead of Boost.Test's own options,
// and are read before main by the runner at the end of this file.
constexpr const char* peer_flag = "--weft-peer-loss-child";

enum class PeerMode { poll_forever, connect_and_exit, error_then_poll, close_with_unread };

// The peer: opens its side, hands our end its address and region, connects to the address it is given,
// then either polls its CQ until killed or destroys everything and says so.
[[noreturn]] void run_peer(PeerMode mode, int in, int out, const std::string& config) {
    int rc = 0;
    {
        try {
            Side peer(config);
            send_blob(out, peer.qp.address());
            auto encoded = peer.mr.remote().encode();
            write_all(out, encoded.data(), encoded.size());
            if (mode == PeerMode::error_then_poll) {
                // A receive whose key names no region: the QP completes it local_protection and goes to error
                // before it hears of its peer.
                weft::LocalSegment bad = peer.mr.slice(0, 8);
                bad.lkey ^= 0x5a5a5;
                if (!peer.qp.post_recv({weft::recv(99, bad)})) throw std::runtime_error("bad receive refused");
                weft::Completion wc[1];
                while (peer.cq.poll(wc).empty()) {
                }
                if (peer.qp.state() != weft::QpState::error) throw std::runtime_error("the QP did not go to error");
                (void)receive_blob(in);
                mode = PeerMode::poll_forever;
            } else if (mode == PeerMode::close_with_unread) {
                // Polls until the first message arrives (a connection-based provider connects only while it
                // is progressed), then no more: the second stays in the provider's queues, unread, while
                // the QP is destroyed.
                if (!peer.qp.post_recv({weft::recv(1, peer.mr.slice(0, 64)), weft::recv(2, peer.mr.slice(64, 64))})) {
                    throw std::runtime_error("receives refused");
                }
                peer.qp.connect(receive_blob(in));
                weft::Completion wc[1];
                while (peer.cq.poll(wc).empty()) {
                }
                if (wc[0].id != 1 || !wc[0].ok()) throw std::runtime_error("the first receive did not complete");
                char ready = 1;
                write_all(out, &ready, 1);
                char destroy = 0;
                read_all(in, &destroy, 1);
            } else {
                peer.qp.connect(receive_blob(in));
            }
            if (mode == PeerMode::poll_forever) {
                char ready = 1;
                write_all(out, &ready, 1);
                for (;;) {
                    weft::Completion wc[4];
                    (void)peer.cq.poll(wc);
                    std::this_thread::sleep_for(std::chrono::microseconds(50));
                }
            }
        } catch (const std::exception& e) {
            std::fprintf(stderr, "peer process: %s\n", e.what());
            rc = 1;
        }
    }
    char gone = 1;  // the QP and its domain are destroyed
    (void)::write(out, &gone, 1);
    ::_exit(rc);
}

// Starts this binary again as a peer in `mode` on `cfg`; returns its pid. `in` and `out` are the child's ends.
pid_t spawn_peer(PeerMode mode, int in, int out, std::string cfg = config()) {
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid != 0) return pid;
    std::string mode_text = mode == PeerMode::poll_forever      ? "poll"
                            : mode == PeerMode::error_then_poll   ? "error"
                            : mode == PeerMode::close_with_unread ? "unread"
                                                                  : "exit";
    std::string in_text = std::to_string(in), out_text = std::to_string(out);
    const char* argv[] = {"weft-ofi-tests", peer_flag, mode_text.c_str(), in_text.c_str(), out_text.c_str(),
                          cfg.c_str(), nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(argv));
    std::fprintf(stderr, "peer process: exec /proc/self/exe: %s\n", std::strerror(errno));
    ::_exit(127);
}

// A peer process that polls its CQ until it ends: SIGSTOP stands for the heaviest load (its program does
// not run at all), SIGKILL for its end. Not SIGTERM: a provider library may install a handler for it that
// calls exit(), and exit() on the peer's service thread races its main thread over static objects. Started
// before the test's own side opens anything.
class PeerProcess {
public:
    explicit PeerProcess(PeerMode mode = PeerMode::poll_forever, const std::string& cfg = config()) {
        if (::pipe(to_child_) != 0 || ::pipe(to_parent_) != 0) throw std::runtime_error("pipe");
        pid = spawn_peer(mode, to_child_[0], to_parent_[1], cfg);
        if (pid < 0) throw std::runtime_error("fork");
        ::close(to_child_[0]);
        ::close(to_parent_[1]);
        address = receive_blob(to_parent_[0]);
        weft::RemoteRegion::Encoded encoded{};
        read_all(to_parent_[0], encoded.data(), encoded.size());
        region = weft::RemoteRegion::decode(encoded);
    }
    PeerProcess(const PeerProcess&) = delete;
    PeerProcess& operator=(const PeerProcess&) = delete;
    ~PeerProcess() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
        ::close(to_child_[1]);
        ::close(to_parent_[0]);
    }
    // Hands the peer our QP's address; returns once its QP is connected.
    void connect(const std::vector<std::byte>& ours) {
        give_address(ours);
        wait_ready();
    }
    void give_address(const std::vector<std::byte>& ours) { send_blob(to_child_[1], ours); }
    void wait_ready() {
        char ready = 0;
        read_all(to_parent_[0], &ready, 1);
    }
    // close_with_unread: lets the peer destroy its side; returns its wait status once it has exited.
    int close_and_wait() {
        char go = 1;
        write_all(to_child_[1], &go, 1);
        int status = 0;
        ::waitpid(pid, &status, 0);
        pid = -1;
        return status;
    }
    void end() {
        ::kill(pid, SIGCONT);
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        pid = -1;
    }

    pid_t pid = -1;
    std::vector<std::byte> address;
    weft::RemoteRegion region;

private:
    int to_child_[2] = {-1, -1};
    int to_parent_[2] = {-1, -1};
};

BOOST_AUTO_TEST_CASE(a_stopped_peer_is_never_lost_and_an_ended_one_is) {
    auto peer = std::make_unique<PeerProcess>();
    auto a = std::make_unique<Side>(config(), short_deadline());
    a->qp.connect(peer->address);
    peer->connect(a->qp.address());
    weft::Completion c;
    auto dst = peer->region.slice(0, 8);
    BOOST_REQUIRE(a->qp.post_send({weft::write(1, a->mr.slice(0, 8), dst)}));
    BOOST_REQUIRE(poll_for(a->cq, c, std::chrono::seconds(10)));
    BOOST_REQUIRE_MESSAGE(c.ok(), c);

    // Stopped for 1.5 s, hundreds of times the QP's ~2 ms timeout x retries: signaled and unsignaled writes
    // may wait (most providers need the peer's program to acknowledge them) but none may fail.
    ::kill(peer->pid, SIGSTOP);
    BOOST_REQUIRE(a->qp.post_send({weft::write(2, a->mr.slice(0, 8), dst),
                                   weft::write(3, a->mr.slice(0, 8), dst).unsignaled(),
                                   weft::write(4, a->mr.slice(0, 8), dst)}));
    std::vector<weft::Completion> got;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    while (std::chrono::steady_clock::now() < until) {
        weft::Completion wc[4];
        for (const auto& x : a->cq.poll(wc)) got.push_back(x);
    }
    for (const auto& x : got) BOOST_TEST(x.ok(), "while the peer was stopped: " << x);
    BOOST_TEST(a->qp.state() == weft::QpState::rts);
    ::kill(peer->pid, SIGCONT);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got.size() < 2 && std::chrono::steady_clock::now() < deadline) {
        weft::Completion wc[4];
        for (const auto& x : a->cq.poll(wc)) got.push_back(x);
    }
    BOOST_REQUIRE_EQUAL(got.size(), 2u);
    BOOST_TEST(got[0].id == 2u);
    BOOST_TEST(got[0].ok(), got[0]);
    BOOST_TEST(got[1].id == 4u);
    BOOST_TEST(got[1].ok(), got[1]);

    // Ended: the next write learns it, well within the test's patience.
    peer->end();
    BOOST_REQUIRE(a->qp.post_send({weft::write(5, a->mr.slice(0, 8), dst)}));
    BOOST_REQUIRE(poll_for(a->cq, c, std::chrono::seconds(5)));
    BOOST_TEST(c.id == 5u);
    BOOST_TEST(c.status == weft::WcStatus::transport_retry_exceeded, c);
    BOOST_TEST(a->qp.state() == weft::QpState::error);
}

// A peer process whose QP is in error and whose program keeps running: a send to it completes with an
// error (it neither hangs nor succeeds), exactly once, with the default QP options. (shm, rxm and sockets
// complete a send once they have buffered it: without the backend's check they completed it success.)
BOOST_AUTO_TEST_CASE(a_send_to_a_peer_process_in_error_completes_with_an_error) {
    auto peer = std::make_unique<PeerProcess>(PeerMode::error_then_poll);
    auto a = std::make_unique<Side>(config());
    peer->connect(a->qp.address());  // returns once the peer's QP is in error
    a->qp.connect(peer->address);
    BOOST_REQUIRE(a->qp.post_send({weft::send(1, a->mr.slice(0, 64)), weft::send(2, a->mr.slice(0, 64))}));
    weft::Completion c;
    BOOST_REQUIRE_MESSAGE(poll_for(a->cq, c, std::chrono::seconds(20)), "no completion within 20 s");
    BOOST_TEST(c.id == 1u);
    BOOST_TEST(c.status != weft::WcStatus::success, c);
    BOOST_REQUIRE(poll_for(a->cq, c, std::chrono::seconds(20)));
    BOOST_TEST(c.id == 2u);
    BOOST_TEST(c.status == weft::WcStatus::flushed, c);
    BOOST_TEST(a->qp.state() == weft::QpState::error);
    BOOST_TEST(!poll_for(a->cq, c, std::chrono::milliseconds(200)), "extra completion " << c);
}

// A peer process that connects and exits: with timeout = 0 (infinite) the write to it stays outstanding
// where the provider never reports the loss; with a finite timeout it fails after the deadline.
BOOST_AUTO_TEST_CASE(timeout_zero_waits_for_a_lost_peer_forever, *boost::unit_test::precondition(rdm_only)) {
    for (std::uint8_t timeout : {std::uint8_t{0}, std::uint8_t{8}}) {
        int to_child[2], to_parent[2];
        BOOST_REQUIRE(::pipe(to_child) == 0 && ::pipe(to_parent) == 0);
        pid_t pid = spawn_peer(PeerMode::connect_and_exit, to_child[0], to_parent[1]);
        BOOST_REQUIRE(pid >= 0);
        ::close(to_child[0]);
        ::close(to_parent[1]);
        weft::QpOptions o = short_deadline();
        o.timeout = timeout;
        Side a(config(), o);
        auto peer_address = receive_blob(to_parent[0]);
        weft::RemoteRegion::Encoded region{};
        read_all(to_parent[0], region.data(), region.size());
        send_blob(to_child[1], a.qp.address());
        a.qp.connect(peer_address);
        char gone = 0;
        read_all(to_parent[0], &gone, 1);
        int status = 0;
        ::waitpid(pid, &status, 0);
        BOOST_REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ::close(to_child[1]);
        ::close(to_parent[0]);

        auto dst = weft::RemoteRegion::decode(region);
        BOOST_REQUIRE(a.qp.post_send({weft::write(7, a.mr.slice(0, 8), dst.slice(0, 8))}));
        weft::Completion c;
        if (timeout == 0) {
            BOOST_TEST(!poll_for(a.cq, c, std::chrono::milliseconds(200)), "timeout 0 completed: " << c);
            BOOST_TEST(a.qp.state() == weft::QpState::rts);
        } else {
            BOOST_REQUIRE(poll_for(a.cq, c, std::chrono::seconds(5)));
            BOOST_TEST(c.id == 7u);
            BOOST_TEST(c.status == weft::WcStatus::transport_retry_exceeded);
            BOOST_TEST(a.qp.state() == weft::QpState::error);
        }
    }
}

// A peer process destroys its QP while a message that reached it is still unread in the provider's queues
// (its program stopped polling after the first message): the destroy must not fault. rxm over verbs
// without a shared receive context did (libfabric 1.17): rxm_close_conn closes the connection's verbs
// endpoint, then handles what was queued on it and reposts the message's buffer to the closed endpoint,
// SIGSEGV in fi_recv (docs/backends/ofi.md, "rxm over verbs"). Without delivery_complete (which would wait
// for the peer's program) the second send completes once the peer's device or kernel has the message, so it
// is there before the peer is told to close.
BOOST_AUTO_TEST_CASE(a_peer_destroys_its_qp_with_a_message_unread) {
    const std::string cfg = config() + ",delivery_complete=off";
    auto peer = std::make_unique<PeerProcess>(PeerMode::close_with_unread, cfg);
    auto a = std::make_unique<Side>(cfg);
    peer->give_address(a->qp.address());
    a->qp.connect(peer->address);
    weft::Completion c;
    BOOST_REQUIRE(a->qp.post_send({weft::send(1, a->mr.slice(0, 64))}));
    BOOST_REQUIRE_MESSAGE(poll_for(a->cq, c, std::chrono::seconds(20)), "no completion within 20 s");
    BOOST_REQUIRE_MESSAGE(c.ok(), c);
    peer->wait_ready();
    BOOST_REQUIRE(a->qp.post_send({weft::send(2, a->mr.slice(64, 64))}));
    BOOST_REQUIRE_MESSAGE(poll_for(a->cq, c, std::chrono::seconds(20)), "no completion within 20 s");
    BOOST_REQUIRE_MESSAGE(c.ok(), c);
    const int status = peer->close_and_wait();
    BOOST_TEST_MESSAGE("peer wait status " << status);
    BOOST_TEST(!WIFSIGNALED(status), "the peer died of signal " << WTERMSIG(status) << " destroying its QP");
    // A fault may also end in exit(1): libpsm2, which libfabric loads, installs a SIGSEGV handler that does so.
    BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 0), "the peer did not exit cleanly: status " << status);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// Runs before main: when this process was started as a peer (spawn_peer), it is the peer and nothing else.
const bool peer_child_ran = [] {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string a; std::getline(in, a, '\0');) args.push_back(a);
    if (args.size() != 6 || args[1] != peer_loss::peer_flag) return false;
    auto mode = args[2] == "poll"     ? peer_loss::PeerMode::poll_forever
                : args[2] == "error"  ? peer_loss::PeerMode::error_then_poll
                : args[2] == "unread" ? peer_loss::PeerMode::close_with_unread
                                      : peer_loss::PeerMode::connect_and_exit;
    peer_loss::run_peer(mode, std::stoi(args[3]), std::stoi(args[4]), args[5]);
}();

}  // namespace
