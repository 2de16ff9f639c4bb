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
// listener/connector keeps nothing for them.
//
// Private data: a few bytes each side hands the other with the connection, as rdma_cm's conn_param carries
// them: a protocol version, a tenant, a memory descriptor (RemoteRegion::encode(), 36 bytes).
//
//   auto theirs = weft::connect(qp, where, 5s, my_descriptor);   // the listener's reply
//   auto mine   = lis.accept(qp, 5s, [&](std::span<const std::byte> request) { ... return reply; });
//
// Each side receives exactly the bytes the other sent (none when it sent none), up to
// Capabilities::max_private_data (56 on sim and ofi; 48 on verbs, rdma_cm's 56 bytes of a connect request
// less the 8 that frame it and carry what the CM does not of the QP; 48 on sim:profile=rxe too). More is
// refused before anything is sent.
//
// What the host part means is the backend's:
//   verbs  an IP address (or name) of the RDMA device's network interface, through rdma_cm: "192.0.2.1:7471",
//          "[fe80::1%d0]:7471", "0.0.0.0:0" (any address, a free port)
//   sim    a name in the simulated fabric, registered while the Listener lives: "server:1", "conformance:0"
//   ofi    an IP address (or name) of this machine, whatever the provider: a TCP rendezvous carries the QP
//          addresses, "127.0.0.1:0" on one machine
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weft/domain.hpp>

namespace weft {

namespace detail {
class ListenerImpl;
}  // namespace detail

/// Decides what a listener answers a connector: called with the connector's private data (as many bytes as
/// it sent), returns the reply (at most Capabilities::max_private_data bytes). It runs before the QP is
/// touched. Throwing refuses that connector (its connect() fails std::errc::connection_refused with the
/// exception's text) and accept() rethrows the exception; the QP stays fresh for the next accept().
using AcceptReply = std::function<std::vector<std::byte>(std::span<const std::byte> request)>;

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
    /// Returns the connector's private data (see weft::connect); `reply` goes back to the connector, which
    /// connect() returns. A reply longer than Capabilities::max_private_data throws Errc::invalid_argument
    /// before anything is waited for.
    std::vector<std::byte> accept(QueuePair& qp, std::chrono::milliseconds timeout,
                                  std::span<const std::byte> reply = {});

    /// Like accept(qp, timeout, reply), with the reply computed from the connector's private data by
    /// `decide` (see AcceptReply); a reply it returns longer than Capabilities::max_private_data refuses
    /// that connector and throws Errc::invalid_argument, as if `decide` had thrown it.
    std::vector<std::byte> accept(QueuePair& qp, std::chrono::milliseconds timeout, const AcceptReply& decide);

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
/// `private_data` (at most Capabilities::max_private_data bytes, else Errc::invalid_argument before anything
/// is sent) reaches the listener's accept(); returns the listener's reply.
std::vector<std::byte> connect(QueuePair& qp, std::string_view host_port, std::chrono::milliseconds timeout,
                               std::span<const std::byte> private_data = {});

}  // namespace weft
