// weft::listen / weft::connect: the Listener handle, host:port parsing, the checks every backend shares, and
// the "not supported" defaults of the backend interface.
#include <weft/backend.hpp>
#include <weft/error.hpp>
#include <weft/listener.hpp>
#include <weft/log.hpp>

#include "locked.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <utility>

namespace weft {
namespace detail {
namespace {

constexpr std::string_view accepted_forms =
    "accepted forms: HOST:PORT with an IPv4 address or a name (192.0.2.1:7471, server:0) or [IPV6]:PORT "
    "([::1]:7471); PORT is 0..65535, 0 asking for a free port";

[[noreturn]] void bad_host_port(std::string_view text, const std::string& why, std::string_view backend,
                                std::string_view call) {
    throw Error(Errc::invalid_argument,
                "'" + std::string(text) + "' is not a host:port address: " + why + "; " + std::string(accepted_forms),
                backend, call);
}

[[noreturn]] void not_supported(const DomainImpl& domain, std::string_view call) {
    throw Error(Errc::not_supported,
                domain.caps.backend + ": listen/connect not implemented; exchange QueuePair::address() out of band "
                                      "and call QueuePair::connect()",
                domain.caps.backend, call);
}

}  // namespace

std::string HostPort::text() const {
    const bool brackets = bracketed || host.find(':') != std::string::npos;
    return (brackets ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HostPort parse_host_port(std::string_view text, std::string_view backend, std::string_view call) {
    HostPort out;
    std::string_view port_text;
    if (!text.empty() && text.front() == '[') {
        const auto close = text.find(']');
        if (close == std::string_view::npos) bad_host_port(text, "'[' without a closing ']'", backend, call);
        out.host = std::string(text.substr(1, close - 1));
        out.bracketed = true;
        if (close + 1 >= text.size() || text[close + 1] != ':') {
            bad_host_port(text, "no ':PORT' after the bracketed host", backend, call);
        }
        port_text = text.substr(close + 2);
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos) bad_host_port(text, "no ':PORT'", backend, call);
        out.host = std::string(text.substr(0, colon));
        if (out.host.find(':') != std::string::npos) {
            bad_host_port(text, "an IPv6 address must be written in brackets", backend, call);
        }
        port_text = text.substr(colon + 1);
    }
    if (out.host.empty()) bad_host_port(text, "the host is empty", backend, call);
    if (out.host.find_first_of(" \t\n[]/") != std::string::npos) {
        bad_host_port(text, "the host holds a space, '[', ']' or '/'", backend, call);
    }
    if (port_text.empty() || port_text.size() > 5 ||
        !std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        bad_host_port(text, "the port '" + std::string(port_text) + "' is not a decimal number", backend, call);
    }
    unsigned long port = std::stoul(std::string(port_text));
    if (port > 65535) bad_host_port(text, "the port " + std::to_string(port) + " exceeds 65535", backend, call);
    out.port = static_cast<std::uint16_t>(port);
    return out;
}

std::string sockaddr_text(const sockaddr* sa) {
    char host[INET6_ADDRSTRLEN] = {};
    if (sa->sa_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
        ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
    }
    if (sa->sa_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
        ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
    }
    return "(address family " + std::to_string(sa->sa_family) + ")";
}

std::unique_ptr<ListenerImpl> DomainImpl::listen(const HostPort&) { not_supported(*this, "listen"); }

std::vector<std::byte> DomainImpl::connect_to(QpImpl&, const HostPort&, std::chrono::milliseconds,
                                              std::span<const std::byte>) {
    not_supported(*this, "connect");
}

}  // namespace detail

namespace {

[[noreturn]] void empty_handle(const char* call) {
    throw Error(Errc::invalid_state, "the handle is empty (default-constructed or moved from)", {}, call);
}

// The QP must be fresh: connecting it is what listen/connect are for, and refusing here keeps a peer from
// being left half connected by a QP that could never finish.
void require_fresh(const detail::QpImpl& qp, const std::string& backend, const char* call) {
    if (const QpState s = qp.state(); s != QpState::init) {
        throw Error(Errc::invalid_state,
                    "QP " + std::to_string(qp.qp_num) + " is in state " + std::string(to_string(s)) +
                        "; only a fresh QP (state init) can be connected",
                    backend, call);
    }
}

std::chrono::milliseconds non_negative(std::chrono::milliseconds t) {
    return std::max(t, std::chrono::milliseconds(0));
}

// Private data longer than the backend carries is refused before anything reaches a peer.
void check_private_data(std::size_t size, const detail::DomainImpl& domain, const char* what, const char* call) {
    if (size <= domain.caps.max_private_data) return;
    throw Error(Errc::invalid_argument,
                std::string(what) + " of " + std::to_string(size) + " bytes is too long: " + domain.caps.backend +
                    " carries at most " + std::to_string(domain.caps.max_private_data) +
                    " bytes of private data each way (Capabilities::max_private_data)",
                domain.caps.backend, call);
}

}  // namespace

Listener::Listener() noexcept = default;
Listener::Listener(std::unique_ptr<detail::ListenerImpl> impl) noexcept : impl_(std::move(impl)) {}
Listener::Listener(Listener&&) noexcept = default;
Listener& Listener::operator=(Listener&&) noexcept = default;
Listener::~Listener() = default;

std::vector<std::byte> Listener::accept(QueuePair& qp, std::chrono::milliseconds timeout,
                                        std::span<const std::byte> reply) {
    if (impl_) check_private_data(reply.size(), *impl_->domain, "the reply", "Listener::accept");
    std::vector<std::byte> fixed(reply.begin(), reply.end());
    return accept(qp, timeout, [&fixed](std::span<const std::byte>) { return fixed; });
}

std::vector<std::byte> Listener::accept(QueuePair& qp, std::chrono::milliseconds timeout, const AcceptReply& decide) {
    constexpr const char* call = "Listener::accept";
    if (!impl_) empty_handle(call);
    if (!qp) empty_handle(call);
    const std::string& backend = impl_->domain->caps.backend;
    if (qp.impl()->domain != impl_->domain) {
        throw Error(Errc::invalid_argument,
                    "QP " + std::to_string(qp.qp_num()) +
                        " comes from another Domain; accept() connects QPs of the listener's own Domain",
                    backend, call);
    }
    require_fresh(*qp.impl(), backend, call);
    if (!decide) throw Error(Errc::invalid_argument, "the AcceptReply is empty", backend, call);
    // A reply too long for the backend refuses that connector (the backend sends the text) and fails accept().
    const AcceptReply checked = [&](std::span<const std::byte> request) {
        std::vector<std::byte> reply = decide(request);
        check_private_data(reply.size(), *impl_->domain, "the reply", call);
        return reply;
    };
    std::vector<std::byte> request = impl_->accept(detail::unwrap(*qp.impl()), non_negative(timeout), checked);
    WEFT_LOGS(core, info, backend + ": " + impl_->address() + " accepted a peer for QP " + std::to_string(qp.qp_num()));
    return request;
}

std::string Listener::address() const {
    if (!impl_) empty_handle("Listener::address");
    return impl_->address();
}

Listener listen(Domain& domain, std::string_view host_port) {
    constexpr const char* call = "listen";
    if (!domain) empty_handle(call);
    const auto& impl = domain.shared_impl();
    detail::HostPort where = detail::parse_host_port(host_port, impl->caps.backend, call);
    auto listener = impl->listen(where);
    listener->domain = impl;
    WEFT_LOGS(core, info, impl->caps.backend + ": listening on " + listener->address() + " (asked " + where.text() + ")");
    return Listener(std::move(listener));
}

std::vector<std::byte> connect(QueuePair& qp, std::string_view host_port, std::chrono::milliseconds timeout,
                               std::span<const std::byte> private_data) {
    constexpr const char* call = "connect";
    if (!qp) empty_handle(call);
    detail::QpImpl& q = *qp.impl();
    if (!q.domain) throw Error(Errc::internal, "the QP does not know its domain", {}, call);
    detail::QpImpl& backend_qp = detail::unwrap(q);
    const std::string& backend = q.domain->caps.backend;
    detail::HostPort where = detail::parse_host_port(host_port, backend, call);
    if (where.port == 0) {
        throw Error(Errc::invalid_argument,
                    "'" + std::string(host_port) + "': port 0 means any free port, which only listen() takes; "
                    "connect to the port Listener::address() reports",
                    backend, call);
    }
    require_fresh(q, backend, call);
    check_private_data(private_data.size(), *q.domain, "the private data", call);
    auto reply = q.domain->connect_to(backend_qp, where, non_negative(timeout), private_data);
    WEFT_LOGS(core, info, backend + ": QP " + std::to_string(q.qp_num) + " connected to " + where.text());
    return reply;
}

}  // namespace weft
