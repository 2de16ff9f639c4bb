// Simulated queue pairs, data path: posting, transmission, execution at the responder, acknowledgements,
// RNR and timeout retries, in-order completion and error flushing. Everything here runs with the fabric
// lock held, allocates nothing and throws nothing.
#include "sim.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace weft::sim::detail {
namespace {

// An RNR NAK travels in an ack event under this status; it never reaches a completion as such.
constexpr WcStatus rnr_nak = WcStatus::rnr_retry_exceeded;

// Whether every segment lies inside a region of `domain` that has the needed right.
bool segments_ok(const SimDomain& domain, std::span<const LocalSegment> segs, bool need_write) noexcept {
    for (const auto& s : segs) {
        if (s.length == 0) continue;
        const SimMr* mr = domain.find_mr(s.lkey);
        if (!mr) return false;
        auto base = reinterpret_cast<std::uint64_t>(mr->addr);
        if (s.addr < base || s.addr - base > mr->length || s.length > mr->length - (s.addr - base)) return false;
        if (need_write && !has(mr->access, Access::local_write)) return false;
    }
    return true;
}

// Copies `length` bytes from a gather list into a scatter list.
void copy_sg(std::span<const LocalSegment> src, std::span<const LocalSegment> dst, std::uint64_t length) noexcept {
    std::size_t si = 0, di = 0;
    std::uint64_t so = 0, doff = 0;
    while (length > 0 && si < src.size() && di < dst.size()) {
        std::uint64_t n = std::min({length, src[si].length - so, dst[di].length - doff});
        if (n > 0) std::memmove(reinterpret_cast<void*>(dst[di].addr + doff), reinterpret_cast<const void*>(src[si].addr + so), n);
        so += n;
        doff += n;
        length -= n;
        if (so == src[si].length) ++si, so = 0;
        if (doff == dst[di].length) ++di, doff = 0;
    }
}

LocalSegment contiguous(std::uint64_t addr, std::uint64_t length) noexcept {
    return {addr, static_cast<std::uint32_t>(length), 0, nullptr};
}

}  // namespace

std::uint64_t SimQp::wire_time(std::uint64_t bytes) const noexcept {
    return static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes) * 8.0 / fabric_.params.gbps));
}

// ---- posting

PostStatus SimQp::post_send(std::span<const SendRequest> batch) noexcept {
    std::lock_guard lock(fabric_.mu);
    if (state_ != QpState::rts && state_ != QpState::error) {
        return PostStatus::not_connected("the QP is not connected; call connect() before posting sends");
    }
    if (auto st = weft::detail::validate_send_batch(batch, caps, domain_->caps); !st) return st;
    if (sq_posted_ - sq_released_ + batch.size() > sq_.size()) return PostStatus::queue_full();

    const std::uint64_t first = sq_posted_;
    for (const SendRequest& r : batch) {
        const std::uint64_t i = sq_posted_++;
        SqEntry& e = sq_at(i);
        e.id = r.id;
        e.remote_addr = r.remote_addr;
        e.rkey = r.rkey;
        e.compare_add = r.compare_add;
        e.swap = r.swap;
        e.length = r.length();
        e.num_sge = r.num_sge;
        e.imm = r.imm;
        e.opcode = r.opcode;
        e.flags = r.flags;
        e.done = false;
        e.status = WcStatus::success;
        auto segs = r.segments();
        LocalSegment* slot = &sq_sge_[(i % sq_.size()) * max_sge_];
        if (has(r.flags, SendFlags::inline_data)) {
            // The payload is copied now, so the caller may reuse its buffer at once.
            std::byte* buf = sq_inline_.data() + (i % sq_.size()) * max_inline_;
            std::uint64_t off = 0;
            for (const auto& s : segs) {
                if (s.length) std::memcpy(buf + off, s.data(), s.length);
                off += s.length;
            }
            slot[0] = contiguous(reinterpret_cast<std::uint64_t>(buf), e.length);
            e.num_sge = e.length ? 1 : 0;
        } else {
            std::copy(segs.begin(), segs.end(), slot);
        }
    }
    if (state_ == QpState::error) {
        flush_send_from(first);
    } else {
        transmit_pending();
    }
    fabric_.notify_post();
    fabric_.sync_fds();
    return PostStatus::ok();
}

PostStatus SimQp::post_recv(std::span<const RecvRequest> batch) noexcept {
    std::lock_guard lock(fabric_.mu);
    if (state_ == QpState::reset) return PostStatus::not_connected("the QP is in reset");
    if (auto st = weft::detail::validate_recv_batch(batch, caps); !st) return st;
    if (rq_posted_ - rq_released_ + batch.size() > caps.max_recv) return PostStatus::queue_full();
    for (const RecvRequest& r : batch) {
        const std::uint64_t i = rq_posted_++;
        RqEntry& e = rq_at(i);
        e.id = r.id;
        e.length = r.length();
        e.num_sge = r.num_sge;
        auto segs = r.segments();
        std::copy(segs.begin(), segs.end(), &rq_sge_[(i % rq_.size()) * max_sge_]);
    }
    if (state_ == QpState::error) flush_recv();
    fabric_.notify_post();
    fabric_.sync_fds();
    return PostStatus::ok();
}

// ---- requester

bool SimQp::check_local(std::uint64_t i) noexcept {
    const SqEntry& e = sq_at(i);
    if (has(e.flags, SendFlags::inline_data)) return true;
    bool writes_local = e.opcode == Opcode::read || is_atomic(e.opcode);
    return segments_ok(*domain_, sq_sges(i), writes_local);
}

void SimQp::transmit_pending() noexcept {
    if (state_ != QpState::rts || rnr_wait_) return;
    while (sq_next_tx_ < sq_posted_ && sq_next_tx_ < tx_stop_) {
        const std::uint64_t i = sq_next_tx_;
        SqEntry& e = sq_at(i);
        if (!check_local(i)) {
            // A local protection error: this entry completes in error once the earlier ones have completed,
            // and nothing after it is sent.
            e.done = true;
            e.status = WcStatus::local_protection;
            tx_stop_ = i;
            complete_in_order();
            return;
        }
        const bool carries_payload = e.opcode != Opcode::read && !is_atomic(e.opcode);
        const std::uint64_t start = std::max(fabric_.now, link_free_);
        link_free_ = start + wire_time(carries_payload ? e.length : 0);
        if (sq_next_tx_ == sq_completed_) last_progress_ = fabric_.now;  // the ACK timer starts now
        Event ev;
        ev.kind = EventKind::deliver;
        ev.time = link_free_ + fabric_.params.latency_ns;
        ev.qpn = remote_qpn_;
        ev.peer = qp_num;
        ev.msn = i;
        fabric_.schedule(ev);
        ++sq_next_tx_;
    }
    arm_timer();
}

void SimQp::arm_timer() noexcept {
    const std::uint64_t tmo = ack_timeout_ns(options_.timeout);
    if (timer_armed_ || tmo == 0 || sq_next_tx_ <= sq_completed_) return;
    timer_armed_ = true;
    Event ev;
    ev.kind = EventKind::timeout;
    ev.time = std::max(fabric_.now, last_progress_ + tmo);
    ev.qpn = qp_num;
    ev.generation = ++timer_gen_;
    fabric_.schedule(ev);
}

void SimQp::on_ack(const Event& e) noexcept {
    if (state_ != QpState::rts) return;
    if (e.msn < sq_completed_ || e.msn >= sq_next_tx_) return;  // stale: already completed or rewound
    SqEntry& w = sq_at(e.msn);
    if (w.done) return;
    if (e.status == WcStatus::success) {
        w.done = true;
        last_progress_ = fabric_.now;
        rnr_count_ = 0;
        retry_count_ = 0;
        complete_in_order();
        return;
    }
    if (e.status == rnr_nak) {
        if (options_.rnr_retry != 7 && rnr_count_ >= options_.rnr_retry) {
            w.done = true;
            w.status = WcStatus::rnr_retry_exceeded;
            complete_in_order();
            return;
        }
        // Go back to the refused message after the responder's RNR delay; later messages were dropped.
        ++rnr_count_;
        sq_next_tx_ = e.msn;
        rnr_wait_ = true;
        Event ev;
        ev.kind = EventKind::rnr_retry;
        ev.time = fabric_.now + rnr_delay_ns(static_cast<std::uint8_t>(e.generation));
        ev.qpn = qp_num;
        ev.generation = ++rnr_gen_;
        fabric_.schedule(ev);
        return;
    }
    w.done = true;
    w.status = e.status;
    complete_in_order();
}

void SimQp::on_rnr_retry(const Event& e) noexcept {
    if (state_ != QpState::rts || !rnr_wait_ || e.generation != rnr_gen_) return;
    rnr_wait_ = false;
    last_progress_ = fabric_.now;
    transmit_pending();
}

void SimQp::on_timeout(const Event& e) noexcept {
    if (e.generation != timer_gen_) return;
    timer_armed_ = false;
    if (state_ != QpState::rts || sq_next_tx_ <= sq_completed_) return;
    const std::uint64_t tmo = ack_timeout_ns(options_.timeout);
    if (fabric_.now < last_progress_ + tmo) {
        arm_timer();
        return;
    }
    if (retry_count_ >= options_.retry_cnt) {
        SqEntry& w = sq_at(sq_completed_);
        w.done = true;
        w.status = WcStatus::transport_retry_exceeded;
        complete_in_order();
        return;
    }
    ++retry_count_;
    sq_next_tx_ = sq_completed_;
    last_progress_ = fabric_.now;
    transmit_pending();
}

void SimQp::complete_in_order() noexcept {
    while (sq_completed_ < sq_posted_) {
        const std::uint64_t i = sq_completed_;
        const SqEntry& w = sq_at(i);
        if (!w.done) break;
        ++sq_completed_;
        if (w.status != WcStatus::success) {
            emit_send(i, w.status);
            enter_error();
            return;
        }
        if (has(w.flags, SendFlags::signaled)) emit_send(i, WcStatus::success);
    }
    sq_next_tx_ = std::max(sq_next_tx_, sq_completed_);
}

void SimQp::enter_error() noexcept {
    if (state_ == QpState::error) return;
    state_ = QpState::error;
    rnr_wait_ = false;
    ++timer_gen_;
    timer_armed_ = false;
    flush_send_from(sq_completed_);
    flush_recv();
}

void SimQp::flush_send_from(std::uint64_t first) noexcept {
    for (std::uint64_t i = first; i < sq_posted_; ++i) emit_send(i, WcStatus::flushed);
    sq_completed_ = sq_next_tx_ = sq_posted_;
}

void SimQp::flush_recv() noexcept {
    for (std::uint64_t i = rq_consumed_; i < rq_posted_; ++i) emit_recv(i, WcStatus::flushed, Opcode::recv, 0, false, 0);
    rq_consumed_ = rq_posted_;
}

void SimQp::emit_send(std::uint64_t i, WcStatus status) noexcept {
    const SqEntry& w = sq_at(i);
    CqEntry e;
    e.wc.id = w.id;
    e.wc.status = status;
    e.wc.opcode = completion_opcode(w.opcode);
    e.wc.byte_len = status == WcStatus::success ? static_cast<std::uint32_t>(w.length) : 0;
    e.wc.qp_num = qp_num;
    e.wqe = i;
    e.send_queue = true;
    send_cq_->push(e);
}

void SimQp::emit_recv(std::uint64_t i, WcStatus status, Opcode op, std::uint32_t byte_len, bool has_imm,
                      std::uint32_t imm) noexcept {
    CqEntry e;
    e.wc.id = rq_at(i).id;
    e.wc.status = status;
    e.wc.opcode = op;
    e.wc.byte_len = byte_len;
    e.wc.has_imm = has_imm;
    e.wc.imm = imm;
    e.wc.qp_num = qp_num;
    e.wqe = i;
    e.send_queue = false;
    recv_cq_->push(e);
}

void SimQp::release(bool send_queue, std::uint64_t wqe) noexcept {
    if (send_queue) sq_released_ = std::max(sq_released_, wqe + 1);
    else rq_released_ = std::max(rq_released_, wqe + 1);
}

// ---- responder

void SimQp::on_deliver(const Event& e) noexcept {
    SimQp* q = fabric_.find_qp(e.peer);
    if (!q) return;
    // A responder that is not ready, is in error, or is connected elsewhere answers nothing; the requester
    // times out.
    if ((state_ != QpState::rts && state_ != QpState::rtr) || remote_qpn_ != q->qp_num) return;
    if (e.msn > expected_msn_) return;  // behind a NAKed message: dropped until the requester goes back
    if (e.msn < expected_msn_) {
        send_ack(q->qp_num, e.msn, WcStatus::success, 0);  // a retransmitted duplicate: acknowledge again
        return;
    }
    const SqEntry& w = q->sq_at(e.msn);
    WcStatus st = execute(*q, e.msn);
    if (st == WcStatus::success) ++expected_msn_;
    const bool response = w.opcode == Opcode::read || is_atomic(w.opcode);
    send_ack(q->qp_num, e.msn, st, st == WcStatus::success && response ? w.length : 0);
}

void SimQp::send_ack(std::uint32_t requester, std::uint64_t msn, WcStatus status, std::uint64_t response_bytes) noexcept {
    const std::uint64_t start = std::max(fabric_.now, link_free_);
    link_free_ = start + wire_time(response_bytes);
    Event ev;
    ev.kind = EventKind::ack;
    ev.time = link_free_ + fabric_.params.latency_ns;
    ev.qpn = requester;
    ev.peer = qp_num;
    ev.msn = msn;
    ev.status = status;
    ev.generation = options_.min_rnr_timer;  // an RNR NAK carries the responder's timer
    fabric_.schedule(ev);
}

const SimMr* SimQp::check_remote(std::uint64_t rkey, std::uint64_t addr, std::uint64_t length, Access right) const noexcept {
    const SimMr* mr = domain_->find_mr(rkey);
    if (!mr || !has(mr->access, right)) return nullptr;
    auto base = reinterpret_cast<std::uint64_t>(mr->addr);
    if (addr < base || addr - base > mr->length || length > mr->length - (addr - base)) return nullptr;
    return mr;
}

WcStatus SimQp::execute(SimQp& q, std::uint64_t msn) noexcept {
    const SqEntry& w = q.sq_at(msn);
    const auto src = q.sq_sges(msn);
    switch (w.opcode) {
        case Opcode::send:
        case Opcode::send_with_imm: {
            if (rq_consumed_ == rq_posted_) return rnr_nak;
            const std::uint64_t ri = rq_consumed_++;
            if (w.length > rq_at(ri).length) {
                emit_recv(ri, WcStatus::local_length, Opcode::recv, 0, false, 0);
                enter_error();
                return WcStatus::remote_invalid_request;
            }
            if (!segments_ok(*domain_, rq_sges(ri), true)) {
                emit_recv(ri, WcStatus::local_protection, Opcode::recv, 0, false, 0);
                enter_error();
                return WcStatus::remote_operation;
            }
            copy_sg(src, rq_sges(ri), w.length);
            emit_recv(ri, WcStatus::success, Opcode::recv, static_cast<std::uint32_t>(w.length),
                      w.opcode == Opcode::send_with_imm, w.imm);
            return WcStatus::success;
        }
        case Opcode::write:
        case Opcode::write_with_imm: {
            const bool with_imm = w.opcode == Opcode::write_with_imm;
            if (with_imm && rq_consumed_ == rq_posted_) return rnr_nak;
            if (w.length > 0) {
                if (!check_remote(w.rkey, w.remote_addr, w.length, Access::remote_write)) {
                    if (with_imm) emit_recv(rq_consumed_++, WcStatus::local_access, Opcode::recv_rdma_with_imm, 0, false, 0);
                    enter_error();
                    return WcStatus::remote_access;
                }
                const LocalSegment dst = contiguous(w.remote_addr, w.length);
                copy_sg(src, {&dst, 1}, w.length);
            }
            if (with_imm) {
                emit_recv(rq_consumed_++, WcStatus::success, Opcode::recv_rdma_with_imm,
                          static_cast<std::uint32_t>(w.length), true, w.imm);
            }
            return WcStatus::success;
        }
        case Opcode::read: {
            if (w.length > 0) {
                if (!check_remote(w.rkey, w.remote_addr, w.length, Access::remote_read)) {
                    enter_error();
                    return WcStatus::remote_access;
                }
                const LocalSegment from = contiguous(w.remote_addr, w.length);
                copy_sg({&from, 1}, src, w.length);
            }
            return WcStatus::success;
        }
        case Opcode::fetch_add:
        case Opcode::compare_swap: {
            if (w.remote_addr % 8 != 0) {
                enter_error();
                return WcStatus::remote_invalid_request;
            }
            if (!check_remote(w.rkey, w.remote_addr, 8, Access::remote_atomic)) {
                enter_error();
                return WcStatus::remote_access;
            }
            std::uint64_t old = 0;
            std::memcpy(&old, reinterpret_cast<const void*>(w.remote_addr), 8);
            std::uint64_t value = old;
            if (w.opcode == Opcode::fetch_add) value = old + w.compare_add;
            else if (old == w.compare_add) value = w.swap;
            std::memcpy(reinterpret_cast<void*>(w.remote_addr), &value, 8);
            std::memcpy(reinterpret_cast<void*>(src[0].addr), &old, 8);
            return WcStatus::success;
        }
        default: return WcStatus::remote_invalid_request;
    }
}

}  // namespace weft::sim::detail
