// weft-perf's measuring loops (templates over the idle hook, so the two-process loops call nothing).
// Included by perf.hpp.
#pragma once

#include <algorithm>
#include <cstring>

namespace weft_perf {

namespace detail {

/// The low `n` (<= 8) bytes of `v`, as a stamp of that many bytes reads back.
inline std::uint64_t low_bytes(std::uint64_t v, std::uint32_t n) noexcept {
    return n >= 8 ? v : v & ((std::uint64_t{1} << (8 * n)) - 1);
}
inline std::uint32_t stamp_width(std::uint32_t size) noexcept { return std::min<std::uint32_t>(size, 8); }
/// Stamps: the first min(size, 8) bytes, and the last 8 when size >= 16.
inline void put_stamp(std::byte* p, std::uint32_t size, std::uint64_t v) noexcept {
    std::memcpy(p, &v, stamp_width(size));
    if (size >= 16) std::memcpy(p + size - 8, &v, 8);
}
inline std::uint64_t read_word(const std::byte* p, std::uint32_t n) noexcept {
    std::uint64_t v = 0;
    // volatile: the bytes change under us (the peer's write lands here).
    const volatile unsigned char* q = reinterpret_cast<const volatile unsigned char*>(p);
    for (std::uint32_t k = 0; k < n; ++k) v |= std::uint64_t{q[k]} << (8 * k);
    return v;
}
inline bool head_is(const std::byte* p, std::uint32_t size, std::uint64_t v) noexcept {
    return read_word(p, stamp_width(size)) == low_bytes(v, stamp_width(size));
}
inline bool tail_is(const std::byte* p, std::uint32_t size, std::uint64_t v) noexcept {
    return size < 16 || read_word(p + size - 8, 8) == v;
}

/// Counts loop turns and reads the clock every 4096 of them: for stall detection and the progress line,
/// without a clock read per request.
struct Watch {
    std::chrono::steady_clock::time_point last_progress = std::chrono::steady_clock::now();
    std::uint64_t last_done = ~std::uint64_t{0};
    unsigned turns = 0;
    /// True when it is time to look at the clock.
    bool tick() noexcept { return (++turns & 4095u) == 0; }
    /// Records `done` at the clock reading `now`; true when nothing moved for stall_limit.
    bool stalled(std::uint64_t done, std::chrono::steady_clock::time_point now) noexcept {
        if (done != last_done) {
            last_done = done;
            last_progress = now;
            return false;
        }
        return now - last_progress > stall_limit;
    }
};

}  // namespace detail

template <class Idle>
void Requester::wait_sends(Idle& idle) {
    weft::Completion wc[4];
    detail::Watch w;
    while (sends_out_ > 0) {
        for (const auto& c : s_.cq.poll(wc)) {
            if (!c.ok()) error_completion(c, "the completion of a request");
            if (c.is_recv()) fail(std::string(s_.role) + ": a message arrived while waiting for a request's completion");
            --sends_out_;
        }
        idle();
        if (w.tick() && w.stalled(sends_out_, std::chrono::steady_clock::now())) stalled("a request's completion");
    }
}

// Waits for the peer's echo of round trip `i`: a receive (send, write_imm) or the stamp in B slot 0 (write).
template <class Idle>
void Requester::wait_echo(std::uint64_t i, Idle& idle) {
    weft::Completion wc[4];
    detail::Watch w;
    const std::uint32_t n = spec_.size;
    const std::uint64_t want = i + 1;
    std::byte* rx = s_.b();
    if (spec_.op == Op::write) {
        // As perftest: the last bytes first, then the first (a multi-packet write may be placed in any order).
        while (!detail::tail_is(rx, n, want) || !detail::head_is(rx, n, want)) {
            for (const auto& c : s_.cq.poll(wc)) {
                if (!c.ok()) error_completion(c, "the peer's echo");
                --sends_out_;
            }
            idle();
            if (w.tick() && w.stalled(sends_out_, std::chrono::steady_clock::now())) stalled("the peer's echo");
        }
        return;
    }
    // Every completion of a poll is taken into account, also those after the echo: the request's own
    // completion may come in the same batch, after it.
    for (bool echoed = false; !echoed;) {
        for (const auto& c : s_.cq.poll(wc)) {
            if (!c.ok()) error_completion(c, "the peer's echo");
            if (!c.is_recv()) {
                --sends_out_;
                continue;
            }
            --s_.posted_receives;
            const bool imm = spec_.op == Op::write_imm;
            if (c.opcode != (imm ? weft::Opcode::recv_rdma_with_imm : weft::Opcode::recv) || c.byte_len != n ||
                (imm && (!c.has_imm || c.imm != static_cast<std::uint32_t>(i))) || !detail::head_is(rx, n, want) ||
                !detail::tail_is(rx, n, want)) {
                fail(std::string(s_.role) + ": echo " + std::to_string(i) + " came back as a " +
                     std::to_string(c.byte_len) + "-byte " + std::string(weft::to_string(c.opcode)) +
                     (imm ? " with imm " + std::to_string(c.imm) : std::string()) + " holding stamp " +
                     std::to_string(detail::read_word(rx, detail::stamp_width(n))) + " (expected " +
                     std::to_string(n) + " bytes, stamp " + std::to_string(detail::low_bytes(want, detail::stamp_width(n))) + ")");
            }
            repost_receive(i + 1);
            echoed = true;
        }
        if (echoed) break;
        idle();
        if (w.tick() && w.stalled(sends_out_, std::chrono::steady_clock::now())) stalled("the peer's echo");
    }
}

template <class Idle>
std::vector<double> Requester::run_lat(Idle&& idle) {
    const std::uint64_t total = spec_.total();
    const std::uint32_t n = spec_.size;
    std::vector<std::chrono::steady_clock::time_point> t(total + 1);
    weft::SendRequest r = templates_.front();
    if (is_atomic(spec_.op)) r.sge = results_.front();
    r.flags = weft::SendFlags::signaled;
    if (spec_.uses_inline()) r.flags = r.flags | weft::SendFlags::inline_data;
    std::byte* src = s_.a();
    std::uint64_t* res = s_.results();
    for (std::uint64_t i = 0; i < total; ++i) {
        wait_sends(idle);
        if (is_ping_pong(spec_.op)) detail::put_stamp(src, n, i + 1);
        r.id = i;
        if (spec_.op == Op::write_imm) r.imm = static_cast<std::uint32_t>(i);
        if (spec_.op == Op::fetch_add) r.compare_add = 1;
        if (spec_.op == Op::compare_swap) {
            r.compare_add = i;
            r.swap = i + 1;
        }
        t[i] = std::chrono::steady_clock::now();
        if (auto st = s_.qp.post_send(std::span(&r, 1)); !st) {
            fail(std::string(s_.role) + ": post_send of round trip " + std::to_string(i) + ": " + st.reason());
        }
        sends_out_ = 1;
        if (is_ping_pong(spec_.op)) {
            wait_echo(i, idle);
        } else {
            wait_sends(idle);
            if (is_atomic(spec_.op) && res[0] != i) {
                fail(std::string(s_.role) + ": " + std::string(name(spec_.op)) + " " + std::to_string(i) +
                     " returned " + std::to_string(res[0]) + ", expected " + std::to_string(i) +
                     " (the counter starts at 0 and each request adds 1)");
            }
        }
        if (progress && (i & 255u) == 0 && std::chrono::steady_clock::now() - progress_at_ > std::chrono::milliseconds(500)) {
            show_progress(i, total, false);
        }
    }
    t[total] = std::chrono::steady_clock::now();
    wait_sends(idle);
    if (progress) show_progress(total, total, true);
    std::vector<double> us;
    us.reserve(spec_.iters);
    const double div = is_ping_pong(spec_.op) ? 2.0 : 1.0;
    for (std::uint64_t i = spec_.warmup; i < total; ++i) {
        us.push_back(std::chrono::duration<double, std::micro>(t[i + 1] - t[i]).count() / div);
    }
    return us;
}

template <class Idle>
double Requester::run_bw(Idle&& idle) {
    const std::uint32_t depth = spec_.depth, cq_mod = spec_.cq_mod, b = spec_.batch;
    const std::uint32_t slots = lay_.slots;
    const bool inl = spec_.uses_inline();
    weft::Completion wc[64];
    std::chrono::steady_clock::time_point t0{};
    std::uint64_t j = 0, done = 0;
    // Two phases: the warm-up (not timed), then the measured requests.
    for (int phase = spec_.warmup > 0 ? 0 : 1; phase < 2; ++phase) {
        const std::uint64_t end = phase == 0 ? spec_.warmup : spec_.total();
        if (phase == 1) t0 = std::chrono::steady_clock::now();
        detail::Watch w;
        while (done < end) {
            while (j < end && (j - done) + std::min<std::uint64_t>(b, end - j) <= depth) {
                const auto k = static_cast<std::uint32_t>(std::min<std::uint64_t>(b, end - j));
                for (std::uint32_t q = 0; q < k; ++q) {
                    const std::uint64_t id = j + q;
                    weft::SendRequest& r = batch_[q];
                    r = templates_[static_cast<std::size_t>(id % slots)];
                    r.id = id;
                    const bool sig = (id + 1) % cq_mod == 0 || id + 1 == end;
                    r.flags = sig ? weft::SendFlags::signaled : weft::SendFlags::none;
                    if (inl) r.flags = r.flags | weft::SendFlags::inline_data;
                    switch (spec_.op) {
                        case Op::write_imm: r.imm = static_cast<std::uint32_t>(id); break;
                        case Op::fetch_add:
                            r.sge = results_[static_cast<std::size_t>(id % depth)];
                            r.compare_add = 1;
                            break;
                        case Op::compare_swap:
                            r.sge = results_[static_cast<std::size_t>(id % depth)];
                            r.compare_add = id;
                            r.swap = id + 1;
                            break;
                        default: break;
                    }
                }
                if (auto st = s_.qp.post_send(std::span<const weft::SendRequest>(batch_.data(), k)); !st) {
                    fail(std::string(s_.role) + ": post_send of requests " + std::to_string(j) + ".." +
                         std::to_string(j + k - 1) + " with " + std::to_string(j - done) + " in flight: " +
                         st.reason());
                }
                j += k;
            }
            for (const auto& c : s_.cq.poll(wc)) {
                if (!c.ok()) error_completion(c, "a request's completion");
                if (c.is_recv()) fail(std::string(s_.role) + ": a message arrived during a bandwidth test");
                done = c.id + 1;
            }
            idle();
            if (w.tick()) {
                const auto now = std::chrono::steady_clock::now();
                if (w.stalled(done, now)) stalled("requests' completions");
                if (progress && phase == 1 && now - progress_at_ > std::chrono::milliseconds(500)) {
                    show_progress(done - spec_.warmup, spec_.iters, false);
                }
            }
        }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (progress) show_progress(spec_.iters, spec_.iters, true);
    return secs;
}

}  // namespace weft_perf
