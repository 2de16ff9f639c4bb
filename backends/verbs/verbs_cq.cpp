// Completion-queue setup: the CQ and its completion channel, blocking wait(), the pollable fd(), and the
// table that leads a completion's wr_id back to its QP's work queue. Polling itself is in
// verbs_datapath.cpp.
//
// Wait/fd protocol. A verbs CQ raises an event on its channel only when armed (ibv_req_notify_cq), and
// only for a completion that arrives after the arming; every event read must be acknowledged before the
// CQ can be destroyed. So:
// - wait() drains pending events (acknowledging them at once), arms, polls once more to catch a
//   completion that came before the arm (keeping what it found for the next poll()), then sleeps in
//   poll(2) on the channel fd. It loops on spurious wake-ups until the deadline.
// - fd() hands out the channel fd (non-blocking) and switches the CQ to fd mode: from then on, a poll()
//   that empties the CQ also drains the events and re-arms, then polls once more. A program that waits
//   on the fd with epoll thus needs no verbs call of its own: wait for readable, poll until empty, wait.
#include "verbs.hpp"

#include <fcntl.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <string>
#include <system_error>

namespace weft::verbs {

// ---- QueueTable (setup side)

QueueTable::Entry& QueueTable::entry(std::uint32_t index) {
    const std::uint32_t c = index / chunk_size;
    if (!storage_[c]) {
        storage_[c] = std::make_unique<Entry[]>(chunk_size);
        chunks_[c].store(storage_[c].get(), std::memory_order_release);
    }
    return storage_[c][index % chunk_size];
}

std::uint64_t QueueTable::attach(WorkQueue* wq) {
    std::lock_guard lock(mutex_);
    std::uint32_t index = 0;
    if (!free_.empty()) {
        index = free_.back();
        free_.pop_back();
    } else {
        if (next_ == first_srq_entry) {
            errors.fail(Errc::resource_exhausted,
                 "a verbs CQ serves at most " + std::to_string(first_srq_entry) + " work queues",
                 "create_qp");
        }
        index = next_++;
        free_.reserve(next_);  // so that detach never allocates
    }
    Entry& e = entry(index);
    auto generation = static_cast<std::uint16_t>(e.generation.load(std::memory_order_relaxed) + 1);
    if (generation == 0) generation = 1;  // 0 never matches, so a zeroed wr_id is never taken for ours
    e.generation.store(generation, std::memory_order_relaxed);
    e.wq.store(wq, std::memory_order_release);
    return (static_cast<std::uint64_t>(generation) << wr_generation_shift) |
           (static_cast<std::uint64_t>(index) << wr_index_shift);
}

void QueueTable::detach(std::uint64_t tag) noexcept {
    std::lock_guard lock(mutex_);
    const auto index = static_cast<std::uint32_t>((tag >> wr_index_shift) & 0xffff);
    storage_[index / chunk_size][index % chunk_size].wq.store(nullptr, std::memory_order_release);
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    free_.push_back(index);  // capacity reserved in attach
}

void QueueTable::attach_srq(std::uint64_t tag, WorkQueue* wq) {
    std::lock_guard lock(mutex_);
    Entry& e = entry(static_cast<std::uint32_t>((tag >> wr_index_shift) & 0xffff));
    e.generation.store(static_cast<std::uint16_t>(tag >> wr_generation_shift), std::memory_order_relaxed);
    e.wq.store(wq, std::memory_order_release);
}

void QueueTable::detach_srq(std::uint64_t tag) noexcept {
    std::lock_guard lock(mutex_);
    const auto index = static_cast<std::uint32_t>((tag >> wr_index_shift) & 0xffff);
    storage_[index / chunk_size][index % chunk_size].wq.store(nullptr, std::memory_order_release);
    epoch_.fetch_add(1, std::memory_order_acq_rel);
}

// ---- VerbsCq setup

VerbsCq::VerbsCq(std::shared_ptr<Device> device, std::uint32_t depth) : device_(std::move(device)) {
    ibv_context* ctx = device_->context.get();
    errno = 0;
    channel_.reset(::ibv_create_comp_channel(ctx));
    if (!channel_) {
        const int err = errno != 0 ? errno : ENOMEM;
        errors.fail_errno(err, "ibv_create_comp_channel on " + device_->name + " failed", "create_cq");
    }
    // Non-blocking, so that draining events never sleeps: wait() sleeps in poll(2) instead.
    const int flags = ::fcntl(channel_->fd, F_GETFL);
    if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        errors.fail_errno(errno, "fcntl(O_NONBLOCK) on the completion channel of " + device_->name + " failed",
                   "create_cq");
    }
    errno = 0;
    // Its context is this object: an IBV_EVENT_CQ_ERR names the ibv_cq, and the event reader finds cq_num here.
    cq_.reset(::ibv_create_cq(ctx, static_cast<int>(depth), this, channel_.get(), 0));
    if (!cq_) {
        const int err = errno != 0 ? errno : ENOMEM;
        errors.fail_errno(err, "ibv_create_cq(depth " + std::to_string(depth) + ") on " + device_->name + " failed",
                   "create_cq");
    }
    channel_handle_ = channel_.get();
    cq_handle_ = cq_.get();
    provider_poll_cq_ = cq_handle_->context->ops.poll_cq;
    poll_cq_ = provider_poll_cq_;
}

VerbsCq::VerbsCq(Adopt, std::shared_ptr<Device> device, ibv_cq* cq, ibv_comp_channel* channel)
    : device_(std::move(device)), channel_handle_(channel),
      cq_handle_(cq),
      provider_poll_cq_(cq->context->ops.poll_cq),
      poll_cq_(provider_poll_cq_) {}

std::uint32_t VerbsCq::depth() const noexcept { return static_cast<std::uint32_t>(cq_handle_->cqe); }

void VerbsCq::reserve(std::uint32_t entries, std::string_view who) {
    if (!cq_ || entries == 0) return;
    std::lock_guard lock(reserve_mutex_);
    const std::uint64_t need = reserved_ + entries;
    if (need > static_cast<std::uint64_t>(std::max(cq_handle_->cqe, 0))) {
        const std::uint32_t max_cqe = device_->caps.max_cqe;
        const auto refuse = [&](const std::string& why) {
            errors.fail(Errc::resource_exhausted,
                 "the " + std::string(who) + " can leave " + std::to_string(entries) +
                     (entries == 1 ? " completion" : " completions") + " in a CQ whose queues already hold " + std::to_string(reserved_) + " of its " +
                     std::to_string(cq_handle_->cqe) + " entries, and " + why +
                     ": a device drops a completion that does not fit; create the CQ with depth >= " +
                     std::to_string(need) + ", spread the QPs over more CQs, or give them smaller max_send/max_recv",
                 "create_qp");
        };
        if (need > max_cqe) refuse(device_->name + " allows at most " + std::to_string(max_cqe) + " (max_cqe)");
        if (const int rc = ::ibv_resize_cq(cq_handle_, static_cast<int>(need)); rc != 0) {
            refuse("ibv_resize_cq(" + std::to_string(need) + ") on " + device_->name + " failed: " +
                   std::generic_category().message(rc));
        }
    }
    reserved_ = need;
}

void VerbsCq::release(std::uint32_t entries) noexcept {
    if (!cq_ || entries == 0) return;
    std::lock_guard lock(reserve_mutex_);
    reserved_ -= std::min<std::uint64_t>(reserved_, entries);
}

void VerbsCq::consume_events() noexcept {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    unsigned events = 0;
    while (::ibv_get_cq_event(channel_handle_, &cq, &context) == 0) ++events;
    if (events != 0) ::ibv_ack_cq_events(cq_handle_, events);
}

int VerbsCq::arm() noexcept { return ::ibv_req_notify_cq(cq_handle_, 0); }

int VerbsCq::fd() {
    fd_mode_ = 1;
    consume_events();
    if (int rc = arm(); rc != 0) errors.fail_errno(rc, "ibv_req_notify_cq failed", "CompletionQueue::fd");
    rearm_ = 0;
    return channel_handle_->fd;
}

bool VerbsCq::wait(std::chrono::nanoseconds timeout) {
    using clock = std::chrono::steady_clock;
    if (held_count_ != 0) return true;
    const auto start = clock::now();
    const bool forever = timeout >= clock::time_point::max() - start;
    const auto deadline = forever ? clock::time_point::max() : start + timeout;

    for (;;) {
        consume_events();
        if (int rc = arm(); rc != 0) errors.fail_errno(rc, "ibv_req_notify_cq failed", "CompletionQueue::wait");
        rearm_ = 0;
        // A completion that came before the arm raises no event: look once more, keeping what we find.
        held_begin_ = 0;
        held_count_ = static_cast<std::uint32_t>(drain(held_));
        if (held_count_ != 0) {
            poll_cq_ = &report_held;  // poll() hands these out first
            return true;
        }

        int ms = -1;
        if (!forever) {
            const auto left = deadline - clock::now();
            if (left <= clock::duration::zero()) return false;
            const auto left_ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
            ms = left_ms > INT_MAX ? INT_MAX : static_cast<int>(left_ms);
        }
        pollfd p{channel_handle_->fd, POLLIN, 0};
        const int rc = ::poll(&p, 1, ms);
        if (rc < 0 && errno != EINTR) {
            errors.fail_errno(errno, "poll(2) on the completion channel failed", "CompletionQueue::wait");
        }
        if (rc == 0 && !forever && clock::now() >= deadline) return false;
        // An event (or a signal): go round, which drains the event, re-arms and polls.
    }
}

}  // namespace weft::verbs
