// The data path: post_send and post_recv build one ibv_*_wr chain per batch in the QP's preallocated
// arrays and hand it to the provider in one call; poll translates ibv_wc into weft::Completion and retires
// the work-queue slots it covers. Nothing here allocates or throws; a batch costs one provider call (poll:
// one per 16 completions), plus one ibv_modify_qp on the error path only (see rerun_error_flush).
#include "verbs.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>

namespace weft::verbs {
namespace {

// weft::WcStatus is ibv_wc_status, value for value; a status added to rdma-core later maps to `general`.
static_assert(static_cast<int>(WcStatus::success) == IBV_WC_SUCCESS);
static_assert(static_cast<int>(WcStatus::local_length) == IBV_WC_LOC_LEN_ERR);
static_assert(static_cast<int>(WcStatus::local_qp_operation) == IBV_WC_LOC_QP_OP_ERR);
static_assert(static_cast<int>(WcStatus::local_eec_operation) == IBV_WC_LOC_EEC_OP_ERR);
static_assert(static_cast<int>(WcStatus::local_protection) == IBV_WC_LOC_PROT_ERR);
static_assert(static_cast<int>(WcStatus::flushed) == IBV_WC_WR_FLUSH_ERR);
static_assert(static_cast<int>(WcStatus::mw_bind) == IBV_WC_MW_BIND_ERR);
static_assert(static_cast<int>(WcStatus::bad_response) == IBV_WC_BAD_RESP_ERR);
static_assert(static_cast<int>(WcStatus::local_access) == IBV_WC_LOC_ACCESS_ERR);
static_assert(static_cast<int>(WcStatus::remote_invalid_request) == IBV_WC_REM_INV_REQ_ERR);
static_assert(static_cast<int>(WcStatus::remote_access) == IBV_WC_REM_ACCESS_ERR);
static_assert(static_cast<int>(WcStatus::remote_operation) == IBV_WC_REM_OP_ERR);
static_assert(static_cast<int>(WcStatus::transport_retry_exceeded) == IBV_WC_RETRY_EXC_ERR);
static_assert(static_cast<int>(WcStatus::rnr_retry_exceeded) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(static_cast<int>(WcStatus::local_rdd_violation) == IBV_WC_LOC_RDD_VIOL_ERR);
static_assert(static_cast<int>(WcStatus::remote_invalid_rd_request) == IBV_WC_REM_INV_RD_REQ_ERR);
static_assert(static_cast<int>(WcStatus::remote_aborted) == IBV_WC_REM_ABORT_ERR);
static_assert(static_cast<int>(WcStatus::invalid_eecn) == IBV_WC_INV_EECN_ERR);
static_assert(static_cast<int>(WcStatus::invalid_eec_state) == IBV_WC_INV_EEC_STATE_ERR);
static_assert(static_cast<int>(WcStatus::fatal) == IBV_WC_FATAL_ERR);
static_assert(static_cast<int>(WcStatus::response_timeout) == IBV_WC_RESP_TIMEOUT_ERR);
static_assert(static_cast<int>(WcStatus::general) == IBV_WC_GENERAL_ERR);

constexpr WcStatus to_status(ibv_wc_status s) noexcept {
    return s <= IBV_WC_GENERAL_ERR ? static_cast<WcStatus>(s) : WcStatus::general;
}

// Indexed by weft::Opcode; only the seven request opcodes are ever looked up.
constexpr std::array<ibv_wr_opcode, 7> wr_opcodes{
    IBV_WR_SEND,           // send
    IBV_WR_SEND_WITH_IMM,  // send_with_imm
    IBV_WR_RDMA_WRITE,     // write
    IBV_WR_RDMA_WRITE_WITH_IMM,  // write_with_imm
    IBV_WR_RDMA_READ,            // read
    IBV_WR_ATOMIC_FETCH_AND_ADD,  // fetch_add
    IBV_WR_ATOMIC_CMP_AND_SWP,    // compare_swap
};
static_assert(static_cast<int>(Opcode::compare_swap) == 6, "wr_opcodes follows weft::Opcode's order");

constexpr unsigned to_send_flags(SendFlags f) noexcept {
    unsigned out = 0;
    if (has(f, SendFlags::signaled)) out |= IBV_SEND_SIGNALED;
    if (has(f, SendFlags::fence)) out |= IBV_SEND_FENCE;
    if (has(f, SendFlags::inline_data)) out |= IBV_SEND_INLINE;
    if (has(f, SendFlags::solicited)) out |= IBV_SEND_SOLICITED;
    return out;
}

// Send-queue completion opcode of a successful completion; opcodes weft does not post fall back to the
// slot's record.
constexpr Opcode send_completion_opcode(ibv_wc_opcode op, Opcode posted) noexcept {
    switch (op) {
        case IBV_WC_SEND: return Opcode::send;
        case IBV_WC_RDMA_WRITE: return Opcode::write;
        case IBV_WC_RDMA_READ: return Opcode::read;
        case IBV_WC_COMP_SWAP: return Opcode::compare_swap;
        case IBV_WC_FETCH_ADD: return Opcode::fetch_add;
        default: return completion_opcode(posted);
    }
}

constexpr bool post_send_allowed(QpState s) noexcept {
    // In error (and sqe) posting is allowed: the requests complete as flushed, as the contract says.
    return s == QpState::rts || s == QpState::sqd || s == QpState::sqe || s == QpState::error;
}

// Moves a QP that is already in error to error again. rxe reads its receive queue only when its
// responder runs, and a receive rings no doorbell, so a receive posted to a QP in error would never be
// flushed, against the contract; re-entering error runs the responder. ERR -> ERR is legal on every
// device. Called once when poll first sees the QP fail, and by post_recv on a QP known to be in error:
// a system call on error paths only.
void rerun_error_flush(ibv_qp* qp) noexcept {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    (void)::ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

constexpr std::uint32_t next_slot(std::uint32_t slot, std::uint32_t capacity) noexcept {
    return slot + 1 == capacity ? 0 : slot + 1;
}

}  // namespace

// ---- Work-queue slots

bool WorkQueue::retire_through(std::uint32_t k) noexcept {
    const std::uint32_t outstanding = used.load(std::memory_order_acquire);
    if (k >= capacity || outstanding == 0) return false;
    const std::uint32_t count = (k >= tail ? k - tail : k + capacity - tail) + 1;
    if (count > outstanding) return false;
    tail = next_slot(k, capacity);
    used.fetch_sub(count, std::memory_order_release);
    return true;
}

WorkQueue* QueueTable::find(std::uint64_t wr_id) const noexcept {
    const auto index = static_cast<std::uint32_t>((wr_id >> wr_index_shift) & 0xffff);
    const auto generation = static_cast<std::uint16_t>(wr_id >> wr_generation_shift);
    const Entry* chunk = chunks_[index / chunk_size].load(std::memory_order_acquire);
    if (chunk == nullptr) return nullptr;
    const Entry& e = chunk[index % chunk_size];
    WorkQueue* wq = e.wq.load(std::memory_order_acquire);
    if (wq == nullptr || e.generation.load(std::memory_order_relaxed) != generation) return nullptr;
    return wq;
}

// ---- Posting

PostStatus VerbsQp::post_send(std::span<const SendRequest> batch) noexcept {
    if (!post_send_allowed(state_.load(std::memory_order_relaxed))) {
        return PostStatus::not_connected("post_send needs a connected QP: call connect() first");
    }
    if (batch.empty()) return PostStatus::ok();
    if (auto st = detail::validate_send_batch(batch, caps, device_->caps); !st) return st;
    if (batch.size() > sq_.free_slots()) return PostStatus::queue_full();

    const auto n = static_cast<std::uint32_t>(batch.size());
    std::uint32_t slot = sq_.head;
    for (std::uint32_t i = 0; i < n; ++i) {
        const SendRequest& r = batch[i];
        if (needs_remote(r.opcode) && r.rkey > 0xffffffffu) {
            return PostStatus::invalid(i, "rkey does not fit in 32 bits: not a verbs key (a RemoteRegion of "
                                          "another backend?)");
        }
        if (r.opcode == Opcode::read && device_->max_sge_rd != 0 && r.num_sge > device_->max_sge_rd) {
            return PostStatus::invalid(i, "more segments than the device allows in a read (max_sge_rd)");
        }

        ibv_sge* sge = &send_sges_[static_cast<std::size_t>(i) * send_sge_stride_];
        const auto segments = r.segments();
        for (std::size_t j = 0; j < segments.size(); ++j) {
            sge[j].addr = segments[j].addr;
            sge[j].length = segments[j].length;
            sge[j].lkey = segments[j].lkey;
        }
        ibv_send_wr& wr = send_wrs_[i];
        wr = ibv_send_wr{};
        wr.wr_id = sq_.tag | slot;
        wr.next = i + 1 < n ? &send_wrs_[i + 1] : nullptr;
        wr.sg_list = segments.empty() ? nullptr : sge;
        wr.num_sge = static_cast<int>(segments.size());
        wr.opcode = wr_opcodes[static_cast<std::size_t>(r.opcode)];
        wr.send_flags = to_send_flags(r.flags);
        switch (r.opcode) {
            case Opcode::send_with_imm:
                wr.imm_data = htonl(r.imm);
                break;
            case Opcode::write_with_imm:
                wr.imm_data = htonl(r.imm);
                [[fallthrough]];
            case Opcode::write:
            case Opcode::read:
                wr.wr.rdma.remote_addr = r.remote_addr;
                wr.wr.rdma.rkey = static_cast<std::uint32_t>(r.rkey);
                break;
            case Opcode::fetch_add:
            case Opcode::compare_swap:
                wr.wr.atomic.remote_addr = r.remote_addr;
                wr.wr.atomic.compare_add = r.compare_add;
                wr.wr.atomic.swap = r.swap;
                wr.wr.atomic.rkey = static_cast<std::uint32_t>(r.rkey);
                break;
            default:
                break;
        }
        sq_.slots[slot] = {r.id, r.opcode};
        slot = next_slot(slot, sq_.capacity);
    }

    // Counted before the provider sees them: the poller may retire them the moment they are posted.
    sq_.used.fetch_add(n, std::memory_order_acq_rel);
    ibv_send_wr* bad = nullptr;
    if (::ibv_post_send(qp_.get(), send_wrs_.get(), &bad) == 0) {
        sq_.head = slot;
        return PostStatus::ok();
    }
    // The provider refused a request weft's checks let through. Providers stop at the first bad request,
    // having queued the ones before it; account for those, and say so.
    const auto posted = bad != nullptr ? static_cast<std::uint32_t>(bad - send_wrs_.get()) : 0u;
    for (std::uint32_t i = 0; i < posted; ++i) sq_.head = next_slot(sq_.head, sq_.capacity);
    sq_.used.fetch_sub(n - posted, std::memory_order_acq_rel);
    return PostStatus::invalid(posted, posted == 0 ? "the provider refused the request (ibv_post_send)"
                                                   : "the provider refused this request (ibv_post_send); the "
                                                     "requests before it in the batch were posted");
}

PostStatus VerbsQp::post_recv(std::span<const RecvRequest> batch) noexcept {
    const QpState state = state_.load(std::memory_order_relaxed);
    if (state == QpState::reset) {
        return PostStatus::not_connected("post_recv needs the QP in init or later");
    }
    if (batch.empty()) return PostStatus::ok();
    if (auto st = detail::validate_recv_batch(batch, caps); !st) return st;
    if (batch.size() > rq_.free_slots()) return PostStatus::queue_full();

    const auto n = static_cast<std::uint32_t>(batch.size());
    std::uint32_t slot = rq_.head;
    for (std::uint32_t i = 0; i < n; ++i) {
        const RecvRequest& r = batch[i];
        ibv_sge* sge = &recv_sges_[static_cast<std::size_t>(i) * recv_sge_stride_];
        const auto segments = r.segments();
        for (std::size_t j = 0; j < segments.size(); ++j) {
            sge[j].addr = segments[j].addr;
            sge[j].length = segments[j].length;
            sge[j].lkey = segments[j].lkey;
        }
        ibv_recv_wr& wr = recv_wrs_[i];
        wr.wr_id = rq_.tag | slot;
        wr.next = i + 1 < n ? &recv_wrs_[i + 1] : nullptr;
        wr.sg_list = segments.empty() ? nullptr : sge;
        wr.num_sge = static_cast<int>(segments.size());
        rq_.slots[slot] = {r.id, Opcode::recv};
        slot = next_slot(slot, rq_.capacity);
    }

    rq_.used.fetch_add(n, std::memory_order_acq_rel);
    ibv_recv_wr* bad = nullptr;
    if (::ibv_post_recv(qp_.get(), recv_wrs_.get(), &bad) == 0) {
        rq_.head = slot;
        if (state == QpState::error) rerun_error_flush(qp_.get());
        return PostStatus::ok();
    }
    const auto posted = bad != nullptr ? static_cast<std::uint32_t>(bad - recv_wrs_.get()) : 0u;
    for (std::uint32_t i = 0; i < posted; ++i) rq_.head = next_slot(rq_.head, rq_.capacity);
    rq_.used.fetch_sub(n - posted, std::memory_order_acq_rel);
    return PostStatus::invalid(posted, posted == 0 ? "the provider refused the receive (ibv_post_recv)"
                                                   : "the provider refused this receive (ibv_post_recv); the "
                                                     "receives before it in the batch were posted");
}

// ---- Polling

bool VerbsCq::translate(const ibv_wc& wc, Completion& c) noexcept {
    WorkQueue* wq = queues_.find(wc.wr_id);
    if (wq == nullptr) return false;
    const auto slot = static_cast<std::uint32_t>(wc.wr_id);
    // The acquire pairs with the poster's count of the request, ordering its write of the slot first.
    if (slot >= wq->capacity || wq->used.load(std::memory_order_acquire) == 0) return false;
    const WorkQueue::Slot posted = wq->slots[slot];  // read before retiring: the poster may reuse it then
    if (!wq->retire_through(slot)) return false;

    c.id = posted.id;
    c.qp_num = wc.qp_num;
    c.status = to_status(wc.status);
    if (wc.status == IBV_WC_SUCCESS) {
        c.opcode = wq->is_recv ? (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM ? Opcode::recv_rdma_with_imm : Opcode::recv)
                               : send_completion_opcode(wc.opcode, posted.opcode);
        c.byte_len = wc.byte_len;
        // Immediate data belongs to receive completions; rxe also flags the requester's completion of a
        // *_with_imm request, without a value, which would read as an immediate of 0.
        c.has_imm = wq->is_recv && (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
        c.imm = c.has_imm ? ntohl(wc.imm_data) : 0;
        c.vendor_err = 0;
    } else {
        // verbs leaves opcode undefined on errors; the slot knows what was posted.
        c.opcode = wq->is_recv ? Opcode::recv : completion_opcode(posted.opcode);
        c.byte_len = 0;
        c.has_imm = false;
        c.imm = 0;
        c.vendor_err = wc.vendor_err;
        // Receives the program posted between the QP's failure and this poll must flush too.
        if (wq->state->exchange(QpState::error, std::memory_order_relaxed) != QpState::error) {
            rerun_error_flush(wq->qp);
        }
    }
    return true;
}

std::size_t VerbsCq::drain(std::span<Completion> out) noexcept {
    constexpr int batch = 16;
    std::array<ibv_wc, batch> wc;
    std::size_t n = 0;
    while (n < out.size()) {
        const int want = static_cast<int>(std::min<std::size_t>(batch, out.size() - n));
        const int got = ::ibv_poll_cq(cq_.get(), want, wc.data());
        if (got <= 0) break;
        for (int i = 0; i < got; ++i) {
            if (translate(wc[static_cast<std::size_t>(i)], out[n])) ++n;
        }
        if (got < want) break;
    }
    return n;
}

std::size_t VerbsCq::take_held(std::span<Completion> out) noexcept {
    const std::size_t n = std::min<std::size_t>(held_count_, out.size());
    std::copy_n(held_.begin() + held_begin_, n, out.begin());
    held_begin_ += static_cast<std::uint32_t>(n);
    held_count_ -= static_cast<std::uint32_t>(n);
    return n;
}

std::size_t VerbsCq::poll(std::span<Completion> out) noexcept {
    std::size_t n = take_held(out);
    if (n == out.size()) return n;
    n += drain(out.subspan(n));
    if (n < out.size() && fd_mode_) {
        // The CQ is empty: re-arm so that the fd fires for the next completion, then look once more for
        // one that slipped in before the arm.
        consume_events();
        arm();
        n += drain(out.subspan(n));
    }
    return n;
}

}  // namespace weft::verbs
