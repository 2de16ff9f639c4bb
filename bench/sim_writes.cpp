// sim_writes — posts 1,000,000 8-byte RDMA writes through the public API on the simulator, checks every
// byte arrived, and prints the rate beside a memcpy anchor measured in the same run and its ratio to the
// target (10 million writes/s); then 64 KiB writes, checked, in GB/s of wall-clock time with check_sources
// on and off, beside a memcpy of the same 64 KiB slots (target: 0.8 times it with check_sources on) and the
// bandwidth of virtual time. Each figure is measured once per `reorder` mode (default: all, then none), so
// the cost of the legal reorderings (torn placement, read/write reordering, ack jitter) is visible.
//
//   weft-bench-sim-writes [--writes N] [--large N] [--batch B] [--backend CONFIG] [--reorder all,none] [--rounds K]
//                         [--clock wall|cpu]
//
// Each figure is the median of `rounds` runs (default 3), each beside its anchor measured just before it:
// wall-clock figures on a shared host drift by tens of percent within seconds.
//
// Each write carries a distinct value to a distinct target slot; one request in every batch is signaled,
// so the send queue is recycled the way a real application would do it.
#include <weft/sim/fabric.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

struct Side {
    weft::Domain dom;
    weft::CompletionQueue cq;
    weft::QueuePair qp;
    std::vector<std::uint64_t> words;
    weft::MemoryRegion mr;
};

Side make(const std::string& config, std::size_t words, std::uint32_t depth) {
    Side s{weft::open(config), {}, {}, std::vector<std::uint64_t>(words), {}};
    s.cq = s.dom.create_cq({.depth = 4096});
    s.qp = s.dom.create_qp({.send_cq = s.cq, .recv_cq = s.cq, .max_send = depth, .max_recv = 1});
    s.mr = s.dom.register_memory(s.words.data(), words * 8, weft::all_access);
    return s;
}

double bytes_per_s(std::size_t copies, double secs) {
    return static_cast<double>(copies) * 64 * 1024 / secs * 1e-9;
}

// --clock cpu: the process's CPU time instead of wall-clock time, for the simulated runs and their anchors
// alike; on a busy host it leaves out the time other processes hold the CPU (not their use of the caches).
bool cpu_clock = false;

double clock_now() {
    if (cpu_clock) {
        timespec t{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double seconds_since(double t0) {
    return clock_now() - t0;
}

// Posts `writes` writes of `words_per_write` 8-byte words in batches of `batch`, three batches in flight at
// most; write i carries value(i, k) in word k and goes to slot i % slots. Words from `touched` on depend on
// the slot only: they are filled before the clock starts, and each write rewrites its first `touched` words,
// as the memcpy anchor does. Returns the wall-clock seconds, or a negative value on failure. Fills `wrong`
// with the slots whose final contents are not the last write's.
template <class Value>
double run(Side& a, Side& b, std::size_t writes, std::size_t words_per_write, std::size_t touched,
           std::uint32_t batch, Value value, std::size_t& wrong) {
    const std::size_t slots = a.words.size() / words_per_write;
    const std::size_t len = words_per_write * 8;
    for (std::size_t slot = 0; slot < slots; ++slot) {
        for (std::size_t w = touched; w < words_per_write; ++w) a.words[slot * words_per_write + w] = value(slot, w);
    }
    std::vector<weft::SendRequest> reqs(batch);
    weft::Completion wc[64];
    std::size_t posted = 0, signaled_in_flight = 0;
    const double t0 = clock_now();
    while (posted < writes) {
        const std::size_t n = std::min<std::size_t>(batch, writes - posted);
        // Keep at most three batches in flight: the queue holds four, and the source slots of the batches
        // in flight stay untouched until they complete.
        while (signaled_in_flight >= 3) {
            for (const auto& c : a.cq.poll(wc)) {
                if (!c.ok()) {
                    std::fprintf(stderr, "write %llu failed: %s\n", static_cast<unsigned long long>(c.id),
                                 std::string(weft::to_string(c.status)).c_str());
                    return -1;
                }
                --signaled_in_flight;
            }
        }
        for (std::size_t k = 0; k < n; ++k) {
            const std::size_t i = posted + k;
            const std::size_t slot = i % slots;
            for (std::size_t w = 0; w < touched; ++w) a.words[slot * words_per_write + w] = value(i, w);
            reqs[k] = weft::write(i, a.mr.slice(slot * len, len), b.mr.remote().slice(slot * len, len))
                          .signaled(k + 1 == n);
        }
        if (auto st = a.qp.post_send(std::span(reqs.data(), n)); !st) {
            std::fprintf(stderr, "post failed: %s\n", st.reason());
            return -1;
        }
        ++signaled_in_flight;
        posted += n;
    }
    while (signaled_in_flight > 0) {
        for (const auto& c : a.cq.poll(wc)) {
            if (!c.ok()) return -1;
            --signaled_in_flight;
        }
    }
    const double secs = seconds_since(t0);
    wrong = 0;
    for (std::size_t slot = 0; slot < std::min(slots, writes); ++slot) {
        const std::size_t last = slot + ((writes - 1 - slot) / slots) * slots;
        for (std::size_t w = 0; w < words_per_write; ++w) {
            if (b.words[slot * words_per_write + w] != value(last, w)) {
                ++wrong;
                break;
            }
        }
    }
    return secs;
}

}  // namespace

int main(int argc, char** argv) {
    std::size_t writes = 1'000'000, large = 4096;
    std::uint32_t batch = 32;
    std::string backend = "sim:fabric=bench";
    std::string reorders = "all,none";
    std::size_t rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string arg = argv[i];
        if (arg == "--writes") writes = std::strtoull(argv[i + 1], nullptr, 10);
        else if (arg == "--large") large = std::strtoull(argv[i + 1], nullptr, 10);
        else if (arg == "--batch") batch = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
        else if (arg == "--backend") backend = argv[i + 1];
        else if (arg == "--reorder") reorders = argv[i + 1];
        else if (arg == "--rounds") rounds = std::max<std::size_t>(1, std::strtoull(argv[i + 1], nullptr, 10));
        else if (arg == "--clock" && (std::string(argv[i + 1]) == "cpu" || std::string(argv[i + 1]) == "wall")) {
            cpu_clock = std::string(argv[i + 1]) == "cpu";
        }
        else {
            std::fprintf(stderr,
                         "usage: weft-bench-sim-writes [--writes N] [--large N] [--batch B] [--backend CONFIG] "
                         "[--reorder all,none] [--rounds K] [--clock wall|cpu]\n");
            return 2;
        }
    }
    std::vector<std::string> configs;
    if (backend.find("reorder=") != std::string::npos || reorders.empty()) {
        configs.push_back(backend);
    } else {
        for (std::size_t at = 0; at <= reorders.size();) {
            const std::size_t comma = std::min(reorders.find(',', at), reorders.size());
            configs.push_back(backend + (backend.find(':') == std::string::npos ? ":" : ",") + "reorder=" +
                              reorders.substr(at, comma - at));
            at = comma + 1;
        }
    }

    // Anchors: the same number of 8-byte copies and of 64 KiB copies with memcpy, on this machine, measured
    // again right before each simulated run they stand beside.
    constexpr std::size_t large_words = 64 * 1024 / 8, large_slots = 64;
    constexpr double small_target = 10e6;  // writes/s
    constexpr double large_target = 0.8;   // of the memcpy anchor, with check_sources on
    auto small_anchor = [&] {
        const std::size_t slots = 1 << 16;
        std::vector<std::uint64_t> src(slots), dst(slots);
        const double m0 = clock_now();
        for (std::size_t i = 0; i < writes; ++i) {
            src[i % slots] = i;
            std::memcpy(&dst[(i * 7) % slots], &src[i % slots], 8);
        }
        const double secs = seconds_since(m0);
        volatile std::uint64_t sink = dst[writes % slots];
        (void)sink;
        return secs;
    };
    // The same 64 slots of 64 KiB per side as the simulated writes, so both work from the same caches.
    std::vector<std::uint64_t> lsrc(large_slots * large_words, 1), ldst(large_slots * large_words, 2);
    auto large_anchor = [&] {
        const double l0 = clock_now();
        for (std::size_t i = 0; i < large; ++i) {
            lsrc[(i % large_slots) * large_words] = i;
            std::memcpy(&ldst[(i % large_slots) * large_words], &lsrc[(i % large_slots) * large_words], large_words * 8);
        }
        const double secs = seconds_since(l0);
        volatile std::uint64_t lsink = ldst[(large % large_slots) * large_words];
        (void)lsink;
        return secs;
    };
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    };
    auto range = [](const std::vector<double>& v) {
        char out[64];
        std::snprintf(out, sizeof out, "%.2f to %.2f", *std::min_element(v.begin(), v.end()),
                      *std::max_element(v.begin(), v.end()));
        return std::string(out);
    };

    int status = 0;
    for (const auto& config : configs) {
        std::size_t wrong = 0;
        {
            std::vector<double> secs, anchor, ratio;
            for (std::size_t round = 0; round < rounds; ++round) {
                anchor.push_back(small_anchor());
                Side a = make(config, 1 << 16, 4 * batch), b = make(config, 1 << 16, 4 * batch);
                a.qp.connect(b.qp.address());
                b.qp.connect(a.qp.address());
                secs.push_back(run(a, b, writes, 1, 1, batch, [](std::size_t i, std::size_t) { return i * 0x9e3779b97f4a7c15ull; },
                                   wrong));
                if (secs.back() < 0) return 1;
                if (wrong) status = 1;
                ratio.push_back(static_cast<double>(writes) / secs.back() / small_target);
            }
            const double s = median(secs), rate = static_cast<double>(writes) / s;
            std::printf("sim_writes: %zu 8-byte writes in batches of %u on %s: %.3f s, %.0f writes/s, %.2fx the target "
                        "of %.0f million; %zu wrong slots; median of %zu rounds (%s)\n",
                        writes, batch, config.c_str(), s, rate, median(ratio), small_target * 1e-6, wrong, rounds,
                        range(ratio).c_str());
            std::printf("sim_writes: anchor memcpy of 8 bytes: %.0f copies/s (%.1f ns per write vs %.2f ns per copy)\n",
                        static_cast<double>(writes) / median(anchor), s * 1e9 / static_cast<double>(writes),
                        median(anchor) * 1e9 / static_cast<double>(writes));
        }
        if (large == 0) continue;
        std::vector<double> anchors;
        for (const char* check : {",check_sources=1", ",check_sources=0"}) {
            // 64 KiB writes: 64 source and target slots (4 MiB per side), batches of 4.
            const std::uint32_t lbatch = 4;
            const std::string cfg = config + check;
            std::vector<double> secs, vsecs, ratio;
            for (std::size_t round = 0; round < rounds; ++round) {
                anchors.push_back(large_anchor());
                Side a = make(cfg, large_slots * large_words, 4 * lbatch), b = make(cfg, large_slots * large_words, 4 * lbatch);
                a.qp.connect(b.qp.address());
                b.qp.connect(a.qp.address());
                auto fab = weft::sim::Fabric::of(a.dom);
                const auto v0 = fab.now();
                secs.push_back(run(a, b, large, large_words, 1, lbatch,
                                   [](std::size_t i, std::size_t w) { return w == 0 ? i : ((i % large_slots) << 20) ^ w; },
                                   wrong));
                if (secs.back() < 0) return 1;
                if (wrong) status = 1;
                vsecs.push_back(static_cast<double>(fab.now() - v0) * 1e-9);
                ratio.push_back(anchors.back() / secs.back());
            }
            const double bytes = static_cast<double>(large) * 64 * 1024;
            const double s = median(secs), r = median(ratio);
            std::printf("sim_writes: %zu 64 KiB writes on %s: %.3f s, %.2f GB/s of %s time "
                        "(%.2f GB/s of virtual time), %.2fx memcpy%s; %zu wrong slots; median of %zu rounds (%s)\n",
                        large, cfg.c_str(), s, bytes / s * 1e-9, cpu_clock ? "CPU" : "wall-clock",
                        bytes / median(vsecs) * 1e-9, r,
                        check[15] == '1' ? (r >= large_target ? " (target >= 0.8x: met)" : " (target >= 0.8x: missed)")
                                         : "",
                        wrong, rounds, range(ratio).c_str());
        }
        std::printf("sim_writes: anchor memcpy of 64 KiB between the same slots: %.2f GB/s\n",
                    bytes_per_s(large, median(anchors)));
    }
    return status;
}
