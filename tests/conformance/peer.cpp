// Two-process mode: the peer process (an agent running commands on real weft objects), the proxy
// implementations of the backend interface that send it those commands, and the shared arena.
//
// Wire format: one SOCK_SEQPACKET message per command and one per answer, fields in host layout (both ends
// are the same executable on the same machine). An answer starts with 0 (done, results follow) or 1 (a
// weft::Error follows, rebuilt on this side with its category, code, message, backend and object).
#include "peer.hpp"

#include <weft/backend.hpp>
#include <weft/error.hpp>
#include <weft/listener.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace weft::test::peer {
namespace {

// ---- Process-wide state

constexpr std::size_t slot_bytes = 64 * 1024;
constexpr std::size_t slot_count = 32;
constexpr std::size_t arena_bytes = slot_bytes * slot_count;
/// Largest command or answer; a post of a few thousand requests fits.
constexpr std::size_t max_message = 512 * 1024;
/// How long the peer waits on its socket before polling its CQs again.
constexpr long idle_poll_ns = 100'000;
/// How long the suite waits for an answer beyond a command's own timeout before it gives the peer up.
constexpr std::chrono::seconds answer_patience{30};

struct State {
    pid_t child = -1;
    int fd = -1;
    std::byte* arena = nullptr;
    std::mutex arena_mu;
    std::array<bool, slot_count> used{};
    std::mutex call_mu;  // one command at a time: a listener case connects from a second thread
    std::vector<std::byte> answer = std::vector<std::byte>(max_message);
    std::string gone;  // why the peer cannot be reached any more; empty while it can
};

State& state() {
    static State s;
    return s;
}

const char* const peer_object = "conformance peer";

// ---- Encoding

enum class Op : std::uint8_t {
    open,
    register_memory,
    create_cq,
    create_qp,
    post_send,
    post_recv,
    address,
    connect,
    connect_to,
    state,
    poll,
    wait,
    destroy_mr,
    destroy_cq,
    destroy_qp,
    destroy_domain,
    disconnect,
    next_event,
    to_error,
};

class Writer {
public:
    template <class T>
    Writer& put(const T& value) {
        static_assert(std::is_trivially_copyable_v<T>);
        const auto* p = reinterpret_cast<const std::byte*>(&value);
        out_.insert(out_.end(), p, p + sizeof(T));
        return *this;
    }
    Writer& put_bytes(std::span<const std::byte> bytes) {
        put(static_cast<std::uint32_t>(bytes.size()));
        out_.insert(out_.end(), bytes.begin(), bytes.end());
        return *this;
    }
    Writer& put_string(std::string_view text) {
        return put_bytes(std::as_bytes(std::span<const char>(text.data(), text.size())));
    }
    std::span<const std::byte> bytes() const noexcept { return out_; }

private:
    std::vector<std::byte> out_;
};

class Reader {
public:
    explicit Reader(std::span<const std::byte> in) noexcept : in_(in) {}

    template <class T>
    T get() {
        static_assert(std::is_trivially_copyable_v<T>);
        T value;
        std::memcpy(&value, take(sizeof(T)).data(), sizeof(T));
        return value;
    }
    std::vector<std::byte> get_bytes() {
        auto n = get<std::uint32_t>();
        auto s = take(n);
        return {s.begin(), s.end()};
    }
    std::string get_string() {
        auto n = get<std::uint32_t>();
        auto s = take(n);
        return {reinterpret_cast<const char*>(s.data()), s.size()};
    }

private:
    std::span<const std::byte> take(std::size_t n) {
        if (in_.size() - pos_ < n) {
            throw Error(Errc::internal, "a message between the two processes is shorter than its fields", {},
                        peer_object);
        }
        auto s = in_.subspan(pos_, n);
        pos_ += n;
        return s;
    }

    std::span<const std::byte> in_;
    std::size_t pos_ = 0;
};

enum class Category : std::uint8_t { weft, system, generic, fabric, other };

void put_error(Writer& w, const std::error_code& code, std::string_view message, std::string_view backend,
               std::string_view object) {
    Category c = Category::other;
    if (code.category() == error_category()) c = Category::weft;
    else if (code.category() == std::system_category()) c = Category::system;
    else if (code.category() == std::generic_category()) c = Category::generic;
    else if (code.category() == fabric_category()) c = Category::fabric;
    w.put(std::uint8_t{1}).put(c).put(code.value()).put_string(message).put_string(backend).put_string(object);
}

[[noreturn]] void throw_error(Reader& r) {
    auto c = r.get<Category>();
    auto value = r.get<int>();
    auto message = r.get_string();
    auto backend = r.get_string();
    auto object = r.get_string();
    switch (c) {
        case Category::weft: throw Error(std::error_code(value, error_category()), message, backend, object);
        case Category::system: throw Error(std::error_code(value, std::system_category()), message, backend, object);
        case Category::generic: throw Error(std::error_code(value, std::generic_category()), message, backend, object);
        case Category::fabric: throw Error(std::error_code(value, fabric_category()), message, backend, object);
        case Category::other: break;
    }
    throw Error(Errc::internal, "the peer process failed: " + message, backend, object);
}

void put_request(Writer& w, const SendRequest& r) {
    w.put(r.id).put(r.remote_addr).put(r.rkey).put(r.compare_add).put(r.swap).put(r.imm).put(r.opcode).put(r.flags);
    w.put(r.remote_backend).put(r.num_sge).put(r.sge).put(r.sg_list != nullptr);
    if (r.sg_list) {
        for (std::uint32_t i = 0; i < r.num_sge; ++i) w.put(r.sg_list[i]);
    }
}

void put_request(Writer& w, const RecvRequest& r) {
    w.put(r.id).put(r.num_sge).put(r.sge).put(r.sg_list != nullptr);
    if (r.sg_list) {
        for (std::uint32_t i = 0; i < r.num_sge; ++i) w.put(r.sg_list[i]);
    }
}

// Reads the gather list of a request; `lists` keeps it (the request points into it).
template <class Request>
void get_segments(Reader& r, Request& req, std::deque<std::vector<LocalSegment>>& lists) {
    req.num_sge = r.get<std::uint32_t>();
    req.sge = r.get<LocalSegment>();
    if (r.get<bool>()) {
        auto& list = lists.emplace_back(req.num_sge);
        for (auto& s : list) s = r.get<LocalSegment>();
        req.sg_list = list.data();
    }
}

SendRequest get_send(Reader& r, std::deque<std::vector<LocalSegment>>& lists) {
    SendRequest req;
    req.id = r.get<std::uint64_t>();
    req.remote_addr = r.get<std::uint64_t>();
    req.rkey = r.get<std::uint64_t>();
    req.compare_add = r.get<std::uint64_t>();
    req.swap = r.get<std::uint64_t>();
    req.imm = r.get<std::uint32_t>();
    req.opcode = r.get<Opcode>();
    req.flags = r.get<SendFlags>();
    req.remote_backend = r.get<BackendKind>();
    get_segments(r, req, lists);
    return req;
}

RecvRequest get_recv(Reader& r, std::deque<std::vector<LocalSegment>>& lists) {
    RecvRequest req;
    req.id = r.get<std::uint64_t>();
    get_segments(r, req, lists);
    return req;
}

void put_status(Writer& w, const PostStatus& st) {
    w.put(st.code()).put(st.index()).put_string(st.reason());
}

// PostStatus carries a reason of static storage: the peer's text is kept here for the rest of the run.
const char* intern(std::string text) {
    static std::mutex mu;
    static std::set<std::string> texts;
    std::lock_guard lock(mu);
    return texts.insert(std::move(text)).first->c_str();
}

PostStatus get_status(Reader& r) {
    auto code = r.get<PostStatus::Code>();
    auto index = r.get<std::uint32_t>();
    const char* reason = intern(r.get_string());
    switch (code) {
        case PostStatus::Code::ok: return PostStatus::ok();
        case PostStatus::Code::queue_full: return PostStatus::queue_full(index);
        case PostStatus::Code::invalid: return PostStatus::invalid(index, reason);
        case PostStatus::Code::not_connected: return PostStatus::not_connected(reason);
    }
    return PostStatus::invalid(index, reason);
}

void put_caps(Writer& w, const Capabilities& c) {
    w.put(c.kind).put_string(c.backend).put_string(c.device).put_string(c.profile);
    w.put(c.features).put(c.max_qp_wr).put(c.max_sge).put(c.max_inline).put(c.max_cqe);
    w.put(c.max_msg_size).put(c.max_mr_size).put(c.max_private_data);
}

Capabilities get_caps(Reader& r) {
    Capabilities c;
    c.kind = r.get<BackendKind>();
    c.backend = r.get_string();
    c.device = r.get_string();
    c.profile = r.get_string();
    c.features = r.get<std::uint32_t>();
    c.max_qp_wr = r.get<std::uint32_t>();
    c.max_sge = r.get<std::uint32_t>();
    c.max_inline = r.get<std::uint32_t>();
    c.max_cqe = r.get<std::uint32_t>();
    c.max_msg_size = r.get<std::uint64_t>();
    c.max_mr_size = r.get<std::uint64_t>();
    c.max_private_data = r.get<std::uint32_t>();
    return c;
}

// ---- The peer process

class Agent {
public:
    ~Agent() {
        // Children before parents, as the handles' owners would release them.
        mrs_.clear();
        qps_.clear();
        cqs_.clear();
        domains_.clear();
    }

    // Runs one command; the answer is ready to send.
    Writer handle(std::span<const std::byte> message) {
        Writer out;
        try {
            Reader r(message);
            out.put(std::uint8_t{0});
            run(r.get<Op>(), r, out);
        } catch (const Error& e) {
            out = Writer();
            put_error(out, e.code(), e.message(), e.backend(), e.object());
        } catch (const std::exception& e) {
            out = Writer();
            put_error(out, make_error_code(Errc::internal), e.what(), {}, peer_object);
        }
        return out;
    }

    // Moves every CQ's completions into its queue, so providers that progress only inside CQ calls keep
    // going while the other process is busy.
    void progress() {
        for (auto& [id, entry] : cqs_) drain(entry);
    }

private:
    struct CqEntry {
        CompletionQueue cq;
        std::deque<Completion> ready;
    };

    static void drain(CqEntry& e) {
        Completion wc[32];
        for (;;) {
            auto got = e.cq.poll(wc);
            e.ready.insert(e.ready.end(), got.begin(), got.end());
            if (got.size() < std::size(wc)) return;
        }
    }

    template <class Map>
    static auto& find(Map& map, std::uint32_t id, const char* what) {
        auto it = map.find(id);
        if (it == map.end()) {
            throw Error(Errc::internal, std::string("no ") + what + " #" + std::to_string(id) + " in the peer process",
                        {}, peer_object);
        }
        return it->second;
    }

    void run(Op op, Reader& r, Writer& out) {
        switch (op) {
            case Op::open: {
                Domain dom = weft::open(r.get_string());
                put_caps(out.put(next_id_), dom.capabilities());
                domains_.emplace(next_id_++, std::move(dom));
                return;
            }
            case Op::register_memory: {
                Domain& dom = find(domains_, r.get<std::uint32_t>(), "domain");
                auto addr = r.get<std::uint64_t>();
                auto length = r.get<std::uint64_t>();
                auto access = r.get<Access>();
                MemoryRegion mr = dom.register_memory(reinterpret_cast<void*>(addr), length, access);
                const detail::MrImpl& m = *mr.impl();
                out.put(next_id_).put(reinterpret_cast<std::uint64_t>(m.addr)).put(std::uint64_t{m.length});
                out.put(m.lkey).put(m.rkey).put(reinterpret_cast<std::uint64_t>(m.desc)).put(m.access).put(m.kind);
                mrs_.emplace(next_id_++, std::move(mr));
                return;
            }
            case Op::create_cq: {
                Domain& dom = find(domains_, r.get<std::uint32_t>(), "domain");
                CompletionQueue cq = dom.create_cq({.depth = r.get<std::uint32_t>()});
                out.put(next_id_).put(cq.depth());
                cqs_.emplace(next_id_++, CqEntry{std::move(cq), {}});
                return;
            }
            case Op::create_qp: {
                Domain& dom = find(domains_, r.get<std::uint32_t>(), "domain");
                QpOptions o;
                o.send_cq = find(cqs_, r.get<std::uint32_t>(), "CQ").cq;
                o.recv_cq = find(cqs_, r.get<std::uint32_t>(), "CQ").cq;
                o.max_send = r.get<std::uint32_t>();
                o.max_recv = r.get<std::uint32_t>();
                o.max_sge = r.get<std::uint32_t>();
                o.max_inline = r.get<std::uint32_t>();
                o.timeout = r.get<std::uint8_t>();
                o.retry_cnt = r.get<std::uint8_t>();
                o.rnr_retry = r.get<std::uint8_t>();
                o.min_rnr_timer = r.get<std::uint8_t>();
                QueuePair qp = dom.create_qp(o);
                out.put(next_id_).put(qp.qp_num()).put(qp.caps());
                qps_.emplace(next_id_++, std::move(qp));
                return;
            }
            case Op::post_send: {
                QueuePair& qp = find(qps_, r.get<std::uint32_t>(), "QP");
                std::deque<std::vector<LocalSegment>> lists;
                std::vector<SendRequest> batch(r.get<std::uint32_t>());
                for (auto& req : batch) req = get_send(r, lists);
                put_status(out, qp.post_send(batch));
                return;
            }
            case Op::post_recv: {
                QueuePair& qp = find(qps_, r.get<std::uint32_t>(), "QP");
                std::deque<std::vector<LocalSegment>> lists;
                std::vector<RecvRequest> batch(r.get<std::uint32_t>());
                for (auto& req : batch) req = get_recv(r, lists);
                put_status(out, qp.post_recv(batch));
                return;
            }
            case Op::address: {
                out.put_bytes(find(qps_, r.get<std::uint32_t>(), "QP").address());
                return;
            }
            case Op::connect: {
                QueuePair& qp = find(qps_, r.get<std::uint32_t>(), "QP");
                qp.connect(r.get_bytes());
                return;
            }
            case Op::connect_to: {
                QueuePair& qp = find(qps_, r.get<std::uint32_t>(), "QP");
                auto where = r.get_string();
                const auto timeout = std::chrono::milliseconds(r.get<std::int64_t>());
                const auto data = r.get_bytes();
                out.put_bytes(weft::connect(qp, where, timeout, data));
                return;
            }
            case Op::state: {
                out.put(find(qps_, r.get<std::uint32_t>(), "QP").state());
                return;
            }
            case Op::disconnect: {
                find(qps_, r.get<std::uint32_t>(), "QP").disconnect();
                return;
            }
            case Op::to_error: {
                find(qps_, r.get<std::uint32_t>(), "QP").to_error();
                return;
            }
            case Op::next_event: {
                const std::optional<AsyncEvent> e = find(domains_, r.get<std::uint32_t>(), "domain").next_event();
                out.put(std::uint8_t{e.has_value()});
                if (e) out.put(e->type).put(e->qp_num).put(e->srq_num).put_string(e->what);
                return;
            }
            case Op::poll: {
                CqEntry& e = find(cqs_, r.get<std::uint32_t>(), "CQ");
                auto want = r.get<std::uint32_t>();
                drain(e);
                auto n = static_cast<std::uint32_t>(std::min<std::size_t>(want, e.ready.size()));
                out.put(n);
                for (std::uint32_t i = 0; i < n; ++i) {
                    out.put(e.ready.front());
                    e.ready.pop_front();
                }
                return;
            }
            case Op::wait: {
                CqEntry& e = find(cqs_, r.get<std::uint32_t>(), "CQ");
                auto timeout = std::chrono::nanoseconds(r.get<std::int64_t>());
                out.put(!e.ready.empty() || e.cq.wait(timeout));
                return;
            }
            case Op::destroy_mr: mrs_.erase(r.get<std::uint32_t>()); return;
            case Op::destroy_cq: cqs_.erase(r.get<std::uint32_t>()); return;
            case Op::destroy_qp: qps_.erase(r.get<std::uint32_t>()); return;
            case Op::destroy_domain: domains_.erase(r.get<std::uint32_t>()); return;
        }
        throw Error(Errc::internal, "unknown command " + std::to_string(static_cast<int>(op)), {}, peer_object);
    }

    std::uint32_t next_id_ = 1;
    std::map<std::uint32_t, Domain> domains_;
    std::map<std::uint32_t, CqEntry> cqs_;
    std::map<std::uint32_t, QueuePair> qps_;
    std::map<std::uint32_t, MemoryRegion> mrs_;
};

// The peer's main loop: answers commands until the socket closes, polling its CQs while none comes.
int serve(int fd) {
    try {
        Agent agent;
        std::vector<std::byte> in(max_message);
        for (;;) {
            pollfd p{fd, POLLIN, 0};
            const timespec idle{0, idle_poll_ns};
            int n = ::ppoll(&p, 1, &idle, nullptr);
            if (n < 0 && errno != EINTR) return 1;
            if (n <= 0) {
                agent.progress();
                continue;
            }
            ssize_t len = ::recv(fd, in.data(), in.size(), MSG_TRUNC);
            if (len == 0) return 0;  // the suite closed the socket: done
            if (len < 0) {
                if (errno == EINTR) continue;
                return 1;
            }
            Writer answer;
            if (static_cast<std::size_t>(len) > in.size()) {
                put_error(answer, make_error_code(Errc::internal), "a command longer than the peer's buffer", {},
                          peer_object);
            } else {
                answer = agent.handle(std::span<const std::byte>(in.data(), static_cast<std::size_t>(len)));
            }
            if (::send(fd, answer.bytes().data(), answer.bytes().size(), MSG_NOSIGNAL) < 0) return 1;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "weft-conformance peer: %s\n", e.what());
        return 1;
    }
}

// ---- The suite's side: one command at a time

[[noreturn]] void unreachable(const std::string& why) {
    throw Error(Errc::internal, "the peer process cannot be reached: " + why, {}, peer_object);
}

// Sends `command` and returns the answer's results; rethrows the peer's weft::Error. A peer that does not
// answer within `answer_patience` plus the command's own `timeout` is killed (a hung peer would otherwise
// hang the suite).
std::vector<std::byte> call(const Writer& command, std::chrono::nanoseconds timeout = {}) {
    State& s = state();
    std::lock_guard lock(s.call_mu);
    if (!s.gone.empty()) unreachable(s.gone);
    auto fail = [&](std::string why) {
        s.gone = std::move(why);
        std::fprintf(stderr, "weft-conformance: the peer process cannot be reached: %s\n", s.gone.c_str());
        unreachable(s.gone);
    };
    if (::send(s.fd, command.bytes().data(), command.bytes().size(), MSG_NOSIGNAL) < 0) {
        if (errno == EMSGSIZE) {
            throw Error(Errc::invalid_argument, "a command of " + std::to_string(command.bytes().size()) +
                        " bytes is too long for the socket to the peer process", {}, peer_object);
        }
        fail(std::string("send: ") + std::strerror(errno));
    }
    const auto patience = std::chrono::ceil<std::chrono::milliseconds>(
        answer_patience + std::clamp<std::chrono::nanoseconds>(timeout, {}, std::chrono::hours(24)));
    const auto deadline = std::chrono::steady_clock::now() + patience;
    for (;;) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd p{s.fd, POLLIN, 0};
        const int n = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count())));
        if (n > 0) break;
        if (n < 0 && errno != EINTR) fail(std::string("poll: ") + std::strerror(errno));
        if (n == 0) {
            ::kill(s.child, SIGKILL);
            fail("no answer within " + std::to_string(patience.count()) + " ms; killed it");
        }
    }
    ssize_t len;
    do {
        len = ::recv(s.fd, s.answer.data(), s.answer.size(), MSG_TRUNC);
    } while (len < 0 && errno == EINTR);
    if (len < 0) fail(std::string("recv: ") + std::strerror(errno));
    if (len == 0) fail("it closed the socket (it exited or crashed; its status is reported at the end)");
    if (static_cast<std::size_t>(len) > s.answer.size()) fail("an answer longer than the buffer");
    Reader r(std::span<const std::byte>(s.answer.data(), static_cast<std::size_t>(len)));
    if (r.get<std::uint8_t>() != 0) throw_error(r);
    return {s.answer.begin() + 1, s.answer.begin() + len};
}

// Whether the peer was lost (and that was reported already).
bool peer_lost() {
    State& s = state();
    std::lock_guard lock(s.call_mu);
    return !s.gone.empty();
}

// For destructors: the command is sent, and a failure is ignored (the peer may be gone already).
void destroy(Op op, std::uint32_t id) noexcept {
    try {
        call(Writer().put(op).put(id));
    } catch (...) {
    }
}

// ---- Proxies

class ProxyCq final : public detail::CqImpl {
public:
    ProxyCq(std::uint32_t id, std::uint32_t depth, std::string backend)
        : id_(id), depth_(depth), backend_(std::move(backend)) {}
    ~ProxyCq() override { destroy(Op::destroy_cq, id_); }

    std::size_t poll(std::span<Completion> out) noexcept override {
        try {
            auto want = static_cast<std::uint32_t>(std::min<std::size_t>(out.size(), 1024));
            auto answer = call(Writer().put(Op::poll).put(id_).put(want));
            Reader r(answer);
            auto n = std::min<std::size_t>(r.get<std::uint32_t>(), want);
            for (std::size_t i = 0; i < n; ++i) out[i] = r.get<Completion>();
            return n;
        } catch (const std::exception& e) {
            // The case waiting on this CQ times out; say why (a lost peer was reported when it was lost).
            if (!peer_lost()) {
                std::fprintf(stderr, "weft-conformance: poll of CQ #%u in the peer process: %s\n", id_, e.what());
            }
            return 0;
        }
    }
    bool wait(std::chrono::nanoseconds timeout) override {
        auto answer =
            call(Writer().put(Op::wait).put(id_).put(static_cast<std::int64_t>(timeout.count())), timeout);
        return Reader(answer).get<bool>();
    }
    int fd() override {
        throw Error(Errc::not_supported,
                    "a CQ in the peer process has no descriptor this process can poll (two-process conformance "
                    "mode); poll() or wait() on it instead",
                    backend_, "CompletionQueue::fd");
    }
    std::uint32_t depth() const noexcept override { return depth_; }
    std::uint32_t id() const noexcept { return id_; }

private:
    std::uint32_t id_;
    std::uint32_t depth_;
    std::string backend_;
};

class ProxyQp final : public detail::QpImpl {
public:
    ProxyQp(std::uint32_t id, std::shared_ptr<detail::CqImpl> send_cq, std::shared_ptr<detail::CqImpl> recv_cq)
        : id_(id), send_cq_(std::move(send_cq)), recv_cq_(std::move(recv_cq)) {}
    ~ProxyQp() override { destroy(Op::destroy_qp, id_); }

    PostStatus post_send(std::span<const SendRequest> batch) noexcept override { return post(Op::post_send, batch); }
    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept override { return post(Op::post_recv, batch); }
    std::vector<std::byte> address() const override {
        auto answer = call(Writer().put(Op::address).put(id_));
        return Reader(answer).get_bytes();
    }
    void connect(std::span<const std::byte> peer) override { call(Writer().put(Op::connect).put(id_).put_bytes(peer)); }
    void disconnect() override { call(Writer().put(Op::disconnect).put(id_)); }
    void to_error() override { call(Writer().put(Op::to_error).put(id_)); }
    QpState state() const noexcept override {
        try {
            auto answer = call(Writer().put(Op::state).put(id_));
            return Reader(answer).get<QpState>();
        } catch (const std::exception& e) {
            if (!peer_lost()) {
                std::fprintf(stderr, "weft-conformance: state of QP #%u in the peer process: %s\n", id_, e.what());
            }
            return QpState::error;
        }
    }
    std::uint32_t id() const noexcept { return id_; }

private:
    template <class Request>
    PostStatus post(Op op, std::span<const Request> batch) const noexcept {
        try {
            Writer w;
            w.put(op).put(id_).put(static_cast<std::uint32_t>(batch.size()));
            for (const auto& req : batch) put_request(w, req);
            auto answer = call(w);
            Reader r(answer);
            return get_status(r);
        } catch (const Error& e) {
            return PostStatus::not_connected(intern(e.what()));
        } catch (...) {
            return PostStatus::not_connected("the peer process could not be asked");
        }
    }

    std::uint32_t id_;
    std::shared_ptr<detail::CqImpl> send_cq_;  // a QP keeps its CQs, as the backends' QPs do
    std::shared_ptr<detail::CqImpl> recv_cq_;
};

class ProxyMr final : public detail::MrImpl {
public:
    explicit ProxyMr(std::uint32_t id) : id_(id) {}
    ~ProxyMr() override { destroy(Op::destroy_mr, id_); }

private:
    std::uint32_t id_;
};

bool in_arena(const void* addr, std::size_t length) {
    const auto* p = static_cast<const std::byte*>(addr);
    const std::byte* base = state().arena;
    return base != nullptr && p >= base && length <= arena_bytes && p <= base + arena_bytes - length;
}

class ProxyDomain final : public detail::DomainImpl {
public:
    ProxyDomain(std::uint32_t id, Capabilities c, Config cfg) : id_(id) {
        caps = std::move(c);
        config = std::move(cfg);
    }
    ~ProxyDomain() override { destroy(Op::destroy_domain, id_); }

    bool next_event(AsyncEvent& out) override {
        auto answer = call(Writer().put(Op::next_event).put(id_));
        Reader r(answer);
        if (r.get<std::uint8_t>() == 0) return false;
        out.type = r.get<EventType>();
        out.qp_num = r.get<std::uint32_t>();
        out.srq_num = r.get<std::uint32_t>();
        out.what = intern(r.get_string());
        return true;
    }

    std::unique_ptr<detail::MrImpl> register_memory(void* addr, std::size_t length, Access access) override {
        if (!in_arena(addr, length)) {
            throw Error(Errc::invalid_argument,
                        "the memory is not in the arena shared with the peer process, so the peer would register a "
                        "copy of it; take a domain's memory from weft::test::Side::memory()",
                        caps.backend, "register_memory");
        }
        auto answer = call(Writer().put(Op::register_memory).put(id_).put(reinterpret_cast<std::uint64_t>(addr))
                               .put(std::uint64_t{length}).put(access));
        Reader r(answer);
        auto mr = std::make_unique<ProxyMr>(r.get<std::uint32_t>());
        mr->addr = reinterpret_cast<void*>(r.get<std::uint64_t>());
        mr->length = r.get<std::uint64_t>();
        mr->lkey = r.get<std::uint32_t>();
        mr->rkey = r.get<std::uint64_t>();
        mr->desc = reinterpret_cast<void*>(r.get<std::uint64_t>());  // the peer's: used only there
        mr->access = r.get<Access>();
        mr->kind = r.get<BackendKind>();
        return mr;
    }

    std::shared_ptr<detail::CqImpl> create_cq(const CqOptions& options) override {
        auto answer = call(Writer().put(Op::create_cq).put(id_).put(options.depth));
        Reader r(answer);
        auto id = r.get<std::uint32_t>();
        return std::make_shared<ProxyCq>(id, r.get<std::uint32_t>(), caps.backend);
    }

    std::unique_ptr<detail::QpImpl> create_qp(const detail::QpSetup& setup) override {
        auto* send_cq = dynamic_cast<ProxyCq*>(setup.send_cq.get());
        auto* recv_cq = dynamic_cast<ProxyCq*>(setup.recv_cq.get());
        if (!send_cq || !recv_cq) {
            throw Error(Errc::invalid_argument, "a QP in the peer process needs CQs of the peer process",
                        caps.backend, "create_qp");
        }
        const QpOptions& o = setup.options;
        Writer w;
        w.put(Op::create_qp).put(id_).put(send_cq->id()).put(recv_cq->id());
        w.put(o.max_send).put(o.max_recv).put(o.max_sge).put(o.max_inline);
        w.put(o.timeout).put(o.retry_cnt).put(o.rnr_retry).put(o.min_rnr_timer);
        auto answer = call(w);
        Reader r(answer);
        auto qp = std::make_unique<ProxyQp>(r.get<std::uint32_t>(), setup.send_cq, setup.recv_cq);
        qp->qp_num = r.get<std::uint32_t>();
        qp->caps = r.get<QpCaps>();
        return qp;
    }

    std::unique_ptr<detail::ListenerImpl> listen(const detail::HostPort&) override {
        throw Error(Errc::not_supported,
                    "listening on a domain of the peer process is not forwarded (two-process conformance mode); "
                    "listen on side a",
                    caps.backend, "listen");
    }

    std::vector<std::byte> connect_to(detail::QpImpl& qp, const detail::HostPort& where,
                                      std::chrono::milliseconds timeout,
                                      std::span<const std::byte> private_data) override {
        auto* proxy = dynamic_cast<ProxyQp*>(&qp);
        if (!proxy) throw Error(Errc::invalid_argument, "the QP is not in the peer process", caps.backend, "connect");
        auto answer = call(Writer().put(Op::connect_to).put(proxy->id()).put_string(where.text())
                               .put(static_cast<std::int64_t>(timeout.count())).put_bytes(private_data),
                           timeout);
        return Reader(answer).get_bytes();
    }

private:
    std::uint32_t id_;
};

}  // namespace

// ---- Public

int start(int argc, char** argv, const std::string& config) {
    std::string mode;
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--peer=", 7) == 0) mode = argv[i] + 7;
    }
    if (mode.empty()) {
        if (const char* env = std::getenv("WEFT_CONFORMANCE_PEER"); env) mode = env;
    }
    if (mode.empty() || mode == "none") return 0;
    if (mode != "process") {
        std::fprintf(stderr, "weft-conformance: unknown peer mode '%s'; accepted: --peer=process (side b in a "
                             "second process) or --peer=none (one process, the default)\n", mode.c_str());
        return 2;
    }
    try {
        if (Config::parse(config).backend() == "sim") {
            std::fprintf(stderr, "weft-conformance: '%s' cannot run in two processes: the simulator's fabric lives "
                                 "inside one process; drop --peer=process\n", config.c_str());
            return 2;
        }
    } catch (const Error& e) {
        std::fprintf(stderr, "weft-conformance: %s\n", e.what());
        return 2;
    }

    State& s = state();
    void* arena = ::mmap(nullptr, arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED) {
        std::fprintf(stderr, "weft-conformance: mmap of the shared arena: %s\n", std::strerror(errno));
        return 2;
    }
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        std::fprintf(stderr, "weft-conformance: socketpair: %s\n", std::strerror(errno));
        return 2;
    }
    for (int fd : sv) {
        int size = static_cast<int>(max_message) * 2;
        ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
        ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    }
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) {
        std::fprintf(stderr, "weft-conformance: fork: %s\n", std::strerror(errno));
        return 2;
    }
    if (pid == 0) {
        ::close(sv[0]);
        ::_exit(serve(sv[1]));
    }
    ::close(sv[1]);
    s.fd = sv[0];
    s.child = pid;
    s.arena = static_cast<std::byte*>(arena);
    std::printf("weft-conformance: two processes: side b of every pair lives in peer process %d\n",
                static_cast<int>(pid));
    std::fflush(stdout);
    return 0;
}

int finish() {
    State& s = state();
    if (s.child < 0) return 0;
    ::close(s.fd);
    s.fd = -1;
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    pid_t got = 0;
    while ((got = ::waitpid(s.child, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (got == 0) {
        std::fprintf(stderr, "weft-conformance: the peer process %d did not exit within 10 s of the end; killed\n",
                     static_cast<int>(s.child));
        ::kill(s.child, SIGKILL);
        ::waitpid(s.child, &status, 0);
        return 1;
    }
    s.child = -1;
    if (WIFSIGNALED(status)) {
        std::fprintf(stderr, "weft-conformance: the peer process died of signal %d (%s)\n", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        return 1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "weft-conformance: the peer process exited with status %d\n", WEXITSTATUS(status));
        return 1;
    }
    return 0;
}

bool active() { return state().child >= 0; }

Domain open(const std::string& config) {
    auto answer = call(Writer().put(Op::open).put_string(config));
    Reader r(answer);
    auto id = r.get<std::uint32_t>();
    return Domain(std::make_shared<ProxyDomain>(id, get_caps(r), Config::parse(config)));
}

bool is_remote(const Domain& dom) { return dynamic_cast<const ProxyDomain*>(dom.impl()) != nullptr; }
bool is_remote(const CompletionQueue& cq) { return dynamic_cast<const ProxyCq*>(cq.impl()) != nullptr; }

// ---- Block

Block::Block(std::size_t bytes) {
    State& s = state();
    if (!s.arena) throw Error(Errc::invalid_state, "no shared arena: the suite runs in one process", {}, peer_object);
    const std::size_t need = std::max<std::size_t>(1, (bytes + slot_bytes - 1) / slot_bytes);
    std::lock_guard lock(s.arena_mu);
    for (std::size_t first = 0; first + need <= slot_count; ++first) {
        bool free = true;
        for (std::size_t i = first; i < first + need && free; ++i) free = !s.used[i];
        if (!free) continue;
        for (std::size_t i = first; i < first + need; ++i) s.used[i] = true;
        bytes_ = std::span<std::byte>(s.arena + first * slot_bytes, bytes);
        std::memset(bytes_.data(), 0, bytes_.size());
        return;
    }
    throw Error(Errc::resource_exhausted,
                "the arena shared with the peer process has no " + std::to_string(need) + " free slots of " +
                    std::to_string(slot_bytes) + " bytes (of " + std::to_string(slot_count) + ")",
                {}, peer_object);
}

Block::Block(Block&& other) noexcept : bytes_(std::exchange(other.bytes_, {})) {}

Block& Block::operator=(Block&& other) noexcept {
    if (this != &other) {
        release();
        bytes_ = std::exchange(other.bytes_, {});
    }
    return *this;
}

Block::~Block() { release(); }

void Block::release() noexcept {
    if (bytes_.data() == nullptr) return;
    State& s = state();
    const std::size_t first = static_cast<std::size_t>(bytes_.data() - s.arena) / slot_bytes;
    const std::size_t need = std::max<std::size_t>(1, (bytes_.size() + slot_bytes - 1) / slot_bytes);
    std::lock_guard lock(s.arena_mu);
    for (std::size_t i = first; i < first + need; ++i) s.used[i] = false;
    bytes_ = {};
}

}  // namespace weft::test::peer
