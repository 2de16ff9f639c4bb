// The ofi backend's progress cost beside raw libfabric, in one run:
//   - an empty poll: raw fi_cq_read on an idle CQ of the same provider, and weft's CompletionQueue::poll with
//     2 and with 64 CQs in the process (each CQ serves one QP of a connected pair, nothing in flight), in
//     alternating rounds: each ratio is the median of the rounds' ratios, each time the median of its rounds;
//   - CPU used while the program waits with nothing to do on 64 CQs: blocked in epoll on their fd()s, and in
//     CompletionQueue::wait on one of them (process CPU time over wall time, every thread counted).
// usage: weft-bench-ofi-progress CONFIG   (e.g. ofi:provider=shm; default ofi:provider=tcp)
#include <weft/weft.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

template <class F>
double ns_per_call(F&& f, int iters) {
    for (int i = 0; i < iters / 10; ++i) f();  // warm up
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) f();
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / iters;
}

// Raw libfabric: an idle CQ of the provider the configuration names (its first fi_info with FI_MSG|FI_RMA),
// with one endpoint bound, open while the measurement runs.
class RawCq {
public:
    explicit RawCq(const std::string& provider) {
        hints_ = fi_allocinfo();
        hints_->caps = FI_MSG | FI_RMA;
        hints_->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
        hints_->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        hints_->fabric_attr->prov_name = strdup(provider.c_str());
        const char* node = provider.rfind("tcp", 0) == 0 || provider == "sockets" ? "127.0.0.1" : nullptr;
        if (fi_getinfo(FI_VERSION(1, 17), node, nullptr, node ? FI_SOURCE : 0, hints_, &info_) != 0) return;
        fi_cq_attr attr{};
        attr.size = 256;
        attr.format = FI_CQ_FORMAT_DATA;
        if (fi_fabric(info_->fabric_attr, &fabric_, nullptr) != 0 || fi_domain(fabric_, info_, &domain_, nullptr) != 0 ||
            fi_cq_open(domain_, &attr, &cq_, nullptr) != 0) {
            return;
        }
        // With an endpoint bound and enabled, as weft's CQs have (RDM: with its address vector; MSG: not
        // connected, which leaves the connection's socket out of tcp's progress).
        if (fi_endpoint(domain_, info_, &ep_, nullptr) == 0) {
            fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV);
            if (info_->ep_attr->type == FI_EP_RDM) {
                fi_av_attr av_attr{};
                av_attr.type = FI_AV_UNSPEC;
                if (fi_av_open(domain_, &av_attr, &av_, nullptr) == 0) fi_ep_bind(ep_, &av_->fid, 0);
            }
            if (info_->ep_attr->type != FI_EP_MSG) fi_enable(ep_);
        }
    }
    RawCq(const RawCq&) = delete;
    RawCq& operator=(const RawCq&) = delete;
    ~RawCq() {
        if (ep_) fi_close(&ep_->fid);
        if (av_) fi_close(&av_->fid);
        if (cq_) fi_close(&cq_->fid);
        if (domain_) fi_close(&domain_->fid);
        if (fabric_) fi_close(&fabric_->fid);
        if (info_) fi_freeinfo(info_);
        fi_freeinfo(hints_);
    }
    bool ok() const { return cq_ != nullptr; }
    void poll() { (void)fi_cq_read(cq_, e_, 16); }

private:
    fi_info* hints_ = nullptr;
    fi_info* info_ = nullptr;
    fid_fabric* fabric_ = nullptr;
    fid_domain* domain_ = nullptr;
    fid_cq* cq_ = nullptr;
    fid_ep* ep_ = nullptr;
    fid_av* av_ = nullptr;
    fi_cq_data_entry e_[16];
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct Pairs {
    weft::Domain dom;
    std::vector<weft::CompletionQueue> cqs;
    std::vector<weft::QueuePair> qps;

    Pairs(const std::string& config, int ncq) : dom(weft::open(config)) {
        for (int i = 0; i < ncq; i += 2) {
            auto a = dom.create_cq({.depth = 64});
            auto b = dom.create_cq({.depth = 64});
            weft::QpOptions oa, ob;
            oa.send_cq = oa.recv_cq = a;
            ob.send_cq = ob.recv_cq = b;
            auto qa = dom.create_qp(oa);
            auto qb = dom.create_qp(ob);
            auto addr_a = qa.address();
            qa.connect(qb.address());
            qb.connect(addr_a);
            cqs.push_back(std::move(a));
            cqs.push_back(std::move(b));
            qps.push_back(std::move(qa));
            qps.push_back(std::move(qb));
        }
    }
};

struct EmptyPoll {
    double raw = -1;    // ns, median of the rounds
    double weft = -1;   // ns, median of the rounds
    double ratio = -1;  // median of the rounds' weft / raw
};

// weft's empty poll on the first of `ncq` CQs beside raw fi_cq_read, in alternating rounds of `per_round`
// calls each, so that a slow spell of a loaded host falls on both sides of a round's ratio.
EmptyPoll empty_poll(RawCq& raw, const std::string& config, int ncq, int rounds, int per_round) {
    Pairs p(config, ncq);
    weft::Completion wc[16];
    auto& cq = p.cqs.front();
    std::vector<double> r, w, q;
    for (int i = 0; i < rounds; ++i) {
        const double b = ns_per_call([&] { (void)cq.poll(wc); }, per_round);
        w.push_back(b);
        if (!raw.ok()) continue;
        const double a = ns_per_call([&] { raw.poll(); }, per_round);
        r.push_back(a);
        q.push_back(b / a);
    }
    EmptyPoll out;
    out.weft = median(w);
    if (!r.empty()) {
        out.raw = median(r);
        out.ratio = median(q);
    }
    return out;
}

// Percent of one core the process uses over `seconds` while blocked on the 64 CQs' descriptors.
double idle_cpu_fd(const std::string& config, double seconds) {
    Pairs p(config, 64);
    int ep = ::epoll_create1(EPOLL_CLOEXEC);
    for (auto& cq : p.cqs) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ::epoll_ctl(ep, EPOLL_CTL_ADD, cq.fd(), &ev);
    }
    weft::Completion wc[16];
    for (auto& cq : p.cqs) (void)cq.poll(wc);  // an empty poll re-arms each descriptor
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration<double>(seconds);
    int wakeups = 0;
    while (Clock::now() < end) {
        epoll_event ev[64];
        int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
        int n = ::epoll_wait(ep, ev, 64, left > 0 ? left : 0);
        if (n > 0) {
            ++wakeups;
            for (auto& cq : p.cqs) (void)cq.poll(wc);
        }
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    ::close(ep);
    if (wakeups > 0) std::printf("    (%d spurious wakeups)\n", wakeups);
    return 100.0 * (cpu_seconds() - c0) / wall;
}

double idle_cpu_wait(const std::string& config, double seconds) {
    Pairs p(config, 64);
    const double c0 = cpu_seconds();
    const auto t0 = Clock::now();
    (void)p.cqs.front().wait(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds)));
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    return 100.0 * (cpu_seconds() - c0) / wall;
}

}  // namespace

int main(int argc, char** argv) {
    std::string config = argc > 1 ? argv[1] : "ofi:provider=tcp";
    std::string provider = "tcp";
    if (auto at = config.find("provider="); at != std::string::npos) {
        provider = config.substr(at + 9, config.find(',', at) == std::string::npos ? std::string::npos
                                                                                     : config.find(',', at) - at - 9);
    }
    try {
        // 40 rounds of 5000 calls a side: 200,000 calls each, as one run of each side before.
        const int rounds = 40, per_round = 5000;
        std::printf("%s\n", config.c_str());
        RawCq raw(provider);
        const EmptyPoll two = empty_poll(raw, config, 2, rounds, per_round);
        const EmptyPoll many = empty_poll(raw, config, 64, rounds, per_round);
        std::printf("  empty poll, raw fi_cq_read (%s):  %8.1f ns  (%.1f ns in the 2-CQ rounds)\n", provider.c_str(),
                    many.raw, two.raw);
        std::printf("  empty poll, weft, 2 CQs (1 pair):  %8.1f ns  (%.2fx raw)\n", two.weft, two.ratio);
        std::printf("  empty poll, weft, 64 CQs:          %8.1f ns  (%.2fx raw; target <= 2x)\n", many.weft, many.ratio);
        std::printf("  idle CPU, epoll on 64 fd()s, 2 s:  %8.1f %% of a core\n", idle_cpu_fd(config, 2.0));
        std::printf("  idle CPU, wait() on 1 of 64, 2 s:  %8.1f %% of a core\n", idle_cpu_wait(config, 2.0));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "weft-bench-ofi-progress: %s\n", e.what());
        return 1;
    }
    return 0;
}
