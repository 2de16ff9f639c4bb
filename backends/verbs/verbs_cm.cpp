// weft::listen / weft::connect on verbs: rdma_cm resolves host:port to the device and carries the two QPs'
// weft addresses (QueuePair::address()) in the connection handshake's private data. The QPs stay weft's
// own (ibv_create_qp in verbs_qp.cpp, never rdma_create_qp), so rdma_cm ids are "QP-less":
//
//   connector                                   listener
//   rdma_resolve_addr, rdma_resolve_route
//   rdma_connect(private data: connect     --> CONNECT_REQUEST: the peer's address from the request and
//     request, the application's data)          rdma_cm (QP number, GID or LID); decide the reply; connect
//                                               the local QP to that address
//   CONNECT_RESPONSE (private data)         <-- rdma_accept(private data: the local QP's address, the reply)
//   connect the QP, rdma_establish (RTU)    --> ESTABLISHED
//
// A QP-less active side gets CONNECT_RESPONSE, not ESTABLISHED, and must call rdma_establish itself
// (rdma_establish(3)). conn_param.qp_num carries the real QP number (the CM tracks connections by it);
// responder_resources/initiator_depth are what weft's connect() programs (the device's limits); retry counts
// and the CM's starting PSN are informational only, as weft's connect() sets every QP attribute from
// QpOptions and the exchanged addresses. Once both QPs are in RTS the rdma_cm ids are destroyed: the
// connection then belongs to the QPs alone, exactly as after a manual address exchange (the peer's CM may
// see DISCONNECTED, which touches no QP).
//
// Private data is framed (verbs_wire.hpp): "wQ" (a connect request: flags, MTU, PSN, then the application's
// data), "wC" (an answer: the QP address, then the application's reply), version 1, length n, n bytes. An IB CM
// REQ holds 92 bytes of which rdma_cm's RDMA_PS_TCP header takes 36, so 56 remain for rdma_connect, 48 of them
// for the application; a REP holds 196, a REJ 148. The connector's QP number travels in the REQ
// (conn_param.qp_num) and its GID or LID in the REQ's path, which the listener reads with rdma_init_qp_attr. The receiver is told the whole field's size, not what was sent, hence the length byte. A refusal
// carries "wR", version, length and the listener's reason as text. Whatever a peer puts there is checked by
// wire::decode_frame and wire::decode_address before it reaches a QP: a listener refuses a request it cannot
// use and waits for the next one.
#include "verbs.hpp"
#include "verbs_wire.hpp"

#include <rdma/rdma_cma.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <deque>
#include <string>
#include <system_error>

namespace weft::verbs {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr std::string_view listen_call = "listen";
constexpr std::string_view connect_call = "connect";
constexpr std::string_view accept_call = "Listener::accept";

constexpr std::size_t req_private_max = 92 - 36;  // IB CM REQ private data less rdma_cm's TCP port-space header
constexpr std::size_t rep_private_max = 196;      // IB CM REP
constexpr std::size_t rej_private_max = 148;      // IB CM REJ
static_assert(wire::frame_header + wire::request_fixed + wire::max_private_data <= req_private_max,
              "a connect request must fit the private data of rdma_connect");
static_assert(wire::frame_header + wire::address_size + wire::max_private_data <= rep_private_max,
              "an answer must fit the private data of rdma_accept");
constexpr int listen_backlog = 64;
constexpr int ib_cm_rej_invalid_service_id = 8;  // IB spec REJ reason: nothing listens on that service ID
constexpr int ib_cm_rej_consumer_defined = 28;

// ---- RAII owners of rdma_cm handles. The channel must outlive every id on it and every event must be
// acknowledged before its id is destroyed (rdma_destroy_id waits for that), so owners are declared in that
// order wherever they meet.

struct DestroyEventChannel {
    void operator()(rdma_event_channel* c) const noexcept { ::rdma_destroy_event_channel(c); }
};
struct DestroyCmId {
    void operator()(rdma_cm_id* id) const noexcept { ::rdma_destroy_id(id); }
};
struct AckCmEvent {
    void operator()(rdma_cm_event* e) const noexcept { ::rdma_ack_cm_event(e); }
};
struct FreeAddrinfo {
    void operator()(addrinfo* a) const noexcept { ::freeaddrinfo(a); }
};
using EventChannelPtr = std::unique_ptr<rdma_event_channel, DestroyEventChannel>;
using CmIdPtr = std::unique_ptr<rdma_cm_id, DestroyCmId>;
using CmEventPtr = std::unique_ptr<rdma_cm_event, AckCmEvent>;
using AddrinfoPtr = std::unique_ptr<addrinfo, FreeAddrinfo>;

std::string ms_text(milliseconds t) { return std::to_string(t.count()) + " ms"; }

// ---- Addresses

using detail::sockaddr_text;

struct SockAddr {
    sockaddr_storage storage{};
    sockaddr* get() noexcept { return reinterpret_cast<sockaddr*>(&storage); }
    int family() const noexcept { return storage.ss_family; }
};

// getaddrinfo on host and port, preferring IPv4 (the RoCE v2 IPv4 GID is what the verbs backend routes by).
SockAddr resolve(const detail::HostPort& where, bool passive, std::string_view call) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    addrinfo* raw = nullptr;
    const std::string port = std::to_string(where.port);
    if (int rc = ::getaddrinfo(where.host.c_str(), port.c_str(), &hints, &raw); rc != 0) {
        throw Error(Errc::invalid_argument,
                    "cannot resolve the host of '" + where.text() + "': " + ::gai_strerror(rc) +
                        " (give an IP address of the RDMA device's interface, or a name that resolves to one)",
                    backend_name, call);
    }
    AddrinfoPtr list(raw);
    const addrinfo* pick = nullptr;
    for (const addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
        if (!pick || (a->ai_family == AF_INET && pick->ai_family != AF_INET)) pick = a;
    }
    if (!pick) {
        throw Error(Errc::invalid_argument, "'" + where.text() + "' resolves to no IPv4 or IPv6 address",
                    backend_name, call);
    }
    SockAddr out;
    std::memcpy(&out.storage, pick->ai_addr, std::min<std::size_t>(pick->ai_addrlen, sizeof out.storage));
    return out;
}

// The domain's IPv4 address when its GID is an IPv4-mapped RoCE v2 GID (::ffff:a.b.c.d), so rdma_cm
// resolves from the interface the domain's GID belongs to.
bool gid_ipv4(const Device& dev, SockAddr& out) {
    static constexpr std::uint8_t mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!dev.use_gid || !dev.ethernet || std::memcmp(dev.gid.raw, mapped_prefix, 12) != 0) return false;
    auto* in = reinterpret_cast<sockaddr_in*>(&out.storage);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, dev.gid.raw + 12, 4);
    return true;
}

// rdma_cm picks the device from the IP route; weft's QPs live on the domain's device and port.
void check_device(const rdma_cm_id* id, const Device& dev, const std::string& what, std::string_view call) {
    if (id->verbs == nullptr) return;  // bound to a wildcard address: no device yet
    const std::string name = ::ibv_get_device_name(id->verbs->device);
    if (name == dev.name && id->port_num == dev.port) return;
    errors.fail(Errc::invalid_argument,
         what + " goes through RDMA device " + name + " port " + std::to_string(id->port_num) +
             ", but the domain is open on " + dev.name + " port " + std::to_string(dev.port) +
             "; use an address of the domain's interface, or open the domain on " + name,
         call);
}

// ---- Private data frames

// The answer's frame: the QP address, then the application's reply (sized by the core).
std::vector<std::uint8_t> answer_frame(const std::vector<std::byte>& address, std::span<const std::byte> reply) {
    std::vector<std::byte> payload(address);
    payload.insert(payload.end(), reply.begin(), reply.end());
    return wire::encode_frame(wire::FrameKind::address, payload, rep_private_max);
}

// The connector's QP address, made from its connect request and what rdma_cm knows of it (the QP number the
// REQ carried, the GID or LID of its path), and the application's data, copied out; `problem` says why not.
std::vector<std::byte> requester_address(const rdma_cm_event& ev, const Device& dev, std::vector<std::byte>& data,
                                         std::string& problem) {
    std::span<const std::byte> payload;
    problem = wire::decode_frame(ev.param.conn.private_data, ev.param.conn.private_data_len,
                                 wire::FrameKind::request, payload);
    if (!problem.empty()) return {};
    wire::Request r;
    if (problem = wire::decode_request(payload, r); !problem.empty()) return {};
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    int mask = 0;
    if (::rdma_init_qp_attr(ev.id, &attr, &mask) != 0) {
        problem = std::string("rdma_init_qp_attr on the request failed: ") + std::strerror(errno);
        return {};
    }
    wire::QpAddress a;
    a.has_gid = r.has_gid;
    a.port = dev.port;  // informational in an address: the listener's QP uses its own port
    a.mtu = r.mtu;
    a.qp_num = ev.param.conn.qp_num;
    a.psn = r.psn;
    if (r.has_gid) {
        if (!attr.ah_attr.is_global) {
            problem = "the request says its QP routes by GID, but its path has none";
            return {};
        }
        a.gid = attr.ah_attr.grh.dgid;
    } else {
        a.lid = attr.ah_attr.dlid;
    }
    const auto bytes = wire::encode_address(a);
    std::vector<std::byte> address(bytes.begin(), bytes.end());
    try {
        (void)wire::decode_address(address);  // what rdma_cm gave is checked like any peer's address
    } catch (const Error& e) {
        problem = e.message();
        return {};
    }
    data.assign(r.private_data.begin(), r.private_data.end());
    return address;
}

rdma_conn_param conn_param(const Device& dev, std::uint32_t qp_num, const std::vector<std::uint8_t>& data) {
    rdma_conn_param p{};
    p.private_data = data.data();
    p.private_data_len = static_cast<std::uint8_t>(data.size());
    p.responder_resources = dev.max_dest_rd_atomic;
    p.initiator_depth = dev.max_rd_atomic;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    p.qp_num = qp_num;
    return p;
}

// ---- Channels and events

EventChannelPtr make_channel(std::string_view call) {
    errno = 0;
    EventChannelPtr ch(::rdma_create_event_channel());
    if (!ch) {
        const int err = errno != 0 ? errno : ENODEV;
        errors.fail_errno(err,
                   "rdma_create_event_channel failed (rdma_cm needs /dev/infiniband/rdma_cm: is the rdma_ucm "
                   "module loaded, and may this user open it?)",
                   call);
    }
    // poll(2) decides when to read; a non-blocking fd keeps a spurious wake-up from blocking the read.
    const int flags = ::fcntl(ch->fd, F_GETFL);
    if (flags < 0 || ::fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        errors.fail_errno(errno, "making the rdma_cm event channel non-blocking failed", call);
    }
    return ch;
}

CmIdPtr make_id(rdma_event_channel* ch, std::string_view call) {
    rdma_cm_id* id = nullptr;
    if (::rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) errors.fail_errno(errno, "rdma_create_id failed", call);
    return CmIdPtr(id);
}

// The next event on `ch`, or null when `deadline` passes first.
CmEventPtr next_event(rdma_event_channel* ch, Clock::time_point deadline, std::string_view call) {
    while (true) {
        rdma_cm_event* ev = nullptr;
        if (::rdma_get_cm_event(ch, &ev) == 0) return CmEventPtr(ev);
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            errors.fail_errno(errno, "rdma_get_cm_event failed", call);
        }
        const auto now = Clock::now();
        if (now >= deadline) return nullptr;
        const auto left = std::chrono::ceil<milliseconds>(deadline - now).count();
        pollfd p{ch->fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(std::min<long long>(left, INT_MAX))) < 0 && errno != EINTR) {
            errors.fail_errno(errno, "poll on the rdma_cm event channel failed", call);
        }
    }
}

int remaining_ms(Clock::time_point deadline) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 1, INT_MAX));
}

std::string event_text(const rdma_cm_event& ev) {
    return std::string(::rdma_event_str(ev.event)) + " (status " + std::to_string(ev.status) + ")";
}

// Sends a refusal with `why` to the peer of `id`; best effort, the caller reports the real error.
void refuse(rdma_cm_id* id, const std::string& why) {
    const auto data = wire::encode_frame(wire::FrameKind::refusal, std::as_bytes(std::span(why)), rej_private_max);
    ::rdma_reject(id, data.data(), static_cast<std::uint8_t>(data.size()));
}

// Throws for an event that ends a connect() attempt; `stage` says what was under way.
[[noreturn]] void connect_failed(const rdma_cm_event& ev, const std::string& target, const std::string& stage) {
    const std::string text = rdma_event_str(ev.event);
    switch (ev.event) {
        case RDMA_CM_EVENT_REJECTED: {
            std::string why;
            if (ev.status == ib_cm_rej_invalid_service_id) {
                why = "nothing listens on " + target + " (" + text + ", IB CM reason 8: invalid service ID)";
            } else {
                std::span<const std::byte> reason;
                const std::string problem = wire::decode_frame(ev.param.conn.private_data,
                                                               ev.param.conn.private_data_len,
                                                               wire::FrameKind::refusal, reason);
                why = "the listener at " + target + " refused: " +
                      (problem.empty() ? wire::printable(reason)
                                       : text + ", IB CM reason " + std::to_string(ev.status) +
                                             (ev.status == ib_cm_rej_consumer_defined ? " (consumer defined)" : ""));
            }
            errors.fail(std::errc::connection_refused, why, connect_call);
        }
        case RDMA_CM_EVENT_UNREACHABLE:
            errors.fail(std::errc::host_unreachable,
                      "no answer from " + target + " while " + stage + ": " + event_text(ev), connect_call);
        case RDMA_CM_EVENT_ADDR_ERROR:
        case RDMA_CM_EVENT_ROUTE_ERROR:
            errors.fail_errno(ev.status < 0 ? -ev.status : EHOSTUNREACH,
                       "rdma_cm could not reach " + target + " while " + stage + ": " + event_text(ev) +
                           " (is it an address of an RDMA device's interface, and routable from this one?)",
                       connect_call);
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            errors.fail_errno(ENODEV, "the RDMA device went away while " + stage, connect_call);
        default:
            errors.fail_errno(ev.status < 0 ? -ev.status : ECONNABORTED,
                       "unexpected " + event_text(ev) + " while " + stage + " to " + target, connect_call);
    }
}

// Waits for `wanted` on the connector's channel; anything else ends the attempt.
CmEventPtr expect(rdma_event_channel* ch, rdma_cm_event_type wanted, Clock::time_point deadline,
                  milliseconds timeout, const std::string& target, const std::string& stage) {
    CmEventPtr ev = next_event(ch, deadline, connect_call);
    if (!ev) {
        errors.fail(std::errc::timed_out, "timed out after " + ms_text(timeout) + " while " + stage, connect_call);
    }
    if (ev->event != wanted) connect_failed(*ev, target, stage);
    return ev;
}

// ---- The listener

class VerbsListener final : public detail::ListenerImpl {
public:
    VerbsListener(std::shared_ptr<Device> device, const detail::HostPort& where);

    std::vector<std::byte> accept(detail::QpImpl& qp, milliseconds timeout, const AcceptReply& decide) override;
    std::string address() const override { return bound_; }

private:
    // A connect request not yet accepted: its id (owned: destroying it refuses the peer) and what came in.
    struct Incoming {
        CmIdPtr id;
        std::string from;
        std::vector<std::byte> peer;
        std::vector<std::byte> data;  // the application's private data
        std::string problem;  // why it cannot be accepted, when it cannot
    };

    // Files an event that is not the one accept() waits for: queues requests, forgets withdrawn ones.
    void note(CmEventPtr ev);

    std::shared_ptr<Device> device_;
    EventChannelPtr channel_;  // declared before the ids on it: destroyed last
    CmIdPtr id_;
    std::deque<Incoming> incoming_;
    std::string bound_;
};

VerbsListener::VerbsListener(std::shared_ptr<Device> device, const detail::HostPort& where)
    : device_(std::move(device)) {
    SockAddr addr = resolve(where, true, listen_call);
    channel_ = make_channel(listen_call);
    id_ = make_id(channel_.get(), listen_call);
    if (::rdma_bind_addr(id_.get(), addr.get()) != 0) {
        const int err = errno;
        std::string hint;
        if (err == EADDRINUSE) hint = " (something listens there already; ask for port 0 to get a free one)";
        if (err == EADDRNOTAVAIL || err == ENODEV) {
            hint = " (no RDMA device has that address: give the IP address of " + device_->name + "'s interface)";
        }
        errors.fail_errno(err, "rdma_bind_addr(" + sockaddr_text(addr.get()) + ") failed" + hint, listen_call);
    }
    check_device(id_.get(), *device_, "listening on " + where.text(), listen_call);
    if (::rdma_listen(id_.get(), listen_backlog) != 0) {
        errors.fail_errno(errno, "rdma_listen(" + sockaddr_text(addr.get()) + ") failed", listen_call);
    }
    bound_ = sockaddr_text(rdma_get_local_addr(id_.get()));
}

void VerbsListener::note(CmEventPtr ev) {
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        Incoming in;
        in.id.reset(ev->id);
        in.from = sockaddr_text(rdma_get_peer_addr(ev->id));
        if (ev->id->verbs != nullptr && (::ibv_get_device_name(ev->id->verbs->device) != device_->name ||
                                         ev->id->port_num != device_->port)) {
            in.problem = "it arrived on RDMA device " + std::string(::ibv_get_device_name(ev->id->verbs->device)) +
                         " port " + std::to_string(ev->id->port_num) + ", not on the domain's " + device_->name +
                         " port " + std::to_string(device_->port);
        } else {
            in.peer = requester_address(*ev, *device_, in.data, in.problem);
        }
        incoming_.push_back(std::move(in));
        return;  // `ev` is acknowledged here; the id now belongs to incoming_
    }
    if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
        errors.fail_errno(ENODEV, "the RDMA device of the listener at " + bound_ + " went away", accept_call);
    }
    // A request withdrawn before it was accepted (the connector gave up): forget it.
    rdma_cm_id* id = ev->id;
    ev.reset();
    std::erase_if(incoming_, [id](const Incoming& in) { return in.id.get() == id; });
}

std::vector<std::byte> VerbsListener::accept(detail::QpImpl& qp_impl, milliseconds timeout,
                                             const AcceptReply& decide) {
    // The core has checked that the QP is fresh and of this listener's domain: a VerbsQp.
    auto& qp = static_cast<VerbsQp&>(qp_impl);
    const auto deadline = Clock::now() + timeout;
    // A request this listener cannot use (no weft address in it, a malformed one, the wrong device, a QP that
    // does not connect to it) is refused, telling the peer why, and the wait goes on for the next one until
    // the deadline: no peer can make accept() fail for the peers after it.
    std::string last_refusal;
    Incoming in;
    std::vector<std::byte> reply;
    for (;;) {
        while (incoming_.empty()) {
            CmEventPtr ev = next_event(channel_.get(), deadline, accept_call);
            if (!ev) {
                errors.fail(std::errc::timed_out,
                          "no connect() to " + bound_ + " within " + ms_text(timeout) +
                              (last_refusal.empty() ? "" : " (refused one: " + last_refusal + ")"),
                          accept_call);
            }
            note(std::move(ev));
        }
        in = std::move(incoming_.front());
        incoming_.pop_front();
        if (!in.problem.empty()) {
            last_refusal = "the connect request from " + in.from + ": " + in.problem;
            refuse(in.id.get(), "refused by the listener at " + bound_ + ": " + in.problem);
            continue;
        }
        try {
            reply = decide(in.data);
        } catch (const std::exception& e) {
            refuse(in.id.get(), "the listener at " + bound_ + " refused: " + e.what());
            throw;
        }
        try {
            qp.connect(in.peer);
            break;
        } catch (const Error& e) {
            refuse(in.id.get(), "the listener at " + bound_ + " could not connect its QP: " + e.message());
            if (!qp.fresh()) throw;  // got past the checks: the QP is half connected
            last_refusal = "the connect request from " + in.from + ": " + e.message();
        }
    }
    const auto data = answer_frame(qp.address(), reply);
    Connections& kept = device_->connections();
    kept.start(accept_call);
    rdma_conn_param param = conn_param(*device_, qp.qp_num, data);
    if (::rdma_accept(in.id.get(), &param) != 0) {
        errors.fail_errno(errno, "rdma_accept of the connect request from " + in.from + " failed", accept_call);
    }
    // The connector connects its QP, then acknowledges (RTU): ESTABLISHED here. DISCONNECTED first means it
    // did so and released its rdma_cm id before the RTU was seen; either way its QP is in RTS.
    while (true) {
        CmEventPtr ev = next_event(channel_.get(), deadline, accept_call);
        if (!ev) {
            errors.fail(std::errc::timed_out,
                      "QP " + std::to_string(qp.qp_num) + " was connected to the peer at " + in.from +
                          ", which did not complete the handshake within " + ms_text(timeout),
                      accept_call);
        }
        if (ev->id != in.id.get()) {
            note(std::move(ev));
            continue;
        }
        const rdma_cm_event copy = *ev;
        ev.reset();  // acknowledged before in.id can be destroyed or move
        if (copy.event == RDMA_CM_EVENT_ESTABLISHED || copy.event == RDMA_CM_EVENT_DISCONNECTED) {
            // The connection is kept for disconnect (verbs_conn.cpp); DISCONNECTED first means the peer
            // closed it already.
            kept.keep(in.id.release(), qp, copy.event == RDMA_CM_EVENT_DISCONNECTED);
            return in.data;
        }
        errors.fail_errno(copy.status < 0 ? -copy.status : ECONNABORTED,
                   "the peer at " + in.from + " did not complete the handshake: " + event_text(copy) +
                       "; QP " + std::to_string(qp.qp_num) + " is half connected",
                   accept_call);
    }
}

}  // namespace

bool rdma_cm_usable() noexcept {
    EventChannelPtr ch(::rdma_create_event_channel());
    return ch != nullptr;
}

std::unique_ptr<detail::ListenerImpl> VerbsDomain::listen(const detail::HostPort& where) {
    return std::make_unique<VerbsListener>(device_, where);
}

std::vector<std::byte> VerbsDomain::connect_to(detail::QpImpl& qp, const detail::HostPort& where,
                                               milliseconds timeout, std::span<const std::byte> private_data) {
    const auto deadline = Clock::now() + timeout;
    const std::string target = where.text();
    SockAddr dst = resolve(where, false, connect_call);
    SockAddr src;
    const bool have_src = dst.family() == AF_INET && gid_ipv4(*device_, src);

    EventChannelPtr channel = make_channel(connect_call);
    CmIdPtr id = make_id(channel.get(), connect_call);

    std::string stage = "resolving the address " + sockaddr_text(dst.get());
    if (::rdma_resolve_addr(id.get(), have_src ? src.get() : nullptr, dst.get(), remaining_ms(deadline)) != 0) {
        errors.fail_errno(errno, "rdma_resolve_addr(" + sockaddr_text(dst.get()) + ") failed", connect_call);
    }
    expect(channel.get(), RDMA_CM_EVENT_ADDR_RESOLVED, deadline, timeout, target, stage);
    check_device(id.get(), *device_, "the route to " + target, connect_call);

    stage = "resolving the route to " + target;
    if (::rdma_resolve_route(id.get(), remaining_ms(deadline)) != 0) {
        errors.fail_errno(errno, "rdma_resolve_route(" + target + ") failed", connect_call);
    }
    expect(channel.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, timeout, target, stage);

    const wire::QpAddress own = wire::decode_address(qp.address());
    wire::Request request;
    request.has_gid = own.has_gid;
    request.mtu = own.mtu;
    request.psn = own.psn;
    request.private_data = private_data;
    const auto data = wire::encode_frame(wire::FrameKind::request, wire::encode_request(request), req_private_max);
    Connections& kept = device_->connections();
    kept.start(connect_call);
    rdma_conn_param param = conn_param(*device_, qp.qp_num, data);
    if (::rdma_connect(id.get(), &param) != 0) errors.fail_errno(errno, "rdma_connect(" + target + ") failed", connect_call);
    stage = "waiting for the listener at " + target + " to accept";
    std::vector<std::byte> peer;
    std::vector<std::byte> reply;
    {
        CmEventPtr ev = expect(channel.get(), RDMA_CM_EVENT_CONNECT_RESPONSE, deadline, timeout, target, stage);
        std::span<const std::byte> payload;
        const std::string problem = wire::decode_frame(ev->param.conn.private_data, ev->param.conn.private_data_len,
                                                       wire::FrameKind::address, payload);
        if (problem.empty()) {
            peer.assign(payload.begin(), payload.begin() + wire::address_size);
            reply.assign(payload.begin() + wire::address_size, payload.end());
        }
        if (!problem.empty()) {
            ev.reset();
            refuse(id.get(), "the connector refused the answer: " + problem);
            errors.fail(Errc::bad_descriptor, "the answer of " + target + " is not a weft listener's: " + problem,
                 connect_call);
        }
    }
    try {
        qp.connect(peer);
    } catch (const Error& e) {
        refuse(id.get(), "the connector could not connect its QP: " + e.message());
        throw;
    }
    if (::rdma_establish(id.get()) != 0) {
        errors.fail_errno(errno, "rdma_establish(" + target + ") failed; QP " + std::to_string(qp.qp_num) +
                              " is connected but the listener may not complete", connect_call);
    }
    // The connection is kept for disconnect (verbs_conn.cpp); `channel` goes now.
    kept.keep(id.release(), static_cast<VerbsQp&>(qp), false);
    return reply;
}

}  // namespace weft::verbs
