// verbs_datapath — what weft's verbs data path costs beyond raw verbs, measured without a device.
//
// A fake provider stands where rdma-core's driver would: a fake ibv_context whose ops table (the one
// ibv_post_send, ibv_post_recv, ibv_poll_cq and ibv_req_notify_cq call through) puts a work completion for
// every signaled request into a ring and hands them out from it. The same fake serves both sides of each
// comparison, so what differs is only the code between the program and the provider:
//   raw   the program builds ibv_send_wr / ibv_recv_wr chains and reads ibv_wc itself;
//   weft  the program builds weft requests and polls weft::Completion through the public API
//         (QueuePair::post_send -> the verbs backend's VerbsQp -> the fake provider), the backend's own
//         code compiled exactly as in the plugin.
// Both consume every completion the same way (check the status, sum the ids).
//
//   weft-bench-verbs-datapath [--iters N]     prints ns per request, weft beside raw, and the channel
//                                             reads and arm calls a completion-returning poll makes in
//                                             fd() mode
//   weft-bench-verbs-datapath --callgrind     under valgrind --tool=callgrind: each scenario's measured
//                                             loop is dumped on its own (CALLGRIND_DUMP_STATS_AT) for
//                                             bench/verbs_datapath.sh, which prints instructions per request
#include "../backends/verbs/fake_provider.hpp"
#include "../backends/verbs/verbs.hpp"

#include <weft/weft.hpp>

#include <valgrind/callgrind.h>

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace wv = weft::verbs;

using wv::fake::FakeProvider;
using wv::fake::deliver;

constexpr std::uint32_t queue_depth = 256;

// The request and completion arrays live as long as the side, as in a program's loop: weft's request and
// completion types zero themselves when constructed, raw verbs' structs do not, and neither cost belongs to
// a post or a poll.
struct WeftSide {
    weft::CompletionQueue cq;
    weft::QueuePair qp;
    std::array<weft::SendRequest, 16> sends;
    std::array<weft::RecvRequest, 16> recvs;
    std::array<weft::Completion, 16> wc;
};

struct RawArrays {
    std::array<ibv_send_wr, 16> sends{};
    std::array<ibv_recv_wr, 16> recvs{};
    std::array<ibv_sge, 16> sges{};
    std::array<ibv_wc, 16> wc{};
};
RawArrays raw_arrays;

WeftSide make_weft(FakeProvider& p) {
    auto side = wv::fake::make_side(p, queue_depth);
    WeftSide s;
    s.cq = std::move(side.cq);
    s.qp = std::move(side.qp);
    return s;
}

// ---- The scenarios. Each iteration posts and consumes `requests()` requests; the sinks keep the work
// observable.

std::uint64_t sink = 0;
std::uint64_t errors = 0;

constexpr std::uint64_t local_addr = 0x10000;
constexpr std::uint32_t lkey = 0x1234;
constexpr std::uint64_t remote_addr = 0x7f0000000000;
constexpr std::uint32_t rkey = 0x5678;
constexpr std::uint32_t msg_len = 64;

// weft: `n` writes in one batch, every one signaled or only the last; then poll until all are back.
void weft_writes(WeftSide& s, std::uint64_t base, std::uint32_t n, bool all_signaled) {
    const weft::LocalSegment seg{local_addr, msg_len, lkey, nullptr};
    const weft::RemoteRegion dst(remote_addr, msg_len, rkey, weft::BackendKind::verbs);
    auto& reqs = s.sends;
    for (std::uint32_t i = 0; i < n; ++i) {
        reqs[i] = all_signaled || i + 1 == n ? weft::write(base + i, seg, dst) : weft::write(base + i, seg, dst).unsignaled();
    }
    if (!s.qp.post_send(std::span<const weft::SendRequest>(reqs.data(), n))) std::abort();
    const std::uint32_t want = all_signaled ? n : 1;
    for (std::uint32_t got = 0; got < want;) {
        for (const auto& c : s.cq.poll(s.wc)) {
            if (!c.ok()) ++errors;
            sink += c.id;
            ++got;
        }
    }
}

void raw_writes(FakeProvider& p, std::uint64_t base, std::uint32_t n, bool all_signaled) {
    auto& wrs = raw_arrays.sends;
    auto& sges = raw_arrays.sges;
    for (std::uint32_t i = 0; i < n; ++i) {
        sges[i] = ibv_sge{local_addr, msg_len, lkey};
        ibv_send_wr& wr = wrs[i];
        wr.wr_id = base + i;
        wr.next = i + 1 < n ? &wrs[i + 1] : nullptr;
        wr.sg_list = &sges[i];
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = all_signaled || i + 1 == n ? IBV_SEND_SIGNALED : 0;
        wr.wr.rdma.remote_addr = remote_addr;
        wr.wr.rdma.rkey = rkey;
    }
    ibv_send_wr* bad = nullptr;
    if (::ibv_post_send(&p.qp.qp, wrs.data(), &bad) != 0) std::abort();
    const std::uint32_t want = all_signaled ? n : 1;
    auto& wc = raw_arrays.wc;
    for (std::uint32_t got = 0; got < want;) {
        const int k = ::ibv_poll_cq(&p.cq.cq, 16, wc.data());
        for (int i = 0; i < k; ++i) {
            if (wc[static_cast<std::size_t>(i)].status != IBV_WC_SUCCESS) ++errors;
            sink += wc[static_cast<std::size_t>(i)].wr_id;
        }
        got += static_cast<std::uint32_t>(k);
    }
}

// Receives: `n` posted in one batch, `n` sends arrive (the fake's work, the same for both), all polled.
void weft_recvs(WeftSide& s, FakeProvider& p, std::uint64_t base, std::uint32_t n) {
    const weft::LocalSegment seg{local_addr, msg_len, lkey, nullptr};
    auto& reqs = s.recvs;
    for (std::uint32_t i = 0; i < n; ++i) reqs[i] = weft::recv(base + i, seg);
    if (!s.qp.post_recv(std::span<const weft::RecvRequest>(reqs.data(), n))) std::abort();
    deliver(p.qp, n, msg_len);
    for (std::uint32_t got = 0; got < n;) {
        for (const auto& c : s.cq.poll(s.wc)) {
            if (!c.ok()) ++errors;
            sink += c.id + c.byte_len;
            ++got;
        }
    }
}

void raw_recvs(FakeProvider& p, std::uint64_t base, std::uint32_t n) {
    auto& wrs = raw_arrays.recvs;
    auto& sges = raw_arrays.sges;
    for (std::uint32_t i = 0; i < n; ++i) {
        sges[i] = ibv_sge{local_addr, msg_len, lkey};
        wrs[i].wr_id = base + i;
        wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
        wrs[i].sg_list = &sges[i];
        wrs[i].num_sge = 1;
    }
    ibv_recv_wr* bad = nullptr;
    if (::ibv_post_recv(&p.qp.qp, wrs.data(), &bad) != 0) std::abort();
    deliver(p.qp, n, msg_len);
    auto& wc = raw_arrays.wc;
    for (std::uint32_t got = 0; got < n;) {
        const int k = ::ibv_poll_cq(&p.cq.cq, 16, wc.data());
        for (int i = 0; i < k; ++i) {
            if (wc[static_cast<std::size_t>(i)].status != IBV_WC_SUCCESS) ++errors;
            sink += wc[static_cast<std::size_t>(i)].wr_id + wc[static_cast<std::size_t>(i)].byte_len;
        }
        got += static_cast<std::uint32_t>(k);
    }
}

void weft_empty_poll(WeftSide& s) { sink += s.cq.poll(s.wc).size(); }

void raw_empty_poll(FakeProvider& p) {
    sink += static_cast<std::uint64_t>(::ibv_poll_cq(&p.cq.cq, 16, raw_arrays.wc.data()));
}

struct Scenario {
    const char* name;
    const char* what;
    std::uint32_t requests;  // per iteration
    std::uint32_t target;    // instructions per request weft may add over raw
    std::function<void(std::uint64_t)> weft;
    std::function<void(std::uint64_t)> raw;
};

std::vector<Scenario> scenarios(FakeProvider& pw, WeftSide& w, FakeProvider& pr) {
    return {
        {"batch16", "16 signaled writes per post_send, polled back", 16, 40,
         [&](std::uint64_t i) { weft_writes(w, i * 16, 16, true); },
         [&](std::uint64_t i) { raw_writes(pr, i * 16, 16, true); }},
        {"batch16_1sig", "16 writes per post_send, the last signaled", 16, 40,
         [&](std::uint64_t i) { weft_writes(w, i * 16, 16, false); },
         [&](std::uint64_t i) { raw_writes(pr, i * 16, 16, false); }},
        {"post1_poll1", "one signaled write, one poll", 1, 100, [&](std::uint64_t i) { weft_writes(w, i, 1, true); },
         [&](std::uint64_t i) { raw_writes(pr, i, 1, true); }},
        {"recv16", "16 receives per post_recv, 16 arrivals polled back", 16, 40,
         [&](std::uint64_t i) { weft_recvs(w, pw, i * 16, 16); },
         [&](std::uint64_t i) { raw_recvs(pr, i * 16, 16); }},
        {"empty_poll", "a poll that finds nothing", 1, 30, [&](std::uint64_t) { weft_empty_poll(w); },
         [&](std::uint64_t) { raw_empty_poll(pr); }},
    };
}

double ns_per(const std::function<void(std::uint64_t)>& f, std::uint64_t iters, std::uint32_t requests) {
    for (std::uint64_t i = 0; i < iters / 10 + 1; ++i) f(i);  // warm up
    const auto t0 = std::chrono::steady_clock::now();
    for (std::uint64_t i = 0; i < iters; ++i) f(i);
    const auto dt = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    return dt / static_cast<double>(iters * requests);
}

// Read system calls this process has made so far (/proc/self/io's syscr), or -1.
long long read_syscalls() {
    std::ifstream in("/proc/self/io");
    std::string key;
    long long value = 0;
    while (in >> key >> value) {
        if (key == "syscr:") return value;
    }
    return -1;
}

// fd() mode: after fd(), posts one write and polls it back, `iters` times. Reports the channel reads
// (read(2) system calls, from /proc/self/io) and arm calls (ibv_req_notify_cq: a write(2) on rxe, a doorbell
// on mlx5) made per completion-returning poll, then those of one empty poll.
void fd_mode(std::uint64_t iters) {
    // What reading /proc/self/io costs in reads itself, to subtract.
    const long long self = [] {
        const long long a = read_syscalls();
        return read_syscalls() - a;
    }();
    FakeProvider p;
    WeftSide w = make_weft(p);
    (void)w.cq.fd();
    const std::uint64_t arms0 = p.cq.arms;
    const long long reads0 = read_syscalls();
    std::uint64_t polls = 0;
    const weft::LocalSegment seg{local_addr, msg_len, lkey, nullptr};
    const weft::RemoteRegion dst(remote_addr, msg_len, rkey, weft::BackendKind::verbs);
    auto& wc = w.wc;
    for (std::uint64_t i = 0; i < iters; ++i) {
        if (!w.qp.post_send({weft::write(i, seg, dst)})) std::abort();
        std::size_t got = 0;
        while (got == 0) {
            got = w.cq.poll(wc).size();
            ++polls;
        }
        sink += wc[0].id;
    }
    const long long reads1 = read_syscalls();
    const std::uint64_t arms1 = p.cq.arms;
    const double reads = static_cast<double>(reads1 - reads0 - self) / static_cast<double>(polls);
    const double arms = static_cast<double>(arms1 - arms0) / static_cast<double>(polls);
    const long long reads2 = read_syscalls();
    const std::uint64_t arms2 = p.cq.arms;
    sink += w.cq.poll(wc).size();
    const long long reads3 = read_syscalls();
    std::printf("fd() mode, a poll that returns a completion: %.2f channel reads, %.2f arm calls per poll (%llu "
                "polls)\n",
                reads, arms, static_cast<unsigned long long>(polls));
    std::printf("fd() mode, an empty poll (re-arms):          %lld channel reads, %llu arm calls\n",
                reads3 - reads2 - self, static_cast<unsigned long long>(p.cq.arms - arms2));
}

}  // namespace

int main(int argc, char** argv) {
    std::uint64_t iters = 200000;
    bool callgrind = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = std::strtoull(argv[++i], nullptr, 10);
        } else if (std::strcmp(argv[i], "--callgrind") == 0) {
            callgrind = true;
        } else {
            std::fprintf(stderr, "usage: %s [--iters N] [--callgrind]\n", argv[0]);
            return 2;
        }
    }
    FakeProvider pw;  // under weft
    FakeProvider pr;  // under the raw program
    WeftSide w = make_weft(pw);
    const auto all = scenarios(pw, w, pr);

    if (callgrind) {
        // Each measured loop is dumped as "NAME VARIANT REQUESTS"; warm-up runs first so that lazy symbol
        // binding and first-touch paths stay out of the figures.
        constexpr std::uint64_t measured = 1000;
        for (const auto& s : all) {
            for (int variant = 0; variant < 2; ++variant) {
                const auto& f = variant == 0 ? s.raw : s.weft;
                for (std::uint64_t i = 0; i < 100; ++i) f(i);
                const std::string label = std::string(s.name) + (variant == 0 ? " raw " : " weft ") +
                                          std::to_string(measured * s.requests) + " " + std::to_string(s.target);
                CALLGRIND_ZERO_STATS;
                for (std::uint64_t i = 0; i < measured; ++i) f(i);
                CALLGRIND_DUMP_STATS_AT(label.c_str());
            }
        }
        return errors == 0 ? 0 : 1;
    }

    std::printf("verbs data path over a fake provider (no device): ns per request, %llu iterations each\n",
                static_cast<unsigned long long>(iters));
    std::printf("  %-14s %9s %9s %9s   %s\n", "scenario", "raw", "weft", "+weft", "what");
    for (const auto& s : all) {
        const std::uint64_t n = iters / s.requests + 1;
        const double raw = ns_per(s.raw, n, s.requests);
        const double wf = ns_per(s.weft, n, s.requests);
        std::printf("  %-14s %9.1f %9.1f %+9.1f   %s\n", s.name, raw, wf, wf - raw, s.what);
    }
    fd_mode(iters / 10 + 1);
    if (errors != 0) {
        std::printf("FAIL: %llu error completions\n", static_cast<unsigned long long>(errors));
        return 1;
    }
    return 0;
}
