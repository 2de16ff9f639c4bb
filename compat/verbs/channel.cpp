// Completion channels and completion events: ibv_create_comp_channel, ibv_req_notify_cq's arming,
// ibv_get_cq_event and ibv_ack_cq_events, over weft's CompletionQueue::fd().
//
// The channel's fd is an epoll descriptor holding the weft descriptor of each armed CQ of the channel.
// weft's descriptor is readable when a poll may return completions (on the simulator, also while
// simulated work is in flight, which polling moves on), so the channel's fd is readable when
// ibv_get_cq_event may find an event. ibv_get_cq_event polls each armed CQ: completions found are kept
// in the CQ's `pending` list, which ibv_poll_cq and the extended polling read first, and the CQ is
// disarmed and returned. As on most providers, arming a CQ that already holds completions raises an event,
// and `solicited_only` arms for any completion (weft's completions do not say which were solicited).
#include "frontend.hpp"

#include <weft/error.hpp>

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <memory>

namespace weft::compat {
namespace {

constexpr std::size_t peek_max = 16;

// Whether the CQ has a completion, polling the queue into `pending` when it has none there.
bool has_completion(Cq& cq) noexcept {
    std::lock_guard lock(cq.pending_mu);
    if (!cq.pending.empty()) return true;
    std::array<Completion, peek_max> buf;
    auto got = cq.queue.poll(buf);
    try {
        cq.pending.insert(cq.pending.end(), got.begin(), got.end());
    } catch (...) {
        return false;  // out of memory: the completions are lost, as on a CQ overrun
    }
    return !got.empty();
}

// Takes the CQ out of its channel's epoll set. Under the channel's lock.
void disarm(Cq& cq) noexcept {
    if (!cq.armed) return;
    ::epoll_ctl(cq.events->fd, EPOLL_CTL_DEL, cq.event_fd, nullptr);
    cq.armed = false;
}

}  // namespace

std::span<Completion> take(Cq& cq, std::span<Completion> out) noexcept {
    if (!cq.events) return cq.queue.poll(out);
    std::lock_guard lock(cq.pending_mu);
    std::size_t n = std::min(out.size(), cq.pending.size());
    std::copy_n(cq.pending.begin(), n, out.begin());
    cq.pending.erase(cq.pending.begin(), cq.pending.begin() + static_cast<std::ptrdiff_t>(n));
    if (n < out.size()) n += cq.queue.poll(out.subspan(n)).size();
    return out.first(n);
}

void join_channel(Cq& cq, Channel& channel) {
    cq.event_fd = cq.queue.fd();
    if (cq.event_fd < 0) throw Error(Errc::not_supported, "the backend's completion queues have no descriptor");
    std::lock_guard lock(channel.mu);
    channel.cqs.push_back(&cq);
    ++channel.refcnt;
    cq.events = &channel;
    cq.channel = &channel;
}

int arm(Cq& cq) noexcept {
    if (!cq.events) return 0;  // a CQ without a channel: arming has no effect
    std::lock_guard lock(cq.events->mu);
    if (cq.armed) return 0;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &cq;
    if (::epoll_ctl(cq.events->fd, EPOLL_CTL_ADD, cq.event_fd, &ev) != 0) return errno;
    cq.armed = true;
    return 0;
}

void leave_channel(Cq& cq) noexcept {
    if (!cq.events) return;
    Channel& channel = *cq.events;
    std::lock_guard lock(channel.mu);
    disarm(cq);
    std::erase(channel.cqs, &cq);
    --channel.refcnt;
    cq.events = nullptr;
}

}  // namespace weft::compat

using namespace weft::compat;

extern "C" {

ibv_comp_channel* ibv_create_comp_channel(ibv_context* c) {
    auto channel = std::make_unique<Channel>();
    channel->context = c;
    channel->fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (channel->fd < 0) return nullptr;  // errno from epoll_create1
    channel->refcnt = 0;
    return channel.release();
}

int ibv_destroy_comp_channel(ibv_comp_channel* ch) {
    auto* channel = static_cast<Channel*>(ch);
    {
        std::lock_guard lock(channel->mu);
        if (channel->refcnt > 0) return EBUSY;
    }
    ::close(channel->fd);
    delete channel;
    return 0;
}

// Blocks until an armed CQ of the channel has a completion, unless the program made the channel's fd
// non-blocking (then -1 with EAGAIN when none has).
int ibv_get_cq_event(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) {
    auto& channel = static_cast<Channel&>(*ch);
    for (;;) {
        {
            std::lock_guard lock(channel.mu);
            for (Cq* armed : channel.cqs) {
                if (!armed->armed || !has_completion(*armed)) continue;
                disarm(*armed);
                *cq = base_of(*armed);
                *cq_context = armed->cq_context;
                return 0;
            }
        }
        const int flags = ::fcntl(channel.fd, F_GETFL);
        if (flags < 0) return -1;
        if (flags & O_NONBLOCK) {
            errno = EAGAIN;
            return -1;
        }
        std::array<epoll_event, peek_max> ready;
        if (::epoll_wait(channel.fd, ready.data(), static_cast<int>(ready.size()), -1) < 0 && errno != EINTR) {
            return -1;
        }
    }
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

}  // extern "C"
