// weft::listen / weft::connect on ofi: a TCP side channel carries the two QPs' addresses, then each side
// connects its QP with the other's address and drives it until it is connected.
//
//   connector                                   listener
//   TCP connect(host:port) ───────────────────▶ accept
//   hello (its QP's address, private data) ───▶ decide(private data), QueuePair::connect(address)
//                                                 ── either fails: refuse(reason)
//                            ◀───────────────── accepted (the listener QP's address, its reply)
//   QueuePair::connect(address)
//   both drive their QP until rts (MSG: the provider's CM handshake; RDM: at once)
//
// libfabric has no provider-neutral way to reach "host:port" (shm and rxm endpoints have no port, verbs and
// tcp passive endpoints are tied to one provider), so the rendezvous is plain TCP, as out-of-band bootstrap
// usually is; it says nothing about the fabric the QPs then use. The host:port names the machine on the
// network the processes share; the QPs use the configured provider.
//
// Frames (ofi_wire.hpp): "weftofi2" (8 bytes), kind (u32 LE), payload length (u32 LE, at most 64 KiB), payload;
// a hello's and an accepted frame's payload is a greeting (address length, address, private data).
#include "ofi.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace weft::ofi {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view listen_call = "listen";
constexpr std::string_view accept_call = "Listener::accept";
constexpr std::string_view connect_call = "connect";

// A connector that connected its socket gets this long to say hello before the listener moves on.
constexpr auto hello_patience = std::chrono::seconds(5);

using Kind = wire::FrameKind;

class Socket {
public:
    Socket() = default;
    explicit Socket(int fd) : fd_(fd) {}
    Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Socket& operator=(Socket&& o) noexcept {
        if (this != &o) {
            reset();
            fd_ = std::exchange(o.fd_, -1);
        }
        return *this;
    }
    ~Socket() { reset(); }
    int get() const noexcept { return fd_; }
    void reset() noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
};

int remaining_ms(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, 1000 * 1000));
}

// Waits for `events` on `fd` until `deadline`. False on timeout.
bool wait_for(int fd, short events, Clock::time_point deadline, std::string_view call) {
    for (;;) {
        pollfd p{fd, events, 0};
        int n = ::poll(&p, 1, remaining_ms(deadline));
        if (n > 0) return true;
        if (n == 0) return false;
        if (errno != EINTR) errors.fail_errno(errno, "poll on the rendezvous socket failed", call);
    }
}

void set_nonblocking(int fd, std::string_view call) {
    int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        errors.fail_errno(errno, "making the rendezvous socket non-blocking failed", call);
    }
}

// Sends one frame; false when the peer went away or the deadline passed.
bool send_frame(int fd, Kind kind, std::span<const std::byte> payload, Clock::time_point deadline,
                std::string_view call) {
    const std::vector<std::byte> out = wire::encode_frame(kind, payload);
    std::size_t done = 0;
    while (done < out.size()) {
        ssize_t n = ::send(fd, out.data() + done, out.size() - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_for(fd, POLLOUT, deadline, call)) return false;
            continue;
        }
        return false;
    }
    return true;
}

bool send_text(int fd, Kind kind, std::string_view text, Clock::time_point deadline, std::string_view call) {
    return send_frame(fd, kind, std::as_bytes(std::span(text.data(), text.size())), deadline, call);
}

// Reads exactly `n` bytes. Returns an empty string on success, else what went wrong.
std::string read_exact(int fd, std::byte* dst, std::size_t n, Clock::time_point deadline, std::string_view call) {
    std::size_t got = 0;
    while (got < n) {
        ssize_t r = ::recv(fd, dst + got, n - got, 0);
        if (r > 0) {
            got += static_cast<std::size_t>(r);
            continue;
        }
        if (r == 0) return "the peer closed the rendezvous connection";
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!wait_for(fd, POLLIN, deadline, call)) return "timed out";
            continue;
        }
        return std::string("recv failed: ") + std::strerror(errno);
    }
    return {};
}

// Reads one frame into `out`. Returns an empty string on success, else what was wrong with it.
std::string read_frame(int fd, wire::Frame& out, Clock::time_point deadline, std::string_view call) {
    return wire::read_frame([&](std::byte* dst, std::size_t n) { return read_exact(fd, dst, n, deadline, call); },
                            out);
}

struct Resolved {
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list{nullptr, &::freeaddrinfo};
};

Resolved resolve(const detail::HostPort& where, bool passive, std::string_view call) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(where.port);
    int rc = ::getaddrinfo(where.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
        errors.fail(std::errc::invalid_argument,
                  "cannot resolve '" + where.host + "': " + ::gai_strerror(rc) +
                      "; give an IPv4 address, [IPv6] address or host name of this network",
                  call);
    }
    Resolved r;
    r.list.reset(res);
    return r;
}

// ---- The listener

class OfiListener final : public detail::ListenerImpl {
public:
    explicit OfiListener(const detail::HostPort& where) {
        Resolved r = resolve(where, true, listen_call);
        int last_err = EADDRNOTAVAIL;
        for (addrinfo* a = r.list.get(); a != nullptr; a = a->ai_next) {
            Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
            if (s.get() < 0) {
                last_err = errno;
                continue;
            }
            int one = 1;
            ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (::bind(s.get(), a->ai_addr, a->ai_addrlen) != 0) {
                last_err = errno;
                continue;
            }
            if (::listen(s.get(), 64) != 0) {
                last_err = errno;
                continue;
            }
            sockaddr_storage bound{};
            socklen_t len = sizeof bound;
            ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&bound), &len);
            set_nonblocking(s.get(), listen_call);
            fd_ = std::move(s);
            bound_ = detail::sockaddr_text(reinterpret_cast<const sockaddr*>(&bound));
            return;
        }
        std::string hint;
        if (last_err == EADDRINUSE) hint = " (something listens there already; ask for port 0 to get a free one)";
        if (last_err == EADDRNOTAVAIL) hint = " (no interface of this machine has that address)";
        errors.fail_errno(last_err, "cannot listen on " + where.text() + hint, listen_call);
    }

    std::string address() const override { return bound_; }

    std::vector<std::byte> accept(detail::QpImpl& qp_impl, std::chrono::milliseconds timeout,
                                  const AcceptReply& decide) override {
        auto& qp = static_cast<OfiQp&>(qp_impl);
        const auto deadline = Clock::now() + timeout;
        std::string last_refusal;
        for (;;) {
            if (!wait_for(fd_.get(), POLLIN, deadline, accept_call)) {
                errors.fail(std::errc::timed_out,
                          "no peer connected to " + bound_ + " within " + std::to_string(timeout.count()) + " ms" +
                              (last_refusal.empty() ? "" : " (refused one: " + last_refusal + ")"),
                          accept_call);
            }
            Socket conn(::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
            if (conn.get() < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
                errors.fail_errno(errno, "accept on " + bound_ + " failed", accept_call);
            }
            int one = 1;
            ::setsockopt(conn.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            const auto hello_deadline = std::min(deadline, Clock::now() + hello_patience);
            wire::Frame hello;
            if (auto why = read_frame(conn.get(), hello, hello_deadline, accept_call); !why.empty()) {
                last_refusal = why;
                send_text(conn.get(), Kind::refused, why, hello_deadline, accept_call);
                continue;
            }
            if (hello.kind != Kind::hello) {
                last_refusal = "expected a hello frame";
                send_text(conn.get(), Kind::refused, last_refusal, hello_deadline, accept_call);
                continue;
            }
            wire::Greeting greeting;
            if (auto why = wire::split_greeting(hello.payload, greeting); !why.empty()) {
                last_refusal = why;
                send_text(conn.get(), Kind::refused, why, hello_deadline, accept_call);
                continue;
            }
            std::vector<std::byte> reply;
            try {
                reply = decide(greeting.private_data);
            } catch (const std::exception& e) {
                send_text(conn.get(), Kind::refused, "the listener at " + bound_ + " refused: " + e.what(),
                          hello_deadline, accept_call);
                throw;
            }
            try {
                qp.connect(greeting.address);
            } catch (const Error& e) {
                if (qp.connect_called()) throw;  // got past the checks: the QP is half connected
                last_refusal = e.message();
                send_text(conn.get(), Kind::refused, last_refusal, hello_deadline, accept_call);
                continue;
            }
            if (!send_frame(conn.get(), Kind::accepted, wire::encode_greeting(qp.address(), reply), deadline,
                            accept_call)) {
                errors.fail(std::errc::connection_aborted,
                          "the peer at " + bound_ + " went away before it got this QP's address", accept_call);
            }
            qp.await_connected(deadline, accept_call);
            return {greeting.private_data.begin(), greeting.private_data.end()};
        }
    }

private:
    Socket fd_;
    std::string bound_;
};

}  // namespace

std::unique_ptr<detail::ListenerImpl> OfiDomain::listen(const detail::HostPort& where) {
    return std::make_unique<OfiListener>(where);
}

std::vector<std::byte> OfiDomain::connect_to(detail::QpImpl& qp_impl, const detail::HostPort& where,
                                             std::chrono::milliseconds timeout,
                                             std::span<const std::byte> private_data) {
    auto& qp = static_cast<OfiQp&>(qp_impl);
    const auto deadline = Clock::now() + timeout;
    const std::string target = where.text();
    Resolved r = resolve(where, false, connect_call);
    Socket s;
    int last_err = ECONNREFUSED;
    for (addrinfo* a = r.list.get(); a != nullptr && s.get() < 0; a = a->ai_next) {
        Socket c(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
        if (c.get() < 0) {
            last_err = errno;
            continue;
        }
        if (::connect(c.get(), a->ai_addr, a->ai_addrlen) != 0) {
            if (errno != EINPROGRESS) {
                last_err = errno;
                continue;
            }
            if (!wait_for(c.get(), POLLOUT, deadline, connect_call)) {
                errors.fail(std::errc::timed_out,
                          "no answer from " + target + " within " + std::to_string(timeout.count()) + " ms",
                          connect_call);
            }
            int err = 0;
            socklen_t len = sizeof err;
            ::getsockopt(c.get(), SOL_SOCKET, SO_ERROR, &err, &len);
            if (err != 0) {
                last_err = err;
                continue;
            }
        }
        s = std::move(c);
    }
    if (s.get() < 0) {
        if (last_err == ECONNREFUSED) {
            errors.fail(std::errc::connection_refused, "nothing listens on " + target, connect_call);
        }
        errors.fail_errno(last_err, "cannot reach " + target, connect_call);
    }
    int one = 1;
    ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!send_frame(s.get(), Kind::hello, wire::encode_greeting(qp.address(), private_data), deadline,
                    connect_call)) {
        errors.fail(std::errc::connection_aborted, "the listener at " + target + " closed the connection", connect_call);
    }
    wire::Frame reply;
    if (auto why = read_frame(s.get(), reply, deadline, connect_call); !why.empty()) {
        if (why == "timed out") {
            errors.fail(std::errc::timed_out,
                      "the listener at " + target + " did not answer within " + std::to_string(timeout.count()) +
                          " ms",
                      connect_call);
        }
        errors.fail(std::errc::connection_aborted, "rendezvous with " + target + ": " + why, connect_call);
    }
    if (reply.kind == Kind::refused) {
        errors.fail(std::errc::connection_refused,
                  "the listener at " + target + " refused: " + wire::printable(reply.payload), connect_call);
    }
    if (reply.kind != Kind::accepted) {
        errors.fail(std::errc::protocol_error, "the listener at " + target + " answered with an unexpected frame",
                  connect_call);
    }
    wire::Greeting greeting;
    if (auto why = wire::split_greeting(reply.payload, greeting); !why.empty()) {
        errors.fail(std::errc::protocol_error, "the answer of the listener at " + target + ": " + why, connect_call);
    }
    qp.connect(greeting.address);
    qp.await_connected(deadline, connect_call);
    return {greeting.private_data.begin(), greeting.private_data.end()};
}

}  // namespace weft::ofi
