// fd_wait_test — two processes whose threads sleep only on CQ descriptors (CompletionQueue::fd()), with no
// timeout of their own and no other poll: the way an event loop built on epoll waits. The sender posts a
// send right after connect(), before the connection is established, so the QP holds it back until the
// handshake is done; whatever the QP still needs then (the handshake driven, the send handed over, the
// provider progressed) must happen while both programs sleep, and make their descriptors fire. The sender's
// send queue has one slot: as soon as the first send completes it posts a second into the same slot, which
// the service thread handed over a moment ago (the second must reach the receiver too; it did not when the
// thread still wrote to the slot after the provider had taken its request, see OfiQp::post_range_inline).
//
//   weft-ofi-fd-wait CONFIG [srq | one-process]
//
// With `srq` the receiver's QP takes its receive from a shared receive queue and completes it on a CQ of its
// own (not the one it sends on): no provider wakes that CQ's descriptor for it, the service thread must read
// the QP's private CQ (docs/backends/ofi.md, "Shared receive queues").
//
// With `one-process` both QPs live in this process and one thread drives them, sleeping on one CQ's
// descriptor at a time: 1000 round trips, each a send from a (a sleeps on its CQ for the send's completion, b
// on its CQ for the receive) and an answer from b. Nothing but the service thread progresses the CQ a thread
// does not sleep on; a descriptor that missed a wake-up stays silent until the bound below fails the run
// (tcp did, about once in 300 round trips, before the service thread progressed the sleeping CQ too).
//
// The two sides fork before either opens anything, exchange addresses through pipes, and each checks what it
// sees: the sender its send's completion, the receiver its receive's completion and the bytes. Exits 0 only
// when both sides passed; a descriptor that stays silent for 60 s (a failure bound, not a deadline the run
// approaches: it takes milliseconds) fails the side that waited on it.
#include <weft/weft.hpp>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr int silence_ms = 60'000;
constexpr char message[] = "sent during the handshake";
constexpr char second_message[] = "sent into the same slot after";

void write_all(int fd, const void* p, std::size_t n) {
    const auto* b = static_cast<const char*>(p);
    while (n > 0) {
        const ssize_t w = ::write(fd, b, n);
        if (w <= 0) throw std::runtime_error("pipe write failed");
        b += w;
        n -= static_cast<std::size_t>(w);
    }
}

void read_all(int fd, void* p, std::size_t n) {
    auto* b = static_cast<char*>(p);
    while (n > 0) {
        const ssize_t r = ::read(fd, b, n);
        if (r <= 0) throw std::runtime_error("the other side closed its pipe");
        b += r;
        n -= static_cast<std::size_t>(r);
    }
}

// Sleeps on the CQ's descriptor until poll() returns a completion (polling until empty after each wake-up,
// as fd() asks); returns it.
weft::Completion wait_on_fd(weft::CompletionQueue& cq, const char* side) {
    const int fd = cq.fd();
    weft::Completion wc[1];
    for (;;) {
        if (auto got = cq.poll(wc); !got.empty()) return got[0];
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, silence_ms) == 0) {
            throw std::runtime_error(std::string(side) + ": the CQ's descriptor stayed silent for 60 s");
        }
    }
}

int run_side(bool sender, int in, int out, const std::string& config, bool use_srq) {
    const char* side = sender ? "sender" : "receiver";
    try {
        weft::Domain dom = weft::open(config);
        const bool shared = use_srq && !sender;
        auto own_send_cq = dom.create_cq({.depth = 16});
        weft::CompletionQueue own_recv_cq;
        if (shared) own_recv_cq = dom.create_cq({.depth = 16});
        weft::CompletionQueue& send_cq = own_send_cq;
        weft::CompletionQueue& cq = shared ? own_recv_cq : own_send_cq;
        weft::SharedReceiveQueue srq;
        if (shared) srq = dom.create_srq({.max_recv = 4});
        weft::QpOptions options{.send_cq = send_cq, .recv_cq = cq, .max_send = 1};
        if (shared) options.srq = srq;
        auto qp = dom.create_qp(options);
        std::vector<std::byte> buf(4096);
        auto mr = dom.register_memory(buf, weft::all_access);
        const weft::RecvRequest r[2] = {weft::recv(1, mr.slice(0, 64)), weft::recv(2, mr.slice(64, 64))};
        if (!sender && !(shared ? srq.post_recv(r) : qp.post_recv(r))) throw std::runtime_error("receive refused");
        const auto ours = qp.address();
        const auto size = static_cast<std::uint32_t>(ours.size());
        write_all(out, &size, sizeof size);
        write_all(out, ours.data(), ours.size());
        std::uint32_t theirs_size = 0;
        read_all(in, &theirs_size, sizeof theirs_size);
        if (theirs_size > 4096) throw std::runtime_error("an oversized address came through the pipe");
        std::vector<std::byte> theirs(theirs_size);
        read_all(in, theirs.data(), theirs.size());
        qp.connect(theirs);
        if (sender) {
            std::memcpy(buf.data(), message, sizeof message);
            if (!qp.post_send({weft::send(7, mr.slice(0, sizeof message))})) throw std::runtime_error("send refused");
        }
        weft::Completion c{};
        for (int n = 0; n < 2; ++n) {
            c = wait_on_fd(cq, side);
            const std::uint64_t want = sender ? 7 + static_cast<std::uint64_t>(n) : 1 + static_cast<std::uint64_t>(n);
            if (c.id != want || !c.ok() || (shared && c.qp_num != qp.qp_num())) {
                std::fprintf(stderr, "%s: completion id %llu (expected %llu), status %s\n", side,
                             static_cast<unsigned long long>(c.id), static_cast<unsigned long long>(want),
                             std::string(weft::to_string(c.status)).c_str());
                return 1;
            }
            const char* sent = n == 0 ? message : second_message;
            const std::size_t len = n == 0 ? sizeof message : sizeof second_message;
            if (!sender && (c.byte_len != len || std::memcmp(buf.data() + 64 * n, sent, len) != 0)) {
                std::fprintf(stderr, "receiver: %u bytes arrived as message %d, not the %zu sent\n", c.byte_len,
                             n + 1, len);
                return 1;
            }
            if (sender && n == 0) {
                // The queue's one slot is free again: the second send takes it at once.
                std::memcpy(buf.data() + 64, second_message, sizeof second_message);
                if (!qp.post_send({weft::send(8, mr.slice(64, sizeof second_message))})) {
                    throw std::runtime_error("second send refused");
                }
            }
        }
        // Neither side destroys its QP before the other has its completion.
        char done = 1;
        write_all(out, &done, 1);
        read_all(in, &done, 1);
        std::printf("%s: completion %llu, success\n", side, static_cast<unsigned long long>(c.id));
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", side, e.what());
        return 1;
    }
}

int run_one_process(const std::string& config) {
    constexpr int round_trips = 1000;
    try {
        weft::Domain da = weft::open(config);
        weft::Domain db = weft::open(config);
        auto ca = da.create_cq({.depth = 16});
        auto cb = db.create_cq({.depth = 16});
        auto qa = da.create_qp({.send_cq = ca, .recv_cq = ca});
        auto qb = db.create_qp({.send_cq = cb, .recv_cq = cb});
        std::vector<std::byte> ba(4096), bb(4096);
        auto ma = da.register_memory(ba, weft::all_access);
        auto mb = db.register_memory(bb, weft::all_access);
        const auto address_a = qa.address();
        const auto address_b = qb.address();
        qa.connect(address_b);
        qb.connect(address_a);
        (void)ca.fd();
        (void)cb.fd();
        auto expect = [](const weft::Completion& c, std::uint64_t id, int trip) {
            if (c.id == id && c.ok()) return;
            throw std::runtime_error("round trip " + std::to_string(trip) + ": completion " + std::to_string(c.id) +
                                     " (expected " + std::to_string(id) + "), " +
                                     std::string(weft::to_string(c.status)));
        };
        for (int i = 0; i < round_trips; ++i) {
            const auto id = static_cast<std::uint64_t>(i);
            if (!qb.post_recv({weft::recv(id, mb.slice(0, 64))}) || !qa.post_recv({weft::recv(id, ma.slice(64, 64))})) {
                throw std::runtime_error("a receive was refused");
            }
            std::memcpy(ba.data(), &i, sizeof i);
            if (!qa.post_send({weft::send(id, ma.slice(0, sizeof i))})) throw std::runtime_error("a's send refused");
            expect(wait_on_fd(ca, "a, for its send"), id, i);
            expect(wait_on_fd(cb, "b, for its receive"), id, i);
            if (std::memcmp(bb.data(), &i, sizeof i) != 0) throw std::runtime_error("b received other bytes");
            if (!qb.post_send({weft::send(id, mb.slice(0, sizeof i))})) throw std::runtime_error("b's send refused");
            expect(wait_on_fd(cb, "b, for its send"), id, i);
            expect(wait_on_fd(ca, "a, for its receive"), id, i);
        }
        std::printf("one process: %d round trips, every descriptor woke\n", round_trips);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "one process: %s\n", e.what());
        return 1;
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || argc > 3 ||
        (argc == 3 && std::strcmp(argv[2], "srq") != 0 && std::strcmp(argv[2], "one-process") != 0)) {
        std::fprintf(stderr, "usage: weft-ofi-fd-wait CONFIG [srq | one-process]\n");
        return 2;
    }
    const std::string config = argv[1];
    if (argc == 3 && std::strcmp(argv[2], "one-process") == 0) return run_one_process(config);
    const bool use_srq = argc == 3;
    int to_receiver[2], to_sender[2];
    if (::pipe(to_receiver) != 0 || ::pipe(to_sender) != 0) {
        std::perror("pipe");
        return 1;
    }
    std::fflush(nullptr);
    const pid_t pid = ::fork();  // before anything is opened: the child starts from a clean process
    if (pid < 0) {
        std::perror("fork");
        return 1;
    }
    if (pid == 0) {
        const int rc = run_side(false, to_receiver[0], to_sender[1], config, use_srq);
        std::fflush(nullptr);
        ::_exit(rc);
    }
    const int rc = run_side(true, to_sender[0], to_receiver[1], config, use_srq);
    ::close(to_receiver[1]);  // a receiver still waiting on the pipe sees the sender gone
    int status = 0;
    ::waitpid(pid, &status, 0);
    const bool child_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!child_ok) std::fprintf(stderr, "the receiver process failed (wait status %d)\n", status);
    return rc == 0 && child_ok ? 0 : 1;
}
