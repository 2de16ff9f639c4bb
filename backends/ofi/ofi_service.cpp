// The ofi backend's service thread: one per process, started when the first liveness socket or fd()-mode CQ
// needs it, and blocked in the kernel (ppoll on an epoll set) while nothing happens. It never reads a CQ's
// entries: liveness hang-ups only set flags the QPs' consumers act on, and its CQ rounds progress the
// provider with fi_cq_read(cq, buf, 0), which consumes nothing.
//
// Rounds: CQs in fd() mode whose provider does not wake the CQ's descriptor by itself (shm, where senders
// only raise a flag in the receiver's shared memory) and CQs whose QPs have peers in this process that need
// kicks. The thread runs them every 20 us after something was found, doubling the pause to at most 1 ms
// while they stay idle and a request is out (OfiCq::round_needed). With nothing out it dozes: it sleeps
// until a post nudges it (service::nudge, one load per post otherwise), at most 100 ms.
//
// Attention rounds: while a CQ of the process is in fd() mode the application may sleep on descriptors
// alone, so the thread also drives the QPs that asked for attention (a handshake under way, requests held
// back), in rounds backing off the same way, for as long as any is left.
//
// progress=thread: every CQ of such a domain is in the rounds from its creation (kicked once a QP on it is
// connected), the thread never dozes longer than a round's longest pause while one exists, drives the
// QPs that asked for attention as for fd() mode, and wakes at once when a CQ's provider descriptor reports
// new data (edge-triggered), then keeps the shortest pause for a few rounds.
//
// After fork() the child has no service thread; the first use in the child starts its own.
#include "ofi.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <unordered_map>

namespace weft::ofi::service {
namespace {

using namespace std::chrono_literals;

constexpr std::chrono::nanoseconds round_min = 20us;
constexpr std::chrono::nanoseconds round_max = 1ms;
// While no round could find anything the thread sleeps until a post nudges it; this bounds the sleep in
// case a nudge is missed (a post racing the thread's last look).
constexpr std::chrono::nanoseconds doze_max = 100ms;

struct Watched {
    int fd = -1;
    OfiQp* qp = nullptr;
};

struct Timer {
    std::chrono::steady_clock::time_point when;
    std::weak_ptr<OfiCq> cq;
};

// Never destroyed: the detached thread may outlive static destructors at exit.
struct State {
    pid_t pid = 0;
    int epfd = -1;
    int wake = -1;  // eventfd: the set of rounds changed
    std::mutex mu;  // watches; held while a watch's callback runs
    std::unordered_map<std::uint64_t, Watched> watches;
    std::uint64_t next_id = 1;
    std::mutex rounds_mu;  // held while rounds run
    std::vector<OfiCq*> rounds;
    std::atomic<bool> has_rounds{false};
    std::mutex timers_mu;
    std::vector<Timer> timers;
};

std::mutex start_mu;
State* state = nullptr;
std::atomic<std::uint32_t> fd_cqs{0};  // CQs in fd() mode
std::atomic<std::uint32_t> thread_cqs{0};  // CQs of progress=thread domains
constexpr std::uint64_t progress_id = 1ull << 63;  // epoll ids of progress=thread descriptors
constexpr int hot_rounds = 16;

// Whether the application may leave the QPs that asked for attention to this thread.
bool attention_ours() noexcept {
    return fd_cqs.load(std::memory_order_acquire) != 0 || thread_cqs.load(std::memory_order_acquire) != 0;
}

void run(State* s) noexcept {
    std::array<epoll_event, 16> events{};
    std::chrono::nanoseconds pause = round_min;
    int hot = 0;  // rounds left at the shortest pause after a progress=thread descriptor reported data
    for (;;) {
        // Attention rounds: a CQ is in fd() mode and a QP needs driving that the application may never poll.
        const bool attention = attention_ours() && registry::attention_pending();
        if (attention) registry::drive_all(true);
        const bool rounds = s->has_rounds.load(std::memory_order_acquire) ||
                            (attention && registry::attention_pending());
        std::chrono::nanoseconds sleep = rounds ? pause : std::chrono::nanoseconds::max();
        {
            // Due timers fire now; the next one bounds the sleep.
            std::vector<std::shared_ptr<OfiCq>> due;
            {
                std::lock_guard lock(s->timers_mu);
                const auto now = std::chrono::steady_clock::now();
                for (std::size_t i = 0; i < s->timers.size();) {
                    if (s->timers[i].when <= now) {
                        if (auto cq = s->timers[i].cq.lock()) due.push_back(std::move(cq));
                        s->timers[i] = std::move(s->timers.back());
                        s->timers.pop_back();
                    } else {
                        sleep = std::min<std::chrono::nanoseconds>(sleep, s->timers[i].when - now);
                        ++i;
                    }
                }
            }
            for (auto& cq : due) cq->wake();
        }
        timespec ts{};
        timespec* tsp = nullptr;
        if (sleep != std::chrono::nanoseconds::max()) {
            ts.tv_sec = static_cast<time_t>(sleep.count() / 1'000'000'000);
            ts.tv_nsec = static_cast<long>(sleep.count() % 1'000'000'000);
            tsp = &ts;
        }
        pollfd p{s->epfd, POLLIN, 0};
        int ready = ::ppoll(&p, 1, tsp, nullptr);
        if (ready < 0 && errno != EINTR) {
            ::usleep(1000);
            continue;
        }
        if (ready > 0) {
            int n = ::epoll_wait(s->epfd, events.data(), static_cast<int>(events.size()), 0);
            std::lock_guard lock(s->mu);
            for (int i = 0; i < n; ++i) {
                const std::uint64_t id = events[static_cast<std::size_t>(i)].data.u64;
                if (id == progress_id) {
                    pause = round_min;
                    hot = hot_rounds;  // a progress=thread CQ's provider has data: a round now
                    continue;
                }
                if (id == 0) {
                    std::uint64_t count = 0;
                    [[maybe_unused]] ssize_t r = ::read(s->wake, &count, sizeof count);
                    dozing.store(false, std::memory_order_relaxed);
                    pause = round_min;
                    continue;
                }
                auto it = s->watches.find(id);
                if (it == s->watches.end()) continue;
                // One report per connection: it will not come back.
                ::epoll_ctl(s->epfd, EPOLL_CTL_DEL, it->second.fd, nullptr);
                OfiQp* qp = it->second.qp;
                s->watches.erase(it);
                qp->liveness_lost();
            }
        }
        if (rounds) {
            bool found = false;
            bool needed = attention && registry::attention_pending();
            {
                std::lock_guard lock(s->rounds_mu);
                for (OfiCq* cq : s->rounds) found |= cq->service_round();
                if (!found) {
                    // Doze when no round can find anything: announce it, then look again, so that a post
                    // either sees the announcement (and nudges) or is seen here.
                    dozing.store(true, std::memory_order_seq_cst);
                    for (OfiCq* cq : s->rounds) needed = needed || cq->round_needed();
                    if (needed) dozing.store(false, std::memory_order_relaxed);
                }
            }
            if (hot > 0) {
                // A message takes several progress calls on tcp (header, payload, acknowledgement).
                --hot;
                found = true;
            }
            pause = found ? round_min : needed ? std::min(pause * 2, round_max) : doze_max;
        }
    }
}

// The process's state, the thread started (again after fork()). Throws weft::Error.
State& started() {
    std::lock_guard lock(start_mu);
    const pid_t pid = ::getpid();
    if (state != nullptr && state->pid == pid) return *state;
    // First use, or first use in a forked child: the parent's thread does not exist here.
    auto* s = new State();
    s->pid = pid;
    s->epfd = ::epoll_create1(EPOLL_CLOEXEC);
    s->wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->epfd < 0 || s->wake < 0) {
        int err = errno;
        if (s->epfd >= 0) ::close(s->epfd);
        if (s->wake >= 0) ::close(s->wake);
        delete s;
        throw_errno(err, "the ofi service thread's epoll set", backend_name, "create_qp");
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    ::epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wake, &ev);
    try {
        std::thread(run, s).detach();
    } catch (const std::system_error& e) {
        ::close(s->epfd);
        ::close(s->wake);
        delete s;
        throw Error(e.code(), "cannot start the ofi service thread", backend_name, "create_qp");
    }
    state = s;  // the previous process's state (if forked) is left as it was
    return *s;
}

State* current() noexcept {
    std::lock_guard lock(start_mu);
    return state != nullptr && state->pid == ::getpid() ? state : nullptr;
}

void wake(State& s) noexcept {
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(s.wake, &one, sizeof one);
}

}  // namespace

std::atomic<bool> dozing{false};

void wake_dozing() noexcept {
    if (!dozing.exchange(false, std::memory_order_acq_rel)) return;
    if (State* s = current()) wake(*s);
}

void fd_mode_entered() {
    State& s = started();
    fd_cqs.fetch_add(1, std::memory_order_acq_rel);
    if (registry::attention_pending()) wake(s);
}

void fd_mode_left() noexcept { fd_cqs.fetch_sub(1, std::memory_order_acq_rel); }

void start_thread_progress(OfiCq* cq, int wait_fd) {
    State& s = started();
    if (wait_fd >= 0) {
        // Edge-triggered: the provider's descriptor stays readable while entries wait for the application,
        // and the thread only needs to know when new data arrives.
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLET;
        ev.data.u64 = progress_id;
        if (::epoll_ctl(s.epfd, EPOLL_CTL_ADD, wait_fd, &ev) != 0) {
            throw_errno(errno, "watching the CQ's descriptor for progress=thread", backend_name, "create_cq");
        }
    }
    thread_cqs.fetch_add(1, std::memory_order_acq_rel);
    try {
        add_round(cq);
    } catch (...) {
        stop_thread_progress(cq, wait_fd);
        throw;
    }
}

void stop_thread_progress(OfiCq* cq, int wait_fd) noexcept {
    State* s = current();
    if (s == nullptr) return;
    remove_round(cq);
    if (wait_fd >= 0) ::epoll_ctl(s->epfd, EPOLL_CTL_DEL, wait_fd, nullptr);
    thread_cqs.fetch_sub(1, std::memory_order_acq_rel);
}

void attention_wanted() noexcept {
    if (!attention_ours()) return;
    if (State* s = current()) wake(*s);
}

void wake_at(const std::shared_ptr<OfiCq>& cq, std::chrono::steady_clock::time_point when) noexcept {
    State* s = current();
    if (s == nullptr) return;
    try {
        std::lock_guard lock(s->timers_mu);
        s->timers.push_back(Timer{when, cq});
    } catch (...) {
        return;  // out of memory: the consumer finds the loss at its next poll instead
    }
    wake(*s);
}

std::uint64_t watch(int fd, OfiQp* qp) {
    State& s = started();
    std::lock_guard lock(s.mu);
    const std::uint64_t id = s.next_id++;
    s.watches.emplace(id, Watched{fd, qp});
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR;
    ev.data.u64 = id;
    if (::epoll_ctl(s.epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int err = errno;
        s.watches.erase(id);
        throw_errno(err, "watching the QP's liveness connection", backend_name, "QueuePair::connect");
    }
    return id;
}

void unwatch(std::uint64_t id) noexcept {
    if (id == 0) return;
    State* s = current();
    if (s == nullptr) return;
    std::lock_guard lock(s->mu);
    auto it = s->watches.find(id);
    if (it == s->watches.end()) return;
    ::epoll_ctl(s->epfd, EPOLL_CTL_DEL, it->second.fd, nullptr);
    s->watches.erase(it);
}

void add_round(OfiCq* cq) {
    State& s = started();
    {
        std::lock_guard lock(s.rounds_mu);
        if (std::find(s.rounds.begin(), s.rounds.end(), cq) != s.rounds.end()) return;
        s.rounds.push_back(cq);
        s.has_rounds.store(true, std::memory_order_release);
    }
    wake(s);
}

void remove_round(OfiCq* cq) noexcept {
    State* s = current();
    if (s == nullptr) return;
    std::lock_guard lock(s->rounds_mu);
    s->rounds.erase(std::remove(s->rounds.begin(), s->rounds.end(), cq), s->rounds.end());
    s->has_rounds.store(!s->rounds.empty(), std::memory_order_release);
}

}  // namespace weft::ofi::service
