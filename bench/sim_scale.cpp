// sim_scale — the simulator's cost per request as queue pairs and requests in flight grow: 8-byte writes
// through the public API from every requester QP of one node to its peer QP on another, each QP keeping the
// same number of writes in flight, at 2, 1,000, 10,000 and 100,000 QPs, and then 1,000 QPs keeping
// 1,000,000 writes in flight in all. Prints wall-clock ns per request beside the 2-QP figure measured in the
// same run; the target is at most 1.5 times it. Every write carries a distinct value and the last value of
// each QP is checked at its target.
//
// Wall-clock figures on a shared host drift by tens of percent within seconds: the whole series runs in
// `rounds` rounds (default 3), each figure's ratio is taken against the first (2-QP) figure measured again
// just before it, and each line gives the median of the ns per request and of the ratio over the rounds.
//
//   weft-bench-sim-scale [--qps N,N,...] [--requests R] [--rounds K] [--backend CONFIG]
//
// A request is counted from its post to the poll of the completion that retires it (one signaled write per
// batch); the setup (domains, QPs, connections) is not counted.
#include <weft/weft.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Result {
    double ns_per_request = 0;
    std::size_t in_flight = 0;  ///< the most requests in flight at once
    std::size_t wrong = 0;      ///< QPs whose target does not hold their last value
    bool failed = false;
};

// `qps` QPs (qps / 2 requesters on node a, their peers on node b); each requester keeps `window` batches of
// `batch` writes in flight until `requests` writes were posted in all.
Result run(const std::string& backend, std::size_t qps, std::uint32_t batch, std::uint32_t window,
           std::size_t requests) {
    const std::size_t pairs = std::max<std::size_t>(qps / 2, 1);
    const std::size_t per_qp = static_cast<std::size_t>(batch) * window;  // source words of one requester
    const std::string config =
        backend + (backend.find(':') == std::string::npos ? ":" : ",") + "fabric=scale" + std::to_string(qps);
    auto a = weft::open(config), b = weft::open(config);
    const auto depth = static_cast<std::uint32_t>(std::min<std::size_t>(pairs * window + 64, 1u << 22));
    auto acq = a.create_cq({.depth = depth}), bcq = b.create_cq({.depth = 64});
    std::vector<std::uint64_t> src(pairs * per_qp), dst(pairs);
    auto amr = a.register_memory(src.data(), src.size() * 8, weft::all_access);
    auto bmr = b.register_memory(dst.data(), dst.size() * 8, weft::all_access);
    std::vector<weft::QueuePair> req, resp;
    req.reserve(pairs);
    resp.reserve(pairs);
    for (std::size_t q = 0; q < pairs; ++q) {
        req.push_back(a.create_qp({.send_cq = acq, .recv_cq = acq, .max_send = static_cast<std::uint32_t>(per_qp),
                                   .max_recv = 1}));
        resp.push_back(b.create_qp({.send_cq = bcq, .recv_cq = bcq, .max_send = 1, .max_recv = 1}));
        req.back().connect(resp.back().address());
        resp.back().connect(req.back().address());
    }
    const auto remote = bmr.remote();

    Result r;
    std::vector<std::size_t> posted(pairs, 0);  // writes posted per requester
    std::vector<weft::SendRequest> reqs(batch);
    std::vector<weft::Completion> wc(256);
    std::size_t total = 0, in_flight = 0;
    // Posts the next batch of requester q; its writes use the source words of the oldest batch, retired.
    auto post = [&](std::size_t q) {
        for (std::uint32_t k = 0; k < batch; ++k) {
            const std::size_t i = posted[q] + k;
            const std::size_t word = q * per_qp + i % per_qp;
            src[word] = (q << 32) | i;
            reqs[k] = weft::write((q << 32) | i, amr.slice(word * 8, 8), remote.slice(q * 8, 8)).signaled(k + 1 == batch);
        }
        if (!req[q].post_send(reqs)) return false;
        posted[q] += batch;
        total += batch;
        in_flight += batch;
        return true;
    };
    const auto t0 = std::chrono::steady_clock::now();
    for (std::uint32_t w = 0; w < window && total < requests; ++w) {
        for (std::size_t q = 0; q < pairs && total < requests; ++q) {
            if (!post(q)) return {0, 0, 0, true};
        }
    }
    r.in_flight = in_flight;
    while (in_flight > 0) {
        for (const auto& c : acq.poll(wc)) {
            if (!c.ok()) {
                std::fprintf(stderr, "sim_scale: write %llx failed: %s\n", static_cast<unsigned long long>(c.id),
                             std::string(weft::to_string(c.status)).c_str());
                return {0, 0, 0, true};
            }
            in_flight -= batch;
            if (total < requests && !post(c.id >> 32)) return {0, 0, 0, true};
        }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.ns_per_request = secs * 1e9 / static_cast<double>(total);
    for (std::size_t q = 0; q < pairs; ++q) {
        if (posted[q] && dst[q] != ((q << 32) | (posted[q] - 1))) ++r.wrong;
    }
    return r;
}

std::vector<std::size_t> parse_list(const std::string& s) {
    std::vector<std::size_t> out;
    for (std::size_t at = 0; at < s.size();) {
        const std::size_t comma = std::min(s.find(',', at), s.size());
        out.push_back(std::strtoull(s.substr(at, comma - at).c_str(), nullptr, 10));
        at = comma + 1;
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::size_t> qp_counts = {2, 1000, 10000, 100000};
    std::size_t requests = 2'000'000;
    std::size_t rounds = 3;
    std::string backend = "sim";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string arg = argv[i];
        if (arg == "--qps") qp_counts = parse_list(argv[i + 1]);
        else if (arg == "--requests") requests = std::strtoull(argv[i + 1], nullptr, 10);
        else if (arg == "--rounds") rounds = std::max<std::size_t>(1, std::strtoull(argv[i + 1], nullptr, 10));
        else if (arg == "--backend") backend = argv[i + 1];
        else {
            std::fprintf(stderr,
                         "usage: weft-bench-sim-scale [--qps N,N,...] [--requests R] [--rounds K] [--backend CONFIG]\n");
            return 2;
        }
    }
    // Each requester keeps 2 batches of 8 writes in flight, so requests in flight grow with the QPs.
    constexpr std::uint32_t batch = 8, window = 2;
    constexpr double target = 1.5;  // at most this times the cost per request with 2 QPs
    struct Series {
        std::string what;
        std::size_t qps;
        std::uint32_t batch, window;
        std::size_t requests;
        std::size_t in_flight = 0;
        std::vector<double> ns, ratio;
    };
    std::vector<Series> series;
    for (std::size_t qps : qp_counts) {
        // At least four times the requests in flight, so filling and draining the queues weighs little.
        series.push_back({std::to_string(qps) + " QPs", qps, batch, window,
                          std::max(requests, 4 * (qps / 2) * batch * window)});
    }
    // 1,000,000 requests in flight: 500 requesters keep 2,000 each (batches of 100, 20 in flight).
    series.push_back({"1000 QPs", 1000, 100, 20, std::max<std::size_t>(requests, 3'000'000)});
    int status = 0;
    auto measure = [&](Series& x) {
        const Result r = run(backend, x.qps, x.batch, x.window, x.requests);
        if (r.wrong) std::printf("sim_scale: %s: %zu wrong targets\n", x.what.c_str(), r.wrong);
        if (r.failed || r.wrong) std::exit(1);
        x.in_flight = r.in_flight;
        x.ns.push_back(r.ns_per_request);
        return r.ns_per_request;
    };
    for (std::size_t round = 0; round < rounds; ++round) {
        for (Series& x : series) {
            // The first series is the base; each other one is measured right after it runs again, so the
            // two figures of a ratio are seconds apart whatever the host does meanwhile.
            const double base = &x == &series.front() ? 0 : measure(series.front());
            const double ns = measure(x);
            x.ratio.push_back(base == 0 ? 1.0 : ns / base);
        }
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    };
    for (const Series& x : series) {
        const double ratio = median(x.ratio);
        std::printf("sim_scale: %s, %zu in flight: %.0f ns per request, %.2fx the first figure (target <= %.1fx: %s); "
                    "0 wrong targets; median of %zu rounds (ratios %.2f to %.2f)\n",
                    x.what.c_str(), x.in_flight, median(x.ns), ratio, target, ratio <= target ? "met" : "missed",
                    rounds, *std::min_element(x.ratio.begin(), x.ratio.end()),
                    *std::max_element(x.ratio.begin(), x.ratio.end()));
    }
    return status;
}
