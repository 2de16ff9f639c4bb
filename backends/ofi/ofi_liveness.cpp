// How an ofi QP learns that its peer is gone without mistaking a slow peer for a dead one, and the checks
// a peer's endpoint name passes before it reaches the provider.
//
// Liveness: every QP listens on a TCP socket of its own and never accepts on it. The peer connects to it
// when it connects its QP (with a finite `timeout`); the kernel completes that handshake and keeps the
// connection in the listen queue. Nothing is ever sent on it. It breaks with a reset when the listening
// socket closes: the QP is destroyed or goes to error, or its process ends however it ends (the kernel closes
// the socket of a killed process too). Across hosts, keepalive probes sized from the QP's timeout and
// retry_cnt notice a peer host that stopped answering. A peer program that is slow, descheduled or stopped
// keeps its connection: both kernels answer for it, so load can never make a live peer look lost.
#include "ofi.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace weft::ofi {
namespace {

constexpr int liveness_backlog = 16;
constexpr std::string_view shm_schemes[] = {"fi_shm://", "fi_ns://"};

std::uint16_t family_of(std::span<const std::byte> name) noexcept {
    std::uint16_t f = 0;
    if (name.size() >= sizeof f) std::memcpy(&f, name.data(), sizeof f);
    return f;
}

// The text of an FI_ADDR_STR name up to its terminator; empty when it has none.
std::string_view str_name(std::span<const std::byte> name) noexcept {
    const auto* p = reinterpret_cast<const char*>(name.data());
    const void* nul = std::memchr(p, 0, name.size());
    if (nul == nullptr) return {};
    return std::string_view(p, static_cast<std::size_t>(static_cast<const char*>(nul) - p));
}

std::string_view scheme_of(std::string_view text) noexcept {
    auto at = text.find("://");
    return at == std::string_view::npos ? std::string_view{} : text.substr(0, at + 3);
}

}  // namespace

std::string check_peer_name(std::uint32_t addr_format, std::span<const std::byte> peer,
                            std::span<const std::byte> own) {
    if (peer.empty()) return "the endpoint name is empty";
    switch (addr_format) {
        case FI_SOCKADDR:
        case FI_SOCKADDR_IN:
        case FI_SOCKADDR_IN6:
        case FI_SOCKADDR_IB: {
            // A socket address of the family and size our own endpoint has (sockaddr_in: 16 bytes, AF_INET).
            if (peer.size() != own.size()) {
                return "the endpoint name has " + std::to_string(peer.size()) + " bytes; this provider's (" +
                       fi_tostr(&addr_format, FI_TYPE_ADDR_FORMAT) + ") have " + std::to_string(own.size());
            }
            if (family_of(peer) != family_of(own)) {
                return "the endpoint name's address family is " + std::to_string(family_of(peer)) + ", expected " +
                       std::to_string(family_of(own));
            }
            if (family_of(peer) == AF_INET && peer.size() == sizeof(sockaddr_in)) {
                sockaddr_in in{};
                std::memcpy(&in, peer.data(), sizeof in);
                if (in.sin_port == 0 || in.sin_addr.s_addr == htonl(INADDR_ANY)) {
                    return "the endpoint name has no address or port (0.0.0.0 or port 0)";
                }
            }
            if (family_of(peer) == AF_INET6 && peer.size() == sizeof(sockaddr_in6)) {
                sockaddr_in6 in6{};
                std::memcpy(&in6, peer.data(), sizeof in6);
                if (in6.sin6_port == 0 || IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
                    return "the endpoint name has no address or port (:: or port 0)";
                }
            }
            return {};
        }
        case FI_ADDR_STR: {
            // A terminated, printable string with the scheme of our own ("fi_shm://pid:ep:0").
            if (peer.size() > FI_NAME_MAX) {
                return "the endpoint name has " + std::to_string(peer.size()) + " bytes (at most " +
                       std::to_string(FI_NAME_MAX) + ")";
            }
            std::string_view text = str_name(peer);
            if (text.empty() || text.size() + 1 != peer.size()) {
                return "the endpoint name is not one terminated string";
            }
            if (!std::all_of(text.begin(), text.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
                return "the endpoint name holds unprintable characters";
            }
            std::string_view scheme = scheme_of(str_name(own));
            if (!scheme.empty() && scheme_of(text) != scheme) {
                return "the endpoint name does not start with '" + std::string(scheme) + "'";
            }
            if (text.size() <= scheme.size()) return "the endpoint name has nothing after its scheme";
            return {};
        }
        default:
            // A format weft has no decoder for: the same length as ours, or nothing.
            if (peer.size() != own.size()) {
                return "the endpoint name has " + std::to_string(peer.size()) + " bytes, this provider's have " +
                       std::to_string(own.size());
            }
            return {};
    }
}

bool liveness_address(std::uint32_t addr_format, std::span<const std::byte> name, sockaddr_storage& out,
                      socklen_t& len) noexcept {
    out = {};
    const std::uint16_t family = family_of(name);
    if ((addr_format == FI_SOCKADDR || addr_format == FI_SOCKADDR_IN) && family == AF_INET &&
        name.size() >= sizeof(sockaddr_in)) {
        sockaddr_in in{};
        std::memcpy(&in, name.data(), sizeof in);
        if (in.sin_addr.s_addr == htonl(INADDR_ANY)) in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        in.sin_port = 0;
        std::memcpy(&out, &in, sizeof in);
        len = sizeof in;
        return true;
    }
    if ((addr_format == FI_SOCKADDR || addr_format == FI_SOCKADDR_IN6) && family == AF_INET6 &&
        name.size() >= sizeof(sockaddr_in6)) {
        sockaddr_in6 in6{};
        std::memcpy(&in6, name.data(), sizeof in6);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) in6.sin6_addr = in6addr_loopback;
        in6.sin6_port = 0;
        std::memcpy(&out, &in6, sizeof in6);
        len = sizeof in6;
        return true;
    }
    if (addr_format == FI_ADDR_STR) {
        std::string_view text = str_name(name);
        for (std::string_view s : shm_schemes) {
            if (text.rfind(s, 0) != 0) continue;
            // Shared memory: the peer is on this host.
            sockaddr_in in{};
            in.sin_family = AF_INET;
            in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            std::memcpy(&out, &in, sizeof in);
            len = sizeof in;
            return true;
        }
    }
    return false;
}

int liveness_listen(const sockaddr_storage& ip, socklen_t len, std::uint16_t& port) {
    int fd = ::socket(ip.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) throw_errno(errno, "socket for the QP's liveness listener", backend_name, "create_qp");
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&ip), len) != 0 || ::listen(fd, liveness_backlog) != 0) {
        int err = errno;
        ::close(fd);
        throw_errno(err, "binding the QP's liveness listener to " + detail::sockaddr_text(reinterpret_cast<const sockaddr*>(&ip)),
                    backend_name, "create_qp");
    }
    sockaddr_storage bound{};
    socklen_t blen = sizeof bound;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
    port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return fd;
}

int liveness_connect(const LivenessTarget& to, std::chrono::nanoseconds per_try, unsigned tries, bool& refused) noexcept {
    refused = false;
    int fd = ::socket(to.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    // Keepalive probes measure the peer host's silence: the first after one transport deadline of idleness
    // (timeout x tries), then one per try; the kernel gives up after `tries` unanswered ones. Whole seconds,
    // at least one.
    auto secs = [](std::chrono::nanoseconds d) {
        return static_cast<int>(std::clamp<long long>(std::chrono::ceil<std::chrono::seconds>(d).count(), 1, 32767));
    };
    int on = 1;
    int idle = secs(per_try * tries);
    int interval = secs(per_try);
    int count = static_cast<int>(std::clamp(tries, 1u, 127u));
    ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&to.addr), to.len) != 0 && errno != EINPROGRESS) {
        // Refused at once: the peer's listener is already closed. The watch reports it like a reset.
        if (errno != ECONNREFUSED) {
            ::close(fd);
            return -1;
        }
        refused = true;
        return fd;
    }
    // In progress: to a peer on this host the answer is usually there already (loopback handles the SYN
    // and its reset inside connect()); a peer whose listener is closed is known lost at once.
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, 0) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ECONNREFUSED) refused = true;
    }
    return fd;
}

}  // namespace weft::ofi
