// The ofi backend's progress cost beside raw libfabric, in one run:
//   - an empty poll: raw fi_cq_read on an idle CQ of the same provider, and weft's CompletionQueue::poll with
//     1 and with 64 CQs in the process (each CQ serves one QP of a connected pair, nothing in flight);
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
// with one endpoint bound.
double raw_empty_poll(const std::string& provider, int iters) {
    fi_info* hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_RMA;
    hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->fabric_attr->prov_name = strdup(provider.c_str());
    fi_info* info = nullptr;
    const char* node = provider.rfind("tcp", 0) == 0 || provider == "sockets" ? "127.0.0.1" : nullptr;
    if (fi_getinfo(FI_VERSION(1, 17), node, nullptr, node ? FI_SOURCE : 0, hints, &info) != 0) {
        fi_freeinfo(hints);
        return -1;
    }
    fid_fabric* fabric = nullptr;
    fid_domain* domain = nullptr;
    fid_cq* cq = nullptr;
    fid_ep* ep = nullptr;
    fid_av* av = nullptr;
    fi_cq_attr attr{};
    attr.size = 256;
    attr.format = FI_CQ_FORMAT_DATA;
    double ns = -1;
    if (fi_fabric(info->fabric_attr, &fabric, nullptr) == 0 && fi_domain(fabric, info, &domain, nullptr) == 0 &&
        fi_cq_open(domain, &attr, &cq, nullptr) == 0) {
        // With an endpoint bound and enabled, as weft's CQs have (RDM: with its address vector; MSG: not
        // connected, which leaves the connection's socket out of tcp's progress).
        if (fi_endpoint(domain, info, &ep, nullptr) == 0) {
            fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV);
            if (info->ep_attr->type == FI_EP_RDM) {
                fi_av_attr av_attr{};
                av_attr.type = FI_AV_UNSPEC;
                if (fi_av_open(domain, &av_attr, &av, nullptr) == 0) fi_ep_bind(ep, &av->fid, 0);
            }
            if (info->ep_attr->type != FI_EP_MSG) fi_enable(ep);
        }
        fi_cq_data_entry e[16];
        ns = ns_per_call([&] { (void)fi_cq_read(cq, e, 16); }, iters);
    }
    if (ep) fi_close(&ep->fid);
    if (av) fi_close(&av->fid);
    if (cq) fi_close(&cq->fid);
    if (domain) fi_close(&domain->fid);
    if (fabric) fi_close(&fabric->fid);
    fi_freeinfo(info);
    fi_freeinfo(hints);
    return ns;
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

double weft_empty_poll(const std::string& config, int ncq, int iters) {
    Pairs p(config, ncq);
    weft::Completion wc[16];
    auto& cq = p.cqs.front();
    return ns_per_call([&] { (void)cq.poll(wc); }, iters);
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
        const int iters = 200000;
        std::printf("%s\n", config.c_str());
        const double raw = raw_empty_poll(provider, iters);
        std::printf("  empty poll, raw fi_cq_read (%s):  %8.1f ns\n", provider.c_str(), raw);
        const double two = weft_empty_poll(config, 2, iters);
        std::printf("  empty poll, weft, 2 CQs (1 pair):  %8.1f ns  (%.2fx raw)\n", two, two / raw);
        const double many = weft_empty_poll(config, 64, iters);
        std::printf("  empty poll, weft, 64 CQs:          %8.1f ns  (%.2fx raw; target <= 2x)\n", many, many / raw);
        std::printf("  idle CPU, epoll on 64 fd()s, 2 s:  %8.1f %% of a core\n", idle_cpu_fd(config, 2.0));
        std::printf("  idle CPU, wait() on 1 of 64, 2 s:  %8.1f %% of a core\n", idle_cpu_wait(config, 2.0));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "weft-bench-ofi-progress: %s\n", e.what());
        return 1;
    }
    return 0;
}
