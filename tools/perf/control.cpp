// weft-perf's control messages: encoding, checked decoding, and the control QP.
#include "control.hpp"

#include <cstring>

namespace weft_perf {
namespace {

constexpr char magic[8] = {'w', 'e', 'f', 't', 'p', 'e', 'r', 'f'};
constexpr std::uint32_t max_text = 200;
constexpr std::uint64_t max_area = 1ull << 30;
constexpr std::uint32_t max_depth_accepted = 1u << 16;

class Writer {
public:
    explicit Writer(std::span<std::byte, message_size> out) : out_(out) { std::memset(out_.data(), 0, out_.size()); }
    void u8(std::uint8_t v) { put(&v, 1); }
    void u32(std::uint32_t v) {
        std::byte b[4];
        for (int k = 0; k < 4; ++k) b[k] = static_cast<std::byte>(v >> (8 * k));
        put(b, 4);
    }
    void u64(std::uint64_t v) {
        u32(static_cast<std::uint32_t>(v));
        u32(static_cast<std::uint32_t>(v >> 32));
    }
    void bytes(const void* p, std::size_t n) { put(p, n); }
    void text(std::string_view s) {
        s = s.substr(0, max_text);
        u32(static_cast<std::uint32_t>(s.size()));
        put(s.data(), s.size());
    }

private:
    void put(const void* p, std::size_t n) {
        if (at_ + n > out_.size()) fail("control message too long (internal)");
        std::memcpy(out_.data() + at_, p, n);
        at_ += n;
    }
    std::span<std::byte, message_size> out_;
    std::size_t at_ = 0;
};

class Reader {
public:
    explicit Reader(std::span<const std::byte> in) : in_(in) {}
    std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
    std::uint32_t u32() {
        const std::byte* b = take(4);
        std::uint32_t v = 0;
        for (int k = 0; k < 4; ++k) v |= static_cast<std::uint32_t>(b[k]) << (8 * k);
        return v;
    }
    std::uint64_t u64() {
        std::uint64_t lo = u32();
        return lo | (std::uint64_t{u32()} << 32);
    }
    std::span<const std::byte> bytes(std::size_t n) { return {take(n), n}; }
    std::string text() {
        const std::uint32_t n = u32();
        if (n > max_text) fail("control message: a text of " + std::to_string(n) + " bytes (at most " + std::to_string(max_text) + ")");
        const std::byte* p = take(n);
        return std::string(reinterpret_cast<const char*>(p), n);
    }

private:
    const std::byte* take(std::size_t n) {
        if (at_ + n > in_.size()) fail("control message: truncated (" + std::to_string(in_.size()) + " bytes)");
        const std::byte* p = in_.data() + at_;
        at_ += n;
        return p;
    }
    std::span<const std::byte> in_;
    std::size_t at_ = 0;
};

void put_region(Writer& w, const weft::RemoteRegion& r) {
    auto e = r.encode();
    w.bytes(e.data(), e.size());
}

}  // namespace

std::string_view name(Kind k) noexcept {
    switch (k) {
        case Kind::hello: return "hello";
        case Kind::hello_reply: return "hello_reply";
        case Kind::begin: return "begin";
        case Kind::ready: return "ready";
        case Kind::refused: return "refused";
        case Kind::end: return "end";
        case Kind::result: return "result";
        case Kind::quit: return "quit";
        case Kind::bye: return "bye";
        case Kind::abort: return "abort";
    }
    return "?";
}

void encode(const Message& m, std::span<std::byte, message_size> out) {
    Writer w(out);
    w.bytes(magic, sizeof magic);
    w.u32(protocol_version);
    w.u32(static_cast<std::uint32_t>(m.kind));
    switch (m.kind) {
        case Kind::hello:
            w.u64(m.setup.area);
            w.u32(m.setup.max_depth);
            w.u32(m.setup.inline_size);
            w.u8(m.setup.atomics ? 1 : 0);
            w.u32(m.features);
            put_region(w, m.region);
            break;
        case Kind::hello_reply:
            w.u32(m.features);
            put_region(w, m.region);
            w.text(m.text);
            break;
        case Kind::begin:
            w.u8(static_cast<std::uint8_t>(m.spec.op));
            w.u8(static_cast<std::uint8_t>(m.spec.test));
            w.u8(m.spec.check ? 1 : 0);
            for (std::uint32_t v : {m.spec.size, m.spec.iters, m.spec.warmup, m.spec.depth, m.spec.cq_mod, m.spec.batch,
                                    m.spec.inline_size, m.spec.rx_depth}) {
                w.u32(v);
            }
            break;
        case Kind::end: w.u32(m.left); break;
        case Kind::result:
            w.u32(m.left);
            w.text(m.text);
            break;
        case Kind::refused:
        case Kind::abort: w.text(m.text); break;
        case Kind::ready:
        case Kind::quit:
        case Kind::bye: break;
    }
}

Message decode(std::span<const std::byte> in) {
    Reader r(in);
    auto mg = r.bytes(sizeof magic);
    if (std::memcmp(mg.data(), magic, sizeof magic) != 0) {
        fail("the peer's control message does not start with \"weftperf\" (is the peer weft-perf?)");
    }
    if (std::uint32_t v = r.u32(); v != protocol_version) {
        fail("the peer speaks control protocol " + std::to_string(v) + ", this weft-perf speaks " +
             std::to_string(protocol_version) + " (use the same version on both sides)");
    }
    Message m;
    const std::uint32_t kind = r.u32();
    if (kind < static_cast<std::uint32_t>(Kind::hello) || kind > static_cast<std::uint32_t>(Kind::abort)) {
        fail("control message of unknown kind " + std::to_string(kind));
    }
    m.kind = static_cast<Kind>(kind);
    switch (m.kind) {
        case Kind::hello:
            m.setup.area = r.u64();
            m.setup.max_depth = r.u32();
            m.setup.inline_size = r.u32();
            m.setup.atomics = r.u8() != 0;
            m.features = r.u32();
            m.region = weft::RemoteRegion::decode(r.bytes(weft::RemoteRegion::encoded_size));
            if (m.setup.area < 64 || m.setup.area > max_area || m.setup.max_depth == 0 ||
                m.setup.max_depth > max_depth_accepted || m.setup.inline_size > (1u << 16)) {
                fail("the client's hello asks for area " + std::to_string(m.setup.area) + ", depth " +
                     std::to_string(m.setup.max_depth) + ", inline " + std::to_string(m.setup.inline_size) +
                     " (accepted: area 64 B..1 GiB, depth 1..65536, inline 0..65536)");
            }
            break;
        case Kind::hello_reply:
            m.features = r.u32();
            m.region = weft::RemoteRegion::decode(r.bytes(weft::RemoteRegion::encoded_size));
            m.text = r.text();
            break;
        case Kind::begin: {
            const std::uint8_t op = r.u8(), test = r.u8(), check = r.u8();
            if (op > static_cast<std::uint8_t>(Op::compare_swap) || test > static_cast<std::uint8_t>(Test::bw) || check > 1) {
                fail("the client's begin names op " + std::to_string(op) + ", test " + std::to_string(test));
            }
            m.spec.op = static_cast<Op>(op);
            m.spec.test = static_cast<Test>(test);
            m.spec.check = check != 0;
            for (std::uint32_t* v : {&m.spec.size, &m.spec.iters, &m.spec.warmup, &m.spec.depth, &m.spec.cq_mod,
                                     &m.spec.batch, &m.spec.inline_size, &m.spec.rx_depth}) {
                *v = r.u32();
            }
            break;
        }
        case Kind::end: m.left = r.u32(); break;
        case Kind::result:
            m.left = r.u32();
            m.text = r.text();
            break;
        case Kind::refused:
        case Kind::abort: m.text = r.text(); break;
        case Kind::ready:
        case Kind::quit:
        case Kind::bye: break;
    }
    if (m.left > max_depth_accepted) fail("the peer says it left " + std::to_string(m.left) + " receives posted");
    return m;
}

std::string check_spec(const Spec& s, const Setup& setup) {
    if (s.size == 0 && !is_atomic(s.op)) return "size 0: sizes are 1 byte or more";
    if (s.size > setup.area) {
        return "size " + std::to_string(s.size) + " exceeds the area of " + std::to_string(setup.area) + " bytes";
    }
    if (is_atomic(s.op) && s.size != 8) return "atomics move 8 bytes";
    if (s.iters == 0) return "iterations must be 1 or more";
    if (s.depth == 0 || s.depth > setup.max_depth) {
        return "tx depth " + std::to_string(s.depth) + " outside 1.." + std::to_string(setup.max_depth);
    }
    if (s.rx_depth == 0 || s.rx_depth > setup.max_depth) {
        return "rx depth " + std::to_string(s.rx_depth) + " outside 1.." + std::to_string(setup.max_depth);
    }
    if (s.batch == 0 || s.batch > s.depth) return "batch " + std::to_string(s.batch) + " outside 1..tx depth";
    if (s.cq_mod == 0 || s.cq_mod + s.batch - 1 > s.depth) {
        return "cq-mod " + std::to_string(s.cq_mod) + " with batch " + std::to_string(s.batch) +
               ": a signaled request is needed in every tx-depth window (cq-mod + batch - 1 <= tx depth " +
               std::to_string(s.depth) + ")";
    }
    if (s.inline_size > setup.inline_size) {
        return "inline " + std::to_string(s.inline_size) + " exceeds the QP's " + std::to_string(setup.inline_size);
    }
    return {};
}

// ---- Control

Control::Control(weft::Domain& dom, const char* role) : role_(role) {
    cq_ = dom.create_cq({.depth = 32});
    qp = dom.create_qp({.send_cq = cq_, .recv_cq = cq_, .max_send = 4, .max_recv = receives});
    mem_.assign(std::size_t{receives + 1} * message_size, std::byte{0});
    mr_ = dom.register_memory(mem_, weft::Access::local_write);
    for (std::uint32_t k = 0; k < receives; ++k) repost(k);
}

Control::~Control() = default;

void Control::repost(std::uint32_t slot) {
    const weft::RecvRequest r = weft::recv(slot, mr_.slice(std::size_t{slot + 1} * message_size, message_size));
    if (auto st = qp.post_recv(std::span(&r, 1)); !st) fail(std::string(role_) + ": control post_recv: " + st.reason());
}

void Control::poll_once() {
    weft::Completion wc[1];
    for (const auto& c : cq_.poll(wc)) {
        if (!c.ok()) {
            fail(std::string(role_) + ": the control connection failed: " + std::string(weft::to_string(c.status)) +
                 " (" + std::string(weft::describe(c.status)) + "); is the peer still running?");
        }
        if (!c.is_recv()) {
            send_done_ = true;
            continue;
        }
        const auto slot = static_cast<std::uint32_t>(c.id);
        if (slot >= receives) fail(std::string(role_) + ": control receive with unknown id");
        const std::byte* p = mem_.data() + std::size_t{slot + 1} * message_size;
        Message m = decode(std::span(p, std::min<std::uint32_t>(c.byte_len, message_size)));
        repost(slot);
        arrived_.push_back(std::move(m));
    }
}

void Control::send(const Message& m) {
    encode(m, std::span<std::byte, message_size>(mem_.data(), message_size));
    const weft::SendRequest r = weft::send(0xc0, mr_.slice(0, message_size));
    send_done_ = false;
    if (auto st = qp.post_send(std::span(&r, 1)); !st) fail(std::string(role_) + ": control post_send: " + st.reason());
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned spins = 0; !send_done_; ++spins) {
        poll_once();
        if ((spins & 4095u) == 0 && std::chrono::steady_clock::now() - t0 > stall_limit) {
            fail(std::string(role_) + ": the control message '" + std::string(name(m.kind)) + "' did not complete in " +
                 std::to_string(stall_limit.count()) + " s");
        }
    }
}

std::optional<Message> Control::try_receive() {
    if (arrived_.empty()) poll_once();
    if (arrived_.empty()) return std::nullopt;
    Message m = std::move(arrived_.front());
    arrived_.pop_front();
    return m;
}

Message Control::receive(const char* what, std::chrono::seconds timeout) {
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned spins = 0;; ++spins) {
        if (auto m = try_receive()) {
            if (m->kind == Kind::abort) fail(std::string(role_) + ": the peer gave up: " + m->text);
            return *m;
        }
        if ((spins & 4095u) == 0 && std::chrono::steady_clock::now() - t0 > timeout) {
            fail(std::string(role_) + ": no " + what + " from the peer within " + std::to_string(timeout.count()) + " s");
        }
    }
}

}  // namespace weft_perf
