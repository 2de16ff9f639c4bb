// Connections kept for disconnect (Feature::disconnect on verbs).
//
// weft::connect and Listener::accept connect a QP through rdma_cm (verbs_cm.cpp). Their rdma_cm ids are
// QP-less (the QP is weft's own), and after the handshake they move here, onto one event channel per domain,
// instead of being destroyed. Then:
//
//   this side                                  the peer
//   disconnect(): QP -> error (flushes)
//   rdma_disconnect (DREQ)               -->   DISCONNECTED on its channel: the thread puts its QP in error
//                                              (everything outstanding flushes), files peer_disconnected,
//   DISCONNECTED (the DREP): nothing     <--   and answers with rdma_disconnect (DREP)
//
// Destroying a QP releases its id, and rdma_destroy_id sends the DREQ of a connection still open (once: it
// does not wait for the DREP): the peer learns of a destroyed QP the same way. A QP connected by address
// exchange (QueuePair::connect) never had an id, and the peer of one cannot be told: disconnect() is
// not_supported there, as rdma_disconnect needs an rdma_cm id. The DREQ travels on the port's management QP,
// not on the QP's path, so it may overtake the QP's last packets, which the peer's QP in error then drops:
// as with rdma_disconnect, a program waits for the completions of what must arrive before it disconnects.
//
// The thread holds the mutex while it touches a QP; forget() takes the QP out under the same mutex before
// the QP goes, and rdma_destroy_id waits until the thread has acknowledged every event of the id it read,
// so the thread never uses a QP or an id that is gone.
#include "verbs.hpp"

#include <rdma/rdma_cma.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <string>
#include <system_error>

namespace weft::verbs {
namespace {

constexpr const char* peer_closed_text = "peer disconnected (RDMA_CM_EVENT_DISCONNECTED)";

int make_eventfd(std::string_view call) {
    const int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0) errors.fail_errno(errno, "eventfd failed", call);
    return fd;
}

void notify(int fd) noexcept {
    const std::uint64_t one = 1;
    while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
}

void drain(int fd) noexcept {
    std::uint64_t count = 0;
    while (::read(fd, &count, sizeof count) < 0 && errno == EINTR) {
    }
}

}  // namespace

Connections& Device::connections() {
    std::lock_guard lock(connections_mutex);
    if (!connections_) connections_ = std::make_unique<Connections>();
    return *connections_;
}

Connections* Device::connections_if_any() noexcept {
    std::lock_guard lock(connections_mutex);
    return connections_.get();
}

Device::~Device() = default;

Connections::Connections() : events_fd_(make_eventfd("Domain::event_fd")) {}

Connections::~Connections() {
    if (thread_.joinable()) {
        notify(stop_fd_);
        thread_.join();
    }
    // Every QP is gone by now (each holds the Device), and with it every id on the channel.
    if (channel_ != nullptr) ::rdma_destroy_event_channel(channel_);
    if (stop_fd_ >= 0) ::close(stop_fd_);
    ::close(events_fd_);
}

void Connections::start(std::string_view call) {
    std::lock_guard lock(mutex_);
    if (thread_.joinable()) return;
    if (channel_ == nullptr) {
        errno = 0;
        channel_ = ::rdma_create_event_channel();
        if (channel_ == nullptr) {
            errors.fail_errno(errno != 0 ? errno : ENODEV, "rdma_create_event_channel for the domain's connections failed",
                       call);
        }
        const int flags = ::fcntl(channel_->fd, F_GETFL);
        if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
            errors.fail_errno(errno, "making the connections' rdma_cm event channel non-blocking failed", call);
        }
    }
    if (stop_fd_ < 0) stop_fd_ = make_eventfd(call);
    try {
        thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {
        errors.fail_errno(e.code().value(), "starting the thread that watches the domain's connections failed", call);
    }
}

void Connections::keep(rdma_cm_id* id, VerbsQp& qp, bool closed) {
    // The caller has called start() and acknowledged every event of `id`; the thread now reads them.
    if (::rdma_migrate_id(id, channel_) != 0) {
        const int err = errno;
        ::rdma_destroy_id(id);
        errors.fail_errno(err,
                   "rdma_migrate_id of QP " + std::to_string(qp.qp_num) +
                       "'s connection failed: the QP is connected, but cannot be disconnected",
                   "connect");
    }
    std::lock_guard lock(mutex_);
    entries_.push_back(Entry{id, &qp, closed});
    if (closed) {
        qp.to_error();
        file_event(qp.qp_num);
    }
}

bool Connections::disconnect(VerbsQp& qp) {
    rdma_cm_id* tell = nullptr;
    {
        std::lock_guard lock(mutex_);
        const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.qp == &qp; });
        if (it == entries_.end()) return false;
        qp.to_error();
        if (!it->closed) {
            it->closed = true;
            tell = it->id;
        }
    }
    // Outside the mutex: the id stays until the QP is destroyed, which is this thread's business.
    if (tell != nullptr) (void)::rdma_disconnect(tell);  // fails only when the CM closed it already
    return true;
}

void Connections::forget(const VerbsQp& qp) noexcept {
    rdma_cm_id* id = nullptr;
    {
        std::lock_guard lock(mutex_);
        const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.qp == &qp; });
        if (it == entries_.end()) return;
        id = it->id;
        entries_.erase(it);
    }
    ::rdma_destroy_id(id);
}

bool Connections::next_event(AsyncEvent& out) {
    std::lock_guard lock(mutex_);
    if (events_head_ == events_.size()) return false;
    out = events_[events_head_++];
    if (events_head_ == events_.size()) {
        events_.clear();
        events_head_ = 0;
        drain(events_fd_);
    }
    return true;
}

void Connections::file_event(std::uint32_t qp_num) {
    AsyncEvent e;
    e.type = EventType::peer_disconnected;
    e.qp_num = qp_num;
    e.what = peer_closed_text;
    try {
        events_.push_back(e);
    } catch (const std::bad_alloc&) {
        return;  // the QP is in error all the same; only the event is lost
    }
    if (events_.size() - events_head_ == 1) notify(events_fd_);
}

bool Connections::peer_closed(rdma_cm_id* id) noexcept {
    std::lock_guard lock(mutex_);
    const auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.id == id; });
    if (it == entries_.end() || it->closed) return false;  // the answer to this side's DREQ, or a QP going
    it->closed = true;
    it->qp->to_error();
    file_event(it->qp->qp_num);
    return true;
}

void Connections::run() noexcept {
    for (;;) {
        pollfd p[2] = {{channel_->fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (p[1].revents != 0) return;
        rdma_cm_event* ev = nullptr;
        while (::rdma_get_cm_event(channel_, &ev) == 0) {
            // The id stays valid until the event is acknowledged (rdma_destroy_id waits for that).
            rdma_cm_id* id = ev->id;
            const bool answer = ev->event == RDMA_CM_EVENT_DISCONNECTED && peer_closed(id);
            if (answer) (void)::rdma_disconnect(id);  // the DREP
            // Anything else (TIMEWAIT_EXIT, DEVICE_REMOVAL, the DISCONNECTED that answers this side's DREQ)
            // concerns no QP: the device reports its own failures on async_fd.
            ::rdma_ack_cm_event(ev);
        }
    }
}

}  // namespace weft::verbs
