// The data path: post_send and post_recv build one ibv_*_wr chain per batch in the QP's preallocated
// arrays and hand it to the provider in one call; poll translates ibv_wc into weft::Completion and retires
// the work-queue slots it covers. Nothing here allocates or throws; a batch costs one provider call (poll:
// one per 16 completions), plus one ibv_modify_qp on the error path only (see rerun_error_flush).
#include "verbs.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>

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

constexpr unsigned to_send_flags(unsigned f) noexcept {
    unsigned out = 0;
    if ((f & static_cast<unsigned>(SendFlags::signaled)) != 0) out |= IBV_SEND_SIGNALED;
    if ((f & static_cast<unsigned>(SendFlags::fence)) != 0) out |= IBV_SEND_FENCE;
    if ((f & static_cast<unsigned>(SendFlags::inline_data)) != 0) out |= IBV_SEND_INLINE;
    if ((f & static_cast<unsigned>(SendFlags::solicited)) != 0) out |= IBV_SEND_SOLICITED;
    return out;
}

// Two 8-byte words that move as one (a 16-byte load or store).
using PairOfWords = std::uint64_t __attribute__((vector_size(16)));

// ibv_send_flags for every SendFlags byte; the bits above the four flags mean nothing and are dropped.
constexpr auto send_flag_table = [] {
    std::array<std::uint8_t, 256> t{};
    for (unsigned f = 0; f < t.size(); ++f) t[f] = static_cast<std::uint8_t>(to_send_flags(f));
    return t;
}();

// The 8-byte word ibv_send_wr's opcode and send_flags make, for a request's opcode | flags << 8 with flags
// below 16 (as every request the fast paths take has): they write both with one load and one store. The
// opcodes are verbs' own for every device (index_opcodes); which of them a device takes is FastOp's business.
static_assert(offsetof(ibv_send_wr, send_flags) == offsetof(ibv_send_wr, opcode) + 4 &&
              sizeof(ibv_send_wr::opcode) == 4 && sizeof(ibv_send_wr::send_flags) == 4);
constexpr ibv_wr_opcode to_wr_opcode(Opcode op) noexcept {
    switch (op) {
        case Opcode::send: return IBV_WR_SEND;
        case Opcode::send_with_imm: return IBV_WR_SEND_WITH_IMM;
        case Opcode::write: return IBV_WR_RDMA_WRITE;
        case Opcode::write_with_imm: return IBV_WR_RDMA_WRITE_WITH_IMM;
        case Opcode::read: return IBV_WR_RDMA_READ;
        case Opcode::fetch_add: return IBV_WR_ATOMIC_FETCH_AND_ADD;
        case Opcode::compare_swap: return IBV_WR_ATOMIC_CMP_AND_SWP;
        default: return IBV_WR_SEND;  // not a request opcode: FastOp refuses it
    }
}
constexpr std::size_t send_word_count = 16 * 256;
constexpr auto send_words = [] {
    std::array<std::uint64_t, send_word_count> t{};
    for (unsigned i = 0; i < t.size(); ++i) {
        t[i] = static_cast<std::uint32_t>(to_wr_opcode(static_cast<Opcode>(i & 0xff))) |
               std::uint64_t{to_send_flags(i >> 8)} << 32;
    }
    return t;
}();
inline void put_opcode_and_flags(ibv_send_wr& wr, std::uint64_t word) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(&wr.opcode, &word, sizeof word);
    } else {
        wr.opcode = static_cast<ibv_wr_opcode>(static_cast<std::uint32_t>(word));
        wr.send_flags = static_cast<unsigned>(word >> 32);
    }
}

// Which states accept send-queue requests, as a bit per QpState. In error (and sqe) posting is allowed:
// the requests complete as flushed, as the contract says.
constexpr unsigned send_states = 1u << static_cast<unsigned>(QpState::rts) | 1u << static_cast<unsigned>(QpState::sqd) |
                                 1u << static_cast<unsigned>(QpState::sqe) | 1u << static_cast<unsigned>(QpState::error);

// The segment list of a request and its total length; false when num_sge > 1 comes without sg_list.
template <class Request>
bool gather(const Request& r, ibv_sge* sge, std::uint64_t& length) noexcept {
    const LocalSegment* seg = r.sg_list != nullptr ? r.sg_list : &r.sge;
    if (r.sg_list == nullptr && r.num_sge > 1) return false;
    length = 0;
    for (std::uint32_t j = 0; j < r.num_sge; ++j) {
        sge[j].addr = seg[j].addr;
        sge[j].length = seg[j].length;
        sge[j].lkey = seg[j].lkey;
        length += seg[j].length;
    }
    return true;
}

// The segment of a request with one segment in `sge` (the builders' form): its address, length and key are
// the first 16 bytes of a LocalSegment, laid out as in ibv_sge.
static_assert(offsetof(LocalSegment, addr) == offsetof(ibv_sge, addr) &&
              offsetof(LocalSegment, length) == offsetof(ibv_sge, length) &&
              offsetof(LocalSegment, lkey) == offsetof(ibv_sge, lkey) && sizeof(ibv_sge) == 16);
inline void copy_segment(const LocalSegment& from, ibv_sge& to) noexcept { std::memcpy(&to, &from, sizeof to); }

// The remote address and key of a request, as wr.rdma takes them: SendRequest's remote_addr and rkey are 16
// adjacent bytes, laid out (little-endian, an rkey that fits in 32 bits) as wr.rdma's remote_addr, rkey and
// the 4 bytes of padding after it. One 16-byte copy.
static_assert(offsetof(SendRequest, rkey) == offsetof(SendRequest, remote_addr) + 8);
static_assert(offsetof(decltype(ibv_send_wr::wr.rdma), rkey) == 8 && sizeof(ibv_send_wr::wr.rdma) == 16);
inline void copy_remote(const SendRequest& r, ibv_send_wr& wr) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(&wr.wr.rdma, &r.remote_addr, 16);
    } else {
        wr.wr.rdma.remote_addr = r.remote_addr;
        wr.wr.rdma.rkey = static_cast<std::uint32_t>(r.rkey);
    }
}
// The high 32 bits of a request's rkey (0 for a verbs key), read as one word.
inline std::uint32_t rkey_high(const SendRequest& r) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        std::uint32_t high = 0;
        std::memcpy(&high, reinterpret_cast<const unsigned char*>(&r.rkey) + 4, sizeof high);
        return high;
    } else {
        return static_cast<std::uint32_t>(r.rkey >> 32);
    }
}

// A request's opcode (bits 7..0), flags (15..8) and remote_backend (23..16), read as one word with the byte
// of padding after them in bits 31..24 (which FastOp::reject masks).
static_assert(offsetof(SendRequest, flags) == offsetof(SendRequest, opcode) + 1 &&
              offsetof(SendRequest, remote_backend) == offsetof(SendRequest, opcode) + 2 &&
              sizeof(Opcode) == 1 && sizeof(SendFlags) == 1 && sizeof(BackendKind) == 1 &&
              offsetof(SendRequest, opcode) + 4 <= sizeof(SendRequest));
inline std::uint32_t op_word(const SendRequest& r) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        std::uint32_t word = 0;
        std::memcpy(&word, &r.opcode, sizeof word);
        return word;
    } else {
        return static_cast<std::uint32_t>(r.opcode) | static_cast<std::uint32_t>(r.flags) << 8 |
               static_cast<std::uint32_t>(r.remote_backend) << 16;
    }
}

}  // namespace

void rerun_error_flush(ibv_qp* qp) noexcept {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    (void)::ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

void note_error(std::atomic<QpState>& state, ibv_qp* qp) noexcept {
    if (state.exchange(QpState::error, std::memory_order_acq_rel) != QpState::error) rerun_error_flush(qp);
}

// ---- Work-queue table

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

namespace {

// The common request (a supported opcode that is not an atomic, one segment in `sge` no longer than a message
// may be, a 32-bit rkey of a verbs region, no flag that needs a look): checked and built into `wr` (whose num_sge
// is already 1, whose sg_list is &sge) and its slot (put_slot(id, tail)). False, with nothing of the queue's state
// changed, for any other request. WithImm: a *_with_imm request is common too, its imm_data written; without,
// it is refused like any other, and the request without immediate data is built with no test for it.
template <bool WithImm, class PutSlot>
[[gnu::always_inline]] inline bool build_common(const SendRequest& r, const FastOp* ops, std::uint32_t max_length,
                                                std::uint64_t wr_id, ibv_send_wr& wr, ibv_sge& sge,
                                                PutSlot put_slot) noexcept {
    const std::uint32_t word = op_word(r);
    const FastOp& op = ops[word & 0xff];
    // Not one segment in `sge` with a 32-bit key: any bit set here. Or-ed, so that one branch tests the three.
    const std::uint64_t shape =
        std::uint64_t{r.num_sge ^ 1u} | rkey_high(r) | reinterpret_cast<std::uintptr_t>(r.sg_list);
    if (((word & op.reject) | shape) != 0 || r.sge.length > max_length) [[unlikely]] return false;
    wr.wr_id = wr_id;
    // (reject holds the flags that mean nothing: they are below 16 here, and word's low half is an index.)
    put_opcode_and_flags(wr, send_words[static_cast<std::uint16_t>(word)]);
    if constexpr (WithImm) {
        if (op.with_imm != 0) wr.imm_data = htonl(r.imm);  // read only for these opcodes
    }
    copy_remote(r, wr);
    copy_segment(r.sge, sge);
    put_slot(r.id, op.tail);
    return true;
}

}  // namespace

PostStatus VerbsQp::post_send(std::span<const SendRequest> batch) noexcept {
    return batch.size() == 1 ? post_one<false>(batch[0]) : post_batch(batch);
}

PostStatus VerbsQp::post_batch(std::span<const SendRequest> batch) noexcept {
    const std::size_t n = batch.size();
    // One comparison refuses an empty batch, one that does not fit, and any before the QP is connected (the
    // send queue's capacity is 0 until then), against the limit the poster keeps; only then is the limit read
    // again, and post_send_refused tells the three apart.
    const std::uint32_t head = sq_.head();
    if (n - 1 >= static_cast<std::uint32_t>(sq_.limit - head)) [[unlikely]] {
        if (!sq_.refresh_limit(head, n)) return post_send_refused(n);
    }
    // Common requests are checked and built here; a batch with any other goes to post_send_general, which
    // checks every request exactly. Nothing is posted before the whole batch is checked, and what was built
    // so far is simply built again. Every entry already has num_sge 1, sg_list at its own segment and its
    // next (the last one's is cut below and restored). wr_id counts up from tag | head; a batch whose
    // positions would wrap round 2^32 (once in 4 billion requests) goes the general way, which counts them in
    // 32 bits.
    if (static_cast<std::uint32_t>(head + n) < head) [[unlikely]] return post_send_general(batch);
    // The batch's slots run from head's on, and when they pass the end of the ring on from its start: one run
    // or two, each built with an index that steps, instead of masking every position (n fits in the ring:
    // n <= capacity).
    const std::uint32_t first = head & sq_.ring_mask;
    const std::size_t to_end = sq_.ring_mask + 1 - first;
    const std::uint32_t max_length = max_single_length_;
    const FastOpTable& ops = send_ops_;
    WrSlot<ibv_send_wr>* const wrs = send_wrs_.get();
    WrSlot<ibv_send_wr>* wr = wrs;
    std::uint64_t wr_id = sq_.tag | head;
    const SendRequest* r = batch.data();
    // (Inlined by force: left to itself GCC calls it, and the loop then keeps its cursors in memory. Not
    // declared noexcept: GCC takes the attribute only after noexcept and clang 14 only before it.)
    const auto build_run = [&](const SendRequest* const run_end, std::uint32_t at) __attribute__((always_inline)) {
        std::uint64_t* const ids = sq_.ids.get() + at;
        std::uint32_t* const tails = sq_.tails.get() + at;
        // A slot's index in the run counts with wr_id (one register steps both).
        const std::uint64_t run_first = wr_id;
        for (; r != run_end; ++r, ++wr, ++wr_id) {
            const auto put_slot = [&](std::uint64_t id, std::uint32_t tail) noexcept {
                ids[wr_id - run_first] = id;
                tails[wr_id - run_first] = tail;
            };
            if (!build_common<false>(*r, ops.without_imm.data(), max_length, wr_id, wr->wr, wr->sge, put_slot))
                [[unlikely]] {
                // A request with immediate data (or one for the general path): the rest of the run is built
                // by the builder that writes imm_data, from this request on. (The empty asm says that memory
                // may have changed: the request is read again there, and the test above keeps nothing.)
                asm volatile("" ::: "memory");
                for (; r != run_end; ++r, ++wr, ++wr_id) {
                    if (!build_common<true>(*r, ops.with_imm.data(), max_length, wr_id, wr->wr, wr->sge, put_slot)) {
                        return false;
                    }
                }
                return true;
            }
        }
        return true;
    };
    const SendRequest* const end = batch.data() + n;
    if (!(n <= to_end ? build_run(end, first) : build_run(r + to_end, first) && build_run(end, 0))) [[unlikely]] {
        return post_send_general(batch);
    }
    // Counted before the provider sees them: the poller may retire them the moment they are posted.
    sq_.publish(static_cast<std::uint32_t>(wr_id));
    ibv_send_wr& last = wr[-1].wr;
    last.next = nullptr;
    ibv_send_wr* bad = nullptr;
    const int rc = provider_post_send_(handle_, &wrs->wr, &bad);
    last.next = &wr->wr;
    // (The batch's first position read back as the posted count less the entries built: only `this` and
    // `wr` are kept across the call.)
    if (rc != 0) [[unlikely]] {
        return send_refused_by_provider(sq_.head() - static_cast<std::uint32_t>(wr - send_wrs_.get()), bad);
    }
    return PostStatus::ok();
}

template <bool WithImm>
PostStatus VerbsQp::post_one(const SendRequest& r) noexcept {
    const std::uint32_t head = sq_.head();
    if (head == sq_.limit) [[unlikely]] {
        if (!sq_.refresh_limit(head, 1)) return post_send_refused(1);
    }
    // Built in one_wr_, whose next, sg_list and num_sge never change: nothing to cut and restore around the
    // provider call.
    const auto put_slot = [&](std::uint64_t id, std::uint32_t tail) noexcept {
        sq_.ids[sq_.at(head)] = id;
        sq_.tails[sq_.at(head)] = tail;
    };
    // A request with immediate data goes to the copy that writes it, any other the builders refuse to the
    // general path.
    const FastOp* const ops = WithImm ? send_ops_.with_imm.data() : send_ops_.without_imm.data();
    if (!build_common<WithImm>(r, ops, max_single_length_, sq_.tag | head, one_wr_, one_sge_, put_slot))
        [[unlikely]] {
        return WithImm ? post_send_general(std::span(&r, 1)) : post_one<true>(r);
    }
    sq_.publish(head + 1);
    // The provider stops at the first request it refuses: here the only one, so none was posted, and where it
    // stopped (written to one_bad_, never read) tells nothing. Only this thread writes `posted`: head is
    // read back from it on that path, so that nothing but `this` stays live across the call.
    if (provider_post_send_(handle_, &one_wr_, &one_bad_) != 0) [[unlikely]] {
        return send_refused_by_provider(sq_.head() - 1, nullptr);
    }
    return PostStatus::ok();
}

PostStatus VerbsQp::post_send_refused(std::size_t n) const noexcept {
    if (((send_states >> static_cast<unsigned>(state_.load(std::memory_order_relaxed))) & 1u) == 0) {
        return PostStatus::not_connected("post_send needs a connected QP: call connect() first");
    }
    return n == 0 ? PostStatus::ok() : PostStatus::queue_full();
}

PostStatus VerbsQp::post_send_general(std::span<const SendRequest> batch) noexcept {
    if (auto st = detail::validate_send_batch(batch, caps, device_->caps); !st) return st;
    for (std::uint32_t i = 0; i < batch.size(); ++i) {
        const SendRequest& r = batch[i];
        if (needs_remote(r.opcode) && r.rkey > 0xffffffffu) {
            return PostStatus::invalid(i, "rkey does not fit in 32 bits: not a verbs key (a RemoteRegion of "
                                          "another backend?)");
        }
        if (r.opcode == Opcode::read && device_->max_sge_rd != 0 && r.num_sge > device_->max_sge_rd) {
            return PostStatus::invalid(i, "more segments than the device allows in a read (max_sge_rd)");
        }
    }
    const std::uint32_t head = sq_.head();
    std::uint32_t pos = head;
    WrSlot<ibv_send_wr>* slot = send_wrs_.get();
    for (const SendRequest& r : batch) {
        const OpInfo info = device_->ops[static_cast<std::uint8_t>(r.opcode)];
        ibv_send_wr* const wr = &slot->wr;
        if (r.num_sge > 1) {
            wr->sg_list = &send_sges_[static_cast<std::size_t>(slot - send_wrs_.get()) * send_sge_stride_];
        }
        std::uint64_t length = 0;
        (void)gather(r, wr->sg_list, length);  // validate_send_batch checked sg_list
        wr->wr_id = sq_.tag | pos;
        wr->num_sge = static_cast<int>(r.num_sge);
        wr->opcode = static_cast<ibv_wr_opcode>(info.wr_opcode);
        wr->send_flags = send_flag_table[static_cast<std::uint8_t>(r.flags)];
        wr->imm_data = htonl(r.imm);
        if (info.atomic) {  // wr.atomic.compare_add shares its place with wr.rdma.rkey
            wr->wr.atomic.remote_addr = r.remote_addr;
            wr->wr.atomic.compare_add = r.compare_add;
            wr->wr.atomic.swap = r.swap;
            wr->wr.atomic.rkey = static_cast<std::uint32_t>(r.rkey);
        } else {
            wr->wr.rdma.remote_addr = r.remote_addr;
            wr->wr.rdma.rkey = static_cast<std::uint32_t>(r.rkey);
        }
        sq_.ids[sq_.at(pos)] = r.id;
        sq_.tails[sq_.at(pos)] = WorkQueue::tail_of(info.completion);
        ++pos;
        ++slot;
    }
    const PostStatus st = submit_send(head, pos, slot);
    for (WrSlot<ibv_send_wr>* w = send_wrs_.get(); w != slot; ++w) {  // as the fast path expects
        w->wr.num_sge = 1;
        w->wr.sg_list = &w->sge;
    }
    return st;
}

PostStatus VerbsQp::submit_send(std::uint32_t head, std::uint32_t end, WrSlot<ibv_send_wr>* after) noexcept {
    // Counted before the provider sees them: the poller may retire them the moment they are posted.
    sq_.publish(end);
    after[-1].wr.next = nullptr;
    ibv_send_wr* bad = nullptr;
    const int rc = provider_post_send_(handle_, &send_wrs_[0].wr, &bad);
    after[-1].wr.next = &after->wr;
    if (rc == 0) [[likely]] return PostStatus::ok();
    return send_refused_by_provider(head, bad);
}

PostStatus VerbsQp::send_refused_by_provider(std::uint32_t head, const ibv_send_wr* bad) noexcept {
    // The provider refused a request weft's checks let through. Providers stop at the first bad request,
    // having queued the ones before it; account for those, and say so.
    // (A slot's request is its first member: the pointers convert.)
    const auto posted =
        bad != nullptr ? static_cast<std::uint32_t>(reinterpret_cast<const WrSlot<ibv_send_wr>*>(bad) - send_wrs_.get())
                       : 0u;
    sq_.publish(head + posted);
    return PostStatus::invalid(posted, posted == 0 ? "the provider refused the request (ibv_post_send)"
                                                   : "the provider refused this request (ibv_post_send); the "
                                                     "requests before it in the batch were posted");
}

PostStatus VerbsQp::recv_refused_by_provider(std::uint32_t head, const ibv_recv_wr* bad) noexcept {
    const auto posted =
        bad != nullptr ? static_cast<std::uint32_t>(reinterpret_cast<const WrSlot<ibv_recv_wr>*>(bad) - recv_wrs_.get())
                       : 0u;
    rq_.publish(head + posted);
    return PostStatus::invalid(posted, posted == 0 ? "the provider refused the receive (ibv_post_recv)"
                                                   : "the provider refused this receive (ibv_post_recv); the "
                                                     "receives before it in the batch were posted");
}

PostStatus VerbsQp::post_recv(std::span<const RecvRequest> batch) noexcept {
    return recv_flush_help_ ? post_recv_fast<true>(batch) : post_recv_fast<false>(batch);
}

template <bool HelpFlush>
PostStatus VerbsQp::post_recv_fast(std::span<const RecvRequest> batch) noexcept {
    // The receive queue's capacity is set once the QP is in init, where it is from creation.
    const std::size_t n = batch.size();
    const std::uint32_t head = rq_.head();
    // One comparison refuses an empty batch, one that does not fit, and any on a QP of a shared receive queue
    // (whose own queue has capacity 0), against the limit the poster keeps; only then is the limit read
    // again, and post_recv_refused tells the three apart.
    if (n - 1 >= static_cast<std::uint32_t>(rq_.limit - head)) [[unlikely]] {
        if (!rq_.refresh_limit(head, n)) return post_recv_refused(n);
    }
    // The state before the post, for help_recv_flush.
    [[maybe_unused]] const QpState before = HelpFlush ? state_.load(std::memory_order_relaxed) : QpState::rts;
    // As in post_batch: the slots in one run, or two when they pass the end of the ring; wr_id counts up from
    // tag | head, the wrap of positions round 2^32 going the general way (which counts them in 32 bits).
    if (static_cast<std::uint32_t>(head + n) < head) [[unlikely]] return post_recv_general(batch);
    const std::uint32_t first = head & rq_.ring_mask;
    const std::size_t to_end = rq_.ring_mask + 1 - first;
    WrSlot<ibv_recv_wr>* const wrs = recv_wrs_.get();
    WrSlot<ibv_recv_wr>* wr = wrs;
    std::uint64_t wr_id = rq_.tag | head;
    const RecvRequest* r = batch.data();
    // A receive's id and sg_list are read as one pair of words: the id goes to its slot, and the sg_list of
    // every receive is or-ed into `lists`, tested once for the batch (a batch with one goes the general way,
    // which builds it again; nothing built here is seen before the publish below).
    static_assert(offsetof(RecvRequest, id) == 0 && offsetof(RecvRequest, sg_list) == 8);
    PairOfWords lists = {0, 0};
    // (Counted in receives, not run to an end pointer: the unrolled loop then finds its remainder as
    // count % 4, where from two pointers it divides by the request's size.)
    const auto build_run = [&](const std::size_t count, std::uint32_t at) noexcept {
        std::uint64_t* const ids = rq_.ids.get() + at;
        // Unrolled by four: four receives share one step of each cursor.
#pragma GCC unroll 4
        for (std::size_t i = 0; i != count; ++r, ++i, ++wr, ++wr_id) {
            if (r->num_sge != 1) [[unlikely]] return false;
            PairOfWords id_and_list;
            std::memcpy(&id_and_list, r, sizeof id_and_list);
            lists |= id_and_list;
            copy_segment(r->sge, wr->sge);
            wr->wr.wr_id = wr_id;
            ids[i] = id_and_list[0];
        }
        return true;
    };
    if (!(n <= to_end ? build_run(n, first) : build_run(to_end, first) && build_run(n - to_end, 0)) ||
        lists[1] != 0) [[unlikely]] {
        return post_recv_general(batch);
    }
    rq_.publish(static_cast<std::uint32_t>(wr_id));
    ibv_recv_wr& last = wr[-1].wr;
    last.next = nullptr;
    ibv_recv_wr* bad = nullptr;
    const int rc = provider_post_recv_(handle_, &wrs->wr, &bad);
    last.next = &wr->wr;
    // (The batch's first position read back as the posted count less the entries built: only `this` and
    // `wr` are kept across the call.)
    if (rc != 0) [[unlikely]] {
        return recv_refused_by_provider(rq_.head() - static_cast<std::uint32_t>(wr - recv_wrs_.get()), bad);
    }
    if constexpr (HelpFlush) help_recv_flush(before);
    return PostStatus::ok();
}

PostStatus VerbsQp::post_recv_refused(std::size_t n) const noexcept {
    if (n == 0) return PostStatus::ok();
    if (srq_) {
        return PostStatus::invalid(0, "this QP takes its receives from a shared receive queue; post them there "
                                      "(SharedReceiveQueue::post_recv)");
    }
    return PostStatus::queue_full();
}

PostStatus VerbsQp::post_recv_general(std::span<const RecvRequest> batch) noexcept {
    const std::uint32_t head = rq_.head();
    const QpState before = state_.load(std::memory_order_relaxed);
    const std::uint32_t max_sge = caps.max_sge;
    WrSlot<ibv_recv_wr>* const wrs = recv_wrs_.get();
    WrSlot<ibv_recv_wr>* slot = wrs;
    std::uint32_t pos = head;
    PostStatus st = PostStatus::ok();
    for (const RecvRequest& r : batch) {
        const auto i = static_cast<std::uint32_t>(slot - wrs);
        if (r.num_sge > max_sge) {
            st = PostStatus::invalid(i, "more segments than the QP's max_sge");
            break;
        }
        if (r.sg_list == nullptr && r.num_sge > 1) {
            st = PostStatus::invalid(i, "num_sge > 1 needs sg_list");
            break;
        }
        ibv_recv_wr* const wr = &slot->wr;
        if (r.num_sge > 1) wr->sg_list = &recv_sges_[static_cast<std::size_t>(i) * recv_sge_stride_];
        std::uint64_t length = 0;
        (void)gather(r, wr->sg_list, length);  // sg_list checked above
        wr->wr_id = rq_.tag | pos;
        wr->num_sge = static_cast<int>(r.num_sge);
        rq_.ids[rq_.at(pos)] = r.id;
        ++pos;
        ++slot;
    }
    if (st) {
        rq_.publish(pos);
        ibv_recv_wr& last = slot[-1].wr;
        last.next = nullptr;
        ibv_recv_wr* bad = nullptr;
        const int rc = provider_post_recv_(handle_, &wrs->wr, &bad);
        last.next = &slot->wr;
        if (rc != 0) {
            st = recv_refused_by_provider(head, bad);
        } else if (before == QpState::error || recv_flush_help_) {
            help_recv_flush(before);
        }
    }
    for (WrSlot<ibv_recv_wr>* w = wrs; w != slot; ++w) {  // as the fast path expects
        w->wr.num_sge = 1;
        w->wr.sg_list = &w->sge;
    }
    return st;
}

void VerbsQp::help_recv_flush(QpState before) noexcept {
    if (before == QpState::error) {
        rerun_error_flush(handle_);
        return;
    }
    // The poller may have learnt of an error between the load of `before` and the post: then it re-ran the
    // flush before these receives were in the queue, and it falls to us. The fence orders the post before
    // the load (the poller's exchange is a full barrier on its side).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (state_.load(std::memory_order_relaxed) == QpState::error) [[unlikely]] rerun_error_flush(handle_);
}

// ---- Shared receive queue

PostStatus VerbsSrq::post_recv(std::span<const RecvRequest> batch) noexcept {
    if (auto st = detail::validate_srq_batch(batch, max_sge); !st) return st;
    const std::size_t n = batch.size();
    if (n == 0) return PostStatus::ok();
    if (n > free_count_) {
        reclaim();
        if (n > free_count_) return PostStatus::queue_full();
    }
    // Slots come off the poster's stack as the chain is built; nothing is visible to a poller until the
    // provider has the receives.
    ibv_recv_wr* wr = wrs_.get();
    std::uint32_t top = free_top_;
    for (const RecvRequest& r : batch) {
        const std::uint32_t slot = top;
        top = next_free_[slot];
        std::uint64_t length = 0;
        (void)gather(r, wr->sg_list, length);  // validate_srq_batch checked sg_list
        wr->num_sge = static_cast<int>(r.num_sge);
        wr->wr_id = wq_.tag | slot;
        ids_[slot] = r.id;
        busy_[slot].store(1, std::memory_order_release);
        ++wr;
    }
    ibv_recv_wr& last = wr[-1];
    last.next = nullptr;
    ibv_recv_wr* bad = nullptr;
    const int rc = ::ibv_post_srq_recv(handle_, wrs_.get(), &bad);
    last.next = wr;
    if (rc != 0) [[unlikely]] return refused_by_provider(bad, static_cast<std::uint32_t>(n));
    free_top_ = top;
    free_count_ -= static_cast<std::uint32_t>(n);
    return PostStatus::ok();
}

PostStatus VerbsSrq::refused_by_provider(const ibv_recv_wr* bad, std::uint32_t built) noexcept {
    // Providers stop at the first receive they refuse, having queued the ones before it: those keep their
    // slots (a poller may already have completed one and handed it back: their links are not read again),
    // the rest stay on the poster's stack, which now starts at the first of them, still linked as taken.
    const std::uint32_t posted = bad != nullptr ? static_cast<std::uint32_t>(bad - wrs_.get()) : 0u;
    if (posted != 0) {
        free_top_ = static_cast<std::uint32_t>(wrs_[posted].wr_id);
        free_count_ -= posted;
    }
    for (std::uint32_t i = posted; i < built; ++i) {
        busy_[static_cast<std::uint32_t>(wrs_[i].wr_id)].store(0, std::memory_order_relaxed);
    }
    return PostStatus::invalid(posted, posted == 0 ? "the provider refused the receive (ibv_post_srq_recv)"
                                                   : "the provider refused this receive (ibv_post_srq_recv); the "
                                                     "receives before it in the batch were posted");
}

void VerbsSrq::reclaim() noexcept {
    std::uint32_t slot = returned_.exchange(no_slot, std::memory_order_acquire);
    while (slot != no_slot) {
        const std::uint32_t next = next_free_[slot];
        next_free_[slot] = free_top_;
        free_top_ = slot;
        ++free_count_;
        slot = next;
    }
}

std::size_t VerbsSrq::complete(const ibv_wc& w, Completion& c) noexcept {
    const auto slot = static_cast<std::uint32_t>(w.wr_id);
    // The acquire pairs with the poster's release: the slot's id was written before it.
    if (slot >= slot_count_ || busy_[slot].load(std::memory_order_acquire) == 0) [[unlikely]] return 0;
    c.id = ids_[slot];
    c.qp_num = w.qp_num;
    c.vendor_err = 0;
    c.opcode = Opcode::recv;
    if (w.status == IBV_WC_SUCCESS) [[likely]] {
        c.status = WcStatus::success;
        c.byte_len = w.byte_len;
        // As for a QP's own receives: immediate data only where the completion flags it, and a
        // write_with_imm that consumed the receive is recv_rdma_with_imm.
        c.has_imm = (w.wc_flags & IBV_WC_WITH_IMM) != 0;
        c.imm = c.has_imm ? ntohl(w.imm_data) : 0;
        if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) c.opcode = Opcode::recv_rdma_with_imm;
    } else {
        // verbs leaves the other fields undefined on errors
        c.status = to_status(w.status);
        c.byte_len = 0;
        c.has_imm = false;
        c.imm = 0;
        c.vendor_err = w.vendor_err;
    }
    // Back to the poster, through the pollers' stack (any CQ's poller may be here at once).
    busy_[slot].store(0, std::memory_order_relaxed);
    std::uint32_t top = returned_.load(std::memory_order_relaxed);
    do {
        next_free_[slot] = top;
    } while (!returned_.compare_exchange_weak(top, slot, std::memory_order_release, std::memory_order_relaxed));
    return 1;
}

// ---- Polling

namespace {

// Fills `c` from an error completion of the request in slot `at`: verbs leaves opcode undefined on errors, the
// slot knows what was posted.
[[gnu::noinline, gnu::cold]] void translate_error(const ibv_wc& wc, const WorkQueue& wq, std::uint32_t at,
                                                   Completion& c) noexcept {
    c.id = wq.ids[at];
    c.qp_num = wc.qp_num;
    c.opcode = wq.is_recv ? Opcode::recv : WorkQueue::opcode_of(wq.tails[at]);
    c.status = to_status(wc.status);
    c.byte_len = 0;
    c.has_imm = false;
    c.imm = 0;
    c.vendor_err = wc.vendor_err;
    // Receives the program posted between the QP's failure and this poll must flush too.
    note_error(*wq.state, wq.qp);
}

// A completion whose queue find() gave (or not) that keeps no ring: a receive of a shared queue, which that
// queue translates, or one of a destroyed QP (wq null), dropped. Returns the completions written to `c`.
[[gnu::noinline, gnu::cold]] std::size_t not_of_a_ring(const WorkQueue* wq, const ibv_wc& wc, Completion& c) noexcept {
    return wq != nullptr ? wq->srq->complete(wc, c) : 0;
}

}  // namespace

// Completion is written in four 8-byte words, built in registers from the work completion.
static_assert(offsetof(Completion, id) == 0 && offsetof(Completion, byte_len) == 8 && offsetof(Completion, imm) == 12 &&
              offsetof(Completion, qp_num) == 16 && offsetof(Completion, vendor_err) == 20 &&
              offsetof(Completion, status) == 24 && offsetof(Completion, opcode) == 25 &&
              offsetof(Completion, has_imm) == 26 && sizeof(Completion) == 32);
static_assert(static_cast<int>(WcStatus::success) == 0);
static_assert(static_cast<int>(Opcode::recv_rdma_with_imm) == static_cast<int>(Opcode::recv) + 1);

namespace {

// A work completion's wr_id bits 63..32 (its queue's key) and its status, as one 64-bit word: equal to a
// queue's key exactly when the completion is a success of that queue, so one comparison covers both.
static_assert(offsetof(ibv_wc, wr_id) == 0 && offsetof(ibv_wc, status) == 8 && sizeof(ibv_wc_status) == 4);
inline std::uint64_t key_and_status(const ibv_wc& w) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
        std::uint64_t word = 0;
        std::memcpy(&word, reinterpret_cast<const unsigned char*>(&w) + 4, sizeof word);
        return word;
    } else {
        return (w.wr_id >> wr_index_shift) | static_cast<std::uint64_t>(static_cast<std::uint32_t>(w.status)) << 32;
    }
}

// Writes a success completion as four 8-byte words: id; byte_len | imm << 32; qp_num | vendor_err (0) << 32;
// status (0) | opcode << 8 | has_imm << 16.
inline void put(Completion* c, std::uint64_t id, std::uint64_t lengths, std::uint64_t qp_num,
                std::uint64_t tail) noexcept {
    auto* bytes = reinterpret_cast<unsigned char*>(c);
    std::memcpy(bytes, &id, 8);
    std::memcpy(bytes + 8, &lengths, 8);
    std::memcpy(bytes + 16, &qp_num, 8);
    std::memcpy(bytes + 24, &tail, 8);
}

// Writes a success completion whose last two words are given as one: id; byte_len | imm << 32; then
// qp_num | vendor_err << 32 and status | opcode << 8 | has_imm << 16.
inline void put(Completion* c, std::uint64_t id, std::uint64_t lengths, PairOfWords last) noexcept {
    auto* bytes = reinterpret_cast<unsigned char*>(c);
    std::memcpy(bytes, &id, 8);
    std::memcpy(bytes + 8, &lengths, 8);
    std::memcpy(bytes + 16, &last, 16);
}

// Rewrites the second and fourth words of a completion put() wrote: byte_len | imm << 32; status (0) |
// opcode << 8 | has_imm << 16.
inline void put_imm(Completion* c, std::uint64_t lengths, std::uint64_t tail) noexcept {
    auto* bytes = reinterpret_cast<unsigned char*>(c);
    std::memcpy(bytes + 8, &lengths, 8);
    std::memcpy(bytes + 24, &tail, 8);
}

}  // namespace

[[gnu::always_inline]] inline std::size_t VerbsCq::translate(Completion* out, std::size_t got) noexcept {
    Completion* c = out;
    // Completions mostly belong to the queue of the one before: what is needed of it is kept in registers
    // while they do, and its retired count is published when they stop (slots are read before that, so the
    // poster cannot reuse them under us). The queue is remembered across polls while no queue is detached;
    // last_key_, last_send_key_ and last_wq_ are written where the current queue changes, which a run of
    // the same queue's completions never does.
    if (const std::uint64_t epoch = queues_.epoch(); epoch != last_epoch_) [[unlikely]] {
        last_epoch_ = epoch;
        last_key_ = 0;
        last_send_key_ = 0;
    }
    // wr_id bits 63..32 of the current queue (generation 0 is never issued), held in 64 bits to compare with
    // key_and_status.
    std::uint64_t key = last_key_;
    WorkQueue* wq = last_wq_;
    const std::uint64_t* ids = nullptr;
    const std::uint32_t* tails = nullptr;  // null on a receive queue, which has none
    std::uint32_t mask = 0;
    std::uint64_t qp_num = 0;  // of the queue's QP, which every completion of its ring reports
    // The queue's outstanding requests are those at positions last - outstanding + 1 .. last (last: the
    // position posted last, as the queue was read); the retired count is last + 1 - outstanding. Both are
    // held complemented (~x, which reverses the order of 32-bit values): ~(last - pos) is pos + ~last, one
    // add that leaves pos as it was (a lea), where last - pos needs a copy of last first.
    std::uint32_t not_last = 0;
    std::uint32_t not_outstanding = ~0u;
    const auto load = [&]() noexcept {
        ids = wq->ids.get();
        tails = wq->tails.get();
        mask = wq->ring_mask;
        qp_num = wq->qp_num;
        const std::uint32_t posted = wq->posted_seen();
        not_last = ~(posted - 1);
        not_outstanding = ~(posted - wq->retired_seen());
    };
    // last + 1 - outstanding, as ~not_last + 1 - ~not_outstanding.
    const auto publish = [&]() noexcept { wq->retire_to(not_outstanding - not_last + 1); };
    if (key != 0) [[likely]] load();
    // Whether the completion at `w` is outstanding; if so it retires with every older one, and its slot is
    // `at`. (Counted from the last position, the requests it leaves outstanding are those after it: `after`,
    // complemented. after >= outstanding is ~after <= ~outstanding.)
    auto take = [&](const ibv_wc& w, std::uint32_t& at) noexcept {
        const auto pos = static_cast<std::uint32_t>(w.wr_id);
        const std::uint32_t not_after = pos + not_last;
        if (not_after <= not_outstanding) [[unlikely]] return false;  // not outstanding: not ours to report
        not_outstanding = not_after;
        at = pos & mask;
        return true;
    };
    const ibv_wc* w = wc_.data();
    const ibv_wc* const end = w + got;
    // After the last: a completion whose wr_id bits 63..32 and status are 0, which no queue's key is
    // (generation 0 is never issued): the runs below stop there without a test of their own for the end.
    std::memset(reinterpret_cast<unsigned char*>(&wc_[got]) + 4, 0, 8);
    while (w != end) {
        // The fast loops below take runs of successes of the current queue; anything else comes here first.
        if (const std::uint64_t ks = key_and_status(*w); ks != key) [[unlikely]] {
            if (const std::uint64_t k = static_cast<std::uint32_t>(ks); k != key) {
                if (key != 0) publish();
                wq = queues_.find(w->wr_id);
                // A completion of a destroyed QP (dropped), or a receive of a shared queue (out of order: the
                // queue translates it); either way no run of a ring's completions.
                if (wq == nullptr || wq->srq != nullptr) [[unlikely]] {
                    c += not_of_a_ring(wq, *w, *c);
                    key = 0;
                    last_key_ = 0;
                    last_send_key_ = 0;
                    not_outstanding = ~0u;  // nothing is taken until a live queue's completion comes
                    ++w;
                    continue;
                }
                key = k;
                load();
                last_key_ = static_cast<std::uint32_t>(key);
                last_send_key_ = tails == nullptr ? 0 : static_cast<std::uint32_t>(key);
                last_wq_ = wq;
            }
            if (w->status != IBV_WC_SUCCESS) {
                std::uint32_t at = 0;
                if (take(*w, at)) {
                    translate_error(*w, *wq, at, *c);
                    ++c;
                }
                ++w;
                continue;
            }
        }
        // The run of successes of this queue, each kind of queue in a loop of its own.
        std::uint32_t at = 0;
        if (tails != nullptr) [[likely]] {
            do {
                if (take(*w, at)) [[likely]] {
                    put(c, ids[at], w->byte_len, qp_num, tails[at]);
                    ++c;
                }
                ++w;
            } while (key_and_status(*w) == key);
        } else {
            // A plain receive's last two words are the queue's: its QP's number and vendor_err (0), and the
            // tail of recv; one 16-byte store writes both.
            const PairOfWords last_words = {qp_num, WorkQueue::tail_of(Opcode::recv)};
            do {
                if (take(*w, at)) [[likely]] {
                    // Immediate data belongs to receive completions (rxe also flags the requester's
                    // completion of a *_with_imm request, without a value). The slot says recv; a
                    // write_with_imm that consumed the receive is the opcode after it. Such a write always
                    // carries immediate data, so a receive without is a plain one: one branch for it, which
                    // rewrites the two words of a plain receive's completion that differ.
                    put(c, ids[at], w->byte_len, last_words);
                    if ((w->wc_flags & IBV_WC_WITH_IMM) != 0) [[unlikely]] {
                        std::uint64_t tail = WorkQueue::tail_of(Opcode::recv) | 1u << 16;
                        if (w->opcode == IBV_WC_RECV_RDMA_WITH_IMM) tail += 1u << 8;
                        put_imm(c, w->byte_len | static_cast<std::uint64_t>(ntohl(w->imm_data)) << 32, tail);
                    }
                    ++c;
                }
                ++w;
            } while (key_and_status(*w) == key);
        }
    }
    if (key != 0) publish();
    return static_cast<std::size_t>(c - out);
}

std::size_t VerbsCq::drain(std::span<Completion> out) noexcept {
    std::size_t n = 0;
    while (n < out.size()) {
        const std::size_t want = std::min(poll_batch, out.size() - n);
        const int got = ::ibv_poll_cq(cq_handle_, static_cast<int>(want), wc_.data());
        if (got <= 0) break;
        rearm_ = fd_mode_;
        n += translate(out.data() + n, static_cast<std::size_t>(got));
        if (static_cast<std::size_t>(got) < want) break;
    }
    return n;
}

std::size_t VerbsCq::took(std::size_t got) noexcept {
    rearm_ = fd_mode_;
    if (got > out_.size()) [[unlikely]] return took_too_many(got);
    const std::size_t n = translate(out_.data(), got);
    // A full batch: the provider may hold more, and out_ may have room for them.
    if (got == poll_batch && out_.size() > poll_batch) [[unlikely]] return n + drain(out_.subspan(n));
    return n;
}

std::size_t VerbsCq::took_one() noexcept {
    // The common single completion: a send-queue success of the queue the last completion belonged to. It
    // needs a handful of registers, where the loop of translate() needs them all; anything else goes there.
    // (last_send_key_ is 0 unless the last queue is a send queue, and no wr_id has key 0: one comparison
    // covers the queue, its kind and the status.)
    const ibv_wc& w = wc_[0];
    WorkQueue* const wq = last_wq_;
    if (key_and_status(w) != last_send_key_ ||
        queues_.epoch() != last_epoch_) [[unlikely]] {
        return took(1);
    }
    const auto pos = static_cast<std::uint32_t>(w.wr_id);
    if (!wq->outstanding(pos)) [[unlikely]] return took(1);
    rearm_ = fd_mode_;
    const std::uint32_t at = pos & wq->ring_mask;
    put(out_.data(), wq->ids[at], w.byte_len, w.qp_num, wq->tails[at]);
    wq->retire_through(pos);
    return 1;
}

std::size_t VerbsCq::took_too_many(std::size_t got) noexcept {
    held_begin_ = 0;
    held_count_ = static_cast<std::uint32_t>(translate(held_.data(), got));
    if (held_count_ == 0) return 0;
    poll_cq_ = &report_held;
    return poll_held(out_);
}

std::size_t VerbsCq::poll_held(std::span<Completion> out) noexcept {
    const std::size_t n = std::min<std::size_t>(held_count_, out.size());
    std::copy_n(held_.begin() + held_begin_, n, out.begin());
    held_begin_ += static_cast<std::uint32_t>(n);
    held_count_ -= static_cast<std::uint32_t>(n);
    if (held_count_ == 0) poll_cq_ = provider_poll_cq_;
    return n + drain(out.subspan(n));
}

int VerbsCq::report_held(ibv_cq* /*cq*/, int /*n*/, ibv_wc* /*wc*/) { return -1; }

std::size_t VerbsCq::rearm_and_drain() noexcept {
    consume_events();
    if (arm() == 0) rearm_ = 0;
    return drain(out_);
}

std::size_t VerbsCq::not_found(int got) noexcept {
    if (held_count_ != 0) return poll_held(out_);  // got is report_held's -1
    // fd mode: an empty CQ must be armed before the program sleeps on the fd. A poll that returns
    // completions needs no system call: the program polls again until it finds nothing. (A provider error,
    // got < 0, reads as an empty CQ.)
    (void)got;
    return rearm_ ? rearm_and_drain() : 0;
}

std::size_t VerbsCq::poll(std::span<Completion> out) noexcept {
    // Kept for took(), so that across the provider call an empty poll keeps nothing but `this`.
    out_ = out;
    // The provider's poll, or report_held (-1) while completions taken earlier wait in held_: they come first.
    // A full batch is asked for whatever out's size (never 0: the core does not call with an empty span);
    // completions beyond it wait in held_ for the next poll.
    const int got = poll_cq_(cq_handle_, static_cast<int>(poll_batch), wc_.data());
    if (got > 0) [[likely]] return got == 1 ? took_one() : took(static_cast<std::size_t>(got));
    if ((got | rearm_) != 0) [[unlikely]] return not_found(got);  // held completions, or fd mode to re-arm
    return 0;
}

}  // namespace weft::verbs
