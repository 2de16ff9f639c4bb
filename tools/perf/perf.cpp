// weft-perf's engine outside the measuring loops: names, layout, memory, the requester's preparation
// and checks, and the responder.
#include "perf.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>

namespace weft_perf {

std::string_view name(Op op) noexcept {
    switch (op) {
        case Op::write: return "write";
        case Op::write_imm: return "write_imm";
        case Op::read: return "read";
        case Op::send: return "send";
        case Op::fetch_add: return "fetch_add";
        case Op::compare_swap: return "compare_swap";
    }
    return "?";
}

std::optional<Op> parse_op(std::string_view text) noexcept {
    for (Op op : all_ops) {
        if (text == name(op)) return op;
    }
    if (text == "write_with_imm") return Op::write_imm;
    if (text == "cas") return Op::compare_swap;
    if (text == "fadd") return Op::fetch_add;
    return std::nullopt;
}

std::string_view name(Test t) noexcept { return t == Test::lat ? "lat" : "bw"; }

std::optional<weft::Feature> feature_of(Op op) noexcept {
    switch (op) {
        case Op::write_imm: return weft::Feature::write_with_imm;
        case Op::read: return weft::Feature::read;
        case Op::fetch_add:
        case Op::compare_swap: return weft::Feature::atomics;
        default: return std::nullopt;
    }
}

std::string unsupported(Op op, const weft::Capabilities& caps) {
    auto f = feature_of(op);
    if (!f || caps.has(*f)) return {};
    return "not supported by this backend (" + caps.backend + " on " + caps.device + " lacks " +
           std::string(weft::to_string(*f)) + ")";
}

Layout layout_of(const Spec& s, std::uint64_t area) {
    Layout l;
    l.stride = std::max<std::uint32_t>(64, (s.size + 63u) & ~63u);
    if (s.test == Test::lat) {
        l.slots = 1;
        l.receives = 1;
        return l;
    }
    l.slots = static_cast<std::uint32_t>(std::clamp<std::uint64_t>(area / l.stride, 1, 4096));
    l.receives = std::min(l.slots, s.rx_depth);
    return l;
}

LatencyStats summarize(std::vector<double>& us) {
    LatencyStats st;
    if (us.empty()) return st;
    std::sort(us.begin(), us.end());
    const double n = static_cast<double>(us.size());
    st.min = us.front();
    st.max = us.back();
    st.typical = us[us.size() / 2];
    st.avg = std::accumulate(us.begin(), us.end(), 0.0) / n;
    double var = 0;
    for (double v : us) var += (v - st.avg) * (v - st.avg);
    st.stdev = std::sqrt(var / n);
    auto pct = [&](double p) { return us[std::min(us.size() - 1, static_cast<std::size_t>(std::ceil(p * n)) - 1)]; };
    st.p99 = pct(0.99);
    st.p999 = pct(0.999);
    return st;
}

void fail(std::string why, int code) { throw Failure{std::move(why), code}; }

// ---- Patterns

namespace {
inline std::uint8_t pattern_byte(std::uint8_t salt, std::uint32_t slot, std::uint32_t j) noexcept {
    return static_cast<std::uint8_t>((j * 131u) ^ (j >> 8) ^ (slot * 29u) ^ (slot >> 8) ^ salt);
}
}  // namespace

void fill_pattern(std::byte* p, std::uint32_t len, std::uint8_t salt, std::uint32_t slot) noexcept {
    for (std::uint32_t j = 0; j < len; ++j) p[j] = static_cast<std::byte>(pattern_byte(salt, slot, j));
}

long long pattern_mismatch(const std::byte* p, std::uint32_t len, std::uint8_t salt, std::uint32_t slot,
                           std::uint32_t from) noexcept {
    for (std::uint32_t j = 0; j < len; ++j) {
        if (p[j] != static_cast<std::byte>(pattern_byte(salt, slot, from + j))) return j;
    }
    return -1;
}

namespace {
// The pattern outside the stamps (the first min(size, 8) bytes, the last 8 when size >= 16).
long long stamped_mismatch(const std::byte* p, std::uint32_t size, std::uint8_t salt) noexcept {
    const std::uint32_t head = detail::stamp_width(size), tail = size >= 16 ? size - 8 : size;
    for (std::uint32_t j = head; j < tail; ++j) {
        if (p[j] != static_cast<std::byte>(pattern_byte(salt, 0, j))) return j;
    }
    return -1;
}

std::string describe_completion(const weft::Completion& c) {
    return std::string(weft::to_string(c.status)) + " (" + std::string(weft::describe(c.status)) + ") on request " +
           std::to_string(c.id) + ", opcode " + std::string(weft::to_string(c.opcode)) + ", vendor error " +
           std::to_string(c.vendor_err);
}
}  // namespace

// ---- Side

Side::Side(const char* who, weft::Domain domain, const Setup& s) : role(who), setup(s), dom(std::move(domain)) {
    const auto& caps = dom.capabilities();
    setup.atomics = setup.atomics && caps.has(weft::Feature::atomics);
    bytes_ = 2 * setup.area + 64 + 8 * std::size_t{setup.max_depth};
    bytes_ = (bytes_ + 4095) & ~std::size_t{4095};
    base_ = static_cast<std::byte*>(std::aligned_alloc(4096, bytes_));
    if (base_ == nullptr) fail(std::string(role) + ": cannot allocate " + std::to_string(bytes_) + " bytes");
    std::memset(base_, 0, bytes_);
    auto access = weft::Access::local_write | weft::Access::remote_write | weft::Access::remote_read;
    if (setup.atomics) access |= weft::Access::remote_atomic;
    cq = dom.create_cq({.depth = 2 * setup.max_depth + 64});
    mr = dom.register_memory(base_, bytes_, access);
}

Side::~Side() {
    qp = weft::QueuePair();
    mr = weft::MemoryRegion();
    std::free(base_);
}

void Side::make_qp() {
    qp = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = setup.max_depth, .max_recv = setup.max_depth,
                        .max_inline = setup.inline_size});
}

void Side::set_peer(const weft::RemoteRegion& peer) {
    if (peer.length() < bytes_) {
        fail(std::string(role) + ": the peer's region is " + std::to_string(peer.length()) + " bytes, expected " +
             std::to_string(bytes_) + " (is the peer a weft-perf of this version with the same --area and depths?)");
    }
    peer_ = peer;
}

// ---- Requester

void Requester::begin(const Spec& spec) {
    spec_ = spec;
    lay_ = layout_of(spec, s_.setup.area);
    sends_out_ = 0;
    progress_shown_ = false;
    progress_at_ = std::chrono::steady_clock::now();
    const std::uint32_t n = spec.size;
    for (std::uint32_t k = 0; k < lay_.slots; ++k) fill_pattern(s_.a() + std::uint64_t{k} * lay_.stride, n, client_salt, k);
    std::memset(s_.b(), 0, lay_.stride);
    std::memset(s_.results(), 0, 8 * std::size_t{s_.setup.max_depth});

    templates_.assign(lay_.slots, weft::SendRequest{});
    for (std::uint32_t k = 0; k < lay_.slots; ++k) {
        weft::SendRequest& r = templates_[k];
        const std::uint64_t off = std::uint64_t{k} * lay_.stride;
        r.num_sge = 1;
        r.sge = s_.a_slot(off, n);
        r.rkey = s_.peer_rkey();
        r.remote_addr = s_.peer_b_addr() + off;
        switch (spec.op) {
            case Op::write: r.opcode = weft::Opcode::write; break;
            case Op::write_imm: r.opcode = weft::Opcode::write_with_imm; break;
            case Op::read: r.opcode = weft::Opcode::read; break;
            case Op::send:
                r.opcode = weft::Opcode::send;
                r.rkey = 0;
                r.remote_addr = 0;
                break;
            case Op::fetch_add:
            case Op::compare_swap:
                r.opcode = spec.op == Op::fetch_add ? weft::Opcode::fetch_add : weft::Opcode::compare_swap;
                r.remote_addr = s_.peer_counter_addr();
                r.sge = s_.result_slot(0);
                break;
        }
    }
    results_.clear();
    for (std::uint32_t k = 0; k < std::max<std::uint32_t>(1, std::min(spec.depth, s_.setup.max_depth)); ++k) {
        results_.push_back(s_.result_slot(k));
    }
    batch_.assign(spec.batch, weft::SendRequest{});
    if (spec.test == Test::lat && consumes_receive(spec.op)) repost_receive(0);
}

void Requester::repost_receive(std::uint64_t id) {
    const weft::RecvRequest r = weft::recv(id, s_.b_slot(0, lay_.stride));
    if (auto st = s_.qp.post_recv(std::span(&r, 1)); !st) fail(std::string(s_.role) + ": post_recv: " + st.reason());
    ++s_.posted_receives;
}

std::string Requester::finish() {
    const std::uint32_t n = spec_.size;
    if (spec_.op == Op::read) {
        const std::uint64_t slots = std::min<std::uint64_t>(lay_.slots, spec_.total());
        for (std::uint32_t k = 0; k < slots; ++k) {
            const long long at = pattern_mismatch(s_.a() + std::uint64_t{k} * lay_.stride, n, server_salt, k);
            if (at >= 0) {
                return "read into slot " + std::to_string(k) + " holds a wrong byte at offset " + std::to_string(at) +
                       " (not the peer's pattern)";
            }
        }
    }
    if (is_atomic(spec_.op) && spec_.test == Test::bw) {
        const std::uint64_t total = spec_.total(), window = std::min<std::uint64_t>(total, results_.size());
        for (std::uint64_t id = total - window; id < total; ++id) {
            const std::uint64_t got = s_.results()[id % results_.size()];
            if (got != id) {
                return std::string(name(spec_.op)) + " " + std::to_string(id) + " returned " + std::to_string(got) +
                       ", expected " + std::to_string(id) + " (atomics of one QP execute in posting order)";
            }
        }
    }
    return {};
}

void Requester::show_progress(std::uint64_t done, std::uint64_t total, bool last) {
    progress_at_ = std::chrono::steady_clock::now();
    if (!last || progress_shown_) {
        std::fprintf(stderr, "\r%s: %llu/%llu (%3.0f%%)%s", label.c_str(), static_cast<unsigned long long>(done),
                     static_cast<unsigned long long>(total), total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
                     last ? "\n" : "");
        std::fflush(stderr);
        progress_shown_ = true;
    }
}

void Requester::error_completion(const weft::Completion& c, const char* what) {
    fail(std::string(s_.role) + ": error completion while waiting for " + what + ": " + describe_completion(c));
}

void Requester::stalled(const char* what) {
    fail(std::string(s_.role) + ": " + label + ": no completion for " + std::to_string(stall_limit.count()) +
         " s while waiting for " + what + " (" + std::to_string(sends_out_) + " requests outstanding, " +
         std::to_string(s_.posted_receives) + " receives posted, QP state " +
         std::string(weft::to_string(s_.qp.state())) + ")");
}

// ---- Responder

void Responder::begin(const Spec& spec) {
    spec_ = spec;
    lay_ = layout_of(spec, s_.setup.area);
    seen_ = 0;
    sends_out_ = 0;
    echo_pending_ = false;
    error_.clear();
    const std::uint32_t n = spec.size;
    for (std::uint32_t k = 0; k < lay_.slots; ++k) {
        std::byte* p = s_.b() + std::uint64_t{k} * lay_.stride;
        if (spec.op == Op::read) fill_pattern(p, n, server_salt, k);
        else std::memset(p, 0, lay_.stride);
    }
    *s_.counter() = 0;
    const bool ping_pong = spec.test == Test::lat && is_ping_pong(spec.op);
    done_ = !(ping_pong || (spec.test == Test::bw && consumes_receive(spec.op)));
    if (ping_pong) {
        fill_pattern(s_.a(), n, server_salt, 0);
        echo_ = weft::SendRequest{};
        echo_.num_sge = 1;
        echo_.sge = s_.a_slot(0, n);
        echo_.rkey = s_.peer_rkey();
        echo_.remote_addr = s_.peer_b_addr();
        echo_.opcode = spec.op == Op::send ? weft::Opcode::send
                       : spec.op == Op::write ? weft::Opcode::write
                                              : weft::Opcode::write_with_imm;
        echo_.flags = weft::SendFlags::signaled;
        if (spec.uses_inline()) echo_.flags = echo_.flags | weft::SendFlags::inline_data;
    }
    if (consumes_receive(spec.op)) {
        reposts_.clear();
        for (std::uint32_t k = 0; k < lay_.receives; ++k) {
            reposts_.push_back(weft::recv(k, s_.b_slot(std::uint64_t{k} * lay_.stride, lay_.stride)));
        }
        if (auto st = s_.qp.post_recv(reposts_); !st) fail(std::string(s_.role) + ": post_recv: " + st.reason());
        s_.posted_receives += lay_.receives;
        reposts_.clear();
        reposts_.reserve(64);
    }
}

void Responder::post_echo() {
    detail::put_stamp(s_.a(), spec_.size, seen_ + 1);
    echo_.id = seen_;
    echo_.imm = static_cast<std::uint32_t>(seen_);
    if (auto st = s_.qp.post_send(std::span(&echo_, 1)); !st) {
        fail(std::string(s_.role) + ": post_send of echo " + std::to_string(seen_) + ": " + st.reason());
    }
    ++sends_out_;
    echo_pending_ = false;
    if (++seen_ == spec_.total()) done_ = true;
}

void Responder::step() {
    weft::Completion wc[32];
    for (const auto& c : s_.cq.poll(wc)) {
        if (!c.ok()) error_completion(c);
        if (!c.is_recv()) {
            --sends_out_;
            continue;
        }
        --s_.posted_receives;
        if (done_) {
            fail(std::string(s_.role) + ": a " + std::to_string(c.byte_len) + "-byte " +
                 std::string(weft::to_string(c.opcode)) + " arrived after the test's last message");
        }
        on_message(spec_.test == Test::lat ? seen_ : seen_++, &c);
        if (spec_.test == Test::bw && seen_ == spec_.total()) done_ = true;
    }
    if (!reposts_.empty()) {
        if (auto st = s_.qp.post_recv(reposts_); !st) fail(std::string(s_.role) + ": post_recv: " + st.reason());
        s_.posted_receives += static_cast<std::uint32_t>(reposts_.size());
        reposts_.clear();
    }
    if (spec_.test == Test::lat && !done_) {
        if (spec_.op == Op::write && !echo_pending_) {
            const std::byte* rx = s_.b();
            const std::uint64_t want = seen_ + 1;
            if (detail::tail_is(rx, spec_.size, want) && detail::head_is(rx, spec_.size, want)) on_message(seen_, nullptr);
        }
        if (echo_pending_ && sends_out_ == 0) post_echo();
    }
}

void Responder::on_message(std::uint64_t i, const weft::Completion* c) {
    const std::uint32_t n = spec_.size;
    const bool imm = spec_.op == Op::write_imm;
    auto note = [&](std::string what) {
        if (error_.empty()) error_ = "message " + std::to_string(i) + ": " + std::move(what);
    };
    if (c != nullptr) {
        const auto want = imm ? weft::Opcode::recv_rdma_with_imm : weft::Opcode::recv;
        if (c->opcode != want || c->byte_len != n) {
            note("arrived as a " + std::to_string(c->byte_len) + "-byte " + std::string(weft::to_string(c->opcode)) +
                 ", expected " + std::to_string(n) + " bytes of " + std::string(weft::to_string(want)));
        } else if (imm && (!c->has_imm || c->imm != static_cast<std::uint32_t>(i))) {
            note("carried imm " + std::to_string(c->imm) + ", expected " + std::to_string(static_cast<std::uint32_t>(i)));
        }
    }
    if (spec_.test == Test::lat) {
        const std::byte* rx = s_.b();
        if (!detail::head_is(rx, n, i + 1) || !detail::tail_is(rx, n, i + 1)) {
            note("holds stamp " + std::to_string(detail::read_word(rx, detail::stamp_width(n))) + ", expected " +
                 std::to_string(detail::low_bytes(i + 1, detail::stamp_width(n))));
        } else if (spec_.check) {
            if (long long at = stamped_mismatch(rx, n, client_salt); at >= 0) note("wrong byte at offset " + std::to_string(at));
        }
        if (c != nullptr) reposts_.push_back(weft::recv(i + 1, s_.b_slot(0, lay_.stride)));
        echo_pending_ = true;
        return;
    }
    // Bandwidth: message i came from the requester's slot i % slots. A send lands in the receive it
    // consumed (the i-th posted: slot i % receives); a write_imm in target slot i % slots.
    const auto src_slot = static_cast<std::uint32_t>(i % lay_.slots);
    const auto at_slot = imm ? src_slot : static_cast<std::uint32_t>(i % lay_.receives);
    const std::byte* p = s_.b() + std::uint64_t{at_slot} * lay_.stride;
    if (spec_.check) {
        if (long long at = pattern_mismatch(p, n, client_salt, src_slot); at >= 0) {
            note("wrong byte at offset " + std::to_string(at) + " of slot " + std::to_string(at_slot));
        }
    } else {
        // The first and last 8 bytes (all of a shorter message).
        const std::uint32_t k = std::min<std::uint32_t>(n, 8);
        if (pattern_mismatch(p, k, client_salt, src_slot) >= 0 ||
            (n > 8 && pattern_mismatch(p + n - k, k, client_salt, src_slot, n - k) >= 0)) {
            note("does not hold the requester's pattern of slot " + std::to_string(src_slot) + " (in slot " +
                 std::to_string(at_slot) + ")");
        }
    }
    if (c != nullptr) reposts_.push_back(weft::recv(i, s_.b_slot(std::uint64_t{at_slot} * lay_.stride, lay_.stride)));
}

std::string Responder::finish() {
    weft::Completion wc[8];
    detail::Watch w;
    while (sends_out_ > 0) {
        for (const auto& c : s_.cq.poll(wc)) {
            if (!c.ok()) error_completion(c);
            if (c.is_recv()) fail(std::string(s_.role) + ": a message arrived after the test's last message");
            --sends_out_;
        }
        if (w.tick() && w.stalled(sends_out_, std::chrono::steady_clock::now())) {
            fail(std::string(s_.role) + ": no completion of the last echo for " + std::to_string(stall_limit.count()) + " s");
        }
    }
    if (!error_.empty()) return error_;
    const std::uint32_t n = spec_.size;
    const std::uint64_t total = spec_.total();
    if (!done_) {
        return "only " + std::to_string(seen_) + " of " + std::to_string(total) + " messages arrived";
    }
    if (spec_.test == Test::bw && (spec_.op == Op::write || spec_.op == Op::write_imm)) {
        const std::uint64_t slots = std::min<std::uint64_t>(lay_.slots, total);
        for (std::uint32_t k = 0; k < slots; ++k) {
            if (long long at = pattern_mismatch(s_.b() + std::uint64_t{k} * lay_.stride, n, client_salt, k); at >= 0) {
                return "target slot " + std::to_string(k) + " holds a wrong byte at offset " + std::to_string(at);
            }
        }
    }
    if (is_atomic(spec_.op) && *s_.counter() != total) {
        return "the counter holds " + std::to_string(*s_.counter()) + " after " + std::to_string(total) + " " +
               std::string(name(spec_.op)) + " requests (expected " + std::to_string(total) + ")";
    }
    return {};
}

void Responder::error_completion(const weft::Completion& c) {
    fail(std::string(s_.role) + ": error completion: " + describe_completion(c));
}

// ---- Drainer

void Drainer::step() {
    const std::uint32_t window = std::max<std::uint32_t>(1, std::min<std::uint32_t>(s_.qp.caps().max_send, 64));
    while (to_send_ > 0 && out_ < window) {
        weft::SendRequest zero;  // no segment: a zero-length send
        zero.opcode = weft::Opcode::send;
        zero.id = 0xd0000000u + to_send_;
        if (auto st = s_.qp.post_send(std::span(&zero, 1)); !st) {
            fail(std::string(s_.role) + ": post_send of a zero-length message (consuming the peer's receives): " +
                 st.reason());
        }
        --to_send_;
        ++out_;
    }
    weft::Completion wc[16];
    for (const auto& c : s_.cq.poll(wc)) {
        if (!c.ok()) {
            fail(std::string(s_.role) + ": error completion while consuming leftover receives: " + describe_completion(c));
        }
        if (c.is_recv()) {
            if (s_.posted_receives == 0) fail(std::string(s_.role) + ": more messages than receives while draining");
            --s_.posted_receives;
        } else {
            --out_;
        }
    }
}

void Drainer::run() {
    detail::Watch w;
    while (!done()) {
        step();
        if (w.tick() && w.stalled(std::uint64_t{to_send_} + out_ + s_.posted_receives, std::chrono::steady_clock::now())) {
            fail(std::string(s_.role) + ": stalled while consuming leftover receives (" + std::to_string(out_) +
                 " zero-length sends in flight, " + std::to_string(s_.posted_receives) + " receives still posted)");
        }
    }
}

}  // namespace weft_perf
