// The ofi backend's data path: posting batches, reading the provider's CQ, and delivering completions
// in weft's order. No allocation, no exceptions, no virtual call per request.
//
// Every request takes a Slot of its queue's Ring; the slot's OpRef is the provider's op_context, so an
// entry read from the fid_cq names its slot whatever order the provider completes in. A CQ delivers a
// ring's slots strictly in sequence, which gives weft's ordering contract on providers that complete
// out of order (rxm, shm). Every provider operation asks for a completion (no FI_SELECTIVE_COMPLETION):
// only a completion tells when a slot's context and buffers are free again; unsignaled successes are
// dropped at delivery instead. A slot becomes reusable when a later reported completion is delivered, as
// with verbs.
//
// write_with_imm on providers whose remote CQ data does not consume a receive (tcp, shm, rxm) is a
// write followed by a zero-length send whose CQ data carries the immediate, the write length and
// imm_marker_bit; the target reports that receive as recv_rdma_with_imm. It relies on the provider
// placing a send after an earlier write (FI_ORDER_SAW), see docs/backends/ofi.md.
//
// fence on providers without FI_FENCE: a fenced request stays in its ring, unposted, while any earlier read
// or atomic of the QP is still out (Ring::ordered_out); the CQ read that absorbs the last of them leaves
// the QP asking for attention, and the same poll hands the fenced request over.
#include "ofi.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <thread>

namespace weft::ofi {
namespace {

// What a receive's completion entry reports: its opcode (`posted` unless immediate data came with an RMA
// write, or as the marker of an emulated write_with_imm, whose length is the write's), its length and its
// immediate.
struct Received {
    Opcode opcode;
    std::uint32_t length;
    bool has_imm = false;
    std::uint32_t imm = 0;
};

Received received(const fi_cq_data_entry& e, bool emulated_imm, Opcode posted) noexcept {
    Received r{posted, static_cast<std::uint32_t>(e.len)};
    if ((e.flags & FI_REMOTE_CQ_DATA) == 0) return r;
    r.has_imm = true;
    r.imm = static_cast<std::uint32_t>(e.data);
    if (emulated_imm && (e.data & imm_marker_bit) != 0) {
        r.opcode = Opcode::recv_rdma_with_imm;
        r.length = static_cast<std::uint32_t>((e.data >> 32) & emulated_imm_max_length);
    } else if ((e.flags & FI_RMA) != 0) {
        r.opcode = Opcode::recv_rdma_with_imm;
    }
    return r;
}

constexpr int eagain_retries = 256;

// WEFT_OFI_TRACE=1 prints every provider error entry (the error path only) to stderr.
bool trace_errors() noexcept {
    static const bool on = [] {
        const char* v = std::getenv("WEFT_OFI_TRACE");
        return v != nullptr && *v != '\0' && *v != '0';
    }();
    return on;
}

// The descriptors handed with a send or write: none for inline payloads and empty requests. The verbs
// provider reads desc[0] whenever the array is not null (an inline payload has no descriptor; a zero-length
// send has no segment at all) and takes a null array as "copy the payload inline".
void** descs(Slot& s) noexcept {
    return (s.fi_flags & FI_INJECT) != 0 || s.iov_count == 0 ? nullptr : s.desc;
}

bool is_flushed_origin(const Ring& r, std::uint64_t seq) noexcept {
    return r.error_origin.load(std::memory_order_acquire) == seq;
}

}  // namespace

// ---- Status mapping

WcStatus map_error(const Profile& p, int err, int prov_errno) noexcept {
    // The verbs provider hands back the ibv_wc_status; weft's WcStatus has the same order.
    if (p.verbs_status && prov_errno > 0 && prov_errno < wc_status_count) return static_cast<WcStatus>(prov_errno);
    switch (err) {
        case FI_ECANCELED: return WcStatus::flushed;
        case FI_EACCES:
        case FI_EKEYREJECTED:
        case FI_EPERM: return WcStatus::remote_access;
        case FI_ETRUNC:
        case FI_EMSGSIZE:
        case FI_ETOOSMALL: return WcStatus::local_length;
        case FI_ETIMEDOUT:
        case FI_ECONNREFUSED:
        case FI_ECONNRESET:
        case FI_ECONNABORTED:
        case FI_ENOTCONN:
        case FI_EHOSTUNREACH:
        case FI_ENETDOWN:
        case FI_ENETUNREACH:
        case FI_ESHUTDOWN: return WcStatus::transport_retry_exceeded;
        case FI_ENORX: return WcStatus::rnr_retry_exceeded;
        case FI_EINVAL: return WcStatus::remote_invalid_request;
        case FI_EOPBADSTATE: return WcStatus::local_qp_operation;
        // sockets: the connection of a MSG endpoint is gone (posts and completions both say so).
        case FI_ENOENT: return p.ep_type == FI_EP_MSG ? WcStatus::transport_retry_exceeded : WcStatus::general;
        case FI_EREMOTEIO: return WcStatus::remote_operation;
        default: return WcStatus::general;
    }
}

// ---- Posting

bool OfiQp::ready_to_post(const Ring& r) const noexcept {
    if (!ep_ready_.load(std::memory_order_acquire)) return false;
    return !r.send_side || state_.load(std::memory_order_acquire) == QpState::rts;
}

void OfiQp::refresh_direct() noexcept {
    for (Ring* r : {&send_, &recv_}) {
        bool ok = !error_.load(std::memory_order_acquire) && ready_to_post(*r) &&
                  r->posted.load(std::memory_order_relaxed) == r->cursors.posted.load(std::memory_order_relaxed);
        r->direct.store(ok, std::memory_order_release);
    }
}

void OfiQp::finish_at_post(Slot& s, WcStatus status) noexcept {
    s.status = status;
    s.ops_total = 0;
    s.ops_left.store(0, std::memory_order_relaxed);
    s.done.store(true, std::memory_order_release);
}

// Looks every segment up by lkey and checks it lies in its region with the rights it needs: providers
// without FI_MR_LOCAL check nothing locally, and verbs reports these as local_protection.
bool OfiQp::check_local(Slot& s, std::span<const LocalSegment> segs, bool need_write) noexcept {
    const MrTable& mrs = dom_->mrs();
    std::uint32_t n = 0;
    for (const LocalSegment& g : segs) {
        if (g.length == 0) continue;
        const MrEntry* e = mrs.find(g.lkey);
        if (e == nullptr || g.addr < e->addr || g.addr - e->addr > e->length ||
            g.length > e->length - (g.addr - e->addr) || (need_write && !e->local_write)) {
            return false;
        }
        s.iov[n].iov_base = reinterpret_cast<void*>(g.addr);
        s.iov[n].iov_len = g.length;
        s.desc[n] = e->desc;
        ++n;
    }
    s.iov_count = n;
    return true;
}

// Fills `s` for `r`. Returns false when the request failed locally (the QP is then in error).
[[gnu::always_inline]] inline bool OfiQp::prepare_send(Slot& s, const SendRequest& r, bool flush) noexcept {
    s.id = r.id;
    s.report = has(r.flags, SendFlags::signaled);
    s.status = WcStatus::success;
    s.vendor_err = 0;
    s.opcode = completion_opcode(r.opcode);
    s.length = static_cast<std::uint32_t>(r.length());
    s.has_imm = false;
    s.imm = 0;
    s.data = 0;
    s.iov_count = 0;
    s.ops_posted = 0;
    s.kind = {OpKind::none, OpKind::none};
    s.inline_data = false;
    s.fence_wait = false;
    s.fi_flags = FI_COMPLETION | (profile_.delivery_complete ? FI_DELIVERY_COMPLETE : 0);
    if (flush) {
        bool origin = is_flushed_origin(send_, s.seq);
        s.vendor_err = origin ? origin_vendor_err_ : 0;
        finish_at_post(s, origin ? origin_status_.load(std::memory_order_acquire) : WcStatus::flushed);
        return true;
    }
    auto segs = r.segments();
    if (has(r.flags, SendFlags::inline_data)) {
        // The provider copies the payload at post time (FI_INJECT): no registration needed.
        std::uint32_t n = 0;
        for (const LocalSegment& g : segs) {
            if (g.length == 0) continue;
            s.iov[n].iov_base = reinterpret_cast<void*>(g.addr);
            s.iov[n].iov_len = g.length;
            s.desc[n] = nullptr;
            ++n;
        }
        s.iov_count = n;
        s.fi_flags |= FI_INJECT;
        s.inline_data = true;
    } else if (!check_local(s, segs, r.opcode == Opcode::read || is_atomic(r.opcode))) {
        finish_at_post(s, WcStatus::local_protection);
        enter_error(send_, s.seq);
        return false;
    }
    if (has(r.flags, SendFlags::fence)) {
        if (profile_.fence) {
            s.fi_flags |= FI_FENCE;
        } else {
            s.fence_wait = true;
        }
    }
    if (needs_remote(r.opcode)) {
        s.rkey = r.rkey;
        s.raddr = profile_.virt_addr ? r.remote_addr : r.remote_addr - (r.rkey >> key_base_shift);
    }
    switch (r.opcode) {
        case Opcode::send:
            s.kind[0] = OpKind::send;
            break;
        case Opcode::send_with_imm:
            s.kind[0] = OpKind::send;
            s.fi_flags |= FI_REMOTE_CQ_DATA;
            s.data = r.imm;
            break;
        case Opcode::write:
        case Opcode::read:
            if (s.length == 0) {
                // Nothing to move and, as the contract says, no rkey to check.
                finish_at_post(s, WcStatus::success);
                return true;
            }
            s.kind[0] = r.opcode == Opcode::write ? OpKind::write : OpKind::read;
            break;
        case Opcode::write_with_imm:
            if (profile_.native_imm) {
                s.kind[0] = OpKind::write;
                s.fi_flags |= FI_REMOTE_CQ_DATA;
                s.data = r.imm;
            } else {
                s.data = imm_marker_bit | (static_cast<std::uint64_t>(s.length) << 32) | r.imm;
                if (s.length > 0) {
                    s.kind = {OpKind::write, OpKind::imm_marker};
                } else {
                    s.kind[0] = OpKind::imm_marker;
                }
            }
            break;
        case Opcode::fetch_add:
        case Opcode::compare_swap:
            if (profile_.our_keys && (r.rkey & (profile_.virt_addr ? key_atomic_bit : offset_key_atomic_bit)) == 0) {
                finish_at_post(s, WcStatus::remote_access);
                enter_error(send_, s.seq);
                return false;
            }
            s.operand[0] = r.compare_add;
            s.operand[1] = r.swap;
            s.kind[0] = r.opcode == Opcode::fetch_add ? OpKind::fetch_add : OpKind::compare_swap;
            break;
        default:
            finish_at_post(s, WcStatus::local_qp_operation);
            enter_error(send_, s.seq);
            return false;
    }
    s.ops_total = s.kind[1] != OpKind::none ? 2 : 1;
    s.ops_left.store(s.ops_total, std::memory_order_relaxed);
    return true;
}

bool OfiQp::prepare_recv(Slot& s, const RecvRequest& r, bool flush) noexcept {
    s.id = r.id;
    s.report = true;
    s.status = WcStatus::success;
    s.vendor_err = 0;
    s.opcode = Opcode::recv;
    s.length = 0;
    s.has_imm = false;
    s.imm = 0;
    s.iov_count = 0;
    s.ops_posted = 0;
    s.kind = {OpKind::recv, OpKind::none};
    s.fence_wait = false;
    s.fi_flags = FI_COMPLETION;
    if (flush) {
        finish_at_post(s, WcStatus::flushed);
        return true;
    }
    if (!check_local(s, r.segments(), true)) {
        finish_at_post(s, WcStatus::local_protection);
        enter_error(recv_, s.seq);
        return false;
    }
    s.ops_total = 1;
    s.ops_left.store(1, std::memory_order_relaxed);
    return true;
}

[[gnu::always_inline]] inline long OfiQp::issue(Slot& s, unsigned op) noexcept {
    fid_ep* ep = ep_.get();
    void* ctx = &s.ops[op];
    const std::uint64_t data_flags = s.fi_flags & ~(op == 0 ? 0 : FI_FENCE);
    switch (s.kind[op]) {
        case OpKind::send: {
            // shm (1.17) never completes a zero-length send that asks for FI_DELIVERY_COMPLETE.
            fi_msg m{s.iov, descs(s), s.iov_count, peer_, ctx, s.data};
            const bool strip_dc = s.iov_count == 0 && profile_.provider == "shm";
            return fi_sendmsg(ep, &m, strip_dc ? data_flags & ~FI_DELIVERY_COMPLETE : data_flags);
        }
        case OpKind::imm_marker: {
            // Under delivery-complete the marker completes once a receive at the target took it, so the
            // write_with_imm waits for a receive as RC does (RNR, rnr_retry = 7); injected, it would complete
            // as soon as the provider buffered it. shm (transmit-complete, see above) cannot wait.
            fi_msg m{nullptr, nullptr, 0, peer_, ctx, s.data};
            std::uint64_t flags = FI_COMPLETION | FI_REMOTE_CQ_DATA;
            if (profile_.delivery_complete && profile_.provider != "shm") {
                flags |= FI_DELIVERY_COMPLETE;
            } else if (profile_.inject_size > 0) {
                flags |= FI_INJECT;
            }
            if (op == 0) flags |= s.fi_flags & FI_FENCE;
            return fi_sendmsg(ep, &m, flags);
        }
        case OpKind::write: {
            fi_rma_iov rma{s.raddr, s.length, s.rkey};
            fi_msg_rma m{s.iov, descs(s), s.iov_count, peer_, &rma, 1, ctx, s.data};
            return fi_writemsg(ep, &m, data_flags);
        }
        case OpKind::read: {
            fi_rma_iov rma{s.raddr, s.length, s.rkey};
            fi_msg_rma m{s.iov, s.desc, s.iov_count, peer_, &rma, 1, ctx, 0};
            return fi_readmsg(ep, &m, data_flags & ~(FI_INJECT | FI_REMOTE_CQ_DATA | FI_DELIVERY_COMPLETE));
        }
        case OpKind::fetch_add:
        case OpKind::compare_swap: {
            const bool cas = s.kind[op] == OpKind::compare_swap;
            fi_ioc operand{&s.operand[cas ? 1 : 0], 1};
            fi_ioc compare{&s.operand[0], 1};
            fi_ioc result{s.iov[0].iov_base, 1};
            void* operand_desc[1] = {operand_desc_};
            void* result_desc[1] = {s.desc[0]};
            fi_rma_ioc rma{s.raddr, 1, s.rkey};
            fi_msg_atomic m{&operand, operand_desc, 1, peer_, &rma, 1, FI_UINT64, cas ? FI_CSWAP : FI_SUM, ctx, 0};
            std::uint64_t flags = data_flags & ~(FI_INJECT | FI_REMOTE_CQ_DATA | FI_DELIVERY_COMPLETE);
            if (!cas) return fi_fetch_atomicmsg(ep, &m, &result, result_desc, 1, flags);
            return fi_compare_atomicmsg(ep, &m, &compare, operand_desc, 1, &result, result_desc, 1, flags);
        }
        case OpKind::recv: {
            fi_msg m{s.iov, s.desc, s.iov_count, FI_ADDR_UNSPEC, ctx, 0};
            return fi_recvmsg(ep, &m, FI_COMPLETION);
        }
        case OpKind::none: break;
    }
    return -FI_EINVAL;
}

// Advances the provider without reading entries, so a full queue can drain.
void OfiQp::progress_own() noexcept {
    send_cq_->kick();
    if (recv_cq_ != send_cq_) recv_cq_->kick();
}

// Hands slots [posted, cursors.posted) of `r` to the provider. Caller: the producer, on its fast path or in
// post_slow; any other thread only through post_backlog. Returns false when slots remain (the provider
// stayed busy with -FI_EAGAIN, a fence holds a request back, or the endpoint is not there yet). Inline in
// the fast paths of post_send and post_recv, called by the rest.
[[gnu::always_inline]] inline bool OfiQp::post_range_inline(Ring& r) noexcept {
    std::uint64_t p = r.posted.load(std::memory_order_relaxed);
    const std::uint64_t t = r.cursors.posted_seen();
    bool notify = false;
    bool complete = true;
    // Gives up the operations of `s` not handed over yet; the slot finishes once those in flight do.
    auto abandon = [&notify](Slot& s, WcStatus status, std::uint32_t vendor_err) {
        s.status = status;
        s.vendor_err = vendor_err;
        auto never = static_cast<std::uint8_t>(s.ops_total - s.ops_posted);
        s.ops_total = s.ops_posted;
        if (s.ops_left.fetch_sub(never, std::memory_order_acq_rel) == never) {
            s.done.store(true, std::memory_order_release);
            notify = true;
        }
    };
    while (p < t) {
        Slot& s = r.at(p);
        if (s.ops_posted < s.ops_total && error_.load(std::memory_order_acquire)) {
            // Not (wholly) handed over and the QP is in error: the rest never reaches the wire, unless the
            // request precedes the one whose failure put the QP in error.
            std::uint64_t origin = r.error_origin.load(std::memory_order_acquire);
            if (origin == no_seq || s.seq >= origin) {
                bool at_origin = s.seq == origin;
                abandon(s, at_origin ? origin_status_.load(std::memory_order_acquire) : WcStatus::flushed,
                        at_origin ? origin_vendor_err_ : 0);
                ++p;
                continue;
            }
        }
        if (s.ops_total == 0) {
            notify = true;
            ++p;
            continue;
        }
        if (!ep_ || (s.fence_wait && s.ops_posted == 0 && r.ordered_out.load(std::memory_order_acquire) != 0)) {
            complete = false;
            break;
        }
        int tries = 0;
        // Once its last operation is handed over, the slot's completion may be read on another thread at
        // once, and the slot retired and filled with the next request: nothing of it is read or written after
        // that. So the count of operations handed over is moved before each provider call (and back if the
        // provider refuses it), and the loop runs on copies.
        std::uint8_t k = s.ops_posted;
        std::uint8_t total = s.ops_total;
        while (k < total) {
            const bool ordered = fence_orders(s.kind[k]);
            if (ordered) r.ordered_out.fetch_add(1, std::memory_order_relaxed);
            s.ops_posted = static_cast<std::uint8_t>(k + 1);
            long ret = issue(s, k);
            if (ret == 0) {
                ++k;
                continue;
            }
            s.ops_posted = k;  // not handed over: no completion comes for it, the slot stays this thread's
            if (ordered) r.ordered_out.fetch_sub(1, std::memory_order_release);
            if (ret == -FI_EAGAIN && ++tries < eagain_retries) {
                progress_own();
                continue;
            }
            if (ret == -FI_EAGAIN) break;
            // The provider refused the operation: the request completes with the reason, the QP goes to error.
            const std::uint64_t seq = s.seq;
            abandon(s, map_error(profile_, static_cast<int>(-ret), 0), static_cast<std::uint32_t>(-ret));
            enter_error(r, seq);
            total = k;  // what abandon() left of it is in flight or done
            break;
        }
        if (k < total) {
            complete = false;
            break;
        }
        ++p;
    }
    r.posted.store(p, std::memory_order_release);
    if (notify) r.cq->notify(r);
    return complete;
}

bool OfiQp::post_range(Ring& r) noexcept { return post_range_inline(r); }

// Copies the payload of every inline request still waiting for the provider into the ring, so that the
// caller's buffer is free when post returns (mu_ held).
void OfiQp::stash_inline(Ring& r) noexcept {
    const std::uint64_t t = r.cursors.posted.load(std::memory_order_relaxed);
    for (std::uint64_t p = r.posted.load(std::memory_order_relaxed); p < t; ++p) {
        Slot& s = r.at(p);
        if (!s.inline_data || s.ops_posted > 0 || r.inline_size == 0) continue;
        std::byte* dst = &r.inline_store[static_cast<std::size_t>(p & r.mask) * r.inline_size];
        std::size_t n = 0;
        for (std::uint32_t i = 0; i < s.iov_count; ++i) {
            std::memcpy(dst + n, s.iov[i].iov_base, s.iov[i].iov_len);
            n += s.iov[i].iov_len;
        }
        s.iov[0].iov_base = dst;
        s.iov[0].iov_len = n;
        s.iov_count = n > 0 ? 1 : 0;
        s.inline_data = false;
    }
}

// mu_ held, from a thread other than the producer's (driving the QP, its handshake, an error): hands over
// what the producer's slow path left. The slots of a ring without a backlog are the producer's: its fast
// path may be handing them over right now, and a second thread doing the same would post them twice.
void OfiQp::post_backlog(Ring& r) noexcept {
    if (!r.backlog) return;
    if (error_.load(std::memory_order_acquire) || ready_to_post(r)) post_range(r);
    r.backlog = r.posted.load(std::memory_order_relaxed) != r.cursors.posted.load(std::memory_order_relaxed);
}

PostStatus OfiQp::post_slow(Ring& r, bool synthetic) noexcept {
    bool backlog;
    {
        std::lock_guard lock(mu_);
        if (error_.load(std::memory_order_acquire) || ready_to_post(r)) post_range(r);
        backlog = r.posted.load(std::memory_order_relaxed) != r.cursors.posted.load(std::memory_order_relaxed);
        r.backlog = backlog;
        if (backlog) stash_inline(r);
        refresh_direct();
    }
    if (synthetic) r.cq->notify(r);
    if (backlog && connect_called_.load(std::memory_order_acquire)) registry::want_attention(this);
    return PostStatus::ok();
}

PostStatus OfiQp::post_send(std::span<const SendRequest> batch) noexcept {
    if (auto st = detail::validate_send_batch(batch, caps, dcaps_); !st) return st;
    if (!profile_.rma) {
        for (std::uint32_t i = 0; i < batch.size(); ++i) {
            if (needs_remote(batch[i].opcode)) {
                return PostStatus::invalid(i, "remote writes, reads and atomics are refused on this provider: it does "
                                              "not check the target's key, bounds or rights (open with "
                                              "unchecked_rma=on to allow them; see docs/backends/ofi.md)");
            }
        }
    }
    if (profile_.emulated_imm) {
        for (std::uint32_t i = 0; i < batch.size(); ++i) {
            if (batch[i].opcode == Opcode::write_with_imm && batch[i].length() > emulated_imm_max_length) {
                return PostStatus::invalid(i, "write_with_imm longer than 2 GiB - 1 on this provider (see ofi docs)");
            }
        }
    }
    if (!connect_called_.load(std::memory_order_acquire)) {
        return PostStatus::not_connected("connect() has not been called on this queue pair");
    }
    if (batch.empty()) return PostStatus::ok();
    Ring& r = send_;
    const std::uint64_t tail = r.cursors.head();
    if (batch.size() > r.cursors.free_slots(r.limit, tail)) return PostStatus::queue_full();

    bool flush = error_.load(std::memory_order_acquire);
    if (!flush && peer_gone_.load(std::memory_order_relaxed)) {
        // The first request after the peer vanished is the one that finds out (see peer_gone()); after a
        // disconnect of the peer, it is flushed.
        enter_error(r, tail, goodbye_.load(std::memory_order_acquire) ? WcStatus::flushed
                                                                       : WcStatus::transport_retry_exceeded);
        flush = true;
    }
    bool synthetic = false;
    std::uint64_t seq = tail;
    for (const SendRequest& req : batch) {
        Slot& s = r.at(seq);
        s.seq = seq++;
        if (!prepare_send(s, req, flush)) flush = true;
        synthetic |= s.ops_total == 0;
    }
    r.cursors.publish(seq);
    service::nudge();
    r.cq->nudge();
    if (r.direct.load(std::memory_order_acquire) && !error_.load(std::memory_order_acquire)) {
        if (post_range_inline(r)) return PostStatus::ok();
    }
    return post_slow(r, synthetic);
}

PostStatus OfiQp::post_recv(std::span<const RecvRequest> batch) noexcept {
    if (srq_ && !batch.empty()) {
        return PostStatus::invalid(0, "this QP takes its receives from a shared receive queue; post them there "
                                      "(SharedReceiveQueue::post_recv)");
    }
    if (auto st = detail::validate_recv_batch(batch, caps); !st) return st;
    if (batch.empty()) return PostStatus::ok();
    Ring& r = recv_;
    const std::uint64_t tail = r.cursors.head();
    if (batch.size() > r.cursors.free_slots(r.limit, tail)) return PostStatus::queue_full();

    bool flush = error_.load(std::memory_order_acquire);
    bool synthetic = false;
    std::uint64_t seq = tail;
    for (const RecvRequest& req : batch) {
        Slot& s = r.at(seq);
        s.seq = seq++;
        if (!prepare_recv(s, req, flush)) flush = true;
        synthetic |= s.ops_total == 0;
    }
    r.cursors.publish(seq);
    service::nudge();
    r.cq->nudge();
    if (r.direct.load(std::memory_order_acquire) && !error_.load(std::memory_order_acquire)) {
        if (post_range_inline(r)) return PostStatus::ok();
    }
    return post_slow(r, synthetic);
}

// ---- Errors

void OfiQp::enter_error(Ring& origin, std::uint64_t origin_seq, WcStatus reason) noexcept {
    if (error_.load(std::memory_order_acquire)) return;
    origin_status_.store(reason, std::memory_order_release);
    std::uint64_t none = no_seq;
    origin.error_origin.compare_exchange_strong(none, origin_seq, std::memory_order_acq_rel);
    none = no_seq;
    origin.flush_from.compare_exchange_strong(none, origin_seq + 1, std::memory_order_acq_rel);
    // On the other queue, requests the provider had finished before this moment keep their status (a
    // message that arrived before the peer went away is delivered); the rest complete flushed.
    Ring& other = &origin == &send_ ? recv_ : send_;
    const std::uint64_t tail = other.cursors.posted_seen();
    std::uint64_t first_open = other.cursors.retired.load(std::memory_order_acquire);
    while (first_open < tail && other.at(first_open).done.load(std::memory_order_acquire)) ++first_open;
    none = no_seq;
    other.flush_from.compare_exchange_strong(none, first_open, std::memory_order_acq_rel);
    // seq_cst, as park()'s: one of the two sees the other (release_parked).
    if (error_.exchange(true, std::memory_order_seq_cst)) return;
    state_.store(QpState::error, std::memory_order_release);
    send_.direct.store(false, std::memory_order_release);
    recv_.direct.store(false, std::memory_order_release);
    cancel_receives();
    if (srq_) {
        // The endpoint would go on taking the shared queue's receives for the peer's messages: its
        // connection ends here (the peer's requests fail as after a loss), what it had taken comes back
        // flushed, and the queue's other receives stay for the other QPs. Then Last WQE Reached.
        // Emulated, the QP takes a receive of the queue only as it completes it: its bounces are cancelled
        // (what waits in them is dropped by the queue's next match) and nothing of the queue is flushed.
        if (ep_ready_.load(std::memory_order_acquire) && ep_) {
            if (srq_->emulated()) {
                for (SrqBounce& b : bounces_) fi_cancel(&ep_->fid, &b.ctx);
            }
            if (profile_.ep_type == FI_EP_MSG) fi_shutdown(ep_.get(), 0);
        }
        AsyncEvent ev;
        ev.type = EventType::qp_last_wqe_reached;
        ev.qp_num = qp_num;
        ev.what = "last WQE reached (the QP on a shared receive queue is in error)";
        dom_->push_event(ev);
    }
    // The peer's requests from now on must fail as they would against an RC QP in error: its liveness
    // connection breaks (across processes), a peer in this process is told at once.
    close_liveness_listener();
    if (std::uint64_t peer = peer_nonce_.load(std::memory_order_acquire); peer != 0) registry::tell_peer_gone(peer);
    release_parked();
}

void OfiQp::park(Slot& s) noexcept {
    s.status = WcStatus::flushed;
    // seq_cst with enter_error's exchange: either it sees this slot parked, or this sees the error.
    s.parked.store(true, std::memory_order_release);
    parked_.fetch_add(1, std::memory_order_seq_cst);
    if (error_.load(std::memory_order_seq_cst)) release_parked();  // nothing else would release it
}

void OfiQp::release_parked() noexcept {
    if (parked_.load(std::memory_order_seq_cst) == 0) return;
    bool any = false;
    const std::uint64_t tail = recv_.cursors.posted_seen();
    for (std::uint64_t i = recv_.cursors.retired.load(std::memory_order_acquire); i < tail; ++i) {
        Slot& s = recv_.at(i);
        if (!s.parked.exchange(false, std::memory_order_acq_rel)) continue;
        parked_.fetch_sub(1, std::memory_order_acq_rel);
        s.done.store(true, std::memory_order_release);
        any = true;
    }
    if (any) recv_.cq->notify(recv_);
}

void OfiQp::lower_origin(Slot& s) noexcept {
    Ring& r = *s.ring;
    std::uint64_t origin = r.error_origin.load(std::memory_order_acquire);
    if (origin == no_seq || s.seq >= origin || s.seq < r.head) return;
    r.error_origin.store(s.seq, std::memory_order_release);
    r.flush_from.store(s.seq + 1, std::memory_order_release);
    if (s.status == WcStatus::flushed) s.status = origin_status_.load(std::memory_order_acquire);
}

// Receives still at the provider would wait for a message forever; cancelling them makes the provider
// return them (FI_ECANCELED), which delivers as flushed. Contexts not posted are ignored by fi_cancel.
void OfiQp::cancel_receives() noexcept {
    if (!ep_ready_.load(std::memory_order_acquire) || !ep_) return;
    for (std::uint32_t i = 0; i <= recv_.mask; ++i) fi_cancel(&ep_->fid, &recv_.slots[i].ops[0]);
}


// ---- Shared receive queue

// Segments are checked here, at post: the provider's context cannot fail one receive at the QP that takes
// it (ibv_post_srq_recv accepts them, and the taking QP fails with local_protection).
PostStatus OfiSrq::post_recv(std::span<const RecvRequest> batch) noexcept {
    if (auto st = detail::validate_srq_batch(batch, max_sge); !st) return st;
    if (batch.empty()) return PostStatus::ok();
    const MrTable& mrs = dom_->mrs();
    for (std::uint32_t i = 0; i < batch.size(); ++i) {
        for (const LocalSegment& g : batch[i].segments()) {
            if (g.length == 0) continue;
            const MrEntry* e = mrs.find(g.lkey);
            if (e == nullptr || g.addr < e->addr || g.addr - e->addr > e->length ||
                g.length > e->length - (g.addr - e->addr) || !e->local_write) {
                return PostStatus::invalid(i, "a segment lies outside its region, or the region lacks local_write");
            }
        }
    }
    std::lock_guard lock(mu_);
    if (outstanding_ + batch.size() > max_recv) return PostStatus::queue_full();
    if (emulated_) {
        // Queued in posted order; the receive CQs' next reads hand them to messages waiting in bounces.
        for (const RecvRequest& r : batch) {
            SrqEntry& e = entries_[next_seq_ % max_recv];
            std::uint32_t n = 0;
            for (const LocalSegment& g : r.segments()) {
                if (g.length == 0) continue;
                e.iov[n].iov_base = reinterpret_cast<void*>(g.addr);
                e.iov[n].iov_len = g.length;
                ++n;
            }
            e.iov_count = n;
            e.id = r.id;
            e.seq = next_seq_++;
            ++outstanding_;
        }
        held_.store(outstanding_, std::memory_order_relaxed);
        service::nudge();
        return PostStatus::ok();
    }
    for (std::uint32_t i = 0; i < batch.size(); ++i) {
        const std::uint32_t at = free_top_;
        SrqEntry& e = entries_[at];
        std::uint32_t n = 0;
        for (const LocalSegment& g : batch[i].segments()) {
            if (g.length == 0) continue;
            e.iov[n].iov_base = reinterpret_cast<void*>(g.addr);
            e.iov[n].iov_len = g.length;
            e.desc[n] = mrs.find(g.lkey)->desc;
            ++n;
        }
        e.id = batch[i].id;
        e.seq = next_seq_;
        fi_msg m{e.iov, e.desc, n, FI_ADDR_UNSPEC, &e.ctx, 0};
        long ret = fi_recvmsg(srx_.get(), &m, FI_COMPLETION);
        for (int tries = 0; ret == -FI_EAGAIN && tries < 1000; ++tries) {
            std::this_thread::yield();
            ret = fi_recvmsg(srx_.get(), &m, FI_COMPLETION);
        }
        if (ret != 0) {
            // The provider's context allocates its entries as it goes; it refuses only when memory runs out.
            // The receives before this one stay posted.
            return PostStatus::invalid(i, "the provider's shared receive context refused the receive (out of memory)");
        }
        free_top_ = e.next_free;
        ++outstanding_;
        ++next_seq_;
        held_.store(outstanding_, std::memory_order_relaxed);
    }
    service::nudge();  // the QPs on the queue have receives out now: the service thread's rounds may matter
    return PostStatus::ok();
}

std::uint64_t OfiSrq::retire(SrqEntry& e) noexcept {
    bool fire = false;
    std::uint64_t id = 0;
    {
        std::lock_guard lock(mu_);
        id = e.id;
        e.next_free = free_top_;
        free_top_ = static_cast<std::uint32_t>(&e - entries_.get());
        fire = count_off();
    }
    if (fire) limit_crossed();
    return id;
}

// mu_ held. One receive fewer outstanding; true when that took the queue below an armed limit (disarmed now).
bool OfiSrq::count_off() noexcept {
    --outstanding_;
    held_.store(outstanding_, std::memory_order_relaxed);
    if (limit_ == 0 || outstanding_ >= limit_) return false;
    limit_ = 0;
    return true;
}

void OfiSrq::limit_crossed() noexcept {
    AsyncEvent ev;
    ev.type = EventType::srq_limit_reached;
    ev.srq_num = srq_num;
    ev.what = "shared receive queue below its limit";
    dom_->push_event(ev);
}

// ---- Emulated shared receive queue (see ofi_srq.cpp)

bool OfiSrq::take(Taken& out) noexcept {
    bool fire = false;
    {
        std::lock_guard lock(mu_);
        if (outstanding_ == 0) return false;
        const SrqEntry& e = entries_[(next_seq_ - outstanding_) % max_recv];
        out.id = e.id;
        out.seq = e.seq;
        out.iov_count = e.iov_count;
        std::copy_n(e.iov, e.iov_count, out.iov.begin());
        fire = count_off();
    }
    if (fire) limit_crossed();
    return true;
}

// The completion of receive `t` for the message in bounce `b`: its bytes are copied into the receive's
// segments, except for a write with immediate, whose bytes went to the write's target. False when the
// message does not fit (the receive's segments, or the bounce buffer itself): `c` then fails with the
// status a receive too small gets on this provider (local_length), and the QP goes to error.
bool OfiSrq::deliver_bounce(SrqBounce& b, const Taken& t, Completion& c) noexcept {
    const Profile& p = dom_->profile();
    c = Completion{};
    c.id = t.id;
    c.qp_num = b.qp->qp_num;
    c.opcode = Opcode::recv;
    if (b.err != 0) {
        c.status = map_error(p, b.err, b.prov_errno);
        c.vendor_err = static_cast<std::uint32_t>(b.prov_errno != 0 ? b.prov_errno : b.err);
        return false;
    }
    fi_cq_data_entry e{};
    e.len = b.len;
    e.flags = b.flags;
    e.data = b.data;
    const Received got = received(e, p.emulated_imm, Opcode::recv);
    c.opcode = got.opcode;
    if (got.opcode != Opcode::recv_rdma_with_imm) {
        std::size_t room = 0;
        for (std::uint32_t i = 0; i < t.iov_count; ++i) room += t.iov[i].iov_len;
        if (b.len > room) {
            c.status = map_error(p, FI_ETRUNC, 0);
            c.vendor_err = FI_ETRUNC;
            return false;
        }
        std::size_t at = 0;
        for (std::uint32_t i = 0; i < t.iov_count && at < b.len; ++i) {
            const std::size_t n = std::min(t.iov[i].iov_len, b.len - at);
            std::memcpy(t.iov[i].iov_base, b.buf + at, n);
            at += n;
        }
    }
    c.status = WcStatus::success;
    c.byte_len = got.length;
    c.has_imm = got.has_imm;
    c.imm = got.imm;
    return true;
}

void OfiQp::post_bounce(SrqBounce& b) noexcept {
    b.state = SrqBounce::State::idle;
    if (bounces_closed_ || !ep_ready_.load(std::memory_order_acquire) || !ep_ ||
        error_.load(std::memory_order_acquire)) {
        return;
    }
    iovec iov{b.buf, profile_.srq_bounce_size};
    void* desc = b.desc;
    fi_msg m{&iov, &desc, 1, FI_ADDR_UNSPEC, &b.ctx, 0};
    long ret = fi_recvmsg(ep_.get(), &m, FI_COMPLETION);
    for (int tries = 0; ret == -FI_EAGAIN && tries < eagain_retries; ++tries) {
        progress_own();
        ret = fi_recvmsg(ep_.get(), &m, FI_COMPLETION);
    }
    if (ret != 0) {
        // The endpoint takes no more receives: the QP goes to error, as when one of its own receives is
        // refused.
        enter_error(recv_, recv_.cursors.posted_seen(), map_error(profile_, static_cast<int>(-ret), 0));
        return;
    }
    b.state = SrqBounce::State::posted;
    // seq_cst with enter_error's exchange: either it cancels this bounce, or this sees the error.
    if (error_.load(std::memory_order_seq_cst)) fi_cancel(&ep_->fid, &b.ctx);
}

std::size_t OfiSrq::pump(const OfiCq& cq, std::vector<std::pair<std::uint64_t, Completion>>& out, std::size_t room,
                         const OfiQp* closing) noexcept {
    std::lock_guard lock(match_mu_);
    std::size_t total = 0;
    auto arrive = [this](SrqBounce& b) noexcept {
        b.state = SrqBounce::State::arrived;
        b.next = nullptr;
        if (arrived_tail_ != nullptr) {
            arrived_tail_->next = &b;
        } else {
            arrived_head_ = &b;
        }
        arrived_tail_ = &b;
    };
    // What arrived, in the order the provider completed it. Closing, to the end: no entry may name the
    // closing QP's bounces once it is gone.
    for (int round = 0; closing != nullptr || round < 8; ++round) {
        const ssize_t got = fi_cq_read(bounce_cq_.get(), entries_read_.data(), entries_read_.size());
        if (got > 0) {
            for (ssize_t i = 0; i < got; ++i) {
                const fi_cq_data_entry& e = entries_read_[static_cast<std::size_t>(i)];
                auto* b = static_cast<SrqBounce*>(e.op_context);
                if (b == nullptr) continue;
                b->len = e.len;
                b->flags = e.flags;
                b->data = e.data;
                b->err = 0;
                b->prov_errno = 0;
                arrive(*b);
            }
            total += static_cast<std::size_t>(got);
            if (static_cast<std::size_t>(got) < entries_read_.size()) break;
            continue;
        }
        if (got != -FI_EAVAIL) break;
        fi_cq_err_entry err{};
        if (fi_cq_readerr(bounce_cq_.get(), &err, 0) < 0) break;
        ++total;
        if (trace_errors()) {
            std::fprintf(stderr, "weft[ofi] srq bounce cq error: context %p err %d (%s) prov_errno %d len %zu\n",
                         err.op_context, err.err, fi_strerror(err.err), err.prov_errno, err.len);
        }
        auto* b = static_cast<SrqBounce*>(err.op_context);
        if (b == nullptr) continue;
        const int code = err.err < 0 ? -err.err : err.err;
        const int prov = err.prov_errno < 0 ? -err.prov_errno : err.prov_errno;
        OfiQp& qp = *b->qp;
        if (code == FI_ECANCELED || qp.bounces_closed_ || qp.in_error()) {
            b->state = SrqBounce::State::idle;  // cancelled by enter_error, or the endpoint is going
            continue;
        }
        const WcStatus st = map_error(dom_->profile(), code, err.prov_errno);
        // A message longer than the bounce buffer: it takes a receive like any other, which fails. Through
        // the verbs provider rxe reports it as its receive too small, local_qp_operation (docs/backends/ofi.md).
        if (st == WcStatus::local_length ||
            (dom_->profile().verbs_status && st == WcStatus::local_qp_operation)) {
            b->err = code;
            b->prov_errno = prov;
            b->len = err.len;
            arrive(*b);
            continue;
        }
        // Any other failure of a bounce fails the QP, as one of its own receives would; no receive of
        // the queue was taken.
        b->state = SrqBounce::State::idle;
        qp.enter_error(qp.recv_, qp.recv_.cursors.posted_seen(), st);
    }
    // Each message that arrived takes the oldest receive posted, while one is; a QP in error or closing
    // takes none, and its bounces are dropped.
    Taken t;
    bool blocked = false;  // a message waits: those after it wait too (arrival order)
    SrqBounce* prev = nullptr;
    for (SrqBounce** at = &arrived_head_; *at != nullptr;) {
        SrqBounce& b = **at;
        OfiQp& qp = *b.qp;
        const bool drop = qp.bounces_closed_ || qp.in_error();
        if (!drop && (blocked || done_.size() == done_.capacity() || !take(t))) {
            blocked = true;
            prev = &b;
            at = &b.next;
            continue;
        }
        *at = b.next;
        if (arrived_tail_ == &b) arrived_tail_ = prev;
        if (drop) {
            b.state = SrqBounce::State::idle;
            continue;
        }
        Completion c;
        const bool ok = deliver_bounce(b, t, c);
        done_.push_back(Done{t.seq, c, qp.recv_cq()});  // within the capacity checked above
        ++total;
        if (ok) {
            qp.post_bounce(b);
        } else {
            b.state = SrqBounce::State::idle;
            qp.enter_error(qp.recv_, qp.recv_.cursors.posted_seen(), c.status);
        }
    }
    // The completions of QPs that receive on `cq`, in the order they were matched.
    std::size_t kept = 0;
    for (std::size_t i = 0; i < done_.size(); ++i) {
        Done& d = done_[i];
        if (d.cq == &cq && (closing != nullptr || room > 0)) {
            try {
                out.emplace_back(d.seq, d.c);  // within capacity, except when closing
            } catch (...) {
                // Out of memory while closing: the completion is lost; the receive was counted off already.
            }
            if (room > 0) --room;
            continue;
        }
        if (kept != i) done_[kept] = d;
        ++kept;
    }
    done_.erase(done_.begin() + static_cast<std::ptrdiff_t>(kept), done_.end());
    return total;
}

// srq_mu_ held. Room for completions in srq_done_ without allocating: what was delivered is dropped from
// its front first.
std::size_t OfiCq::srq_room() noexcept {
    if (srq_head_ == srq_done_.size()) {
        srq_done_.clear();
        srq_head_ = 0;
    } else if (srq_done_.size() == srq_done_.capacity() && srq_head_ != 0) {
        srq_done_.erase(srq_done_.begin(), srq_done_.begin() + static_cast<std::ptrdiff_t>(srq_head_));
        srq_head_ = 0;
    }
    return srq_done_.capacity() - srq_done_.size();
}

// srq_mu_ held. Turns the entries of `qp`'s private CQ into completions naming `qp`, as many as srq_done_
// has room for: the rest wait in the private CQ, which holds every receive of the queue. `closing` (the
// endpoint is closed, the private CQ goes next) reads everything.
std::size_t OfiCq::read_srq_cq(OfiQp& qp, bool closing) noexcept {
    fid_cq* cq = qp.srq_cq();
    OfiSrq* srq = qp.srq();
    if (srq != nullptr && srq->emulated()) {
        return srq->pump(*this, srq_done_, srq_done_.capacity() - srq_done_.size(), closing ? &qp : nullptr);
    }
    if (cq == nullptr || srq == nullptr) return 0;
    std::size_t total = 0;
    auto push = [this](std::uint64_t seq, const Completion& c) noexcept {
        try {
            srq_done_.emplace_back(seq, c);  // within capacity, except when closing
        } catch (...) {
            // Out of memory while closing: the completion is lost; the receive's entry is free again.
        }
    };
    for (;;) {
        const std::size_t room = closing ? srq_entries_.size() : std::min(srq_room(), srq_entries_.size());
        if (room == 0) break;
        const ssize_t got = fi_cq_read(cq, srq_entries_.data(), room);
        if (got > 0) {
            for (ssize_t i = 0; i < got; ++i) {
                const fi_cq_data_entry& e = srq_entries_[static_cast<std::size_t>(i)];
                auto* entry = static_cast<SrqEntry*>(e.op_context);
                if (entry == nullptr) continue;
                Completion c{};
                c.status = WcStatus::success;
                c.qp_num = qp.qp_num;
                const Received got_as = received(e, profile_->emulated_imm, Opcode::recv);
                c.opcode = got_as.opcode;
                c.byte_len = got_as.length;
                c.has_imm = got_as.has_imm;
                c.imm = got_as.imm;
                const std::uint64_t seq = entry->seq;
                c.id = srq->retire(*entry);
                push(seq, c);
            }
            total += static_cast<std::size_t>(got);
            if (static_cast<std::size_t>(got) < room) break;
            continue;
        }
        if (got != -FI_EAVAIL) break;
        fi_cq_err_entry err{};
        if (fi_cq_readerr(cq, &err, 0) < 0) break;
        ++total;
        if (trace_errors()) {
            std::fprintf(stderr, "weft[ofi] srq cq error: qp %u context %p err %d (%s) prov_errno %d len %zu\n",
                         qp.qp_num, err.op_context, err.err, fi_strerror(err.err), err.prov_errno, err.len);
        }
        auto* entry = static_cast<SrqEntry*>(err.op_context);
        if (entry == nullptr) continue;
        const int code = err.err < 0 ? -err.err : err.err;
        const int prov = err.prov_errno < 0 ? -err.prov_errno : err.prov_errno;
        WcStatus st = WcStatus::flushed;
        if (!closing && !qp.in_error()) {
            // The receive failed while the QP was still up: it is the error's origin (as absorb_error).
            st = map_error(*profile_, code, err.prov_errno);
            if (code == FI_ECANCELED || st == WcStatus::flushed) st = WcStatus::transport_retry_exceeded;
            qp.enter_error(qp.recv_, qp.recv_.cursors.posted_seen(), st);
        }
        Completion c{};
        c.status = st;
        c.qp_num = qp.qp_num;
        c.opcode = Opcode::recv;
        if (st != WcStatus::flushed) c.vendor_err = static_cast<std::uint32_t>(prov != 0 ? prov : code);
        const std::uint64_t seq = entry->seq;
        c.id = srq->retire(*entry);
        push(seq, c);
    }
    return total;
}

std::size_t OfiCq::pump_srq() noexcept {
    std::unique_lock lock(srq_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return 0;
    std::size_t total = 0;
    srq_room();  // compacts first, so that what this round reads is one range
    const std::size_t before = srq_done_.size();
    const OfiSrq* pumped = nullptr;  // an emulated queue is read once for all its QPs (the usual case: one queue)
    for (OfiQp* qp : srq_readers_) {
        if (qp->srq() == pumped) continue;
        if (qp->srq()->emulated()) pumped = qp->srq();
        total += read_srq_cq(*qp, false);
    }
    // Each QP's CQ keeps the order its receives completed in, but not the order between QPs: what this
    // round read leaves in the order the receives were posted, which is the order they were taken in.
    // An insertion sort: the range is short, and neither allocates nor reorders equal keys.
    for (std::size_t i = before + 1; i < srq_done_.size(); ++i) {
        for (std::size_t j = i; j > before && srq_done_[j - 1].first > srq_done_[j].first; --j) {
            std::swap(srq_done_[j - 1], srq_done_[j]);
        }
    }
    srq_pending_.store(srq_head_ != srq_done_.size(), std::memory_order_release);
    return total;
}

std::size_t OfiCq::deliver_srq(std::span<Completion> out, std::size_t n) noexcept {
    std::unique_lock lock(srq_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return n;
    while (n < out.size() && srq_head_ != srq_done_.size()) out[n++] = srq_done_[srq_head_++].second;
    srq_pending_.store(srq_head_ != srq_done_.size(), std::memory_order_release);
    return n;
}

// ---- Completion queue

bool OfiCq::kick() noexcept {
    std::unique_lock lock(progress_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    fi_cq_data_entry scratch;
    // Progresses; with a count of 0 nothing is consumed and the answer says whether entries wait.
    ssize_t r = fi_cq_read(cq_.get(), &scratch, 0);
    return r != -FI_EAGAIN && r >= -FI_EAVAIL;
}

void OfiCq::kick_local_peers() noexcept {
    std::unique_lock lock(bound_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    for (OfiQp* qp : bound_) {
        if (qp->has_local_peer() && qp->outstanding()) qp->kick_local_peer();
    }
}

// The consumer's own walk: no lock (see KickLink), so it neither waits for nor skips a round of the service
// thread's.
inline void OfiCq::kick_waited_peers() noexcept {
    for (KickLink* l = kicks_.load(std::memory_order_acquire); l != nullptr; l = l->next.load(std::memory_order_acquire)) {
        if (l->qp->outstanding()) l->qp->kick_local_peer();
    }
}

bool OfiCq::connected_qp() noexcept {
    std::unique_lock lock(bound_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    for (OfiQp* qp : bound_) {
        if (qp->state() == QpState::rts) return true;
    }
    return false;
}

bool OfiCq::round_needed() noexcept {
    if (thread_progress_) return true;  // a peer may write, read or call at any time
    if (inbox_.load(std::memory_order_acquire) != nullptr) return true;
    // Receives of a shared queue may complete at any time on private CQs that do not wake this one.
    if (srq_unwoken_.load(std::memory_order_relaxed) != 0) return true;
    const bool native = wait_fd_ >= 0;
    if (native && local_links_.load(std::memory_order_relaxed) == 0) return false;
    std::unique_lock lock(bound_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return true;
    for (OfiQp* qp : bound_) {
        if (qp->outstanding() && (!native || qp->has_local_peer())) return true;
    }
    return false;
}

bool OfiCq::local_peer_outstanding() noexcept {
    if (local_links_.load(std::memory_order_relaxed) == 0) return false;
    std::unique_lock lock(bound_mu_, std::try_to_lock);
    if (!lock.owns_lock()) return true;
    for (OfiQp* qp : bound_) {
        if (qp->has_local_peer() && qp->outstanding()) return true;
    }
    return false;
}

bool OfiCq::service_round() noexcept {
    if (local_links_.load(std::memory_order_relaxed) != 0) kick_local_peers();
    if (thread_progress_ && !fd_mode_.load(std::memory_order_acquire)) {
        // progress=thread: move the provider although nobody polls this CQ, leaving its entries to the
        // application. A CQ in fd() mode is left to the rounds below, as without the mode: the thread
        // sleeping on its descriptor polls, and so progresses, whenever the provider has data.
        if (connected_qp()) kick();
        return false;
    }
    if (srq_unwoken_.load(std::memory_order_relaxed) != 0 && !signaled_.load(std::memory_order_acquire) &&
        (pump_srq() > 0 || srq_pending_.load(std::memory_order_acquire))) {
        wake();
        return true;
    }
    if (wait_fd_ >= 0) {
        // The provider wakes the descriptor itself when it writes an entry, but tcp writes entries only
        // inside calls on this CQ: with a peer QP in this process, a thread sleeping on the descriptor for a
        // request's completion missed its wake-up about once in 300 round trips (the next poll found the
        // entry at once). So progress this CQ too, and wake the descriptor when entries wait; the round's
        // pause keeps backing off (an application that does not poll for a while costs a signal per round).
        if (local_links_.load(std::memory_order_relaxed) != 0 && local_peer_outstanding() && kick()) {
            fi_cq_signal(cq_.get());
        }
        return false;
    }
    if (signaled_.load(std::memory_order_acquire)) return false;  // the application has not polled yet
    if (inbox_.load(std::memory_order_acquire) != nullptr || kick()) {
        wake();
        return true;
    }
    return false;
}

void OfiCq::wake() noexcept {
    if (wait_fd_ >= 0) {
        fi_cq_signal(cq_.get());
        return;
    }
    if (event_fd_ >= 0 && !signaled_.exchange(true, std::memory_order_acq_rel)) {
        std::uint64_t one = 1;
        [[maybe_unused]] ssize_t w = ::write(event_fd_, &one, sizeof one);
    }
}

void OfiCq::peer_lost() noexcept {
    detours_.fetch_or(detour_loss, std::memory_order_release);
    wake();
}

// The consumer's part of a peer's loss (see OfiQp::handle_loss): after this poll read the provider's entries.
void OfiCq::handle_losses() noexcept {
    if ((detours_.fetch_and(static_cast<std::uint8_t>(~detour_loss), std::memory_order_acq_rel) & detour_loss) == 0) return;
    std::unique_lock lock(bound_mu_, std::try_to_lock);
    if (!lock.owns_lock()) {
        detours_.fetch_or(detour_loss, std::memory_order_release);
        return;
    }
    const auto now = std::chrono::steady_clock::now();
    bool again = false;
    for (OfiQp* qp : bound_) {
        if (qp->send_cq_.get() == this && qp->lost() && !qp->handle_loss(now)) again = true;
    }
    if (again) detours_.fetch_or(detour_loss, std::memory_order_release);
}

void OfiCq::notify(Ring& ring) noexcept {
    if (!ring.in_inbox.exchange(true, std::memory_order_acq_rel)) {
        Ring* old = inbox_.load(std::memory_order_relaxed);
        do {
            ring.inbox_next = old;
        } while (!inbox_.compare_exchange_weak(old, &ring, std::memory_order_release, std::memory_order_relaxed));
    }
    if (fd_mode_.load(std::memory_order_acquire) || waiters_.load(std::memory_order_acquire) != 0) wake();
}

void OfiCq::take_inbox() noexcept {
    Ring* r = inbox_.exchange(nullptr, std::memory_order_acq_rel);
    while (r != nullptr) {
        Ring* next = r->inbox_next;
        r->in_inbox.store(false, std::memory_order_release);
        link_ready(*r);
        r = next;
    }
}

void OfiCq::link_ready(Ring& r) noexcept {
    if (r.in_ready) return;
    r.in_ready = true;
    r.ready_next = nullptr;
    if (ready_tail_) {
        ready_tail_->ready_next = &r;
    } else {
        ready_head_ = &r;
    }
    ready_tail_ = &r;
}

[[gnu::always_inline]] inline void OfiCq::slot_finished(Slot& s) noexcept {
    if (fence_orders(s.kind[0])) {
        // Read from the provider, so it was counted when handed over. A fenced request may be waiting for
        // it: the poll that read it drives the QP.
        if (s.ring->ordered_out.fetch_sub(1, std::memory_order_acq_rel) == 1 &&
            s.ring->posted.load(std::memory_order_acquire) != s.ring->cursors.posted_seen()) {
            registry::want_attention(s.ring->qp);
        }
    }
    s.done.store(true, std::memory_order_release);
    link_ready(*s.ring);
}

[[gnu::always_inline]] inline void OfiCq::absorb(const fi_cq_data_entry& e) noexcept {
    auto* ref = static_cast<OpRef*>(e.op_context);
    if (ref == nullptr) return;  // not ours: no weft operation runs without a context
    Slot& s = *ref->slot;
    if (!s.ring->send_side) {
        const Received got_as = received(e, profile_->emulated_imm, s.opcode);
        s.opcode = got_as.opcode;
        s.length = got_as.length;
        if (got_as.has_imm) {
            s.has_imm = true;
            s.imm = got_as.imm;
        }
    }
    if (s.complete_op()) slot_finished(s);
}

void OfiCq::absorb_error() noexcept {
    fi_cq_err_entry err{};
    if (fi_cq_readerr(cq_.get(), &err, 0) < 0) return;
    auto* ref = static_cast<OpRef*>(err.op_context);
    if (trace_errors()) {
        std::fprintf(stderr, "weft[ofi] cq error: context %p err %d (%s) prov_errno %d flags %s len %zu\n",
                     err.op_context, err.err, fi_strerror(err.err), err.prov_errno,
                     fi_tostr(&err.flags, FI_TYPE_CQ_EVENT_FLAGS), err.len);
    }
    if (ref == nullptr) return;
    Slot& s = *ref->slot;
    Ring& r = *s.ring;
    OfiQp& qp = *r.qp;
    const bool already = qp.in_error();
    // shm (1.17) reports some errors negated.
    const int code = err.err < 0 ? -err.err : err.err;
    const int prov = err.prov_errno < 0 ? -err.prov_errno : err.prov_errno;
    if (!already && !r.send_side && code == FI_ECANCELED) {
        // weft cancels only after the QP is in error: the provider returned a posted receive because the
        // connection closed under it (tcp, when the peer's endpoint closes). A QP of an RC device does
        // not see its peer go while it only waits for messages (ibv_rc_pingpong's server still waits for
        // its last send's completion when the client exits): the receive stays outstanding, and completes
        // flushed once the QP goes to error for a reason of its own (a request of its own failing).
        if (s.complete_op()) qp.park(s);
        return;
    }
    WcStatus st = map_error(*profile_, code, err.prov_errno);
    // weft cancels only after the QP is in error; a cancellation or flush before that is the provider
    // tearing the connection down (tcp does so when the peer closes it, or when the peer refused an access;
    // the verbs provider flushes once the peer disconnected, see OfiQp::disconnected).
    if ((code == FI_ECANCELED || st == WcStatus::flushed) && !already) st = WcStatus::transport_retry_exceeded;
    if (s.status == WcStatus::success) {
        s.status = st;
        s.vendor_err = static_cast<std::uint32_t>(prov != 0 ? prov : code);
        if (!r.send_side) s.length = static_cast<std::uint32_t>(err.len);
    }
    if (already) {
        qp.lower_origin(s);
    } else {
        qp.enter_error(r, s.seq, st == WcStatus::flushed ? WcStatus::general : st);
    }
    if (s.complete_op()) slot_finished(s);
}

std::size_t OfiCq::pump(ssize_t first) noexcept {
    std::size_t total = 0;
    ssize_t got = first;
    for (int round = 0; round < 8; ++round, got = unread) {
        if (got == unread) got = fi_cq_read(cq_.get(), entries_.data(), entries_.size());
        if (got > 0) {
            for (ssize_t i = 0; i < got; ++i) absorb(entries_[static_cast<std::size_t>(i)]);
            total += static_cast<std::size_t>(got);
            if (static_cast<std::size_t>(got) < entries_.size()) break;
            continue;
        }
        if (got == -FI_EAVAIL) {
            absorb_error();
            ++total;
            continue;
        }
        break;
    }
    if (srq_readers_n_.load(std::memory_order_acquire) != 0) total += pump_srq();
    return total;
}

// Delivers the finished prefix of each ready ring into out[n..]: inline in poll()'s path for the poll that
// finds its completions, called by the rest.
[[gnu::always_inline]] inline std::size_t OfiCq::deliver_inline(std::span<Completion> out, std::size_t n) noexcept {
    if (srq_pending_.load(std::memory_order_acquire)) n = deliver_srq(out, n);
    while (ready_head_ != nullptr && n < out.size()) {
        Ring& r = *ready_head_;
        const bool qp_error = r.qp->in_error();
        if (qp_error) {
            std::uint64_t none = no_seq;
            r.flush_from.compare_exchange_strong(none, r.head, std::memory_order_acq_rel);
        }
        const std::uint64_t flush_from = r.flush_from.load(std::memory_order_acquire);
        const std::uint64_t origin = r.error_origin.load(std::memory_order_acquire);
        bool more = true;
        while (n < out.size()) {
            Slot& s = r.at(r.head);
            if (!s.done.load(std::memory_order_acquire)) {
                more = false;
                break;
            }
            WcStatus st = s.status;
            if (r.head >= flush_from && r.head != origin) st = WcStatus::flushed;
            if (st != WcStatus::success || s.report) {
                Completion& c = out[n++];
                c = Completion{};
                c.id = s.id;
                c.status = st;
                c.qp_num = r.qp->qp_num;
                c.opcode = s.opcode;
                if (st == WcStatus::success) {
                    c.byte_len = s.length;
                    c.imm = s.imm;
                    c.has_imm = s.has_imm;
                } else if (st != WcStatus::flushed) {
                    c.vendor_err = s.vendor_err;
                }
                r.cursors.retire_through(r.head);
            }
            s.done.store(false, std::memory_order_relaxed);
            ++r.head;
        }
        r.delivered.store(r.head, std::memory_order_release);
        if (more) break;  // out is full; this ring stays first
        ready_head_ = r.ready_next;
        if (ready_head_ == nullptr) ready_tail_ = nullptr;
        r.in_ready = false;
        r.ready_next = nullptr;
    }
    return n;
}

std::size_t OfiCq::deliver(std::span<Completion> out, std::size_t n) noexcept { return deliver_inline(out, n); }

// Whether poll() would return something now, without consuming it.
bool OfiCq::deliverable() noexcept {
    if (srq_pending_.load(std::memory_order_acquire)) return true;
    take_inbox();
    for (Ring* r = ready_head_; r != nullptr; r = r->ready_next) {
        const bool qp_error = r->qp->in_error();
        for (std::uint64_t i = r->head;; ++i) {
            Slot& s = r->at(i);
            if (!s.done.load(std::memory_order_acquire) || i - r->head > r->mask) break;
            if (qp_error || s.status != WcStatus::success || s.report) return true;
        }
    }
    return false;
}

// An empty poll, with fd() in use: the descriptor must fire again when something arrives.
void OfiCq::rearm() noexcept {
    if (wait_fd_ >= 0) {
        // fi_trywait arms the provider's wait object, or says entries are waiting: then keep it readable.
        fid_t fids[1] = {&cq_->fid};
        if (fi_trywait(dom_->fabric(), fids, 1) != 0) fi_cq_signal(cq_.get());
        return;
    }
    if (signaled_.exchange(false, std::memory_order_acq_rel)) {
        std::uint64_t count = 0;
        [[maybe_unused]] ssize_t r = ::read(event_fd_, &count, sizeof count);
    }
    // Anything that came after this poll looked would otherwise wait for the service thread's next round.
    if (inbox_.load(std::memory_order_acquire) != nullptr) wake();
}

// What an empty poll does besides reading the provider: QPs connecting or with a backlog are driven, and
// peers in this process that our requests wait on are kicked. Nothing here costs more than a few loads
// while there is nothing to do.
void OfiCq::idle() noexcept {
    if (registry::attention_pending()) registry::drive_all(true);
    kick_waited_peers();
    if (fd_mode_.load(std::memory_order_relaxed)) rearm();
}

std::size_t OfiCq::poll_here(std::span<Completion> out, ssize_t first) noexcept {
    if (inbox_.load(std::memory_order_relaxed) != nullptr) take_inbox();
    std::size_t n = deliver(out, 0);
    // Entries poll() has read already are absorbed even when `out` is full.
    if ((first != unread || n < out.size()) && pump(first) > 0) n = deliver(out, n);
    if (loss_pending()) {
        handle_losses();
        if (n < out.size()) {
            take_inbox();
            n = deliver(out, n);
        }
    }
    if (n == 0) {
        idle();
        if (inbox_.load(std::memory_order_relaxed) != nullptr) {
            take_inbox();
            n = deliver(out, n);
        }
    } else if (registry::attention_pending()) {
        registry::drive_all(true);
    }
    return n;
}

// An empty poll is what a busy-polling consumer does most, so it has a path of its own: while nothing is
// ready or notified here, no peer loss waits to be handled and neither fd() mode nor a shared receive queue
// asks for more, a provider read that finds nothing leaves only the idle duties, inline. So has the poll
// that finds the completions it returns, the next most common: a read short of a full batch leaves nothing
// more to read, and nothing was ready before it, so its entries are absorbed and delivered here, without
// pump()'s rounds or poll_here()'s first delivery. Everything else goes on in poll_here(), which then starts
// from the entries this read got.
std::size_t OfiCq::poll(std::span<Completion> out) noexcept {
    if (ready_head_ != nullptr || inbox_.load(std::memory_order_relaxed) != nullptr ||
        detours_.load(std::memory_order_relaxed) != 0) {
        return poll_here(out);
    }
    const ssize_t got = fi_cq_read(cq_.get(), entries_.data(), entries_.size());
    if (got > 0 && static_cast<std::size_t>(got) < entries_.size() &&
        srq_readers_n_.load(std::memory_order_acquire) == 0) {
        for (ssize_t i = 0; i < got; ++i) absorb(entries_[static_cast<std::size_t>(i)]);
        const std::size_t n = deliver_inline(out, 0);
        // Nothing to return (unsignaled requests, or no room in `out`): the rest of a poll's duties.
        if (n == 0) return poll_here(out);
        if (registry::attention_pending()) registry::drive_all(true);
        return n;
    }
    if (got != -FI_EAGAIN || registry::attention_pending()) return poll_here(out, got);
    kick_waited_peers();
    return 0;
}

// One round of wait(): true when poll() would return something.
bool OfiCq::wait_step() noexcept {
    if (deliverable()) {
        // Completions wait to be polled, but the provider still moves data only inside calls on its CQs:
        // a wait(0) that leaves them is the caller's way to let this side progress (tcp, shm, rxm).
        kick();
        return true;
    }
    pump();
    if (loss_pending()) handle_losses();
    if (registry::attention_pending()) registry::drive_all(true);
    if (deliverable()) return true;
    kick_waited_peers();
    return false;
}

// Blocks on the provider's wait object where it has one that its peers wake (verbs, tcp, rxm, sockets),
// in short slices only while a peer in this process or a connecting QP needs this thread's kicks. Without
// one (shm) sleeps between rounds, from 20 us doubling to 1 ms while nothing comes.
bool OfiCq::wait(std::chrono::nanoseconds timeout) {
    using namespace std::chrono_literals;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::chrono::nanoseconds pause = 20us;
    struct Waiting {
        std::atomic<std::uint32_t>& n;
        explicit Waiting(std::atomic<std::uint32_t>& c) : n(c) { n.fetch_add(1, std::memory_order_acq_rel); }
        ~Waiting() { n.fetch_sub(1, std::memory_order_acq_rel); }
    } waiting(waiters_);
    for (;;) {
        if (wait_step()) return true;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) return false;
        const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
        // Short slices only while this thread's kicks may be needed (a peer in this process has work) or
        // a QP needs driving; otherwise the provider's descriptor wakes us.
        const bool busy = registry::attention_pending() || loss_pending() ||
                          local_peer_outstanding() || srq_unwoken_.load(std::memory_order_relaxed) != 0;
        std::chrono::nanoseconds slice = std::min(left, pause);
        if (wait_fd_ >= 0 && !busy) slice = left;
        if (wait_fd_ >= 0) {
            // With peers in this process but none of their requests out, block until a post on a bound QP
            // nudges us (it may need our kicks then) or the provider wakes the descriptor.
            bool dozed = false;
            if (!busy && local_links_.load(std::memory_order_relaxed) != 0) {
                dozing_.store(true, std::memory_order_seq_cst);
                if (local_peer_outstanding()) {
                    dozing_.store(false, std::memory_order_relaxed);
                    slice = std::min(left, pause);
                } else {
                    dozed = true;
                }
            }
            fid_t fids[1] = {&cq_->fid};
            if (fi_trywait(dom_->fabric(), fids, 1) == 0) {
                pollfd pfd[2] = {{wait_fd_, POLLIN, 0}, {nudge_fd_, POLLIN, 0}};
                timespec ts{static_cast<time_t>(slice.count() / 1'000'000'000), static_cast<long>(slice.count() % 1'000'000'000)};
                ::ppoll(pfd, dozed ? 2 : 1, &ts, nullptr);
            }
            if (dozed) {
                dozing_.store(false, std::memory_order_relaxed);
                std::uint64_t count = 0;
                [[maybe_unused]] ssize_t r = ::read(nudge_fd_, &count, sizeof count);  // non-blocking
            }
        } else if (!busy && event_fd_ >= 0 && doze(left)) {
            pause = 20us;
            continue;
        } else {
            std::this_thread::sleep_for(slice);
        }
        pause = std::min<std::chrono::nanoseconds>(pause * 2, 1ms);
    }
}

// wait() without a native descriptor (shm): when no request of a bound QP is out, nothing can arrive until a
// post makes one (which nudges) or a synthetic completion is notified (which wakes): sleep on the event fd
// for up to `left` (at most doze_max as a bound on a missed nudge). False when there is something to do.
bool OfiCq::doze(std::chrono::nanoseconds left) noexcept {
    constexpr std::chrono::nanoseconds doze_max = std::chrono::milliseconds(100);
    dozing_.store(true, std::memory_order_seq_cst);
    if (round_needed() || deliverable()) {
        dozing_.store(false, std::memory_order_relaxed);
        return false;
    }
    const auto slice = std::min(left, doze_max);
    pollfd pfd{event_fd_, POLLIN, 0};
    timespec ts{static_cast<time_t>(slice.count() / 1'000'000'000), static_cast<long>(slice.count() % 1'000'000'000)};
    ::ppoll(&pfd, 1, &ts, nullptr);
    dozing_.store(false, std::memory_order_relaxed);
    if (!fd_mode_.load(std::memory_order_acquire) && signaled_.exchange(false, std::memory_order_acq_rel)) {
        std::uint64_t count = 0;
        [[maybe_unused]] ssize_t r = ::read(event_fd_, &count, sizeof count);
    }
    return true;
}

void OfiCq::end_doze() noexcept {
    if (nudge_fd_ < 0) {
        wake();  // the event fd a doze() polls
        return;
    }
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(nudge_fd_, &one, sizeof one);
}

void OfiCq::drain_provider() noexcept {
    while (pump() > 0) {
    }
}

void OfiCq::detach(Ring& ring) noexcept {
    take_inbox();
    Ring* prev = nullptr;
    for (Ring* r = ready_head_; r != nullptr; prev = r, r = r->ready_next) {
        if (r != &ring) continue;
        if (prev) {
            prev->ready_next = r->ready_next;
        } else {
            ready_head_ = r->ready_next;
        }
        if (ready_tail_ == r) ready_tail_ = prev;
        r->in_ready = false;
        break;
    }
}

}  // namespace weft::ofi
