// pingpong — bounces a message between two queue pairs, first with send/recv, then with write_with_imm,
// and prints the round-trip latency.
//
//   weft-pingpong [--backend CONFIG] [--iters N] [--size BYTES]                 # both QPs in this process
//   weft-pingpong [--backend CONFIG] --listen HOST:PORT                          # server: echoes one client
//   weft-pingpong [--backend CONFIG] [--iters N] [--size BYTES] --connect HOST:PORT   # client: measures
//
// The backend comes from --backend, else $WEFT_BACKEND, else "sim". Without --listen/--connect both QPs
// live in this process, each on its own domain, connected through their addresses, exactly as two
// machines would be after exchanging them out of band. With them, the server connects its QP through
// weft::listen (printing "listening on HOST:PORT" once it listens, port 0 asking for a free one) and the
// client through weft::connect; the client picks the size and count and prints the same lines, the server
// echoes every message and checks it, so the figures can be put beside fi_pingpong's on one provider.
// Across processes the two sides first trade a hello (the size, the count and each side's receive region,
// for write_with_imm) and end with done/bye, which keeps each process alive until the other's last
// message has been taken (see two_process below). Work request ids are slot numbers, never pointers.
#include <weft/sim/fabric.hpp>
#include <weft/weft.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
    std::string backend = weft::default_config();
    int iters = 10000;
    std::uint32_t size = 64;
    std::string listen;   // server: where to listen
    std::string connect;  // client: the server's address
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "weft-pingpong: %s\n"
                 "usage: weft-pingpong [--backend CONFIG] [--iters N] [--size BYTES]                  one process\n"
                 "       weft-pingpong [--backend CONFIG] --listen HOST:PORT                          server\n"
                 "       weft-pingpong [--backend CONFIG] [--iters N] [--size BYTES] --connect HOST:PORT   client\n"
                 "  CONFIG e.g. sim, sim:seed=7, verbs:device=rxe0, ofi:provider=tcp (default $WEFT_BACKEND or sim)\n"
                 "  --listen  waits for one client and echoes its messages; port 0 asks for a free port, and the\n"
                 "            line 'listening on HOST:PORT' names it; the client chooses --iters and --size\n"
                 "  --connect runs the round trips against that server and prints the latency (not on sim,\n"
                 "            whose fabric lives inside one process)\n",
                 why);
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    bool shaped = false;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
            return argv[++i];
        };
        if (arg == "--backend") o.backend = value();
        else if (arg == "--iters") {
            o.iters = std::atoi(value().c_str());
            shaped = true;
        } else if (arg == "--size") {
            o.size = static_cast<std::uint32_t>(std::atoi(value().c_str()));
            shaped = true;
        } else if (arg == "--listen") o.listen = value();
        else if (arg == "--connect") o.connect = value();
        else usage(("unknown argument " + arg).c_str());
    }
    if (o.iters <= 0) usage("--iters must be positive");
    if (o.size == 0 || o.size > (1u << 20)) usage("--size must be 1..1048576");
    if (!o.listen.empty() && !o.connect.empty()) usage("give --listen (server) or --connect (client), not both");
    if (!o.listen.empty() && shaped) usage("--iters and --size are the client's: the server takes them from it");
    return o;
}

// A failure the program reports and exits on. Thrown, not std::exit()ed, so that the QPs and domains are
// closed on the way out: a provider may leave a process's resources behind otherwise (shm keeps its 16 MiB
// region in /dev/shm, and a later process that gets the same pid cannot open its endpoint).
struct Failure {
    std::string why;
    int code = 1;
};

[[noreturn]] void fail(std::string why, int code = 1) { throw Failure{std::move(why), code}; }

// The iteration number travels in a message's first bytes, as many of its 4 as the message holds;
// low_bytes(i, n) is what then arrives.
void stamp(std::byte* p, std::uint32_t n, int i) { std::memcpy(p, &i, std::min<std::size_t>(n, sizeof i)); }
int stamped(const std::byte* p, std::uint32_t n) {
    int v = 0;
    std::memcpy(&v, p, std::min<std::size_t>(n, sizeof v));
    return v;
}
int low_bytes(int i, std::uint32_t n) {
    int v = 0;
    std::memcpy(&v, &i, std::min<std::size_t>(n, sizeof v));
    return v;
}

// One endpoint: domain, CQ, QP, and a buffer split into a send half and a receive half.
struct Peer {
    weft::Domain dom;
    weft::CompletionQueue cq;
    weft::QueuePair qp;
    std::vector<std::byte> buf;
    weft::MemoryRegion mr;
    int sends_in_flight = 0;

    Peer(const std::string& config, std::uint32_t size) : dom(weft::open(config)) {
        cq = dom.create_cq({.depth = 64});
        qp = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 16, .max_recv = 16});
        buf.resize(2 * size);
        mr = dom.register_memory(buf, weft::Access::local_write | weft::Access::remote_write);
    }
};

// Polls until a receive completes (want_recv) or until no send is in flight; send completions seen on the
// way are counted off. Exits on any error completion. A receive that completes while it waits for sends, or
// beside the one it waits for, is not kept: safe here, where each QP gets its next message only after both
// sides have waited, but not across processes, where the peer's next message can arrive in the same poll
// as our send's completion (Side::next_recv keeps to one completion per poll for that reason).
void await(Peer& p, bool want_recv) {
    weft::Completion wc[4];
    bool got_recv = false;
    while (want_recv ? !got_recv : p.sends_in_flight > 0) {
        for (const auto& c : p.cq.poll(wc)) {
            if (!c.ok()) {
                fail("error completion on QP " + std::to_string(c.qp_num) + ": " + std::string(weft::to_string(c.status)) +
                     " (" + std::string(weft::describe(c.status)) + ")");
            }
            if (c.is_recv()) got_recv = true;
            else --p.sends_in_flight;
        }
    }
}

void check(weft::PostStatus st, const char* what) {
    if (!st) fail(std::string(what) + ": " + st.reason());
}

struct Summary {
    double p50, p99, mean;
};

Summary summarize(std::vector<double>& us) {
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double v : us) sum += v;
    return {us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)], sum / static_cast<double>(us.size())};
}

// Bounces one message `iters` times; `use_write` selects write_with_imm instead of send.
std::vector<double> bounce(Peer& a, Peer& b, const Options& o, bool use_write) {
    const std::uint32_t n = o.size;
    auto rx_a = a.mr.slice(n, n), rx_b = b.mr.slice(n, n);
    auto dst_a = a.mr.remote().slice(n, n), dst_b = b.mr.remote().slice(n, n);
    auto message = [&](Peer& from, const weft::RemoteRegion& to, std::uint32_t slot) {
        auto src = from.mr.slice(0, n);
        return use_write ? weft::write(slot, src, to).with_imm(slot) : weft::send(slot, src);
    };
    check(a.qp.post_recv({weft::recv(0, rx_a)}), "post_recv");
    check(b.qp.post_recv({weft::recv(0, rx_b)}), "post_recv");
    std::vector<double> us;
    us.reserve(static_cast<std::size_t>(o.iters));
    for (int i = 0; i < o.iters; ++i) {
        auto slot = static_cast<std::uint32_t>(i & 0xffff);
        stamp(a.buf.data(), n, i);
        auto t0 = std::chrono::steady_clock::now();
        check(a.qp.post_send({message(a, dst_b, slot)}), "post_send");
        ++a.sends_in_flight;
        await(b, true);
        check(b.qp.post_recv({weft::recv(slot, rx_b)}), "post_recv");
        std::memcpy(b.buf.data(), b.buf.data() + n, n);  // echo what arrived
        check(b.qp.post_send({message(b, dst_a, slot)}), "post_send");
        ++b.sends_in_flight;
        await(a, true);
        check(a.qp.post_recv({weft::recv(slot, rx_a)}), "post_recv");
        auto t1 = std::chrono::steady_clock::now();
        await(a, false);
        await(b, false);
        int echoed = stamped(a.buf.data() + n, n);
        if (echoed != low_bytes(i, n)) {
            fail("iteration " + std::to_string(i) + " came back as " + std::to_string(echoed));
        }
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    return us;
}

// ---- Two processes (--listen / --connect)
//
//   client                                        server
//   weft::connect ──────────────────────────────▶ Listener::accept
//   hello: size, count, phases, its receive half ─▶ registers its buffers, posts a receive
//                 ◀──────────────────────────────  hello: its receive half
//   i (send, or write_with_imm with imm = slot) ─▶ checks i, reposts its receive, echoes it the same way
//                 ◀──────────────────────────────  ... `iters` times per phase
//   done ────────────────────────────────────────▶ checks the counts, waits for its echoes' completions
//                 ◀──────────────────────────────  bye
//
// Every message finds a receive posted: each side posts one before connecting, reposts it before it sends
// again, and the server sends its hello (which starts the client) only after posting its data receive.
// Leaving takes done/bye because a process must not go while its peer still needs it: on tcp a send
// completes only when the peer's provider has acknowledged it, and shm loses a message whose sender has
// exited before the receiver took it.

constexpr std::uint32_t control_size = 64;
constexpr char control_magic[8] = {'w', 'e', 'f', 't', 'p', 'p', '0', '1'};
enum class Control : std::uint32_t { hello = 1, done = 2, bye = 3 };
constexpr std::uint32_t phase_send = 1, phase_write = 2;
constexpr auto accept_limit = std::chrono::seconds(60);
constexpr auto connect_limit = std::chrono::seconds(10);
constexpr auto stall_limit = std::chrono::seconds(10);  // no completion for this long: report and fail

// magic (8) | kind | size | iters | phases (u32 little-endian each) | receive region (36, hellos only)
struct ControlMessage {
    Control kind = Control::hello;
    std::uint32_t size = 0;
    std::uint32_t iters = 0;
    std::uint32_t phases = 0;
    weft::RemoteRegion region;
};
static_assert(24 + weft::RemoteRegion::encoded_size <= control_size);

void put_u32(std::byte* p, std::uint32_t v) {
    for (int k = 0; k < 4; ++k) p[k] = static_cast<std::byte>(v >> (8 * k));
}
std::uint32_t get_u32(const std::byte* p) {
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v |= static_cast<std::uint32_t>(p[k]) << (8 * k);
    return v;
}

// One side of the two-process mode. The control halves (64 bytes each) are registered at once; the data
// halves (max(size, 64) bytes each, so that a control message fits the data receive too) once the size is
// known, which for the server is after the client's hello. The QP is declared last: it goes first.
struct Side {
    const char* role;
    weft::Domain dom;
    weft::CompletionQueue cq;
    std::vector<std::byte> ctl;
    weft::MemoryRegion ctl_mr;
    std::vector<std::byte> buf;
    weft::MemoryRegion mr;
    std::uint32_t size = 0;
    std::uint32_t half = 0;
    int sends_in_flight = 0;
    weft::QueuePair qp;

    Side(const char* who, const std::string& config) : role(who), dom(weft::open(config)) {
        if (dom.capabilities().kind == weft::BackendKind::sim) {
            fail("'" + config + "' cannot run in two processes: the simulator's fabric lives inside one process; "
                 "drop --listen/--connect to run both QPs in this one", 2);
        }
        cq = dom.create_cq({.depth = 64});
        ctl.resize(2 * control_size);
        ctl_mr = dom.register_memory(ctl, weft::Access::local_write);
        qp = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 16, .max_recv = 16});
    }

    void allocate(std::uint32_t n) {
        size = n;
        half = std::max(n, control_size);
        buf.assign(2 * static_cast<std::size_t>(half), std::byte{0});
        mr = dom.register_memory(buf, weft::Access::local_write | weft::Access::remote_write);
    }
    std::byte* rx() { return buf.data() + half; }
    weft::LocalSegment rx_segment() const { return mr.slice(half, half); }
    weft::RemoteRegion rx_remote() const { return mr.remote().slice(half, half); }

    void post_recv(const weft::LocalSegment& where, std::uint64_t id) {
        check(qp.post_recv({weft::recv(id, where)}), "post_recv");
    }
    void post_send(const weft::SendRequest& r) {
        check(qp.post_send({r}), "post_send");
        ++sends_in_flight;
    }
    void send_control(const ControlMessage& m) {
        std::byte* p = ctl.data();
        std::memset(p, 0, control_size);
        std::memcpy(p, control_magic, sizeof control_magic);
        put_u32(p + 8, static_cast<std::uint32_t>(m.kind));
        put_u32(p + 12, m.size);
        put_u32(p + 16, m.iters);
        put_u32(p + 20, m.phases);
        if (m.kind == Control::hello) {
            auto region = m.region.encode();
            std::memcpy(p + 24, region.data(), region.size());
        }
        post_send(weft::send(0xc0000000u + static_cast<std::uint32_t>(m.kind), ctl_mr.slice(0, control_size)));
    }

    // What a wait was for, for its error message: `what`, and round trip `i` unless negative. Built only on
    // failure, so that the waits cost nothing extra between the clock readings.
    std::string waiting_for(const char* what, int i) const {
        return std::string(what) + (i >= 0 ? " " + std::to_string(i) : std::string());
    }
    [[noreturn]] void stalled(const char* what, int i) const {
        fail(std::string(role) + ": no completion for " + std::to_string(stall_limit.count()) + " s while waiting for " +
             waiting_for(what, i) + " (" + std::to_string(sends_in_flight) + " sends in flight, QP state " +
             std::string(weft::to_string(qp.state())) + ")");
    }
    void check_ok(const weft::Completion& c, const char* what, int i) const {
        if (c.ok()) return;
        fail(std::string(role) + ": error completion (id " + std::to_string(c.id) + ", " +
             std::string(weft::to_string(c.opcode)) + ") while waiting for " + waiting_for(what, i) + ": " +
             std::string(weft::to_string(c.status)) + " (" + std::string(weft::describe(c.status)) + ")");
    }

    // Polls until a receive completes and returns it; send completions on the way are counted off. One
    // completion per poll, so that a receive completing beside a send is never passed over.
    weft::Completion next_recv(const char* what, int i = -1) {
        weft::Completion wc[1];
        auto last = std::chrono::steady_clock::now();
        for (unsigned idle = 0;;) {
            if (cq.poll(wc).empty()) {
                if (++idle % 4096 == 0 && std::chrono::steady_clock::now() - last > stall_limit) stalled(what, i);
                continue;
            }
            check_ok(wc[0], what, i);
            if (wc[0].is_recv()) return wc[0];
            --sends_in_flight;
            last = std::chrono::steady_clock::now();
        }
    }
    // Polls until every send has completed; no message may arrive meanwhile.
    void drain_sends(const char* what, int i = -1) {
        weft::Completion wc[1];
        auto last = std::chrono::steady_clock::now();
        for (unsigned idle = 0; sends_in_flight > 0;) {
            if (cq.poll(wc).empty()) {
                if (++idle % 4096 == 0 && std::chrono::steady_clock::now() - last > stall_limit) stalled(what, i);
                continue;
            }
            check_ok(wc[0], what, i);
            if (wc[0].is_recv()) fail(std::string(role) + ": a message arrived while waiting for " + waiting_for(what, i));
            --sends_in_flight;
            last = std::chrono::steady_clock::now();
        }
    }
};

bool is_control(const weft::Completion& c, const std::byte* p) {
    return c.opcode == weft::Opcode::recv && c.byte_len == control_size &&
           std::memcmp(p, control_magic, sizeof control_magic) == 0;
}

// Reads the control message of kind `want` that completion `c` placed at `p`, or fails naming what came.
ControlMessage expect_control(const Side& s, const weft::Completion& c, const std::byte* p, Control want,
                              const char* name) {
    if (!is_control(c, p) || get_u32(p + 8) != static_cast<std::uint32_t>(want)) {
        fail(std::string(s.role) + ": expected the peer's " + name + ", got a " + std::to_string(c.byte_len) +
             "-byte " + std::string(weft::to_string(c.opcode)) +
             " (is the peer a weft-pingpong of this version on the same backend?)");
    }
    ControlMessage m;
    m.kind = want;
    m.size = get_u32(p + 12);
    m.iters = get_u32(p + 16);
    m.phases = get_u32(p + 20);
    if (want == Control::hello) m.region = weft::RemoteRegion::decode(std::span(p + 24, weft::RemoteRegion::encoded_size));
    return m;
}

int serve(const Options& o) {
    Side s("server", o.backend);
    weft::Listener lis = weft::listen(s.dom, o.listen);
    std::printf("weft-pingpong: listening on %s\n", lis.address().c_str());
    std::fflush(stdout);
    s.post_recv(s.ctl_mr.slice(control_size, control_size), 0);
    lis.accept(s.qp, accept_limit);

    auto c = s.next_recv("the client's hello");
    ControlMessage hello = expect_control(s, c, s.ctl.data() + control_size, Control::hello, "hello");
    if (hello.size == 0 || hello.size > (1u << 20) || hello.iters == 0 || hello.iters > 0x7fffffffu ||
        (hello.phases & ~(phase_send | phase_write)) != 0) {
        fail("server: the client's hello asks for " + std::to_string(hello.iters) + " round trips of " +
             std::to_string(hello.size) + " bytes, phases " + std::to_string(hello.phases));
    }
    if ((hello.phases & phase_write) != 0 && !s.dom.capabilities().has(weft::Feature::write_with_imm)) {
        fail("server: the client asks for write_with_imm, which this backend lacks (" + o.backend + ")");
    }
    const std::uint32_t n = hello.size;
    const int iters = static_cast<int>(hello.iters);
    s.allocate(n);
    s.post_recv(s.rx_segment(), 1);
    s.send_control({.kind = Control::hello, .size = n, .region = s.rx_remote()});

    const weft::RemoteRegion to = hello.region.slice(0, n);
    int sends = 0, writes = 0;
    for (;;) {
        c = s.next_recv("message from the client, round trip", sends + writes);
        if (is_control(c, s.rx())) {
            expect_control(s, c, s.rx(), Control::done, "done");
            break;
        }
        const bool write = c.opcode == weft::Opcode::recv_rdma_with_imm;
        int& count = write ? writes : sends;
        const auto slot = static_cast<std::uint32_t>(count & 0xffff);
        const int got = stamped(s.rx(), n);
        if (c.byte_len != n || got != low_bytes(count, n) || (write && (!c.has_imm || c.imm != slot)) ||
            (!write && writes > 0) || count >= iters) {
            fail("server: " + std::string(write ? "write_with_imm " : "send ") + std::to_string(count) +
                 " arrived as " + std::to_string(c.byte_len) + " bytes holding " + std::to_string(got) +
                 (write ? ", imm " + std::to_string(c.imm) : std::string()) + " (expected " + std::to_string(n) +
                 " bytes holding " + std::to_string(low_bytes(count, n)) + " of " + std::to_string(iters) + ")");
        }
        s.post_recv(s.rx_segment(), slot);
        std::memcpy(s.buf.data(), s.rx(), n);  // echo what arrived
        auto src = s.mr.slice(0, n);
        if (s.sends_in_flight >= 15) s.drain_sends("the completion of earlier echoes");
        s.post_send(write ? weft::write(slot, src, to).with_imm(slot) : weft::send(slot, src));
        ++count;
    }
    const int want_writes = (hello.phases & phase_write) != 0 ? iters : 0;
    if (sends != iters || writes != want_writes) {
        fail("server: the client said done after " + std::to_string(sends) + " sends and " + std::to_string(writes) +
             " write_with_imm, expected " + std::to_string(iters) + " and " + std::to_string(want_writes));
    }
    s.drain_sends("the completion of the last echo");
    s.send_control({.kind = Control::bye});
    s.drain_sends("the completion of bye");
    std::printf("weft-pingpong: served %d send/recv and %d write_with_imm round trips of %u bytes\n", sends, writes, n);
    return 0;
}

int run_client(const Options& o) {
    Side s("client", o.backend);
    const std::uint32_t n = o.size;
    s.allocate(n);
    s.post_recv(s.ctl_mr.slice(control_size, control_size), 0);
    weft::connect(s.qp, o.connect, connect_limit);
    const bool has_write = s.dom.capabilities().has(weft::Feature::write_with_imm);
    s.send_control({.kind = Control::hello, .size = n, .iters = static_cast<std::uint32_t>(o.iters),
                    .phases = phase_send | (has_write ? phase_write : 0u), .region = s.rx_remote()});
    auto c = s.next_recv("the server's hello");
    ControlMessage hello = expect_control(s, c, s.ctl.data() + control_size, Control::hello, "hello");
    if (hello.size != n) fail("client: the server answered for " + std::to_string(hello.size) + "-byte messages");
    const weft::RemoteRegion to = hello.region.slice(0, n);
    s.drain_sends("the completion of hello");
    s.post_recv(s.rx_segment(), 1);

    std::printf("weft-pingpong: backend %s (%s), %d round trips of %u bytes with the server at %s\n", o.backend.c_str(),
                s.dom.capabilities().device.c_str(), o.iters, n, o.connect.c_str());
    for (bool use_write : {false, true}) {
        if (use_write && !has_write) {
            std::printf("  write_with_imm: skipped, the backend lacks it\n");
            continue;
        }
        const char* phase = use_write ? "write_with_imm" : "send/recv";
        auto src = s.mr.slice(0, n);
        std::vector<double> us;
        us.reserve(static_cast<std::size_t>(o.iters));
        for (int i = 0; i < o.iters; ++i) {
            const auto slot = static_cast<std::uint32_t>(i & 0xffff);
            stamp(s.buf.data(), n, i);
            auto t0 = std::chrono::steady_clock::now();
            s.post_send(use_write ? weft::write(slot, src, to).with_imm(slot) : weft::send(slot, src));
            c = s.next_recv(use_write ? "the echo of write_with_imm" : "the echo of send", i);
            s.post_recv(s.rx_segment(), slot);
            auto t1 = std::chrono::steady_clock::now();
            s.drain_sends(use_write ? "the completion of write_with_imm" : "the completion of send", i);
            const int echoed = stamped(s.rx(), n);
            const auto want = use_write ? weft::Opcode::recv_rdma_with_imm : weft::Opcode::recv;
            if (c.opcode != want || c.byte_len != n || echoed != low_bytes(i, n) ||
                (use_write && (!c.has_imm || c.imm != slot))) {
                fail("client: " + std::string(phase) + " " + std::to_string(i) + " came back as a " +
                     std::to_string(c.byte_len) + "-byte " + std::string(weft::to_string(c.opcode)) + " holding " +
                     std::to_string(echoed) + (use_write ? ", imm " + std::to_string(c.imm) : std::string()));
            }
            us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        auto sum = summarize(us);
        std::printf("  %-14s round trip: p50 %8.2f us  p99 %8.2f us  mean %8.2f us\n", phase, sum.p50, sum.p99,
                    sum.mean);
        std::fflush(stdout);
    }
    s.send_control({.kind = Control::done});
    c = s.next_recv("the server's bye");
    expect_control(s, c, s.rx(), Control::bye, "bye");
    s.drain_sends("the completion of done");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    Options o = parse(argc, argv);
    try {
        if (!o.listen.empty()) return serve(o);
        if (!o.connect.empty()) return run_client(o);
        Peer a(o.backend, o.size), b(o.backend, o.size);
        a.qp.connect(b.qp.address());
        b.qp.connect(a.qp.address());
        std::printf("weft-pingpong: backend %s (%s), %d round trips of %u bytes\n", o.backend.c_str(),
                    a.dom.capabilities().device.c_str(), o.iters, o.size);
        const bool sim = a.dom.capabilities().kind == weft::BackendKind::sim;
        for (bool use_write : {false, true}) {
            if (use_write && !a.dom.capabilities().has(weft::Feature::write_with_imm)) {
                std::printf("  write_with_imm: skipped, the backend lacks it\n");
                continue;
            }
            std::uint64_t v0 = sim ? weft::sim::Fabric::of(a.dom).now() : 0;
            auto us = bounce(a, b, o, use_write);
            auto s = summarize(us);
            std::printf("  %-14s round trip: p50 %8.2f us  p99 %8.2f us  mean %8.2f us", use_write ? "write_with_imm" : "send/recv",
                        s.p50, s.p99, s.mean);
            if (sim) {
                double virt = static_cast<double>(weft::sim::Fabric::of(a.dom).now() - v0) / 1000.0 / o.iters;
                std::printf("  (simulated: %.2f us)", virt);
            }
            std::printf("\n");
        }
    } catch (const Failure& f) {
        std::fprintf(stderr, "weft-pingpong: %s\n", f.why.c_str());
        return f.code;
    } catch (const weft::Error& e) {
        std::fprintf(stderr, "weft-pingpong: %s\n", e.what());
        return 1;
    }
    return 0;
}
