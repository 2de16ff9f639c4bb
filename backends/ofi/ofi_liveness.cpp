// How an ofi QP learns that its peer is gone without mistaking a slow peer for a dead one.
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

}  // namespace

void liveness_say_goodbye(int listener) noexcept {
    if (listener < 0) return;
    for (int i = 0; i < liveness_backlog; ++i) {
        const int conn = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (conn < 0) return;
        // Nothing was ever sent to us on it, so closing sends the byte and then an orderly end, not a reset.
        [[maybe_unused]] const ssize_t sent = ::send(conn, &liveness_goodbye, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        ::close(conn);
    }
}

bool liveness_heard_goodbye(int conn) noexcept {
    if (conn < 0) return false;
    char byte = 0;
    return ::recv(conn, &byte, 1, MSG_DONTWAIT) == 1 && byte == liveness_goodbye;
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
    // In progress: a peer on this host (loopback) answers within microseconds, usually inside connect()
    // itself; wait for that answer (up to 20 ms, on a loaded host) so that a peer whose listener is closed
    // is known lost at once. Remote peers are left to the watch.
    bool loopback = false;
    if (to.addr.ss_family == AF_INET) {
        loopback = (ntohl(reinterpret_cast<const sockaddr_in*>(&to.addr)->sin_addr.s_addr) >> 24) == 127;
    } else if (to.addr.ss_family == AF_INET6) {
        loopback = IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&to.addr)->sin6_addr);
    }
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, loopback ? 20 : 0) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ECONNREFUSED) refused = true;
    }
    return fd;
}

}  // namespace weft::ofi
