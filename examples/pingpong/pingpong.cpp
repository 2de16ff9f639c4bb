// pingpong — two queue pairs bounce a message back and forth, first with send/recv, then with
// write_with_imm, and print the round-trip latency.
//
//   weft-pingpong [--backend CONFIG] [--iters N] [--size BYTES]
//
// The backend comes from --backend, else $WEFT_BACKEND, else "sim". Both QPs live in this process, each on
// its own domain, connected through their addresses, exactly as two machines would be after exchanging
// them out of band. Work request ids are slot numbers, never pointers.
#include <weft/sim/fabric.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
    std::string backend = weft::default_config();
    int iters = 10000;
    std::uint32_t size = 64;
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "weft-pingpong: %s\nusage: weft-pingpong [--backend CONFIG] [--iters N] [--size BYTES]\n"
                 "  CONFIG e.g. sim, sim:seed=7, verbs:device=rxe0, ofi:provider=tcp (default $WEFT_BACKEND or sim)\n",
                 why);
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
            return argv[++i];
        };
        if (arg == "--backend") o.backend = value();
        else if (arg == "--iters") o.iters = std::atoi(value().c_str());
        else if (arg == "--size") o.size = static_cast<std::uint32_t>(std::atoi(value().c_str()));
        else usage(("unknown argument " + arg).c_str());
    }
    if (o.iters <= 0) usage("--iters must be positive");
    if (o.size == 0 || o.size > (1u << 20)) usage("--size must be 1..1048576");
    return o;
}

// One endpoint: domain, CQ, QP, and a buffer split into a send half and a receive half.
struct Peer {
    weft::Domain dom;
    weft::CompletionQueue cq;
    weft::QueuePair qp;
    std::vector<std::byte> buf;
    weft::MemoryRegion mr;
    int sends_in_flight = 0;

    Peer(const std::string& config, std::uint32_t size) : dom(weft::open(config)) {
        cq = dom.create_cq({.depth = 64});
        qp = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 16, .max_recv = 16});
        buf.resize(2 * size);
        mr = dom.register_memory(buf, weft::Access::local_write | weft::Access::remote_write);
    }
};

// Polls until a receive completes (want_recv) or until no send is in flight; send completions seen on the
// way are counted off. Exits on any error completion.
void await(Peer& p, bool want_recv) {
    weft::Completion wc[4];
    bool got_recv = false;
    while (want_recv ? !got_recv : p.sends_in_flight > 0) {
        for (const auto& c : p.cq.poll(wc)) {
            if (!c.ok()) {
                std::fprintf(stderr, "weft-pingpong: error completion on QP %u: %s (%s)\n", c.qp_num,
                             std::string(weft::to_string(c.status)).c_str(), std::string(weft::describe(c.status)).c_str());
                std::exit(1);
            }
            if (c.is_recv()) got_recv = true;
            else --p.sends_in_flight;
        }
    }
}

void check(weft::PostStatus st, const char* what) {
    if (!st) {
        std::fprintf(stderr, "weft-pingpong: %s: %s\n", what, st.reason());
        std::exit(1);
    }
}

struct Summary {
    double p50, p99, mean;
};

Summary summarize(std::vector<double>& us) {
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double v : us) sum += v;
    return {us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)], sum / static_cast<double>(us.size())};
}

// Bounces one message `iters` times; `use_write` selects write_with_imm instead of send.
std::vector<double> bounce(Peer& a, Peer& b, const Options& o, bool use_write) {
    const std::uint32_t n = o.size;
    auto rx_a = a.mr.slice(n, n), rx_b = b.mr.slice(n, n);
    auto dst_a = a.mr.remote().slice(n, n), dst_b = b.mr.remote().slice(n, n);
    auto message = [&](Peer& from, const weft::RemoteRegion& to, std::uint32_t slot) {
        auto src = from.mr.slice(0, n);
        return use_write ? weft::write(slot, src, to).with_imm(slot) : weft::send(slot, src);
    };
    check(a.qp.post_recv({weft::recv(0, rx_a)}), "post_recv");
    check(b.qp.post_recv({weft::recv(0, rx_b)}), "post_recv");
    std::vector<double> us;
    us.reserve(static_cast<std::size_t>(o.iters));
    for (int i = 0; i < o.iters; ++i) {
        auto slot = static_cast<std::uint32_t>(i & 0xffff);
        std::memcpy(a.buf.data(), &i, sizeof i);
        auto t0 = std::chrono::steady_clock::now();
        check(a.qp.post_send({message(a, dst_b, slot)}), "post_send");
        ++a.sends_in_flight;
        await(b, true);
        check(b.qp.post_recv({weft::recv(slot, rx_b)}), "post_recv");
        std::memcpy(b.buf.data(), b.buf.data() + n, n);  // echo what arrived
        check(b.qp.post_send({message(b, dst_a, slot)}), "post_send");
        ++b.sends_in_flight;
        await(a, true);
        check(a.qp.post_recv({weft::recv(slot, rx_a)}), "post_recv");
        auto t1 = std::chrono::steady_clock::now();
        await(a, false);
        await(b, false);
        int echoed = 0;
        std::memcpy(&echoed, a.buf.data() + n, sizeof echoed);
        if (echoed != i) {
            std::fprintf(stderr, "weft-pingpong: iteration %d came back as %d\n", i, echoed);
            std::exit(1);
        }
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    return us;
}

}  // namespace

int main(int argc, char** argv) {
    Options o = parse(argc, argv);
    try {
        Peer a(o.backend, o.size), b(o.backend, o.size);
        a.qp.connect(b.qp.address());
        b.qp.connect(a.qp.address());
        std::printf("weft-pingpong: backend %s (%s), %d round trips of %u bytes\n", o.backend.c_str(),
                    a.dom.capabilities().device.c_str(), o.iters, o.size);
        const bool sim = a.dom.capabilities().kind == weft::BackendKind::sim;
        for (bool use_write : {false, true}) {
            if (use_write && !a.dom.capabilities().has(weft::Feature::write_with_imm)) {
                std::printf("  write_with_imm: skipped, the backend lacks it\n");
                continue;
            }
            std::uint64_t v0 = sim ? weft::sim::Fabric::of(a.dom).now() : 0;
            auto us = bounce(a, b, o, use_write);
            auto s = summarize(us);
            std::printf("  %-14s round trip: p50 %8.2f us  p99 %8.2f us  mean %8.2f us", use_write ? "write_with_imm" : "send/recv",
                        s.p50, s.p99, s.mean);
            if (sim) {
                double virt = static_cast<double>(weft::sim::Fabric::of(a.dom).now() - v0) / 1000.0 / o.iters;
                std::printf("  (simulated: %.2f us)", virt);
            }
            std::printf("\n");
        }
    } catch (const weft::Error& e) {
        std::fprintf(stderr, "weft-pingpong: %s\n", e.what());
        return 1;
    }
    return 0;
}
