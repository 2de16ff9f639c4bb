// sim_writes — posts 1,000,000 8-byte RDMA writes through the public API on the simulator, checks every
// byte arrived, and prints the rate beside a memcpy anchor measured in the same run.
//
//   weft-bench-sim-writes [--writes N] [--batch B] [--backend CONFIG]
//
// Each write carries a distinct 8-byte value to a distinct target slot; one request in every batch is
// signaled, so the send queue is recycled the way a real application would do it.
#include <weft/weft.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

}  // namespace

int main(int argc, char** argv) {
    std::size_t writes = 1'000'000;
    std::uint32_t batch = 32;
    std::string backend = "sim:fabric=bench";
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string arg = argv[i];
        if (arg == "--writes") writes = std::strtoull(argv[i + 1], nullptr, 10);
        else if (arg == "--batch") batch = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
        else if (arg == "--backend") backend = argv[i + 1];
        else {
            std::fprintf(stderr, "usage: weft-bench-sim-writes [--writes N] [--batch B] [--backend CONFIG]\n");
            return 2;
        }
    }
    const std::size_t slots = 1 << 16;  // target slots; writes wrap around them
    Side a = make(backend, slots, 4 * batch), b = make(backend, slots, 4 * batch);
    a.qp.connect(b.qp.address());
    b.qp.connect(a.qp.address());

    std::vector<weft::SendRequest> reqs(batch);
    weft::Completion wc[64];
    std::size_t posted = 0, signaled_in_flight = 0;
    auto t0 = std::chrono::steady_clock::now();
    while (posted < writes) {
        const std::size_t n = std::min<std::size_t>(batch, writes - posted);
        for (std::size_t k = 0; k < n; ++k) {
            const std::size_t i = posted + k;
            const std::size_t slot = i % slots;
            a.words[slot] = i * 0x9e3779b97f4a7c15ull;  // the value this write carries
            reqs[k] = weft::write(i, a.mr.slice(slot * 8, 8), b.mr.remote().slice(slot * 8, 8)).signaled(k + 1 == n);
        }
        // Keep at most three batches in flight: the queue holds four.
        while (signaled_in_flight >= 3) {
            for (const auto& c : a.cq.poll(wc)) {
                if (!c.ok()) {
                    std::fprintf(stderr, "write %llu failed: %s\n", static_cast<unsigned long long>(c.id),
                                 std::string(weft::to_string(c.status)).c_str());
                    return 1;
                }
                --signaled_in_flight;
            }
        }
        if (auto st = a.qp.post_send(std::span(reqs.data(), n)); !st) {
            std::fprintf(stderr, "post failed: %s\n", st.reason());
            return 1;
        }
        ++signaled_in_flight;
        posted += n;
    }
    while (signaled_in_flight > 0) {
        for ([[maybe_unused]] const auto& c : a.cq.poll(wc)) --signaled_in_flight;
    }
    auto t1 = std::chrono::steady_clock::now();

    // The last write to each slot must be what the target holds.
    std::size_t wrong = 0;
    for (std::size_t slot = 0; slot < std::min(slots, writes); ++slot) {
        std::size_t last = slot + ((writes - 1 - slot) / slots) * slots;
        if (b.words[slot] != last * 0x9e3779b97f4a7c15ull) ++wrong;
    }
    const double secs = std::chrono::duration<double>(t1 - t0).count();

    // Anchor: the same number of 8-byte copies with memcpy, on this machine, now.
    std::vector<std::uint64_t> src(slots), dst(slots);
    auto m0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < writes; ++i) {
        src[i % slots] = i;
        std::memcpy(&dst[(i * 7) % slots], &src[i % slots], 8);
    }
    auto m1 = std::chrono::steady_clock::now();
    volatile std::uint64_t sink = dst[writes % slots];
    (void)sink;
    const double msecs = std::chrono::duration<double>(m1 - m0).count();

    std::printf("sim_writes: %zu 8-byte writes in batches of %u on %s: %.3f s, %.0f writes/s; %zu wrong slots\n",
                writes, batch, backend.c_str(), secs, static_cast<double>(writes) / secs, wrong);
    std::printf("sim_writes: anchor memcpy of 8 bytes: %.0f copies/s (%.1f ns per write vs %.2f ns per copy)\n",
                static_cast<double>(writes) / msecs, secs * 1e9 / static_cast<double>(writes),
                msecs * 1e9 / static_cast<double>(writes));
    return wrong == 0 ? 0 : 1;
}
