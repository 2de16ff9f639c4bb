// weft/listener.hpp — connecting queue pairs by host:port instead of exchanging QueuePair::address().
//
//   // server                                            // client
//   auto lis = weft::listen(dom, "192.0.2.1:7471");      auto qp = dom.create_qp({...});
//   auto qp  = dom.create_qp({...});                     weft::connect(qp, "192.0.2.1:7471", 5s);
//   lis.accept(qp, 5s);                                  // qp is in rts
//   // qp is in rts
//
// accept() and connect() both block until the other side has taken part (or the timeout passes), so a
// program that plays both roles runs one of them in another thread. They are a convenience on top of
// address exchange, not a second connection model: the handshake carries each QP's address() to the other
// side, which passes it to connect(bytes); after it, the QPs are as if connected by hand, and the
// listener/connector keeps nothing for them. What the host part means is the backend's:
//   verbs  an IP address (or name) of the RDMA device's network interface, through rdma_cm: "192.0.2.1:7471",
//          "[fe80::1%d0]:7471", "0.0.0.0:0" (any address, a free port)
//   sim    a name in the simulated fabric, registered while the Listener lives: "server:1", "conformance:0"
//   ofi    an IP address (or name) of this machine, whatever the provider: a TCP rendezvous carries the QP
//          addresses, "127.0.0.1:0" on one machine
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include <weft/domain.hpp>

namespace weft {

namespace detail {
class ListenerImpl;
}  // namespace detail

/// A bound, listening endpoint that connects fresh QPs to peers calling weft::connect(). Move-only; one
/// thread at a time may call accept(). Destroying it stops listening and refuses connects not yet accepted.
class Listener {
public:
    /// An empty handle (false); assign one from weft::listen.
    Listener() noexcept;
    /// Wraps a backend's listener (for backends and tests; users call weft::listen).
    explicit Listener(std::unique_ptr<detail::ListenerImpl> impl) noexcept;
    /// Takes the listener from `other`, which becomes empty.
    Listener(Listener&& other) noexcept;
    /// Stops this handle's listener and takes the one of `other`.
    Listener& operator=(Listener&& other) noexcept;
    ~Listener();

    /// Whether the handle holds a listener.
    explicit operator bool() const noexcept { return impl_ != nullptr; }

    /// Waits up to `timeout` for the next peer's connect() and connects the fresh QP `qp` (state init, from
    /// the listener's Domain) to it; `qp` ends in rts. Throws weft::Error: std::errc::timed_out when no
    /// peer came in time, Errc::invalid_state for a QP that is not fresh, Errc::invalid_argument for a QP of
    /// another domain, the backend's code when the handshake fails. After a failure, a QP still in state
    /// init may be used again; one that got further is half connected: destroy it.
    void accept(QueuePair& qp, std::chrono::milliseconds timeout);

    /// The address actually bound, "host:port" or "[v6host]:port", with the port the system chose when
    /// port 0 was asked for. A peer passes it to weft::connect().
    std::string address() const;

    /// The backend's object (for backends and tests).
    detail::ListenerImpl* impl() const noexcept { return impl_.get(); }

private:
    std::unique_ptr<detail::ListenerImpl> impl_;
};

/// Binds `host_port` on `domain`'s backend and listens there. Forms: "HOST:PORT" (IPv4 address or name),
/// "[IPV6]:PORT"; PORT is 0..65535, 0 asking for a free one (see Listener::address()). Throws weft::Error:
/// Errc::invalid_argument for a malformed address (naming the accepted forms), std::errc::address_in_use
/// when something listens there already, Errc::not_supported without Feature::listener.
Listener listen(Domain& domain, std::string_view host_port);

/// Connects the fresh QP `qp` (state init) to the Listener at `host_port`, waiting up to `timeout` for the
/// listener's accept(); `qp` ends in rts. Throws weft::Error: std::errc::connection_refused when nothing
/// listens there (or the listener refused), std::errc::timed_out when no accept() came in time,
/// std::errc::host_unreachable (verbs) when no route leads there, Errc::not_supported without
/// Feature::listener. After a failure, a QP still in state init may be used again; destroy any other.
void connect(QueuePair& qp, std::string_view host_port, std::chrono::milliseconds timeout);

}  // namespace weft
