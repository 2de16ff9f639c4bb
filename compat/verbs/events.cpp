// Asynchronous events: the context's async_fd, ibv_get_async_event and ibv_ack_async_event over the
// context's weft Domain (Domain::event_fd, Domain::next_event).
//
// async_fd is an epoll descriptor holding the domain's descriptor, so that the program's poll, epoll and
// O_NONBLOCK act on a descriptor of the context's own (the domain's is non-blocking and belongs to it).
// weft's descriptor is readable when next_event() may have something (on the simulator, also while
// simulated work is in flight, which next_event moves on), so async_fd is readable when
// ibv_get_async_event may find an event. ibv_get_async_event blocks until it finds one, unless the
// program made async_fd non-blocking (then -1 with EAGAIN).
//
// Each weft event becomes the verbs event with its element: the ibv_qp or ibv_srq it names (an event
// whose QP, SRQ or CQ was destroyed meanwhile is dropped), port 1 for port and device events. A CQ overrun is
// IBV_EVENT_CQ_ERR naming the CQ (weft's cq_num). weft's peer_disconnected
// (the front end never disconnects a QP) and backend-specific events have no verbs event and are dropped.
// As in rdma-core, ibv_ack_async_event counts the events of each QP, SRQ and CQ, and ibv_destroy_qp,
// ibv_destroy_srq and ibv_destroy_cq wait until every event returned for the object is acknowledged.
#include "frontend.hpp"

#include <weft/log.hpp>

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <mutex>
#include <optional>

namespace weft::compat {
namespace {

// The SRQ of this context numbered `srq_num`, with one more event reported for it; null when there is
// none. A limit event also disarms the limit ibv_query_srq reports.
ibv_srq* srq_for_event(Context& ctx, std::uint32_t srq_num, bool limit) noexcept {
    std::lock_guard lock(ctx.srq_mu);  // ibv_destroy_srq takes the SRQ out first, then waits for its acks
    auto it = ctx.srqs.find(srq_num);
    if (it == ctx.srqs.end()) return nullptr;
    Srq& srq = *it->second;
    if (limit) srq.limit = 0;
    pthread_mutex_lock(&srq.mutex);
    ++srq.events_reported;
    pthread_mutex_unlock(&srq.mutex);
    return &srq;
}

// The CQ of this context numbered `cq_num`, with one more event reported for it; null when there is none.
ibv_cq* cq_for_event(Context& ctx, std::uint32_t cq_num) noexcept {
    std::lock_guard lock(ctx.cq_mu);  // ibv_destroy_cq takes the CQ out first, then waits for its acks
    auto it = ctx.cqs.find(cq_num);
    if (it == ctx.cqs.end()) return nullptr;
    Cq& cq = *it->second;
    pthread_mutex_lock(&cq.mutex);
    ++cq.events_reported;
    pthread_mutex_unlock(&cq.mutex);
    return base_of(cq);
}

// Fills `out` from `e`; false when the event has no verbs counterpart or its object is gone.
bool to_verbs(Context& ctx, const AsyncEvent& e, ibv_async_event& out) noexcept {
    out = {};
    switch (e.type) {
        case EventType::qp_fatal:
        case EventType::qp_last_wqe_reached:
            out.event_type = e.type == EventType::qp_fatal ? IBV_EVENT_QP_FATAL : IBV_EVENT_QP_LAST_WQE_REACHED;
            out.element.qp = qp_for_event(ctx, e.qp_num);
            return out.element.qp != nullptr;
        case EventType::srq_limit_reached:
            out.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
            out.element.srq = srq_for_event(ctx, e.srq_num, true);
            return out.element.srq != nullptr;
        case EventType::cq_error:
            out.event_type = IBV_EVENT_CQ_ERR;
            out.element.cq = cq_for_event(ctx, e.cq_num);
            return out.element.cq != nullptr;
        case EventType::port_active:
        case EventType::port_error:
        case EventType::device_fatal:
            out.event_type = e.type == EventType::port_active  ? IBV_EVENT_PORT_ACTIVE
                             : e.type == EventType::port_error ? IBV_EVENT_PORT_ERR
                                                               : IBV_EVENT_DEVICE_FATAL;
            out.element.port_num = 1;
            return true;
        case EventType::peer_disconnected:
        case EventType::other: break;
    }
    WEFT_LOGF(compat, info, "ibv_get_async_event: weft's event \"%s\" has no verbs event; dropped", e.what);
    return false;
}

}  // namespace

int open_async_fd(Context& ctx) noexcept {
    const int fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) return -1;
    try {
        if (ctx.domain.capabilities().has(Feature::async_events)) ctx.event_fd = ctx.domain.event_fd();
    } catch (...) {
        ::close(fd);
        errno = current_errno("ibv_open_device");
        return -1;
    }
    if (ctx.event_fd >= 0) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        if (::epoll_ctl(fd, EPOLL_CTL_ADD, ctx.event_fd, &ev) != 0) {
            const int err = errno;
            ::close(fd);
            errno = err;
            return -1;
        }
    }
    return fd;
}

void close_async_fd(Context& ctx) noexcept { ::close(ctx.context.async_fd); }

}  // namespace weft::compat

using namespace weft::compat;

extern "C" {

int ibv_get_async_event(ibv_context* c, ibv_async_event* event) {
    Context& ctx = context_of(c);
    for (;;) {
        if (ctx.event_fd >= 0) {
            std::optional<weft::AsyncEvent> e;
            try {
                e = ctx.domain.next_event();
            } catch (...) {
                errno = current_errno("ibv_get_async_event");
                return -1;
            }
            if (e) {
                if (to_verbs(ctx, *e, *event)) return 0;
                continue;
            }
        }
        const int flags = ::fcntl(c->async_fd, F_GETFL);
        if (flags < 0) return -1;
        if (flags & O_NONBLOCK) {
            errno = EAGAIN;
            return -1;
        }
        epoll_event ready{};
        if (::epoll_wait(c->async_fd, &ready, 1, -1) < 0 && errno != EINTR) return -1;
    }
}

// Counts the event in its object, as rdma-core does; the destroy verbs wait for the count.
void ibv_ack_async_event(ibv_async_event* event) {
    pthread_mutex_t* mu = nullptr;
    pthread_cond_t* cond = nullptr;
    std::uint32_t* completed = nullptr;
    switch (event->event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_COMM_EST:
        case IBV_EVENT_SQ_DRAINED:
        case IBV_EVENT_PATH_MIG:
        case IBV_EVENT_PATH_MIG_ERR:
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            if (ibv_qp* qp = event->element.qp) {
                mu = &qp->mutex;
                cond = &qp->cond;
                completed = &qp->events_completed;
            }
            break;
        case IBV_EVENT_SRQ_ERR:
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            if (ibv_srq* srq = event->element.srq) {
                mu = &srq->mutex;
                cond = &srq->cond;
                completed = &srq->events_completed;
            }
            break;
        case IBV_EVENT_CQ_ERR:
            if (ibv_cq* cq = event->element.cq) {
                mu = &cq->mutex;
                cond = &cq->cond;
                completed = &cq->async_events_completed;
            }
            break;
        default: break;
    }
    if (!mu) return;
    pthread_mutex_lock(mu);
    ++*completed;
    pthread_cond_signal(cond);
    pthread_mutex_unlock(mu);
}

}  // extern "C"
