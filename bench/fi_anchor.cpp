// fi_anchor — raw libfabric doing what weft-perf does, as the anchor for the ofi backend's figures (Debian
// ships no fabtests). Two processes: a server and a client meeting over a TCP socket, which also carries
// the endpoint names, the memory key and the test commands.
//
//   weft-bench-fi-anchor -p tcp --listen 127.0.0.1:0          # prints "fi-anchor: listening on HOST:PORT"
//   weft-bench-fi-anchor -p tcp --connect 127.0.0.1:PORT -o write,send -T lat --sizes 2:4096 --json
//
// The same fi_info as the ofi backend picks for `ofi:provider=P[,domain=D]`: caps FI_MSG|FI_RMA (with
// FI_ATOMIC when the provider keeps the send/write ordering with it, as the backend decides), modes
// FI_CONTEXT|FI_CONTEXT2|FI_RX_CQ_DATA, MR modes LOCAL|VIRT_ADDR|ALLOCATED|PROV_KEY, FI_THREAD_SAFE,
// FI_DELIVERY_COMPLETE (not on shm), node 127.0.0.1 with FI_SOURCE for socket providers, a MSG endpoint
// where there is one, RDM otherwise; the first entry whose provider name is exactly P; and the same
// environment defaults (FI_MR_CACHE_MAX_COUNT=0, FI_UNIVERSE_SIZE=16, the user's own settings win). Every
// operation asks for a completion (FI_COMPLETION, as the backend does). The CQ has the wait object the
// backend gives its CQs (--cq-wait auto): FI_WAIT_FD where the provider's descriptor is woken by its peers
// (every provider but shm), which CompletionQueue::wait() and fd() block on, FI_WAIT_NONE on shm. The
// wait object is not free: tcp (1.17) then progresses through an epoll_wait on the CQ's wait set instead
// of a poll() of the endpoint's socket, about 0.6 us more one way for a 64-byte write on loopback; `--cq-wait
// none` measures raw libfabric without it (docs/performance.md).
//
// The tests are weft-perf's, with its memory layout and timing:
//   write lat  ping-pong: stamp the iteration into the first and last bytes of slot 0, fi_writemsg it to the
//              peer's slot 0, wait for the peer's stamp in ours (polling the CQ meanwhile: the socket
//              providers progress only inside CQ calls) and for the write's completion; the server echoes
//              after its previous echo completed. One way = half the time between posts.
//   send lat   the same with fi_sendmsg/fi_recvmsg (one receive kept posted on each side).
//   write bw   `depth` writes in flight from source slot j % slots to target slot j % slots; MiB/s and
//              millions of writes per second from the first measured post to the last completion.
// Output: one line per test (`--json`: one JSON object per line), with the fields weft-perf's JSON has.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;
constexpr auto stall_limit = std::chrono::seconds(20);

struct Failure {
    std::string why;
};
[[noreturn]] void fail(std::string why) { throw Failure{std::move(why)}; }

void check(int ret, const char* call) {
    if (ret < 0) fail(std::string(call) + ": " + fi_strerror(-ret) + " (" + std::to_string(ret) + ")");
}

// ---- Options

struct Options {
    std::string provider = "tcp";
    std::string domain;
    std::string listen, connect;
    std::vector<std::string> ops{"write"};
    std::vector<std::string> tests{"lat"};
    std::vector<std::uint32_t> sizes;
    std::uint32_t iters = 0, warmup = ~0u, depth = 128;
    std::uint64_t area = 8u << 20;
    std::string cq_wait = "auto";  // auto (as the ofi backend), fd, none
    bool json = false;
};

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "fi-anchor: %s\n"
                 "usage: weft-bench-fi-anchor -p PROVIDER [-d DOMAIN] --listen HOST:PORT\n"
                 "       weft-bench-fi-anchor -p PROVIDER [-d DOMAIN] --connect HOST:PORT [-o write,send] [-T lat,bw]\n"
                 "                            [--sizes LIST|MIN:MAX] [-n ITERS] [--warmup N] [-t DEPTH] [--area BYTES]\n"
                 "                            [--cq-wait auto|fd|none] [--json]\n",
                 why.c_str());
    std::exit(2);
}

std::uint64_t number(std::string s) {
    std::uint64_t mult = 1;
    if (!s.empty() && (s.back() == 'K' || s.back() == 'k')) mult = 1024, s.pop_back();
    else if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) mult = 1024 * 1024, s.pop_back();
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) usage("not a number: " + s);
    return std::strtoull(s.c_str(), nullptr, 10) * mult;
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::size_t at = 0;
    for (;;) {
        auto next = s.find(',', at);
        out.push_back(s.substr(at, next - at));
        if (next == std::string::npos) return out;
        at = next + 1;
    }
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage("missing value after " + a);
            return argv[++i];
        };
        if (a == "-p" || a == "--provider") o.provider = value();
        else if (a == "-d" || a == "--domain") o.domain = value();
        else if (a == "--listen") o.listen = value();
        else if (a == "--connect") o.connect = value();
        else if (a == "-o" || a == "--op") o.ops = split(value());
        else if (a == "-T" || a == "--test") o.tests = split(value());
        else if (a == "-s" || a == "--size") o.sizes = {static_cast<std::uint32_t>(number(value()))};
        else if (a == "--sizes") {
            std::string v = value();
            o.sizes.clear();
            if (auto c = v.find(':'); c != std::string::npos) {
                std::uint64_t lo = number(v.substr(0, c)), hi = number(v.substr(c + 1)), s = 1;
                while (s < lo) s <<= 1;
                for (; s <= hi; s <<= 1) o.sizes.push_back(static_cast<std::uint32_t>(s));
            } else {
                for (auto& p : split(v)) o.sizes.push_back(static_cast<std::uint32_t>(number(p)));
            }
        } else if (a == "-n" || a == "--iters") o.iters = static_cast<std::uint32_t>(number(value()));
        else if (a == "--warmup") o.warmup = static_cast<std::uint32_t>(number(value()));
        else if (a == "-t" || a == "--tx-depth") o.depth = static_cast<std::uint32_t>(number(value()));
        else if (a == "--area") o.area = number(value());
        else if (a == "--cq-wait") o.cq_wait = value();
        else if (a == "--json") o.json = true;
        else usage("unknown argument " + a);
    }
    if (o.listen.empty() == o.connect.empty()) usage("give --listen or --connect");
    if (o.cq_wait != "auto" && o.cq_wait != "fd" && o.cq_wait != "none") usage("--cq-wait: auto, fd or none");
    for (const auto& op : o.ops) {
        if (op != "write" && op != "send") usage("ops: write, send");
    }
    for (const auto& t : o.tests) {
        if (t != "lat" && t != "bw") usage("tests: lat, bw");
    }
    for (const auto& op : o.ops) {
        for (const auto& t : o.tests) {
            if (op == "send" && t == "bw") usage("send is measured for latency only (-o send -T lat)");
        }
    }
    if (o.depth == 0 || o.depth > 4096) usage("-t: 1..4096");
    for (auto s : o.sizes) {
        if (s == 0 || s > o.area) usage("sizes: 1..area");
    }
    return o;
}

// ---- The out-of-band socket (text lines)

std::pair<std::string, std::string> split_host_port(const std::string& hp) {
    auto c = hp.rfind(':');
    if (c == std::string::npos) usage("HOST:PORT expected, not " + hp);
    return {hp.substr(0, c), hp.substr(c + 1)};
}

class Socket {
public:
    explicit Socket(int fd = -1) : fd_(fd) {}
    Socket(Socket&& o) noexcept : fd_(o.fd_), in_(std::move(o.in_)) { o.fd_ = -1; }
    Socket& operator=(Socket&& o) noexcept {
        std::swap(fd_, o.fd_);
        std::swap(in_, o.in_);
        return *this;
    }
    ~Socket() {
        if (fd_ >= 0) ::close(fd_);
    }
    int fd() const { return fd_; }

    void send_line(const std::string& s) {
        std::string line = s + "\n";
        for (std::size_t at = 0; at < line.size();) {
            ssize_t n = ::send(fd_, line.data() + at, line.size() - at, MSG_NOSIGNAL);
            if (n <= 0) fail("the control socket closed while sending");
            at += static_cast<std::size_t>(n);
        }
    }
    // A whole line if one has arrived (waiting up to `ms`), else false.
    bool try_line(std::string& out, int ms) {
        for (;;) {
            if (auto nl = in_.find('\n'); nl != std::string::npos) {
                out = in_.substr(0, nl);
                in_.erase(0, nl + 1);
                return true;
            }
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, ms) <= 0) return false;
            char buf[4096];
            ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) fail("the peer closed the control socket");
            in_.append(buf, static_cast<std::size_t>(n));
            if (in_.size() > 1 << 16) fail("the peer sent an overlong control line");
        }
    }
    std::string line(const char* what) {
        std::string s;
        if (!try_line(s, 60000)) fail(std::string("no ") + what + " from the peer within 60 s");
        return s;
    }

private:
    int fd_;
    std::string in_;
};

Socket tcp_listen(const std::string& hp, std::string& bound) {
    auto [host, port] = split_host_port(hp);
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) fail("cannot resolve " + hp);
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 1) != 0) {
        freeaddrinfo(res);
        fail("cannot listen on " + hp + ": " + std::strerror(errno));
    }
    freeaddrinfo(res);
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    char ip[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
    bound = std::string(ip) + ":" + std::to_string(ntohs(sa.sin_port));
    return Socket(fd);
}

Socket tcp_accept(Socket& lis) {
    pollfd p{lis.fd(), POLLIN, 0};
    if (::poll(&p, 1, 60000) <= 0) fail("no client within 60 s");
    int fd = ::accept4(lis.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) fail(std::string("accept: ") + std::strerror(errno));
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return Socket(fd);
}

Socket tcp_connect(const std::string& hp) {
    auto [host, port] = split_host_port(hp);
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) fail("cannot resolve " + hp);
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (rc != 0) fail("cannot connect to " + hp + ": " + std::strerror(errno));
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return Socket(fd);
}

std::string hex(const void* p, std::size_t n) {
    static const char* d = "0123456789abcdef";
    std::string s;
    for (std::size_t i = 0; i < n; ++i) {
        auto b = static_cast<const unsigned char*>(p)[i];
        s += d[b >> 4];
        s += d[b & 15];
    }
    return s;
}

std::vector<unsigned char> unhex(const std::string& s) {
    if (s.size() % 2 != 0 || s.size() > 2048) fail("malformed name from the peer");
    std::vector<unsigned char> out(s.size() / 2);
    for (std::size_t i = 0; i < out.size(); ++i) {
        auto nib = [&](char c) -> int {
            if (c >= '0' && c <= '9') return c - '0';
            if (c >= 'a' && c <= 'f') return c - 'a' + 10;
            fail("malformed name from the peer");
        };
        out[i] = static_cast<unsigned char>(nib(s[2 * i]) << 4 | nib(s[2 * i + 1]));
    }
    return out;
}

// ---- Fabric objects, chosen as the ofi backend chooses them

struct Chosen {
    fi_info* info = nullptr;
    bool delivery_complete = true;
};

constexpr std::uint64_t contract_order = FI_ORDER_SAS | FI_ORDER_SAW | FI_ORDER_WAS | FI_ORDER_WAW;

fi_info* query(const Options& o, fi_ep_type type, bool atomics, bool dc) {
    fi_info* hints = fi_allocinfo();
    hints->caps = FI_MSG | FI_RMA | (atomics ? FI_ATOMIC : 0);
    hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
    hints->ep_attr->type = type;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    if (dc) hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    hints->fabric_attr->prov_name = strdup(o.provider.c_str());
    if (!o.domain.empty()) hints->domain_attr->name = strdup(o.domain.c_str());
    const bool sockets = o.provider.rfind("tcp", 0) == 0 || o.provider.rfind("sockets", 0) == 0 ||
                         o.provider.rfind("udp", 0) == 0;
    const char* node = sockets ? "127.0.0.1" : nullptr;
    fi_info* out = nullptr;
    int ret = fi_getinfo(FI_VERSION(1, 17), node, nullptr, node ? FI_SOURCE : 0, hints, &out);
    fi_freeinfo(hints);
    if (ret != 0) return nullptr;
    fi_info* pick = nullptr;
    for (fi_info* i = out; i; i = i->next) {
        if (i->fabric_attr && i->fabric_attr->prov_name && o.provider == i->fabric_attr->prov_name) {
            pick = fi_dupinfo(i);
            break;
        }
    }
    fi_freeinfo(out);
    return pick;
}

Chosen choose(const Options& o) {
    const bool want_dc = o.provider != "shm";
    const bool atomics_broken = o.provider == "verbs" && fi_version() <= FI_VERSION(1, 17);
    for (bool dc : {want_dc, false}) {
        for (fi_ep_type t : {FI_EP_MSG, FI_EP_RDM}) {
            fi_info* plain = query(o, t, false, dc);
            fi_info* with = atomics_broken ? nullptr : query(o, t, true, dc);
            if (with) {
                std::uint64_t kept = plain ? plain->tx_attr->msg_order & contract_order : 0;
                if ((with->tx_attr->msg_order & kept) == kept || !plain) {
                    fi_freeinfo(plain);
                    return {with, dc};
                }
                fi_freeinfo(with);
            }
            if (plain) return {plain, dc};
        }
    }
    fail("no fi_info for provider " + o.provider);
}

struct Fabric {
    Chosen chosen;
    fid_fabric* fabric = nullptr;
    fid_domain* domain = nullptr;
    fid_eq* eq = nullptr;
    fid_cq* cq = nullptr;
    bool cq_wait_fd = false;  // the CQ has an FI_WAIT_FD wait object
    fid_av* av = nullptr;
    fid_pep* pep = nullptr;
    fid_ep* ep = nullptr;
    fid_mr* mr = nullptr;
    void* desc = nullptr;
    std::byte* mem = nullptr;
    std::uint64_t area = 0;
    fi_addr_t peer = FI_ADDR_UNSPEC;
    std::uint64_t peer_addr = 0, peer_key = 0;
    std::uint64_t flags = 0;  // per operation, as the backend passes them
    std::vector<fi_context2> ctx;

    ~Fabric() {
        if (ep) fi_close(&ep->fid);
        if (pep) fi_close(&pep->fid);
        if (mr) fi_close(&mr->fid);
        if (av) fi_close(&av->fid);
        if (cq) fi_close(&cq->fid);
        if (eq) fi_close(&eq->fid);
        if (domain) fi_close(&domain->fid);
        if (fabric) fi_close(&fabric->fid);
        if (chosen.info) fi_freeinfo(chosen.info);
        std::free(mem);
    }
    bool msg() const { return chosen.info->ep_attr->type == FI_EP_MSG; }
    std::byte* a() const { return mem; }
    std::byte* b() const { return mem + area; }
};

void open_fabric(Fabric& f, const Options& o, std::uint32_t depth_max) {
    ::setenv("FI_MR_CACHE_MAX_COUNT", "0", 0);
    ::setenv("FI_UNIVERSE_SIZE", "16", 0);
    f.chosen = choose(o);
    f.area = o.area;
    f.flags = FI_COMPLETION | (f.chosen.delivery_complete ? FI_DELIVERY_COMPLETE : 0);
    check(fi_fabric(f.chosen.info->fabric_attr, &f.fabric, nullptr), "fi_fabric");
    check(fi_domain(f.fabric, f.chosen.info, &f.domain, nullptr), "fi_domain");
    fi_cq_attr ca{};
    ca.size = std::max<std::size_t>(64, 2 * (2 * std::size_t{depth_max} + 64));
    ca.format = FI_CQ_FORMAT_DATA;
    // auto: as the backend's CQs (OfiCq), an FI_WAIT_FD wait object where the provider has one that its
    // peers wake, i.e. on every provider but shm, FI_WAIT_NONE where it has none.
    const bool want_fd = o.cq_wait == "fd" || (o.cq_wait == "auto" && o.provider != "shm");
    if (want_fd) {
        ca.wait_obj = FI_WAIT_FD;
        int fd = -1;
        if (fi_cq_open(f.domain, &ca, &f.cq, nullptr) == 0 && fi_control(&f.cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) {
            f.cq_wait_fd = true;
        } else if (o.cq_wait == "fd") {
            fail("the provider gives no CQ with an FI_WAIT_FD wait object (--cq-wait fd)");
        } else if (f.cq) {
            fi_close(&f.cq->fid);
            f.cq = nullptr;
        }
    }
    if (!f.cq) {
        ca.wait_obj = FI_WAIT_NONE;
        check(fi_cq_open(f.domain, &ca, &f.cq, nullptr), "fi_cq_open");
    }
    fi_eq_attr ea{};
    ea.size = 64;
    ea.wait_obj = FI_WAIT_NONE;
    check(fi_eq_open(f.fabric, &ea, &f.eq, nullptr), "fi_eq_open");
    const std::size_t bytes = (2 * o.area + 4095) & ~std::size_t{4095};
    f.mem = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
    std::memset(f.mem, 0, bytes);
    check(fi_mr_reg(f.domain, f.mem, bytes, FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
                    0, 0, &f.mr, nullptr),
          "fi_mr_reg");
    f.desc = fi_mr_desc(f.mr);
    f.ctx.resize(2 * std::size_t{depth_max} + 16);
}

void size_msg(fi_info* info, std::uint32_t depth_max) {
    info->tx_attr->size = std::min<std::size_t>(info->tx_attr->size, 2 * std::size_t{depth_max});
    info->rx_attr->size = std::min<std::size_t>(info->rx_attr->size, depth_max);
    info->tx_attr->iov_limit = std::min<std::size_t>(info->tx_attr->iov_limit, 1);
    info->rx_attr->iov_limit = std::min<std::size_t>(info->rx_attr->iov_limit, 1);
}

void make_ep(Fabric& f, fi_info* info) {
    check(fi_endpoint(f.domain, info, &f.ep, nullptr), "fi_endpoint");
    if (f.msg()) check(fi_ep_bind(f.ep, &f.eq->fid, 0), "fi_ep_bind(eq)");
    else check(fi_ep_bind(f.ep, &f.av->fid, 0), "fi_ep_bind(av)");
    check(fi_ep_bind(f.ep, &f.cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    check(fi_enable(f.ep), "fi_enable");
}

std::vector<unsigned char> name_of(fid_t fid) {
    std::vector<unsigned char> n(512);
    std::size_t len = n.size();
    check(fi_getname(fid, n.data(), &len), "fi_getname");
    n.resize(len);
    return n;
}

void wait_event(Fabric& f, std::uint32_t want, fi_eq_cm_entry& entry) {
    const auto t0 = clock_type::now();
    for (;;) {
        std::uint32_t event = 0;
        ssize_t n = fi_eq_read(f.eq, &event, &entry, sizeof entry, 0);
        if (n > 0) {
            if (event != want) fail("unexpected connection event " + std::to_string(event));
            return;
        }
        if (n == -FI_EAVAIL) {
            fi_eq_err_entry err{};
            fi_eq_readerr(f.eq, &err, 0);
            fail(std::string("connection failed: ") + fi_strerror(err.err));
        }
        if (clock_type::now() - t0 > std::chrono::seconds(30)) fail("no connection event within 30 s");
        fi_cq_data_entry scratch;
        fi_cq_read(f.cq, &scratch, 0);  // progress
    }
}

// Connects the endpoint over the socket: names and the memory key cross it.
void connect_ep(Fabric& f, Socket& sock, bool server, std::uint32_t depth_max) {
    if (!f.msg()) {
        fi_av_attr aa{};
        aa.type = f.chosen.info->domain_attr->av_type == FI_AV_MAP ? FI_AV_MAP : FI_AV_TABLE;
        aa.count = 4;
        check(fi_av_open(f.domain, &aa, &f.av, nullptr), "fi_av_open");
        make_ep(f, f.chosen.info);
        sock.send_line("name " + hex(name_of(&f.ep->fid).data(), name_of(&f.ep->fid).size()));
        std::string line = sock.line("endpoint name");
        if (line.rfind("name ", 0) != 0) fail("expected the peer's name");
        auto peer = unhex(line.substr(5));
        if (fi_av_insert(f.av, peer.data(), 1, &f.peer, 0, nullptr) != 1) fail("fi_av_insert failed");
    } else if (server) {
        check(fi_passive_ep(f.fabric, f.chosen.info, &f.pep, nullptr), "fi_passive_ep");
        check(fi_pep_bind(f.pep, &f.eq->fid, 0), "fi_pep_bind");
        check(fi_listen(f.pep), "fi_listen");
        auto n = name_of(&f.pep->fid);
        sock.send_line("name " + hex(n.data(), n.size()));
        fi_eq_cm_entry entry{};
        wait_event(f, FI_CONNREQ, entry);
        size_msg(entry.info, depth_max);
        make_ep(f, entry.info);
        fi_freeinfo(entry.info);
        check(fi_accept(f.ep, nullptr, 0), "fi_accept");
        wait_event(f, FI_CONNECTED, entry);
    } else {
        std::string line = sock.line("endpoint name");
        if (line.rfind("name ", 0) != 0) fail("expected the peer's name");
        auto peer = unhex(line.substr(5));
        fi_info* info = fi_dupinfo(f.chosen.info);
        std::free(info->dest_addr);
        info->dest_addr = std::malloc(peer.size());
        std::memcpy(info->dest_addr, peer.data(), peer.size());
        info->dest_addrlen = peer.size();
        size_msg(info, depth_max);
        make_ep(f, info);
        fi_freeinfo(info);
        check(fi_connect(f.ep, peer.data(), nullptr, 0), "fi_connect");
        fi_eq_cm_entry entry{};
        wait_event(f, FI_CONNECTED, entry);
    }
    const bool virt = (f.chosen.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
    sock.send_line("mr " + std::to_string(virt ? reinterpret_cast<std::uint64_t>(f.mem) : 0) + " " +
                   std::to_string(fi_mr_key(f.mr)));
    std::string line = sock.line("memory key");
    if (std::sscanf(line.c_str(), "mr %" SCNu64 " %" SCNu64, &f.peer_addr, &f.peer_key) != 2) fail("expected the peer's key");
}

// ---- Data path

struct Engine {
    Fabric& f;
    std::uint64_t out = 0;   // operations posted and not completed
    std::uint64_t recvs = 0; // receive completions taken
    std::uint32_t next_ctx = 0;

    fi_context2* ctx() { return &f.ctx[next_ctx++ % f.ctx.size()]; }

    void poll() {
        fi_cq_data_entry e[16];
        ssize_t n = fi_cq_read(f.cq, e, 16);
        if (n == -FI_EAGAIN) return;
        if (n == -FI_EAVAIL) {
            fi_cq_err_entry err{};
            fi_cq_readerr(f.cq, &err, 0);
            fail(std::string("error completion: ") + fi_strerror(err.err) + " (" +
                 fi_cq_strerror(f.cq, err.prov_errno, err.err_data, nullptr, 0) + ")");
        }
        check(static_cast<int>(n), "fi_cq_read");
        for (ssize_t i = 0; i < n; ++i) {
            if (e[i].flags & FI_RECV) ++recvs;
            else --out;
        }
    }
    // Posts with `call` until the provider takes the request, polling while it says -FI_EAGAIN.
    template <class Call>
    void retry(Call call, const char* name) {
        for (;;) {
            ssize_t r = call();
            if (r == 0) return;
            if (r != -FI_EAGAIN) check(static_cast<int>(r), name);
            poll();
        }
    }
    fi_msg message(iovec& iov) {
        fi_msg m{};
        m.msg_iov = &iov;
        m.desc = &f.desc;
        m.iov_count = 1;
        m.addr = f.peer;
        m.context = ctx();
        return m;
    }
    void post_write(std::uint64_t off, std::uint32_t len) {
        iovec iov{f.a() + off, len};
        fi_rma_iov rma{f.peer_addr + f.area + off, len, f.peer_key};
        const fi_msg base = message(iov);
        fi_msg_rma m{};
        m.msg_iov = base.msg_iov;
        m.desc = base.desc;
        m.iov_count = base.iov_count;
        m.addr = base.addr;
        m.rma_iov = &rma;
        m.rma_iov_count = 1;
        m.context = base.context;
        retry([&] { return fi_writemsg(f.ep, &m, f.flags); }, "fi_writemsg");
        ++out;
    }
    void post_send(std::uint64_t off, std::uint32_t len) {
        iovec iov{f.a() + off, len};
        const fi_msg m = message(iov);
        retry([&] { return fi_sendmsg(f.ep, &m, f.flags); }, "fi_sendmsg");
        ++out;
    }
    void post_recv(std::uint64_t off, std::uint32_t len) {
        iovec iov{f.b() + off, len};
        const fi_msg m = message(iov);
        retry([&] { return fi_recvmsg(f.ep, &m, FI_COMPLETION); }, "fi_recvmsg");
    }
    template <class Done>
    void until(Done done, const char* what) {
        const auto t0 = clock_type::now();
        for (unsigned turn = 0; !done(); ++turn) {
            poll();
            if ((turn & 4095u) == 0 && clock_type::now() - t0 > stall_limit) fail(std::string("stalled waiting for ") + what);
        }
    }
};

void put_stamp(std::byte* p, std::uint32_t size, std::uint64_t v) {
    std::memcpy(p, &v, std::min<std::uint32_t>(size, 8));
    if (size >= 16) std::memcpy(p + size - 8, &v, 8);
}
bool stamped(const std::byte* p, std::uint32_t size, std::uint64_t v) {
    const std::uint32_t k = std::min<std::uint32_t>(size, 8);
    const volatile unsigned char* q = reinterpret_cast<const volatile unsigned char*>(p);
    std::uint64_t head = 0;
    for (std::uint32_t i = 0; i < k; ++i) head |= std::uint64_t{q[i]} << (8 * i);
    const std::uint64_t want = k >= 8 ? v : v & ((std::uint64_t{1} << (8 * k)) - 1);
    if (size >= 16) {
        std::uint64_t tail = 0;
        for (std::uint32_t i = 0; i < 8; ++i) tail |= std::uint64_t{q[size - 8 + i]} << (8 * i);
        if (tail != v) return false;
    }
    return head == want;
}

struct Test {
    std::string op, test;
    std::uint32_t size = 0, iters = 0, warmup = 0, depth = 1;
    std::uint64_t total() const { return std::uint64_t{warmup} + iters; }
};

std::uint32_t stride_of(std::uint32_t size) { return std::max<std::uint32_t>(64, (size + 63u) & ~63u); }
std::uint32_t slots_of(const Test& t, std::uint64_t area) {
    return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(area / stride_of(t.size), 1, 4096));
}

// Client side of a latency ping-pong; returns the one-way samples in microseconds.
std::vector<double> client_lat(Engine& e, const Test& t) {
    const std::uint64_t total = t.total();
    std::vector<clock_type::time_point> tp(total + 1);
    const bool write = t.op == "write";
    for (std::uint64_t i = 0; i < total; ++i) {
        e.until([&] { return e.out == 0; }, "the completion of a request");
        put_stamp(e.f.a(), t.size, i + 1);
        tp[i] = clock_type::now();
        if (write) {
            e.post_write(0, t.size);
            e.until([&] { return stamped(e.f.b(), t.size, i + 1); }, "the peer's echo");
        } else {
            const std::uint64_t before = e.recvs;
            e.post_send(0, t.size);
            e.until([&] { return e.recvs > before; }, "the peer's echo");
            if (!stamped(e.f.b(), t.size, i + 1)) fail("echo " + std::to_string(i) + " holds the wrong stamp");
            e.post_recv(0, static_cast<std::uint32_t>(std::min<std::uint64_t>(e.f.area, 1u << 30)));
        }
    }
    tp[total] = clock_type::now();
    e.until([&] { return e.out == 0; }, "the last completion");
    std::vector<double> us;
    for (std::uint64_t i = t.warmup; i < total; ++i) {
        us.push_back(std::chrono::duration<double, std::micro>(tp[i + 1] - tp[i]).count() / 2);
    }
    return us;
}

void server_lat(Engine& e, const Test& t) {
    const bool write = t.op == "write";
    for (std::uint64_t n = 0; n < t.total(); ++n) {
        if (write) {
            e.until([&] { return stamped(e.f.b(), t.size, n + 1); }, "the client's message");
        } else {
            const std::uint64_t before = e.recvs;
            e.until([&] { return e.recvs > before; }, "the client's message");
            if (!stamped(e.f.b(), t.size, n + 1)) fail("message " + std::to_string(n) + " holds the wrong stamp");
            e.post_recv(0, static_cast<std::uint32_t>(std::min<std::uint64_t>(e.f.area, 1u << 30)));
        }
        e.until([&] { return e.out == 0; }, "the completion of the previous echo");
        put_stamp(e.f.a(), t.size, n + 1);
        if (write) e.post_write(0, t.size);
        else e.post_send(0, t.size);
    }
    e.until([&] { return e.out == 0; }, "the completion of the last echo");
}

// Client side of a bandwidth test; returns the seconds of the measured part.
double client_bw(Engine& e, const Test& t, std::uint64_t area) {
    const std::uint32_t stride = stride_of(t.size), slots = slots_of(t, area);
    const bool write = t.op == "write";
    clock_type::time_point t0{};
    std::uint64_t j = 0;
    for (int phase = t.warmup > 0 ? 0 : 1; phase < 2; ++phase) {
        const std::uint64_t end = phase == 0 ? t.warmup : t.total();
        if (phase == 1) t0 = clock_type::now();
        const auto start = clock_type::now();
        for (unsigned turn = 0; j < end || e.out > 0; ++turn) {
            while (j < end && e.out < t.depth) {
                const std::uint64_t off = (j % slots) * stride;
                if (write) e.post_write(off, t.size);
                else e.post_send(off, t.size);
                ++j;
            }
            e.poll();
            if ((turn & 4095u) == 0 && clock_type::now() - start > std::chrono::seconds(600)) fail("bandwidth test stalled");
        }
    }
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void print_result(const Options& o, const Fabric& f, const Test& t, std::vector<double>* us, double secs) {
    const char* ep = f.msg() ? "msg" : "rdm";
    const char* wait = f.cq_wait_fd ? "fd" : "none";
    if (us != nullptr) {
        std::sort(us->begin(), us->end());
        const double n = static_cast<double>(us->size());
        const double avg = std::accumulate(us->begin(), us->end(), 0.0) / n;
        double var = 0;
        for (double v : *us) var += (v - avg) * (v - avg);
        auto pct = [&](double p) { return (*us)[std::min(us->size() - 1, static_cast<std::size_t>(std::ceil(p * n)) - 1)]; };
        if (o.json) {
            std::printf("{\"tool\":\"fi-anchor\",\"provider\":\"%s\",\"ep_type\":\"%s\",\"cq_wait\":\"%s\",\"op\":\"%s\",\"test\":\"lat\",\"size\":%u,"
                        "\"iterations\":%u,\"one_way\":true,\"t_min_us\":%.6g,\"t_max_us\":%.6g,\"t_typical_us\":%.6g,"
                        "\"t_avg_us\":%.6g,\"t_stdev_us\":%.6g,\"t_p99_us\":%.6g,\"t_p999_us\":%.6g}\n",
                        o.provider.c_str(), ep, wait, t.op.c_str(), t.size, t.iters, us->front(), us->back(), (*us)[us->size() / 2],
                        avg, std::sqrt(var / n), pct(0.99), pct(0.999));
        } else {
            std::printf("fi-anchor %s %s lat %7u B: typical %9.2f us  avg %9.2f us  min %9.2f  p99 %9.2f (one way, %u iterations)\n",
                        o.provider.c_str(), t.op.c_str(), t.size, (*us)[us->size() / 2], avg, us->front(), pct(0.99), t.iters);
        }
    } else {
        const double bytes = static_cast<double>(t.size) * t.iters;
        if (o.json) {
            std::printf("{\"tool\":\"fi-anchor\",\"provider\":\"%s\",\"ep_type\":\"%s\",\"cq_wait\":\"%s\",\"op\":\"%s\",\"test\":\"bw\",\"size\":%u,"
                        "\"iterations\":%u,\"tx_depth\":%u,\"seconds\":%.6g,\"bw_mib_s\":%.6g,\"bw_gbit_s\":%.6g,\"msg_rate_mpps\":%.6g}\n",
                        o.provider.c_str(), ep, wait, t.op.c_str(), t.size, t.iters, t.depth, secs, bytes / secs / 1048576.0,
                        bytes * 8 / secs / 1e9, t.iters / secs / 1e6);
        } else {
            std::printf("fi-anchor %s %s bw  %7u B: %10.2f MiB/s  %8.4f Mpps (%u iterations, depth %u)\n", o.provider.c_str(),
                        t.op.c_str(), t.size, bytes / secs / 1048576.0, t.iters / secs / 1e6, t.iters, t.depth);
        }
    }
    std::fflush(stdout);
}

int run(const Options& o) {
    const bool server = !o.listen.empty();
    Socket lis;
    Socket sock;
    if (server) {
        std::string bound;
        lis = tcp_listen(o.listen, bound);
        std::printf("fi-anchor: listening on %s\n", bound.c_str());
        std::fflush(stdout);
        sock = tcp_accept(lis);
    } else {
        sock = tcp_connect(o.connect);
    }
    // The client's area and depth rule both sides.
    std::uint64_t area = o.area;
    std::uint32_t depth_max = o.depth;
    if (server) {
        std::string line = sock.line("hello");
        unsigned long long a = 0;
        unsigned d = 0;
        if (std::sscanf(line.c_str(), "hello %llu %u", &a, &d) != 2 || a < 64 || a > (1ull << 30) || d == 0 || d > 4096) {
            fail("bad hello from the client: " + line);
        }
        area = a;
        depth_max = d;
    } else {
        sock.send_line("hello " + std::to_string(area) + " " + std::to_string(depth_max));
    }
    Options eff = o;
    eff.area = area;
    Fabric f;
    open_fabric(f, eff, depth_max);
    connect_ep(f, sock, server, depth_max);
    Engine e{f};
    // One receive stays posted on each side for the send ping-pongs (any size fits: the whole of B).
    const auto whole = static_cast<std::uint32_t>(std::min<std::uint64_t>(area, 1u << 30));
    bool recv_posted = false;

    if (server) {
        for (;;) {
            std::string line = sock.line("next test");
            if (line == "quit") {
                sock.send_line("bye");
                return 0;
            }
            char op[16], test[16];
            Test t;
            if (std::sscanf(line.c_str(), "test %15s %15s %u %u %u %u", op, test, &t.size, &t.iters, &t.warmup, &t.depth) != 6) {
                fail("bad test line from the client: " + line);
            }
            t.op = op;
            t.test = test;
            if ((t.op != "write" && t.op != "send") || (t.test != "lat" && t.test != "bw") ||
                (t.op == "send" && t.test == "bw") || t.size == 0 ||
                t.size > area || t.depth == 0 || t.depth > depth_max) {
                fail("bad test from the client: " + line);
            }
            if (t.op == "send" && !recv_posted) {
                e.post_recv(0, whole);
                recv_posted = true;
            }
            std::memset(f.b(), 0, stride_of(t.size));
            sock.send_line("ready");
            if (t.test == "lat") server_lat(e, t);
            // Keep progressing (the client's writes need this side's CQ calls) until it says "end".
            std::string end;
            while (!sock.try_line(end, 0)) e.poll();
            if (end != "end") fail("expected end, got " + end);
            sock.send_line("ok");
        }
    }

    std::vector<Test> tests;
    for (const auto& op : o.ops) {
        for (const auto& tt : o.tests) {
            std::vector<std::uint32_t> sizes = o.sizes;
            if (sizes.empty()) sizes = {tt == "bw" ? 65536u : 2u};
            for (auto s : sizes) {
                Test t;
                t.op = op;
                t.test = tt;
                t.size = s;
                t.iters = o.iters ? o.iters : (tt == "bw" ? 5000u : 1000u);
                t.warmup = o.warmup != ~0u ? o.warmup : std::min<std::uint32_t>(100, t.iters / 10);
                t.depth = tt == "bw" ? o.depth : 1;
                tests.push_back(t);
            }
        }
    }
    for (const Test& t : tests) {
        if (t.op == "send" && t.test == "lat" && !recv_posted) {
            e.post_recv(0, whole);
            recv_posted = true;
        }
        std::memset(f.b(), 0, stride_of(t.size));
        for (std::uint32_t k = 0; k < slots_of(t, area); ++k) {
            std::memset(f.a() + std::uint64_t{k} * stride_of(t.size), static_cast<int>(k + 1), t.size);
        }
        sock.send_line("test " + t.op + " " + t.test + " " + std::to_string(t.size) + " " + std::to_string(t.iters) + " " +
                       std::to_string(t.warmup) + " " + std::to_string(t.depth));
        if (sock.line("ready") != "ready") fail("the server did not get ready");
        if (t.test == "lat") {
            auto us = client_lat(e, t);
            print_result(o, f, t, &us, 0);
        } else {
            double secs = client_bw(e, t, area);
            print_result(o, f, t, nullptr, secs);
        }
        sock.send_line("end");
        std::string ok;
        while (!sock.try_line(ok, 0)) e.poll();
        if (ok != "ok") fail("the server answered " + ok);
    }
    sock.send_line("quit");
    std::string bye;
    while (!sock.try_line(bye, 0)) e.poll();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    try {
        return run(o);
    } catch (const Failure& f) {
        std::fflush(stdout);
        std::fprintf(stderr, "fi-anchor: %s\n", f.why.c_str());
        return 1;
    }
}
