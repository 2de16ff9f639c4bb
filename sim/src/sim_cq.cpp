// Simulated completion queues: a fixed ring, progress on poll/wait, and an eventfd for epoll users.
#include "sim.hpp"

#include <weft/error.hpp>

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace weft::sim::detail {
namespace {

// Events a poll may run on an empty queue before returning empty-handed, so a caller that waits for
// something only it can cause (e.g. posting a receive to end an RNR loop) regains control.
constexpr std::size_t poll_budget = 4096;

}  // namespace

SimCq::SimCq(std::shared_ptr<SimDomain> domain, std::uint32_t depth)
    : domain_(std::move(domain)), ring_(depth) {}

SimCq::~SimCq() {
    if (event_fd_ >= 0) {
        FabricState& f = *domain_->fabric();
        std::lock_guard lock(f.mu);
        std::erase(f.fd_cqs, this);
        ::close(event_fd_);
    }
}

void SimCq::push(const CqEntry& e) noexcept {
    if (overrun_) return;  // a CQ in error takes nothing more
    if (count_ == ring_.size()) {
        // As in verbs: the CQ goes to error and every QP using it follows (once this event is done).
        overrun_ = true;
        FabricState& f = *domain_->fabric();
        f.overrun_cqs.push_back(this);
        domain_->push_event({EventType::cq_error, 0, 0, "completion queue overrun", cq_num});
        f.report_misuse("completion queue of depth " + std::to_string(ring_.size()) +
                        " overran (a completion of QP " + std::to_string(e.wc.qp_num) +
                        " had no room): the CQ is in error, its QPs go to error, later completions are lost; "
                        "size CQs for every request and receive that can complete before the next poll");
        return;
    }
    ring_[(head_ + count_) % ring_.size()] = e;
    ++count_;
    FabricState& f = *domain_->fabric();
    if (f.tracing) {
        TraceRecord r;
        r.kind = TraceKind::completion;
        r.time = f.now;
        r.id = e.wc.id;
        r.node = domain_->node();
        r.qpn = e.wc.qp_num;
        r.bytes = e.wc.byte_len;
        r.opcode = e.wc.opcode;
        r.status = e.wc.status;
        f.record(r);
    }
}

void SimCq::report_overlap(FabricState& f) {
    f.report_misuse("two threads polled or waited on a completion queue of depth " + std::to_string(ring_.size()) +
                    " at the same time; one thread at a time may poll or wait (CqOptions::thread_safe lets several)");
}

std::size_t SimCq::poll(std::span<Completion> out) noexcept {
    FabricState& f = *domain_->fabric();
    OneAtATime::Scope poller(pollers_);
    std::lock_guard lock(f.mu);
    FabricState::ReturnToProgram stage{f};
    if (poller.overlapped) report_overlap(f);
    f.enter_call(domain_->node(), true);
    if (count_ == 0 && !f.idle()) {
        if (f.reorders(reorder_program)) {
            // The program spins on the queue until the NIC next does something, and no further: whatever
            // the program (or another node's) does between two polls can fall between two packets.
            f.run([this] { return count_ != 0; }, f.next_event_time(), SIZE_MAX);
            f.program_waited(domain_->node());
        } else {
            f.run([this] { return count_ != 0; }, UINT64_MAX, poll_budget);
        }
    }
    std::size_t n = 0;
    while (n < out.size() && count_ > 0) {
        const CqEntry& e = ring_[head_];
        out[n++] = e.wc;
        if (SimQp* qp = f.find_qp(e.wc.qp_num)) qp->release(e.send_queue, e.wqe);
        head_ = (head_ + 1) % ring_.size();
        --count_;
    }
    f.sync_fds();
    return n;
}

bool SimCq::wait(std::chrono::nanoseconds timeout) {
    FabricState& f = *domain_->fabric();
    OneAtATime::Scope poller(pollers_);
    std::unique_lock lock(f.mu);
    FabricState::ReturnToProgram stage{f};
    if (poller.overlapped) report_overlap(f);
    f.enter_call(domain_->node(), true);
    const std::uint64_t virtual_deadline =
        timeout.count() <= 0 ? f.now : f.now + static_cast<std::uint64_t>(timeout.count());
    const auto real_deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
        f.run([this] { return count_ != 0; }, virtual_deadline, SIZE_MAX);
        if (count_ != 0) return true;
        if (!f.idle()) {
            // The next event lies past the deadline: the wait times out in virtual time.
            f.now = std::max(f.now, virtual_deadline);
            return false;
        }
        // Nothing in flight: only another thread posting can produce a completion. Wait for it in real time.
        ++f.waiters_;
        bool woke = f.cv_.wait_until(lock, real_deadline) == std::cv_status::no_timeout;
        --f.waiters_;
        if (!woke && f.idle() && count_ == 0) return false;
    }
}

int SimCq::fd() {
    FabricState& f = *domain_->fabric();
    std::lock_guard lock(f.mu);
    if (event_fd_ < 0) {
        event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (event_fd_ < 0) errors.fail_errno(errno, "eventfd failed", "CompletionQueue::fd");
        f.fd_cqs.push_back(this);
        sync_fd();
    }
    return event_fd_;
}

void SimCq::sync_fd() noexcept {
    // Readable while a poll could make progress: completions queued, or simulated work in flight.
    set_readable(event_fd_, count_ != 0 || !domain_->fabric()->idle(), fd_armed_);
}

void set_readable(int fd, bool want, bool& armed) noexcept {
    if (want == armed) return;
    if (want) {
        std::uint64_t one = 1;
        [[maybe_unused]] auto r = ::write(fd, &one, sizeof one);
    } else {
        std::uint64_t value = 0;
        [[maybe_unused]] auto r = ::read(fd, &value, sizeof value);
    }
    armed = want;
}

void FabricState::sync_fds() noexcept {
    for (SimCq* cq : fd_cqs) cq->sync_fd();
    for (SimDomain* d : fd_domains) d->sync_event_fd();
}

}  // namespace weft::sim::detail
