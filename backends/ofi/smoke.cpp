// weft-ofi-smoke: opens an ofi configuration, connects two QPs of one domain to each other over loopback
// and runs every operation the provider supports, printing each completion.
//
//   weft-ofi-smoke                                 # ofi:provider=tcp
//   weft-ofi-smoke 'ofi:provider=tcp;ofi_rxm'
//   weft-ofi-smoke ofi:provider=shm
//   weft-ofi-smoke ofi:provider=tcp two-domains    # each QP on its own domain, as two nodes would be
//   weft-ofi-smoke ofi:provider=tcp own-cq-only    # wait on one CQ at a time, never polling the peer's
//   weft-ofi-smoke ofi:provider=tcp two-process    # requester and responder in two processes (fork)
#include <weft/weft.hpp>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <span>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

// Both QPs live in this thread: while waiting on one CQ, poll the other too (manual-progress providers
// move a side only when its CQ is polled) and keep what it returns for later.
bool own_cq_only = false;  // poll only the CQ waited on, as a test harness might

struct Cq {
    weft::CompletionQueue cq;
    std::deque<weft::Completion> kept;
};

weft::Completion wait_one(Cq& mine, Cq& other) {
    weft::Completion wc[4];
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (mine.kept.empty()) {
        if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no completion within 10 s");
        for (auto& c : mine.cq.poll(wc)) mine.kept.push_back(c);
        if (!own_cq_only) {
            for (auto& c : other.cq.poll(wc)) other.kept.push_back(c);
        }
    }
    auto c = mine.kept.front();
    mine.kept.pop_front();
    return c;
}

int failures = 0;

void expect(bool ok, const char* what) {
    std::cout << "  " << (ok ? "ok   " : "FAIL ") << what << '\n';
    if (!ok) ++failures;
}

// ---- two processes: the parent requests, the forked child responds; QP addresses and the responder's
// region descriptor cross over pipes.

void put_blob(int fd, std::span<const std::byte> b) {
    auto n = static_cast<std::uint32_t>(b.size());
    if (::write(fd, &n, 4) != 4 || ::write(fd, b.data(), n) != static_cast<ssize_t>(n)) throw std::runtime_error("pipe write");
}

std::vector<std::byte> get_blob(int fd) {
    std::uint32_t n = 0;
    if (::read(fd, &n, 4) != 4) throw std::runtime_error("pipe read");
    std::vector<std::byte> b(n);
    for (std::size_t got = 0; got < n;) {
        ssize_t r = ::read(fd, b.data() + got, n - got);
        if (r <= 0) throw std::runtime_error("pipe read");
        got += static_cast<std::size_t>(r);
    }
    return b;
}

constexpr int pingpong_rounds = 2000;
constexpr auto pingpong_budget = std::chrono::seconds(2);  // sockets takes milliseconds per round trip

struct Node {
    weft::Domain dom;
    Cq cq;
    weft::QueuePair qp;
    std::vector<std::byte> buf;
    weft::MemoryRegion mr;

    explicit Node(const std::string& config)
        : dom(weft::open(config)),
          cq{dom.create_cq({.depth = 64}), {}},
          qp(dom.create_qp({.send_cq = cq.cq, .recv_cq = cq.cq, .max_send = 32, .max_recv = 32})),
          buf(1 << 16),
          mr(dom.register_memory(buf, weft::all_access)) {}

    weft::Completion next() {
        weft::Completion wc[1];
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (cq.cq.poll(wc).empty()) {
            if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no completion within 10 s");
        }
        return wc[0];
    }
};

int responder(const std::string& config, int in, int out) {
    Node b(config);
    for (int i = 0; i < 1000; ++i) b.buf[30000 + i] = static_cast<std::byte>(i * 5 + 1);
    std::uint64_t counter = 40;
    std::memcpy(b.buf.data() + 40000, &counter, 8);
    put_blob(out, b.qp.address());
    auto desc = b.mr.remote().encode();
    put_blob(out, desc);
    auto peer = get_blob(in);
    if (!b.qp.post_recv({weft::recv(100, b.mr.slice(0, 64)), weft::recv(101, b.mr.slice(64, 16))})) return 3;
    b.qp.connect(peer);
    auto r1 = b.next();
    auto r2 = b.next();
    std::cout << "[responder] " << r1 << "\n[responder] " << r2 << '\n';
    bool ok = r1.ok() && r1.byte_len == 15 && std::memcmp(b.buf.data(), "hello, process", 15) == 0 && r2.ok() &&
              r2.opcode == weft::Opcode::recv_rdma_with_imm && r2.imm == 0xabcd && r2.byte_len == 512;
    // Keep polling (manual-progress providers serve reads and atomics only then) until the requester is done.
    char done = 0;
    weft::Completion wc[4];
    ::fcntl(in, F_SETFL, ::fcntl(in, F_GETFL) | O_NONBLOCK);
    for (;;) {
        const ssize_t got = ::read(in, &done, 1);
        if (got == 1) break;
        if (got == 0) {  // the requester ended without saying so: it failed, and says why itself
            std::cout << "[responder] the requester ended early\n";
            return 5;
        }
        for (auto& c : b.cq.cq.poll(wc)) std::cout << "[responder] unexpected " << c << '\n';
    }
    // Ping-pong: answer every 64-byte message with one, as fi_pingpong does, until one says stop.
    (void)b.qp.post_recv({weft::recv(300, b.mr.slice(60000, 64))});
    int sends_out = 0;
    for (bool stop = false; !stop;) {
        for (;;) {
            weft::Completion got = b.next();
            if (!got.ok()) return 4;
            if (got.is_recv()) break;
            --sends_out;
        }
        stop = b.buf[60000] != std::byte{0};
        if (!stop) (void)b.qp.post_recv({weft::recv(300, b.mr.slice(60000, 64))});
        (void)b.qp.post_send({weft::send(301, b.mr.slice(60100, 64))});
        ++sends_out;
    }
    while (sends_out > 0) {
        if (!b.next().ok()) return 4;
        --sends_out;
    }
    bool wrote = true;
    for (int i = 0; i < 4096; ++i) wrote &= b.buf[8192 + i] == static_cast<std::byte>(i * 3);
    std::memcpy(&counter, b.buf.data() + 40000, 8);
    std::cout << "[responder] receives " << (ok ? "ok" : "WRONG") << ", written bytes " << (wrote ? "ok" : "WRONG")
              << ", counter " << counter << '\n';
    return ok && wrote ? 0 : 1;
}

int requester(const std::string& config, int in, int out) {
    Node a(config);
    auto peer = get_blob(in);
    auto dst = weft::RemoteRegion::decode(get_blob(in));
    put_blob(out, a.qp.address());
    a.qp.connect(peer);
    const auto& caps = a.dom.capabilities();
    std::memcpy(a.buf.data(), "hello, process", 15);
    for (int i = 0; i < 4096; ++i) a.buf[1024 + i] = static_cast<std::byte>(i * 3);
    (void)a.qp.post_send({weft::send(1, a.mr.slice(0, 15)), weft::write(2, a.mr.slice(1024, 4096), dst.slice(8192, 4096))});
    auto c = a.next();
    std::cout << "[requester] " << c << '\n';
    expect(c.ok() && c.id == 1, "send completed");
    c = a.next();
    std::cout << "[requester] " << c << '\n';
    expect(c.ok() && c.id == 2, "write completed");
    (void)a.qp.post_send({weft::write(3, a.mr.slice(1024, 512), dst.slice(16384, 512)).with_imm(0xabcd)});
    c = a.next();
    std::cout << "[requester] " << c << '\n';
    expect(c.ok() && c.id == 3, "write_with_imm completed");
    if (caps.has(weft::Feature::read)) {
        (void)a.qp.post_send({weft::read(4, a.mr.slice(20000, 1000), dst.slice(30000, 1000))});
        c = a.next();
        std::cout << "[requester] " << c << '\n';
        bool same = true;
        for (int i = 0; i < 1000; ++i) same &= a.buf[20000 + i] == static_cast<std::byte>(i * 5 + 1);
        expect(c.ok() && same, "read brought the responder's bytes");
    }
    if (caps.has(weft::Feature::atomics)) {
        (void)a.qp.post_send({weft::fetch_add(5, a.mr.slice(40000, 8), dst.slice(40000, 8), 2)});
        c = a.next();
        std::uint64_t old = 0;
        std::memcpy(&old, a.buf.data() + 40000, 8);
        std::cout << "[requester] " << c << '\n';
        expect(c.ok() && old == 40, "fetch_add returned the old value");
    }
    char done = 1;
    if (::write(out, &done, 1) != 1) throw std::runtime_error("pipe write");
    auto t0 = std::chrono::steady_clock::now();
    int rounds = 0;
    for (bool stop = false; !stop; ++rounds) {
        stop = rounds + 1 == pingpong_rounds || std::chrono::steady_clock::now() - t0 > pingpong_budget;
        a.buf[60100] = stop ? std::byte{1} : std::byte{0};
        (void)a.qp.post_recv({weft::recv(400, a.mr.slice(60000, 64))});
        (void)a.qp.post_send({weft::send(401, a.mr.slice(60100, 64))});
        for (int want = 2; want > 0; --want) {
            if (auto got = a.next(); !got.ok()) {
                std::cout << "[requester] round " << rounds << ": " << got << '\n';
                throw std::runtime_error("ping-pong completion failed");
            }
        }
    }
    auto t1 = std::chrono::steady_clock::now();
    std::cout << "[requester] ping-pong 64 B x " << rounds << ": "
              << std::chrono::duration<double, std::micro>(t1 - t0).count() / rounds / 2
              << " us one-way (fi_pingpong's usec/xfer)\n";
    return failures == 0 ? 0 : 1;
}

int two_process(const std::string& config) {
    int to_child[2], to_parent[2];
    if (::pipe(to_child) != 0 || ::pipe(to_parent) != 0) throw std::runtime_error("pipe");
    std::cout.flush();
    // Fork before any libfabric state exists: each process opens its own domain.
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork");
    if (pid == 0) {
        // Only the ends each side uses stay open, so that either side sees the other's end as end of file.
        ::close(to_child[1]);
        ::close(to_parent[0]);
        int rc = 2;
        try {
            rc = responder(config, to_child[0], to_parent[1]);
        } catch (const std::exception& e) {
            std::cerr << "[responder] " << e.what() << '\n';
        }
        std::cout.flush();
        ::_exit(rc);
    }
    ::close(to_child[0]);
    ::close(to_parent[1]);
    int rc = 1;
    try {
        rc = requester(config, to_parent[0], to_child[1]);
    } catch (const std::exception& e) {
        std::cerr << "[requester] " << e.what() << '\n';
    }
    ::close(to_child[1]);  // a responder still waiting for "done" sees end of file and stops
    int status = 0;
    ::waitpid(pid, &status, 0);
    int child = WIFEXITED(status) ? WEXITSTATUS(status) : 9;
    std::cout << (rc == 0 && child == 0 ? "two-process smoke passed\n" : "two-process smoke FAILED\n");
    return rc == 0 && child == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) try {
    std::string config = argc > 1 ? argv[1] : "ofi:provider=tcp";
    bool two_domains = false;
    for (int i = 2; i < argc; ++i) {
        two_domains |= std::string(argv[i]) == "two-domains";
        own_cq_only |= std::string(argv[i]) == "own-cq-only";
        if (std::string(argv[i]) == "two-process") return two_process(config);
    }
    auto dom = weft::open(config);
    auto dom_b = two_domains ? weft::open(config) : weft::Domain();
    weft::Domain& db = two_domains ? dom_b : dom;
    const auto& caps = dom.capabilities();
    std::cout << "config " << config << "\ndevice " << caps.device << "\nfeatures";
    for (std::uint32_t bit = 1; bit != 0; bit <<= 1) {
        const auto f = static_cast<weft::Feature>(bit);
        if (caps.has(f) && weft::to_string(f) != "unknown_feature") std::cout << ' ' << weft::to_string(f);
    }
    std::cout << "\nmax_qp_wr " << caps.max_qp_wr << " max_sge " << caps.max_sge << " max_inline " << caps.max_inline
              << " max_msg_size " << caps.max_msg_size << "\n";

    Cq cq_a{dom.create_cq({.depth = 64}), {}};
    Cq cq_b{db.create_cq({.depth = 64}), {}};
    auto qa = dom.create_qp({.send_cq = cq_a.cq, .recv_cq = cq_a.cq, .max_send = 32, .max_recv = 32});
    auto qb = db.create_qp({.send_cq = cq_b.cq, .recv_cq = cq_b.cq, .max_send = 32, .max_recv = 32});
    std::vector<std::byte> abuf(1 << 16), bbuf(1 << 16);
    auto ma = dom.register_memory(abuf, weft::all_access);
    auto mb = db.register_memory(bbuf, weft::all_access);

    auto t0 = std::chrono::steady_clock::now();
    qa.connect(qb.address());
    qb.connect(qa.address());
    auto t1 = std::chrono::steady_clock::now();
    std::cout << "connected in " << std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0).count()
              << " us; states " << qa.state() << ' ' << qb.state() << "\n";

    // send / recv
    std::memcpy(abuf.data(), "hello over ofi", 15);
    if (!qb.post_recv({weft::recv(100, mb.slice(0, 64))})) throw std::runtime_error("post_recv");
    if (auto st = qa.post_send({weft::send(1, ma.slice(0, 15))}); !st) throw std::runtime_error("post_send");
    auto c = wait_one(cq_a, cq_b);
    std::cout << "send:  " << c << '\n';
    c = wait_one(cq_b, cq_a);
    std::cout << "recv:  " << c << '\n';
    expect(c.ok() && c.byte_len == 15 && std::memcmp(bbuf.data(), "hello over ofi", 15) == 0, "send/recv bytes");

    // write
    for (int i = 0; i < 4096; ++i) abuf[1024 + i] = static_cast<std::byte>(i * 3);
    (void)qa.post_send({weft::write(2, ma.slice(1024, 4096), mb.remote().slice(8192, 4096))});
    c = wait_one(cq_a, cq_b);
    std::cout << "write: " << c << '\n';
    expect(c.ok() && std::memcmp(abuf.data() + 1024, bbuf.data() + 8192, 4096) == 0, "write bytes");

    // write_with_imm
    if (caps.has(weft::Feature::write_with_imm)) {
        (void)qb.post_recv({weft::recv(101, mb.slice(0, 16))});
        (void)qa.post_send({weft::write(3, ma.slice(1024, 512), mb.remote().slice(16384, 512)).with_imm(0xabcd)});
        c = wait_one(cq_a, cq_b);
        std::cout << "wimm:  " << c << '\n';
        c = wait_one(cq_b, cq_a);
        std::cout << "rimm:  " << c << '\n';
        expect(c.ok() && c.opcode == weft::Opcode::recv_rdma_with_imm && c.imm == 0xabcd && c.byte_len == 512,
               "write_with_imm consumed a receive");
    }

    // read
    if (caps.has(weft::Feature::read)) {
        for (int i = 0; i < 1000; ++i) bbuf[30000 + i] = static_cast<std::byte>(i * 5 + 1);
        (void)qa.post_send({weft::read(4, ma.slice(20000, 1000), mb.remote().slice(30000, 1000))});
        c = wait_one(cq_a, cq_b);
        std::cout << "read:  " << c << '\n';
        expect(c.ok() && std::memcmp(abuf.data() + 20000, bbuf.data() + 30000, 1000) == 0, "read bytes");
    }

    // atomics
    if (caps.has(weft::Feature::atomics)) {
        std::uint64_t v = 40;
        std::memcpy(bbuf.data() + 40000, &v, 8);
        (void)qa.post_send({weft::fetch_add(5, ma.slice(40000, 8), mb.remote().slice(40000, 8), 2),
                            weft::compare_swap(6, ma.slice(40008, 8), mb.remote().slice(40000, 8), 42, 7)});
        std::cout << "fadd:  " << wait_one(cq_a, cq_b) << '\n';
        std::cout << "cswap: " << wait_one(cq_a, cq_b) << '\n';
        std::uint64_t old1 = 0, old2 = 0, now = 0;
        std::memcpy(&old1, abuf.data() + 40000, 8);
        std::memcpy(&old2, abuf.data() + 40008, 8);
        std::memcpy(&now, bbuf.data() + 40000, 8);
        expect(old1 == 40 && old2 == 42 && now == 7, "fetch_add then compare_swap");
    }

    // A short ping-pong for a feel of the latency through weft.
    int rounds = 0;
    weft::Completion wc[4];
    auto p0 = std::chrono::steady_clock::now();
    for (; rounds < pingpong_rounds && std::chrono::steady_clock::now() - p0 < pingpong_budget; ++rounds) {
        (void)qb.post_recv({weft::recv(200, mb.slice(0, 64))});
        (void)qa.post_recv({weft::recv(201, ma.slice(0, 64))});
        (void)qa.post_send({weft::send(7, ma.slice(0, 8))});
        // a: its send and, after b answers, its receive; b: its receive and its send.
        int want_a = 2, want_b = 1;
        while (want_b > 0) want_b -= static_cast<int>(cq_b.cq.poll(wc).size()), want_a -= static_cast<int>(cq_a.cq.poll(wc).size());
        (void)qb.post_send({weft::send(8, mb.slice(0, 8))});
        want_b = 1;
        while (want_a > 0 || want_b > 0) {
            want_a -= static_cast<int>(cq_a.cq.poll(wc).size());
            want_b -= static_cast<int>(cq_b.cq.poll(wc).size());
        }
    }
    auto p1 = std::chrono::steady_clock::now();
    std::cout << "ping-pong 8 B: "
              << std::chrono::duration_cast<std::chrono::nanoseconds>(p1 - p0).count() / rounds / 2 / 1000.0
              << " us one-way (both ends in this thread)\n";

    std::cout << (failures == 0 ? "smoke passed\n" : "smoke FAILED\n");
    return failures == 0 ? 0 : 1;
} catch (const std::exception& e) {
    std::cerr << "weft-ofi-smoke: " << e.what() << '\n';
    return 2;
}
