// Simulated queue pairs, data path: posting, transmission, packet-by-packet placement at the responder
// (torn when the seed says so), deferred reads and atomics, acknowledgements, sequence and RNR NAKs,
// timeout retries, in-order completion and error flushing, and the staging of send/write packets on the wire
// when the program may run (sources read at transmission). Everything here runs with the fabric lock held
// and throws nothing; nothing allocates except a misuse report (a program error, off the normal path) and
// a QP's staging rings, which grow to the most it had on the wire as its program ran and keep that.
#include "sim.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

namespace weft::sim::detail {
namespace {

// An RNR NAK travels in an ack event under this status; it never reaches a completion as such.
constexpr WcStatus rnr_nak = WcStatus::rnr_retry_exceeded;
// A PSN sequence error NAK (the responder saw a message past the one it expects; `msn` names the expected
// one). A status RC never reports, used only as this marker.
constexpr WcStatus sequence_nak = WcStatus::invalid_eecn;

enum SegmentCheck : int { segments_fine = 0, unknown_key = 1, outside_region = 2 };

// Whether every segment lies inside a region of `domain` that has the needed right. Inline: a post checks
// the gather list of every request, mostly of one segment.
[[gnu::always_inline]] inline int check_segments(const SimDomain& domain, std::span<const LocalSegment> segs,
                                                  bool need_write) noexcept {
    for (const auto& s : segs) {
        if (s.length == 0) continue;
        const SimDomain::MrSlot* mr = domain.find_mr(s.lkey);
        if (!mr) return unknown_key;
        const std::uint64_t base = mr->base;
        if (s.addr < base || s.addr - base > mr->length || s.length > mr->length - (s.addr - base)) return outside_region;
        if (need_write && !has(mr->access, Access::local_write)) return outside_region;
    }
    return segments_fine;
}

// Copies bytes [offset, offset + length) of a message from its gather list to the same bytes of a scatter
// list (a contiguous destination is a one-segment list).
void copy_range(std::span<const LocalSegment> src, std::span<const LocalSegment> dst, std::uint64_t offset,
                std::uint64_t length) noexcept {
    std::size_t si = 0, di = 0;
    std::uint64_t so = offset, doff = offset;
    while (si < src.size() && so >= src[si].length) so -= src[si++].length;
    while (di < dst.size() && doff >= dst[di].length) doff -= dst[di++].length;
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

// memmove, with the common 8-byte write inline rather than a call (a load before the store: overlap is fine).
inline void move_bytes(void* to, const void* from, std::size_t n) noexcept {
    if (n == 8) {
        std::uint64_t word;
        std::memcpy(&word, from, 8);
        std::memcpy(to, &word, 8);
        return;
    }
    std::memmove(to, from, n);
}

LocalSegment contiguous(std::uint64_t addr, std::uint64_t length) noexcept {
    return {addr, static_cast<std::uint32_t>(length), 0, nullptr};
}

// A keyed pseudo-random permutation of [0, n): a 4-round Feistel network on the smallest even number of bits
// that covers n, cycle-walking values outside [0, n). O(1) state, so torn placement needs no buffer.
std::uint32_t permute(std::uint32_t k, std::uint32_t n, std::uint64_t key) noexcept {
    if (n <= 1 || key == 0) return k;
    unsigned bits = 1;
    while ((1ull << bits) < n) ++bits;
    const unsigned half = (bits + 1) / 2;
    const std::uint32_t mask = (1u << half) - 1;
    std::uint32_t x = k;
    do {
        std::uint32_t l = x >> half, r = x & mask;
        for (std::uint64_t round = 0; round < 4; ++round) {
            std::uint64_t z = key + round * 0x9e3779b97f4a7c15ull + r;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            const std::uint32_t f = static_cast<std::uint32_t>(z ^ (z >> 31)) & mask;
            const std::uint32_t next_l = r;
            r = l ^ f;
            l = next_l;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

// The eight lanes of running sums of digest() over `blocks` 64-byte blocks from `p`: lane k adds word k of
// each block (a += word; b += a). Vector additions of a `Lanes` at a time; the sums are the same for any width.
// With `copy`, the blocks are stored at `to` as they are read (a packet's copy and its digest in one pass).
using Lanes2 = std::uint64_t __attribute__((vector_size(16)));
using Lanes4 = std::uint64_t __attribute__((vector_size(32)));
template <class Lanes, bool copy>
[[gnu::always_inline]] inline void sum_blocks(const unsigned char* p, unsigned char* to, std::size_t blocks,
                                              std::uint64_t* a, std::uint64_t* b) noexcept {
    constexpr std::size_t vectors = 64 / sizeof(Lanes);
    Lanes va[vectors], vb[vectors];
    std::memcpy(va, a, 64);
    std::memcpy(vb, b, 64);
    for (; blocks > 0; --blocks, p += 64) {
#pragma GCC unroll 4  // the sums stay in registers only when unrolled
        for (std::size_t j = 0; j < vectors; ++j) {
            Lanes w;
            std::memcpy(&w, p + j * sizeof(Lanes), sizeof(Lanes));
            if constexpr (copy) std::memcpy(to + j * sizeof(Lanes), &w, sizeof(Lanes));
            va[j] += w;
            vb[j] += va[j];
        }
        if constexpr (copy) to += 64;
    }
    std::memcpy(a, va, 64);
    std::memcpy(b, vb, 64);
}

// SSE2 (every x86-64 has it; other targets split the vectors), and AVX2 where the CPU has it: half the
// instructions per block, so a large source digests at nearer the speed its bytes load.
void sum_blocks_base(const unsigned char* p, std::size_t blocks, std::uint64_t* a, std::uint64_t* b) noexcept {
    sum_blocks<Lanes2, false>(p, nullptr, blocks, a, b);
}
void copy_sum_blocks_base(const unsigned char* p, unsigned char* to, std::size_t blocks, std::uint64_t* a,
                          std::uint64_t* b) noexcept {
    sum_blocks<Lanes2, true>(p, to, blocks, a, b);
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
[[gnu::target("avx2")]] void sum_blocks_avx2(const unsigned char* p, std::size_t blocks, std::uint64_t* a,
                                             std::uint64_t* b) noexcept {
    sum_blocks<Lanes4, false>(p, nullptr, blocks, a, b);
}
[[gnu::target("avx2")]] void copy_sum_blocks_avx2(const unsigned char* p, unsigned char* to, std::size_t blocks,
                                                  std::uint64_t* a, std::uint64_t* b) noexcept {
    sum_blocks<Lanes4, true>(p, to, blocks, a, b);
}
// Chosen when the library loads; the CPU detection may not have run yet then, so it is asked for first.
const bool has_avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
}();
const auto sum_blocks_best = has_avx2 ? &sum_blocks_avx2 : &sum_blocks_base;
const auto copy_sum_blocks_best = has_avx2 ? &copy_sum_blocks_avx2 : &copy_sum_blocks_base;
#else
const auto sum_blocks_best = &sum_blocks_base;
const auto copy_sum_blocks_best = &copy_sum_blocks_base;
#endif

// A fast digest of the bytes a gather list names, to notice a source buffer changed while its request was
// in flight: eight lanes of two running sums over 64-bit words (a += word; b += a), vector additions only,
// so it runs at about the speed the bytes load; words past the last 64-byte block go through a multiply-xor
// chain, and at the end everything is mixed with multiplies. A change confined to one word always changes
// `a`; moved or swapped words change `b`. Not cryptographic: a change that keeps both sums of every lane is
// missed.
// The multiply-xor chain of digest() over bytes [i, n) of `p`, then the segment's length.
inline std::uint64_t chain_tail(std::uint64_t tail, const unsigned char* p, std::size_t i, std::size_t n) noexcept {
    for (; i + 8 <= n; i += 8) {
        std::uint64_t w;
        std::memcpy(&w, p + i, 8);
        tail = (tail ^ w) * 0x9e3779b97f4a7c15ull;
        tail ^= tail >> 29;
    }
    if (i < n) {
        std::uint64_t w = 0;
        std::memcpy(&w, p + i, n - i);
        tail = (tail ^ w) * 0x9e3779b97f4a7c15ull;
        tail ^= tail >> 29;
    }
    return (tail ^ n) * 0xbf58476d1ce4e5b9ull;  // segment boundaries count
}

constexpr std::uint64_t digest_start = 0x243f6a8885a308d3ull;

std::uint64_t digest_blocks(std::span<const LocalSegment> segs) noexcept;

// The end of digest(): the chain's value and the lanes' two sums, mixed.
inline std::uint64_t mix_lanes(std::uint64_t h, const std::uint64_t* a, const std::uint64_t* b) noexcept {
    for (std::size_t k = 0; k < 8; ++k) {
        h = (h ^ a[k]) * 0x94d049bb133111ebull;
        h = (h ^ b[k] ^ (h >> 31)) * 0x9e3779b97f4a7c15ull;
    }
    return h ^ (h >> 29);
}

// The digest of a gather list; a single segment of up to 8 bytes (the common small send or write) is one
// load and the chain's two mixing steps inline, the same value chain_tail gives.
inline std::uint64_t digest(std::span<const LocalSegment> segs) noexcept {
    if (segs.size() == 1 && segs[0].length <= 8) {
        const std::size_t n = segs[0].length;
        std::uint64_t h = digest_start;
        if (n != 0) {
            std::uint64_t w = 0;
            if (n == 8) std::memcpy(&w, reinterpret_cast<const void*>(segs[0].addr), 8);
            else std::memcpy(&w, reinterpret_cast<const void*>(segs[0].addr), n);
            h = (h ^ w) * 0x9e3779b97f4a7c15ull;
            h ^= h >> 29;
        }
        h = (h ^ n) * 0xbf58476d1ce4e5b9ull;
        return h ^ (h >> 29);
    }
    return digest_blocks(segs);
}

std::uint64_t digest_blocks(std::span<const LocalSegment> segs) noexcept {
    constexpr std::size_t block = 64;
    constexpr std::uint64_t start = digest_start;
    if (segs.size() == 1 && segs[0].length < block) {
        // Without a whole block the lanes hold nothing: a small message costs the tail chain only.
        const std::uint64_t h = chain_tail(start, reinterpret_cast<const unsigned char*>(segs[0].addr), 0, segs[0].length);
        return h ^ (h >> 29);
    }
    std::uint64_t a[8], b[8];
    std::uint64_t tail = start;
    bool blocks = false;
    for (const auto& s : segs) {
        const auto* p = reinterpret_cast<const unsigned char*>(s.addr);
        const std::size_t n = s.length;
        std::size_t i = 0;
        if (n >= block) {
            if (!blocks) std::fill(a, a + 8, 0), std::fill(b, b + 8, 0);
            blocks = true;
            sum_blocks_best(p, n / block, a, b);
            i = n / block * block;
        }
        tail = chain_tail(tail, p, i, n);
    }
    return blocks ? mix_lanes(tail, a, b) : tail ^ (tail >> 29);
}

bool carries_payload(Opcode op) noexcept { return op != Opcode::read && !is_atomic(op); }

}  // namespace

WcStatus SimQp::local_key_error(int why) const noexcept {
    // rxe reports an unknown lkey as a QP operation error; a known key with bad bounds as specified.
    return why == unknown_key && domain_->profile() == Profile::rxe ? WcStatus::local_qp_operation
                                                                    : WcStatus::local_protection;
}

// ---- posting

namespace {

// A posted receive as a queue keeps it: entry `e`, its scatter list copied to `sges`, taking effect at `at`.
void store_receive(RqEntry& e, LocalSegment* sges, const RecvRequest& r, std::uint64_t at) noexcept {
    e.id = r.id;
    e.length = r.length();
    e.num_sge = r.num_sge;
    e.ready_at = at;
    const auto segs = r.segments();
    std::copy(segs.begin(), segs.end(), sges);
}

}  // namespace

PostStatus SimQp::post_send(std::span<const SendRequest> batch) noexcept {
    OneAtATime::Scope poster(send_posters_);
    std::lock_guard lock(fabric_.mu);
    FabricState::ReturnToProgram stage{fabric_};
    if (poster.overlapped) {
        fabric_.report_misuse("two threads posted to the send queue of QP " + std::to_string(qp_num) +
                              " at the same time; one thread at a time may post to a queue "
                              "(QpOptions::thread_safe lets several)");
    }
    const std::uint64_t at = fabric_.enter_call(domain_->node(), false);
    if (state_ != QpState::rts && state_ != QpState::error) {
        return PostStatus::not_connected("the QP is not connected; call connect() before posting sends");
    }
    if (auto st = weft::detail::validate_send_batch(batch, caps, domain_->caps); !st) return st;
    if (batch.size() > sq_ring_.free_slots(caps.max_send, sq_ring_.posted)) return PostStatus::queue_full();

    const std::uint64_t first = sq_ring_.posted;
    // The entries about to be written: their lines are asked for at once, not one store stall at a time.
    for (std::size_t k = 0; k < batch.size() && k < 16; ++k) __builtin_prefetch(&sq_at(first + k), 1);
    for (const SendRequest& r : batch) {
        const std::uint64_t i = sq_ring_.posted++;
        SqEntry& e = sq_at(i);
        e.id = r.id;
        e.remote_addr = r.remote_addr;
        e.rkey = r.rkey;
        e.length = static_cast<std::uint32_t>(r.length());  // validated: at most max_msg_size
        e.num_sge = r.num_sge & 0x3f;                       // at most max_sge
        e.opcode = r.opcode;
        e.flags = r.flags;
        e.done = false;
        e.status = WcStatus::success;
        e.tx_start = at;
        e.sources_checked = 0;
        if (is_atomic(r.opcode)) {
            SqOperands& o = operands_at(i);
            o.compare_add = r.compare_add;
            o.swap = r.swap;
        } else if (consumes_receive(r.opcode)) {
            operands_at(i).imm = r.imm;
        }
        auto segs = r.segments();
        LocalSegment* slot = &sq_sge_[sq_slot(i) * max_sge_];
        if (has(r.flags, SendFlags::inline_data)) {
            // The payload is copied now, so the caller may reuse its buffer at once.
            std::byte* buf = sq_inline_.data() + sq_slot(i) * max_inline_;
            std::uint64_t off = 0;
            for (const auto& s : segs) {
                if (s.length) std::memcpy(buf + off, s.data(), s.length);
                off += s.length;
            }
            slot[0] = contiguous(reinterpret_cast<std::uint64_t>(buf), e.length);
            e.num_sge = e.length ? 1 : 0;
        } else {
            if (segs.size() == 1) slot[0] = segs[0];  // most requests: a store, not a call of memmove
            else std::copy(segs.begin(), segs.end(), slot);
            // Reading unregistered memory here would be a bug of ours: only digest what passes the local check.
            if (fabric_.params.check_sources && carries_payload(r.opcode) && check_gather(i) == segments_fine) {
                e.digest = digest(segs);
            }
        }
    }
    if (state_ == QpState::error) {
        flush_send();  // the flush cursor is at `first`: everything before was flushed when the QP went to error
    } else {
        transmit_pending();
    }
    if (!fabric_.overrun_cqs.empty()) fabric_.handle_overruns();
    fabric_.notify_post();
    fabric_.sync_fds();
    return PostStatus::ok();
}

PostStatus SimQp::post_recv(std::span<const RecvRequest> batch) noexcept {
    OneAtATime::Scope poster(recv_posters_);
    std::lock_guard lock(fabric_.mu);
    FabricState::ReturnToProgram stage{fabric_};
    if (poster.overlapped) {
        fabric_.report_misuse("two threads posted to the receive queue of QP " + std::to_string(qp_num) +
                              " at the same time; one thread at a time may post to a queue "
                              "(QpOptions::thread_safe lets several)");
    }
    const std::uint64_t at = fabric_.enter_call(domain_->node(), false);
    if (state_ == QpState::reset) return PostStatus::not_connected("the QP is in reset");
    if (srq_ && !batch.empty()) {
        return PostStatus::invalid(0, "this QP takes its receives from a shared receive queue; post them there "
                                      "(SharedReceiveQueue::post_recv)");
    }
    if (auto st = weft::detail::validate_recv_batch(batch, caps); !st) return st;
    if (batch.size() > rq_ring_.free_slots(caps.max_recv, rq_ring_.posted)) return PostStatus::queue_full();
    for (const RecvRequest& r : batch) {
        const std::uint64_t i = rq_ring_.posted++;
        store_receive(rq_at(i), &rq_sge_[rq_slot(i) * rq_stride_], r, at);
    }
    if (state_ == QpState::error) flush_recv();
    if (!fabric_.overrun_cqs.empty()) fabric_.handle_overruns();
    fabric_.notify_post();
    fabric_.sync_fds();
    return PostStatus::ok();
}

// ---- shared receive queue

SimSrq::SimSrq(std::shared_ptr<SimDomain> domain, const SrqOptions& options, std::uint32_t number)
    : domain_(std::move(domain)),
      fabric_(*domain_->fabric()),
      ring_(std::bit_ceil(std::max<std::size_t>(options.max_recv, 1))),
      sges_(ring_.size() * options.max_sge),
      stride_(options.max_sge),
      limit_(options.limit) {
    srq_num = number;
    max_recv = options.max_recv;
    max_sge = options.max_sge;
}

SimSrq::~SimSrq() = default;

PostStatus SimSrq::post_recv(std::span<const RecvRequest> batch) noexcept {
    OneAtATime::Scope poster(posters_);
    std::lock_guard lock(fabric_.mu);
    FabricState::ReturnToProgram stage{fabric_};
    if (poster.overlapped) {
        fabric_.report_misuse("two threads posted to shared receive queue " + std::to_string(srq_num) +
                              " at the same time; one thread at a time may post to it "
                              "(SrqOptions::thread_safe lets several)");
    }
    const std::uint64_t at = fabric_.enter_call(domain_->node(), false);
    if (auto st = weft::detail::validate_srq_batch(batch, max_sge); !st) return st;
    if (tail_ - head_ + batch.size() > max_recv) return PostStatus::queue_full();
    for (const RecvRequest& r : batch) {
        const std::uint64_t i = tail_++;
        store_receive(ring_[slot(i)], &sges_[slot(i) * stride_], r, at);
    }
    fabric_.notify_post();
    fabric_.sync_fds();
    return PostStatus::ok();
}

void SimSrq::arm_limit(std::uint32_t limit) {
    std::lock_guard lock(fabric_.mu);
    FabricState::ReturnToProgram stage{fabric_};
    (void)fabric_.enter_call(domain_->node(), false);
    limit_ = limit;
}

void SimSrq::take(RqEntry& entry, LocalSegment* sges) noexcept {
    const std::uint64_t i = head_++;
    entry = ring_[slot(i)];
    std::copy_n(&sges_[slot(i) * stride_], entry.num_sge, sges);
    if (limit_ != 0 && tail_ - head_ < limit_) {
        limit_ = 0;
        domain_->push_event({EventType::srq_limit_reached, 0, srq_num, "SRQ limit reached"});
    }
}

// ---- requester

int SimQp::check_local(std::uint64_t i) noexcept {
    const SqEntry& e = sq_at(i);
    if (has(e.flags, SendFlags::inline_data)) return segments_fine;
    if (e.opcode == Opcode::read || is_atomic(e.opcode)) return check_segments(*domain_, sq_sges(i), true);
    return check_gather(i);
}

int SimQp::check_gather_again(std::uint64_t i) noexcept {
    SqEntry& e = sq_at(i);
    const int why = check_segments(*domain_, sq_sges(i), false);
    if (why == segments_fine) e.sources_checked = domain_->mr_epoch;
    return why;
}

void SimQp::transmit_pending() noexcept {
    if (state_ != QpState::rts || rnr_wait_) return;
    bool staged_source = false;  // a transmitted packet will read a program's source
    while (sq_next_tx_ < sq_ring_.posted && sq_next_tx_ < tx_stop_) {
        const std::uint64_t i = sq_next_tx_;
        SqEntry& e = sq_at(i);
        if (int why = check_local(i); why != segments_fine) {
            // A local protection error: this entry completes in error once the earlier ones have completed,
            // and nothing after it is sent.
            e.done = true;
            e.status = local_key_error(why);
            tx_stop_ = i;
            complete_in_order();
            if (staged_source && stage_due_ == UINT64_MAX) arm_staging();
            return;
        }
        const bool payload = carries_payload(e.opcode);
        // A fenced request waits until every earlier read and atomic has completed.
        if (has(e.flags, SendFlags::fence) && sq_ring_.completed < rd_atomic_end_) break;
        const std::uint64_t bytes = payload ? e.length : 0;
        // One link per node, in posting order across its QPs; or, with qp_paths, an engine and a path per
        // QP, so that a later message of another QP may arrive first (the IB spec orders one QP only).
        const bool own_path = fabric_.reorders(reorder_qp_paths);
        std::uint64_t& engine_free = own_path ? engine_free_ : domain_->link_free;
        // Not before the program posted it (program time), nor before the engine is free. (A retransmission
        // finds its previous start in tx_start instead, which the engine has passed.)
        const std::uint64_t start = std::max({fabric_.now, engine_free, e.tx_start});
        const std::uint64_t wire = fabric_.wire_ns(bytes);
        engine_free = start + wire;
        if (sq_next_tx_ == sq_ring_.completed) last_progress_ = start;  // the ACK timer starts as it leaves
        if (!payload) rd_atomic_end_ = std::max(rd_atomic_end_, i + 1);
        Event ev;
        ev.kind = EventKind::deliver;
        e.tx_start = start;
        ev.base = tx_base(e);
        ev.time = ev.base + (bytes <= fabric_.params.mtu ? wire : fabric_.wire_ns(fabric_.params.mtu));  // first packet
        ev.qpn = remote_qpn_;
        ev.peer = qp_num;
        ev.msn = i;
        e.word_staged = false;
        // The order its packets leave and are placed in (torn), drawn per transmission (perm_key()).
        if (payload && bytes > fabric_.params.mtu && fabric_.reorders(reorder_torn)) {
            operands_at(i).perm_key = fabric_.rng.next() | 1;
        }
        if (i < stage_msn_ || (i == stage_msn_ && stage_k_ > 0)) restage_from(i);
        // check_sources=0 trusts the program not to change a source in flight: nothing is staged.
        staged_source |= fabric_.params.check_sources && reads_source(e);
        if (i < tx_high_) ++fabric_.stats.retransmitted;
        else tx_high_ = i + 1;
        if (fabric_.tracing) {
            TraceRecord r;
            r.kind = TraceKind::transmit;
            r.time = start;
            r.end = ev.base + wire;
            r.msn = i;
            r.node = domain_->node();
            r.qpn = qp_num;
            r.peer = remote_qpn_;
            r.bytes = static_cast<std::uint32_t>(bytes);
            r.opcode = e.opcode;
            fabric_.record(r);
        }
        fabric_.send_packet(ev, domain_->node());
        ++sq_next_tx_;
    }
    if (staged_source && stage_due_ == UINT64_MAX) arm_staging();
    arm_timer();
}

void SimQp::arm_timer() noexcept {
    const std::uint64_t tmo = ack_timeout_;
    if (timer_armed_ || tmo == 0 || sq_next_tx_ <= sq_ring_.completed) return;
    timer_armed_ = true;
    const std::uint64_t due = std::max(fabric_.now, last_progress_ + tmo);
    // One timer event per QP at most: an earlier one still pending fires first and re-arms for the rest,
    // so re-arming per acknowledgement adds nothing to the event heap.
    if (timer_pending_ && timer_due_ <= due) return;
    Event ev;
    ev.kind = EventKind::timeout;
    ev.time = due;
    ev.qpn = qp_num;
    ev.generation = ++timer_gen_;
    timer_pending_ = true;
    timer_due_ = due;
    fabric_.schedule(ev);
}

void SimQp::on_ack(const Event& e) noexcept {
    if (state_ != QpState::rts) return;
    if (e.msn < sq_ring_.completed || e.msn >= sq_next_tx_) return;  // stale: already completed or rewound
    if (e.status == sequence_nak) {
        // The responder expects message e.msn: something before what it saw was lost. Go back to it now.
        if (rnr_wait_) return;
        sq_next_tx_ = e.msn;
        last_progress_ = fabric_.now;
        transmit_pending();
        return;
    }
    SqEntry& w = sq_at(e.msn);
    if (w.done) return;
    if (e.status == WcStatus::success) {
        // Acknowledgements are cumulative for sends and writes: the responder executes in order, so every
        // earlier one succeeded (reads and atomics wait for their own response, which carries the data).
        for (std::uint64_t k = std::max(sq_ring_.completed, cumulative_done_); k < e.msn; ++k) {
            SqEntry& before = sq_at(k);
            if (!before.done && carries_payload(before.opcode)) {
                before.done = true;
                check_source(k);
            }
        }
        cumulative_done_ = std::max(cumulative_done_, e.msn);
        w.done = true;
        check_source(e.msn);
        last_progress_ = fabric_.now;
        rnr_count_ = 0;
        retry_count_ = 0;
        complete_in_order();
        if (sq_next_tx_ < sq_ring_.posted) transmit_pending();  // a fenced request may go now
        return;
    }
    if (e.status == rnr_nak) {
        retry_count_ = 0;  // a NAK is a valid response: the transport retry count starts over
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
    timer_pending_ = false;
    if (!timer_armed_) return;
    timer_armed_ = false;
    if (state_ != QpState::rts || sq_next_tx_ <= sq_ring_.completed) return;
    const std::uint64_t tmo = ack_timeout_;
    if (fabric_.now < last_progress_ + tmo) {
        arm_timer();
        return;
    }
    if (retry_count_ >= options_.retry_cnt) {
        SqEntry& w = sq_at(sq_ring_.completed);
        w.done = true;
        w.status = WcStatus::transport_retry_exceeded;
        complete_in_order();
        return;
    }
    ++retry_count_;
    sq_next_tx_ = sq_ring_.completed;
    last_progress_ = fabric_.now;
    transmit_pending();
}

void SimQp::complete_in_order() noexcept {
    while (sq_ring_.completed < sq_ring_.posted) {
        const std::uint64_t i = sq_ring_.completed;
        const SqEntry& w = sq_at(i);
        if (!w.done) break;
        ++sq_ring_.completed;
        if (w.status != WcStatus::success) {
            emit_send(i, w.status);
            enter_error();
            return;
        }
        if (has(w.flags, SendFlags::signaled)) emit_send(i, WcStatus::success);
    }
    sq_next_tx_ = std::max(sq_next_tx_, sq_ring_.completed);
    if (timer_armed_ && sq_next_tx_ == sq_ring_.completed) {
        // Nothing on the wire: disarm the ACK timer (its pending event is skipped without advancing the
        // clock, unless the timer is armed again by then).
        timer_armed_ = false;
    }
}

void SimQp::check_source(std::uint64_t i) noexcept {
    const SqEntry& w = sq_at(i);
    if (!fabric_.params.check_sources || !carries_payload(w.opcode) || has(w.flags, SendFlags::inline_data) ||
        check_gather(i) != segments_fine) {
        return;
    }
    // Read in this source epoch and found as at post: the source still holds those bytes.
    if (w.length > fabric_.params.mtu && w.num_sge == 1 && operands_at(i).source_clean != 0 &&
        operands_at(i).source_clean == fabric_.source_epoch()) {
        return;
    }
    if (digest(sq_sges(i)) != w.digest) report_source_changed(i);
}

bool SimQp::fold_source(std::uint64_t msn, std::uint64_t base, std::uint32_t k, std::uint64_t offset,
                        std::uint32_t n, std::byte* to) noexcept {
    // Packets are read in leaving order, each once, message after message: one fold at a time per QP.
    const std::uint64_t epoch = fabric_.source_epoch();
    const LocalSegment& src = sq_sges(msn)[0];
    if (k == 0) {
        operands_at(msn).source_clean = 0;
        if (epoch == 0) return false;
        fold_.msn = msn;
        fold_.base = base;
        fold_.epoch = epoch;
        fold_.next = 0;
        std::fill(fold_.a, fold_.a + 8, 0);
        std::fill(fold_.c, fold_.c + 8, 0);
        fabric_.source_read(src.addr, src.length);
    } else if (fold_.epoch != epoch || fold_.next != k || fold_.msn != msn || fold_.base != base) {
        fold_.epoch = 0;  // a read in another epoch, or one this fold missed: the acknowledgement reads again
        return false;
    }
    // The packet's whole blocks (an mtu is a multiple of 64 bytes, so its packets start on a block): their
    // sums, and those of the words times their block's index in the message, are added to the lanes'.
    const auto* p = reinterpret_cast<const unsigned char*>(src.addr);
    const std::uint64_t first = offset / 64, blocks = n / 64;
    std::uint64_t a[8]{}, b[8]{};
    if (to) {
        copy_sum_blocks_best(p + offset, reinterpret_cast<unsigned char*>(to), blocks, a, b);
        if (n % 64) std::memcpy(to + blocks * 64, p + offset + blocks * 64, n % 64);
    } else {
        sum_blocks_best(p + offset, blocks, a, b);
    }
    for (std::size_t l = 0; l < 8; ++l) {
        fold_.a[l] += a[l];
        fold_.c[l] += (first + blocks) * a[l] - b[l];  // sum over j of (first + j) * word j
    }
    if (++fold_.next < fabric_.packets(src.length)) return to != nullptr;
    // The last read: digest() of the source as read (lane b is the sum of words times the blocks from theirs
    // to the end). No store since the first read touched the source, so its tail still holds what was read.
    fold_.epoch = 0;
    const std::uint64_t total = src.length / 64;
    for (std::size_t l = 0; l < 8; ++l) b[l] = total * fold_.a[l] - fold_.c[l];
    const std::uint64_t h = mix_lanes(chain_tail(digest_start, p, total * 64, src.length), fold_.a, b);
    if (h == sq_at(msn).digest) operands_at(msn).source_clean = epoch;
    return to != nullptr;
}

void SimQp::report_source_changed(std::uint64_t i) {
    const SqEntry& w = sq_at(i);
    fabric_.report_misuse("the source buffer of send request id=" + std::to_string(w.id) + " (" +
                          std::string(to_string(w.opcode)) + ", " + std::to_string(w.length) + " bytes) on QP " +
                          std::to_string(qp_num) +
                          " changed between post and acknowledgement; the peer may have received either version "
                          "(keep it unchanged until the request completes, or post it inline)");
}

void SimQp::enter_error() noexcept {
    if (state_ == QpState::error) return;
    // A read or atomic this QP deferred as a responder was ahead of whatever failed: it executes first,
    // and a read response being sent is sent whole.
    if (response_.active) finish_response();
    if (deferred_.active) run_deferred();
    if (response_.active) finish_response();
    state_ = QpState::error;
    rnr_wait_ = false;
    ++timer_gen_;
    timer_armed_ = false;
    timer_pending_ = false;
    inbound_.active = false;
    ++inbound_.gen;
    if (domain_->profile() == Profile::rxe) {
        // rxe flushes the receive queue before the send queue (docs/backends/verbs.md).
        flush_recv();
        flush_send();
    } else {
        flush_send();
        flush_recv();
    }
    // A QP on a shared receive queue takes no more of its receives: the spec's Last WQE Reached (Soft-RoCE
    // does not report it).
    if (srq_ && domain_->profile() != Profile::rxe) {
        domain_->push_event({EventType::qp_last_wqe_reached, qp_num, 0, "last WQE reached"});
    }
}

void SimQp::fail_responder(bool access) noexcept {
    if (state_ == QpState::error) return;
    enter_error();
    if (domain_->profile() == Profile::rxe) return;
    domain_->push_event({EventType::qp_fatal, qp_num, 0,
                         access ? "local access violation: a peer's request outside a region or without its right "
                                  "(IBV_EVENT_QP_ACCESS_ERR)"
                                : "invalid request: a peer's request this QP cannot execute (IBV_EVENT_QP_REQ_ERR)"});
}

void SimQp::disconnect() {
    std::lock_guard lock(fabric_.mu);
    FabricState::ReturnToProgram stage{fabric_};
    const std::uint64_t at = fabric_.enter_call(domain_->node(), false);
    enter_error();
    if (told_peer_) return;
    told_peer_ = true;
    // The notice travels as the CM's DREQ does, on a path of its own: it may overtake this QP's packets
    // still on the wire, which then find the peer in error. A cut link or a crashed peer loses it.
    Event ev;
    ev.kind = EventKind::disconnect;
    ev.time = std::max(fabric_.now, at) + fabric_.params.latency_ns + path_ns_;
    ev.qpn = remote_qpn_;
    ev.peer = qp_num;
    ev.from_node = domain_->node();
    fabric_.schedule(ev);
}

void SimQp::to_error() {
    std::lock_guard lock(fabric_.mu);
    FabricState::ReturnToProgram stage{fabric_};
    (void)fabric_.enter_call(domain_->node(), false);
    enter_error();
    if (!fabric_.overrun_cqs.empty()) fabric_.handle_overruns();
    fabric_.notify_post();
    fabric_.sync_fds();
}

void SimQp::on_disconnect(const Event& e) noexcept {
    if (e.peer != remote_qpn_ || state_ == QpState::init) return;  // not this QP's peer
    enter_error();
    domain_->push_event({EventType::peer_disconnected, qp_num, 0, "peer disconnected"});
}

void SimQp::flush_send() noexcept {
    sq_next_tx_ = sq_ring_.flush([this](std::uint64_t i) noexcept { emit_send(i, WcStatus::flushed); });
}

void SimQp::flush_recv() noexcept {
    rq_ring_.flush([this](std::uint64_t i) noexcept { emit_recv(i, WcStatus::flushed, Opcode::recv, 0, false, 0); });
}

void SimQp::emit_send(std::uint64_t i, WcStatus status) noexcept {
    const SqEntry& w = sq_at(i);
    CqEntry e;
    e.wc.id = w.id;
    e.wc.status = status;
    e.wc.opcode = completion_opcode(w.opcode);
    if (status == WcStatus::success) {
        // byte_len belongs to reads and atomics on the send queue (verbs); rxe fills it in for sends and
        // writes too.
        const bool has_len = w.opcode == Opcode::read || is_atomic(w.opcode) || domain_->profile() == Profile::rxe;
        e.wc.byte_len = has_len ? static_cast<std::uint32_t>(w.length) : 0;
    }
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
    if (srq_) rq_ring_.retire_through(i);  // taken from the shared queue: nothing waits for the poll to free it
}

void SimQp::release(bool send_queue, std::uint64_t wqe) noexcept {
    QueueRing& ring = send_queue ? sq_ring_ : rq_ring_;
    if (wqe >= ring.retired) ring.retire_through(wqe);
}

// ---- responder

void SimQp::on_deliver(const Event& e) noexcept {
    SimQp* q = fabric_.find_qp(e.peer);
    if (!q) return;
    // A responder that is not ready, is in error, or is connected elsewhere answers nothing; the requester
    // times out.
    if ((state_ != QpState::rts && state_ != QpState::rtr) || remote_qpn_ != q->qp_num) return;
    // The link delivers packets in order: a message arriving means the one before has fully arrived. The
    // responder takes up a message after the read response it is sending.
    if (inbound_.active) finish_inbound();
    if (response_.active) finish_response();
    if (e.msn > expected_msn_) {
        // Out of sequence (an earlier message was lost, or is behind a NAK): one NAK until it comes.
        if (!nak_sent_) {
            nak_sent_ = true;
            send_ack(q->qp_num, expected_msn_, sequence_nak, 0);
        }
        return;
    }
    if (e.msn < expected_msn_) {
        // A retransmitted duplicate. A deferred read answers by itself. A read the requester still waits
        // for is executed again: its memory is read anew, as a responder does. Anything else (a send or
        // write already placed, an atomic whose result must not change) is acknowledged again.
        if (deferred_.active && deferred_.msn == e.msn) return;
        if (q->holds(e.msn) && q->sq_at(e.msn).opcode == Opcode::read && !q->sq_at(e.msn).done &&
            check_response(*q, e.msn) == WcStatus::success) {
            ++fabric_.stats.reread;
            execute_response(*q, e.msn);
            return;
        }
        send_ack(q->qp_num, e.msn, WcStatus::success, 0);
        return;
    }
    // The requester has flushed this message (it went to error): it never takes effect (what was lost
    // and what was flushed look alike to everyone).
    if (!q->holds(e.msn)) return;
    nak_sent_ = false;
    const SqEntry& w = q->sq_at(e.msn);
    if (w.opcode == Opcode::read || is_atomic(w.opcode)) {
        if (deferred_.active) run_deferred();  // reads and atomics stay in order among themselves
        WcStatus st = check_response(*q, e.msn);
        if (st != WcStatus::success) {
            send_ack(q->qp_num, e.msn, st, 0);
            return;
        }
        ++expected_msn_;
        if (fabric_.reorders(reorder_read_after_write) && fabric_.rng.chance(0.5)) {
            // Execute later: messages behind this one (not fenced: the requester holds those back) may take
            // effect first.
            deferred_.active = true;
            deferred_.requester = q->qp_num;
            deferred_.msn = e.msn;
            Event ev;
            ev.kind = EventKind::deferred;
            ev.time = fabric_.now + 1 + fabric_.rng.below(fabric_.params.latency_ns + fabric_.wire_ns(w.length) + 1);
            ev.qpn = qp_num;
            ev.generation = ++deferred_.gen;
            fabric_.schedule(ev);
            return;
        }
        execute_response(*q, e.msn);
        return;
    }
    WcStatus st = begin_message(*q, e.msn);
    if (st != WcStatus::success) {
        nak_sent_ = st == rnr_nak;  // later messages are dropped silently until the refused one comes again
        send_ack(q->qp_num, e.msn, st, 0);
        return;
    }
    inbound_.active = true;
    inbound_.requester = q->qp_num;
    inbound_.msn = e.msn;
    inbound_.length = w.length;
    inbound_.packets = fabric_.packets(w.length);
    inbound_.placed = 0;
    inbound_.base = e.base;
    inbound_.from_node = e.from_node;
    inbound_.perm_key = q->perm_key(e.msn);
    inbound_.checked = domain_->mr_epoch;  // begin_message checked the target
    ++inbound_.gen;
    if (!place_packet(0)) return;
    if (inbound_.packets > 1) {
        schedule_place();
        return;
    }
    // A one-packet message landed whole within this event: finish_inbound() without looking the requester
    // up again, which still holds the message (placing a packet changes nothing of it).
    inbound_.active = false;
    ++inbound_.gen;
    if (inbound_.consumes_recv) {
        const bool is_send = w.opcode == Opcode::send || w.opcode == Opcode::send_with_imm;
        emit_recv(inbound_.rq, WcStatus::success, is_send ? Opcode::recv : Opcode::recv_rdma_with_imm,
                  static_cast<std::uint32_t>(w.length), w.opcode != Opcode::send, q->operands_at(e.msn).imm);
    }
    ++expected_msn_;
    send_ack(q->qp_num, e.msn, WcStatus::success, 0);
}

void SimQp::schedule_place() noexcept {
    const std::uint64_t end = std::min<std::uint64_t>(inbound_.length, std::uint64_t{inbound_.placed + 1} * fabric_.params.mtu);
    Event ev;
    ev.kind = EventKind::place;
    ev.time = std::max(fabric_.now, inbound_.base + fabric_.wire_ns(end));
    ev.qpn = qp_num;
    ev.generation = inbound_.gen;
    fabric_.schedule(ev);
}

void SimQp::on_place(const Event& e) noexcept {
    if (!inbound_.active || e.generation != inbound_.gen) return;
    // The packets that land before anything else happens are placed in this one event, each at its time,
    // as their own events would have placed them.
    while (place_next()) {
        const std::uint64_t end = std::min<std::uint64_t>(inbound_.length, std::uint64_t{inbound_.placed + 1} * fabric_.params.mtu);
        if (!fabric_.run_inline(std::max(fabric_.now, inbound_.base + fabric_.wire_ns(end)))) {
            schedule_place();
            return;
        }
    }
}

bool SimQp::place_next() noexcept {
    const bool lost = (fabric_.rates.drop > 0 && fabric_.rng.chance(fabric_.rates.drop)) ||
                      ((!fabric_.cuts.empty() || !fabric_.crashed.empty()) &&
                       !fabric_.link_up(inbound_.from_node, domain_->node(), fabric_.now));
    if (lost) {
        // A packet in the middle of the message is lost: what landed stays (the program may see it), the
        // receive is not consumed, and a sequence NAK makes the requester send the whole message again.
        ++fabric_.stats.dropped;
        inbound_.active = false;
        ++inbound_.gen;
        if (inbound_.consumes_recv) --rq_ring_.completed;
        if (!nak_sent_) {
            nak_sent_ = true;
            send_ack(inbound_.requester, expected_msn_, sequence_nak, 0);
        }
        return false;
    }
    if (!place_packet(inbound_.placed)) return false;
    if (inbound_.placed < inbound_.packets) return true;
    finish_inbound();
    return false;
}

WcStatus SimQp::begin_message(SimQp& q, std::uint64_t msn) noexcept {
    const SqEntry& w = q.sq_at(msn);
    const bool rxe = domain_->profile() == Profile::rxe;
    inbound_.consumes_recv = false;
    switch (w.opcode) {
        case Opcode::send:
        case Opcode::send_with_imm: {
            if (!receive_ready()) return rnr_nak;
            const std::uint64_t ri = take_receive();
            if (w.length > rq_at(ri).length) {
                emit_recv(ri, rxe ? WcStatus::local_qp_operation : WcStatus::local_length, Opcode::recv, 0, false, 0);
                enter_error();
                return rxe ? WcStatus::remote_operation : WcStatus::remote_invalid_request;
            }
            if (int why = check_segments(*domain_, rq_sges(ri), true); why != segments_fine) {
                if (why == unknown_key) {
                    fabric_.report_misuse("a message arrived into receive id=" + std::to_string(rq_at(ri).id) +
                                          " on QP " + std::to_string(qp_num) +
                                          " whose memory region was deregistered after the receive was posted");
                }
                // rxe completes a receive whose scatter list fails its check as a QP operation error.
                emit_recv(ri, rxe ? WcStatus::local_qp_operation : WcStatus::local_protection, Opcode::recv, 0, false, 0);
                enter_error();
                return WcStatus::remote_operation;
            }
            inbound_.consumes_recv = true;
            inbound_.rq = ri;
            return WcStatus::success;
        }
        case Opcode::write:
        case Opcode::write_with_imm: {
            const bool with_imm = w.opcode == Opcode::write_with_imm;
            if (with_imm && !receive_ready()) return rnr_nak;
            if (w.length > 0 && !check_remote(w.rkey, w.remote_addr, w.length, Access::remote_write)) {
                if (with_imm) {
                    emit_recv(take_receive(), WcStatus::local_access, Opcode::recv_rdma_with_imm, 0, false, 0);
                    enter_error();
                } else {
                    fail_responder(true);
                }
                return WcStatus::remote_access;
            }
            if (with_imm) {
                inbound_.consumes_recv = true;
                inbound_.rq = take_receive();
            }
            return WcStatus::success;
        }
        default: return WcStatus::remote_invalid_request;
    }
}

bool SimQp::place_packet(std::uint32_t k) noexcept {
    SimQp* q = fabric_.find_qp(inbound_.requester);
    const std::uint64_t msn = inbound_.msn;
    if (!q) {
        // The requester vanished mid-message: what landed stays, the rest never comes.
        inbound_.active = false;
        ++inbound_.gen;
        if (inbound_.consumes_recv) --rq_ring_.completed;
        return false;
    }
    if (!q->holds(msn)) {
        // The requester flushed the message mid-way (it went to error): the rest never comes, as if lost,
        // and its slot is not read again.
        inbound_.active = false;
        ++inbound_.gen;
        if (inbound_.consumes_recv) --rq_ring_.completed;
        return false;
    }
    const SqEntry& w = q->sq_at(msn);
    const std::uint64_t mtu = fabric_.params.mtu;
    // A packet still on the wire when the program last ran left with the bytes staged then (stage_until);
    // any other left since the program last ran, so the source still holds what it sent.
    const bool word = w.word_staged && q->tx_base(w) == inbound_.base;  // implies one packet
    const Staged* staged = !word && q->staged_head_ != q->staged_tail_ ? q->staged_packet(msn, inbound_.base, k) : nullptr;
    const std::uint32_t p = staged ? static_cast<std::uint32_t>(staged->offset / mtu) : permute(k, inbound_.packets, inbound_.perm_key);
    const std::uint64_t offset = staged ? staged->offset : std::uint64_t{p} * mtu;
    const std::uint64_t n = std::min(mtu, inbound_.length - std::min(inbound_.length, offset));
    ++inbound_.placed;
    if (n == 0) return true;
    const auto src = q->sq_sges(msn);
    // The source is read as it is sent: its region must still be registered (misuse: deregistered early).
    if (!has(w.flags, SendFlags::inline_data)) {
        if (int why = q->check_gather(msn); why != segments_fine) {
            inbound_.active = false;
            ++inbound_.gen;
            if (inbound_.consumes_recv) --rq_ring_.completed;
            send_ack(q->qp_num, msn, q->local_key_error(why), 0);
            return false;
        }
    }
    const std::byte* staged_bytes = word ? reinterpret_cast<const std::byte*>(&w.staged_word)
                                    : staged ? q->staged_data(*staged)
                                             : nullptr;
    // The staged bytes as a gather list whose byte `offset` is the packet's first (nothing before it is read).
    const LocalSegment from_staging =
        staged_bytes ? contiguous(reinterpret_cast<std::uint64_t>(staged_bytes) - offset, offset + n) : LocalSegment{};
    if (w.opcode == Opcode::send || w.opcode == Opcode::send_with_imm) {
        const auto dst = rq_sges(inbound_.rq);
        if (inbound_.checked != domain_->mr_epoch && check_segments(*domain_, dst, true) != segments_fine) {
            inbound_.active = false;
            ++inbound_.gen;
            emit_recv(inbound_.rq,
                      domain_->profile() == Profile::rxe ? WcStatus::local_qp_operation : WcStatus::local_protection,
                      Opcode::recv, 0, false, 0);
            enter_error();
            send_ack(q->qp_num, msn, WcStatus::remote_operation, 0);
            return false;
        }
        // Read from the source now: folded into the digest of its reads before anything is stored.
        if (!staged_bytes && q->folds(w)) (void)q->fold_source(msn, inbound_.base, k, offset, static_cast<std::uint32_t>(n), nullptr);
        copy_range(staged_bytes ? std::span<const LocalSegment>(&from_staging, 1) : src, dst, offset, n);
        for (const LocalSegment& d : dst) fabric_.stored(d.addr, d.length);
        if (staged) q->pop_staged();
        trace_place(p, offset, n);
        return true;
    }
    // begin_message checked the whole target range; a packet's part of it needs a new look only after a
    // deregistration.
    if (inbound_.checked != domain_->mr_epoch &&
        !check_remote(w.rkey, w.remote_addr + offset, n, Access::remote_write)) {
        // The region was deregistered while the write was landing.
        inbound_.active = false;
        ++inbound_.gen;
        if (inbound_.consumes_recv) {
            emit_recv(inbound_.rq, WcStatus::local_access, Opcode::recv_rdma_with_imm, 0, false, 0);
            enter_error();
        } else {
            fail_responder(true);
        }
        send_ack(q->qp_num, msn, WcStatus::remote_access, 0);
        return false;
    }
    if (staged_bytes) {
        move_bytes(reinterpret_cast<void*>(w.remote_addr + offset), staged_bytes, n);
        if (staged) q->pop_staged();
    } else if (src.size() == 1) {
        // One source segment (most writes): the packet's bytes are at the same offset on both sides.
        if (q->folds(w)) return place_folded(*q, k, p, offset, static_cast<std::uint32_t>(n));
        move_bytes(reinterpret_cast<void*>(w.remote_addr + offset), reinterpret_cast<const void*>(src[0].addr + offset), n);
    } else {
        const LocalSegment dst = contiguous(w.remote_addr, w.length);
        copy_range(src, {&dst, 1}, offset, n);
    }
    fabric_.stored(w.remote_addr + offset, n);
    trace_place(p, offset, n);
    return true;
}

bool SimQp::place_folded(SimQp& q, std::uint32_t k, std::uint32_t p, std::uint64_t offset, std::uint32_t n) noexcept {
    // Read from the source now: folded into the digest of its reads and stored in the same pass (or, when
    // source and target overlap, folded before the store).
    const SqEntry& w = q.sq_at(inbound_.msn);
    const std::uint64_t from = q.sq_sges(inbound_.msn)[0].addr + offset, into = w.remote_addr + offset;
    std::byte* const to = into + n <= from || from + n <= into ? reinterpret_cast<std::byte*>(into) : nullptr;
    if (!q.fold_source(inbound_.msn, inbound_.base, k, offset, n, to)) {
        std::memmove(reinterpret_cast<void*>(into), reinterpret_cast<const void*>(from), n);
    }
    fabric_.stored(into, n);
    trace_place(p, offset, n);
    return true;
}

void SimQp::trace_place(std::uint32_t packet, std::uint64_t offset, std::uint64_t n) noexcept {
    if (!fabric_.tracing) return;
    TraceRecord r;
    r.kind = TraceKind::place;
    r.time = fabric_.now;
    r.msn = inbound_.msn;
    r.id = offset;
    r.node = domain_->node();
    r.qpn = qp_num;
    r.peer = packet;
    r.bytes = static_cast<std::uint32_t>(n);
    fabric_.record(r);
}

void SimQp::finish_inbound() noexcept {
    while (inbound_.active && inbound_.placed < inbound_.packets) {
        if (!place_packet(inbound_.placed)) return;
    }
    if (!inbound_.active) return;
    inbound_.active = false;
    ++inbound_.gen;
    SimQp* q = fabric_.find_qp(inbound_.requester);
    if (!q) return;
    if (!q->holds(inbound_.msn)) {
        if (inbound_.consumes_recv) --rq_ring_.completed;  // flushed by the requester: the receive stays posted
        return;
    }
    const SqEntry& w = q->sq_at(inbound_.msn);
    if (inbound_.consumes_recv) {
        const bool is_send = w.opcode == Opcode::send || w.opcode == Opcode::send_with_imm;
        emit_recv(inbound_.rq, WcStatus::success, is_send ? Opcode::recv : Opcode::recv_rdma_with_imm,
                  static_cast<std::uint32_t>(w.length), w.opcode != Opcode::send, q->operands_at(inbound_.msn).imm);
    }
    ++expected_msn_;
    send_ack(q->qp_num, inbound_.msn, WcStatus::success, 0);
}

void SimQp::send_ack(std::uint32_t requester, std::uint64_t msn, WcStatus status, std::uint64_t response_bytes) noexcept {
    const std::uint64_t start = std::max(fabric_.now, domain_->link_free);
    domain_->link_free = start + (response_bytes == 0 ? 0 : fabric_.wire_ns(response_bytes));
    send_ack_at(requester, msn, status, domain_->link_free, response_bytes);
}

void SimQp::send_ack_at(std::uint32_t requester, std::uint64_t msn, WcStatus status, std::uint64_t departs,
                        std::uint64_t response_bytes) noexcept {
    Event ev;
    ev.kind = EventKind::ack;
    ev.time = departs + fabric_.params.latency_ns + fabric_.ack_jitter();
    ev.qpn = requester;
    ev.peer = qp_num;
    ev.msn = msn;
    ev.status = status;
    ev.generation = min_rnr_timer_;  // an RNR NAK carries the responder's timer
    if (fabric_.tracing) {
        TraceRecord r;
        r.kind = TraceKind::ack;
        r.time = departs - fabric_.wire_ns(response_bytes);
        r.end = ev.time;
        r.msn = msn;
        r.node = domain_->node();
        r.qpn = qp_num;
        r.peer = requester;
        r.bytes = static_cast<std::uint32_t>(response_bytes);
        r.status = status;
        fabric_.record(r);
    }
    fabric_.send_packet(ev, domain_->node());
}

const SimDomain::MrSlot* SimQp::check_remote(std::uint64_t rkey, std::uint64_t addr, std::uint64_t length,
                                              Access right) const noexcept {
    const SimDomain::MrSlot* mr = domain_->find_mr(rkey);
    if (!mr || !has(mr->access, right)) return nullptr;
    const std::uint64_t base = mr->base;
    if (addr < base || addr - base > mr->length || length > mr->length - (addr - base)) return nullptr;
    return mr;
}

WcStatus SimQp::check_response(SimQp& q, std::uint64_t msn) noexcept {
    const SqEntry& w = q.sq_at(msn);
    if (w.opcode == Opcode::read) {
        if (w.length > 0 && !check_remote(w.rkey, w.remote_addr, w.length, Access::remote_read)) {
            fail_responder(true);
            return WcStatus::remote_access;
        }
        return WcStatus::success;
    }
    if (w.remote_addr % 8 != 0) {
        fail_responder(false);
        return WcStatus::remote_invalid_request;
    }
    if (!check_remote(w.rkey, w.remote_addr, 8, Access::remote_atomic)) {
        fail_responder(true);
        return WcStatus::remote_access;
    }
    return WcStatus::success;
}

void SimQp::execute_response(SimQp& q, std::uint64_t msn) noexcept {
    const SqEntry& w = q.sq_at(msn);
    const auto dst = q.sq_sges(msn);
    // The result lands in the requester's buffer, which must still be registered.
    if (int why = check_segments(*q.domain_, dst, true); why != segments_fine) {
        send_ack(q.qp_num, msn, q.local_key_error(why), 0);
        return;
    }
    if (w.opcode == Opcode::read) {
        if (w.length > 0) {
            if (!check_remote(w.rkey, w.remote_addr, w.length, Access::remote_read)) {  // deregistered meanwhile
                fail_responder(true);
                send_ack(q.qp_num, msn, WcStatus::remote_access, 0);
                return;
            }
            // The response leaves packet by packet; each packet's bytes are read as it leaves.
            const std::uint64_t start = std::max(fabric_.now, domain_->link_free);
            domain_->link_free = start + fabric_.wire_ns(w.length);
            response_.active = true;
            response_.requester = q.qp_num;
            response_.msn = msn;
            response_.packets = fabric_.packets(w.length);
            response_.next = 0;
            response_.start = start;
            ++response_.gen;
            if (fabric_.now >= start) {
                if (!respond_packet()) return;
            }
            if (response_.active) {
                Event ev;
                ev.kind = EventKind::respond;
                ev.time = start + fabric_.wire_ns(std::uint64_t{response_.next} * fabric_.params.mtu);
                ev.qpn = qp_num;
                ev.generation = response_.gen;
                fabric_.schedule(ev);
            }
            return;
        }
        send_ack(q.qp_num, msn, WcStatus::success, 0);
        return;
    }
    if (!check_remote(w.rkey, w.remote_addr, 8, Access::remote_atomic)) {
        fail_responder(true);
        send_ack(q.qp_num, msn, WcStatus::remote_access, 0);
        return;
    }
    std::uint64_t old = 0;
    std::memcpy(&old, reinterpret_cast<const void*>(w.remote_addr), 8);
    std::uint64_t value = old;
    const SqOperands& o = q.operands_at(msn);
    if (w.opcode == Opcode::fetch_add) value = old + o.compare_add;
    else if (old == o.compare_add) value = o.swap;
    std::memcpy(reinterpret_cast<void*>(w.remote_addr), &value, 8);
    fabric_.stored(w.remote_addr, 8);
    // The result lands as the response leaves (a shortcut of the model), unless the requester crashed: a
    // crashed node takes nothing in (a read or atomic it asked for can execute after its crash: deferred,
    // or held up by a stall).
    if (!fabric_.node_crashed(q.domain_->node())) {
        std::memcpy(reinterpret_cast<void*>(dst[0].addr), &old, 8);
        fabric_.stored(dst[0].addr, 8);
    }
    send_ack(q.qp_num, msn, WcStatus::success, 8);
}

void SimQp::run_deferred() noexcept {
    deferred_.active = false;
    ++deferred_.gen;
    SimQp* q = fabric_.find_qp(deferred_.requester);
    if (!q || !q->holds(deferred_.msn)) return;  // gone, or flushed by the requester's error
    if (fabric_.tracing) {
        TraceRecord r;
        r.kind = TraceKind::deferred;
        r.time = fabric_.now;
        r.msn = deferred_.msn;
        r.node = domain_->node();
        r.qpn = qp_num;
        r.opcode = q->sq_at(deferred_.msn).opcode;
        fabric_.record(r);
    }
    execute_response(*q, deferred_.msn);
}

bool SimQp::respond_packet() noexcept {
    SimQp* q = fabric_.find_qp(response_.requester);
    const std::uint64_t msn = response_.msn;
    if (!q || !q->holds(msn)) {
        // The requester is gone or flushed the read: the rest of the response is never sent.
        response_.active = false;
        ++response_.gen;
        return false;
    }
    const SqEntry& w = q->sq_at(msn);
    const std::uint64_t offset = std::uint64_t{response_.next} * fabric_.params.mtu;
    const std::uint64_t n = std::min<std::uint64_t>(fabric_.params.mtu, w.length - offset);
    const auto dst = q->sq_sges(msn);
    WcStatus failed = WcStatus::success;
    if (int why = check_segments(*q->domain_, dst, true); why != segments_fine) {
        failed = q->local_key_error(why);  // the requester's buffer was deregistered meanwhile
    } else if (!check_remote(w.rkey, w.remote_addr + offset, n, Access::remote_read)) {
        failed = WcStatus::remote_access;  // the region was deregistered while the response was being sent
    }
    if (failed != WcStatus::success) {
        response_.active = false;
        ++response_.gen;
        if (failed == WcStatus::remote_access) fail_responder(true);
        send_ack(q->qp_num, msn, failed, 0);
        return false;
    }
    const LocalSegment from = contiguous(w.remote_addr, w.length);
    if (!fabric_.node_crashed(q->domain_->node())) {
        copy_range({&from, 1}, dst, offset, n);  // as for atomics
        for (const LocalSegment& d : dst) fabric_.stored(d.addr, d.length);
    }
    if (++response_.next == response_.packets) {
        // The last packet left: the response arrives one latency after the whole of it was sent.
        response_.active = false;
        ++response_.gen;
        send_ack_at(q->qp_num, msn, WcStatus::success, response_.start + fabric_.wire_ns(w.length), w.length);
    }
    return true;
}

void SimQp::finish_response() noexcept {
    while (response_.active && respond_packet()) {
    }
}

void SimQp::on_respond(const Event& e) noexcept {
    if (!response_.active || e.generation != response_.gen) return;
    if (!respond_packet() || !response_.active) return;
    Event ev;
    ev.kind = EventKind::respond;
    ev.time = response_.start + fabric_.wire_ns(std::uint64_t{response_.next} * fabric_.params.mtu);
    ev.qpn = qp_num;
    ev.generation = response_.gen;
    fabric_.schedule(ev);
}

void SimQp::on_deferred(const Event& e) noexcept {
    if (!deferred_.active || e.generation != deferred_.gen) return;
    run_deferred();
}

// ---- sources read at transmission (staging)

bool SimQp::reads_source(const SqEntry& e) noexcept {
    return carries_payload(e.opcode) && e.length > 0 && !has(e.flags, SendFlags::inline_data);
}

void SimQp::restage_from(std::uint64_t i) noexcept {
    // Entry i leaves again: what was staged of it and of later entries belongs to an earlier transmission.
    // (Their bytes stay in the ring until the packets before them are popped.)
    while (staged_tail_ != staged_head_ && staged_[(staged_tail_ - 1) & (staged_.size() - 1)].msn >= i) --staged_tail_;
    if (staged_tail_ == staged_head_) bytes_head_ = bytes_tail_;
    stage_msn_ = i;
    stage_k_ = 0;
    stage_due_ = UINT64_MAX;  // the key it had is for a later packet: arm_staging makes a new one
    ++stage_gen_;
}

void SimQp::arm_staging() noexcept {
    if (stage_msn_ < sq_ring_.completed) stage_msn_ = sq_ring_.completed, stage_k_ = 0;
    if (stage_msn_ >= sq_next_tx_) return;
    // The cursor's packet, or an earlier time when it is not one that reads a source: stage_until skips on.
    const std::uint64_t due = sq_at(stage_msn_).tx_start + fabric_.wire_ns(std::uint64_t{stage_k_} * fabric_.params.mtu);
    if (due >= stage_due_) return;
    stage_due_ = due;
    fabric_.key_staging(domain_->node(), {due, qp_num, ++stage_gen_});
}

std::uint64_t SimQp::stage_until(std::uint64_t t) noexcept {
    stage_due_ = UINT64_MAX;
    if (stage_msn_ < sq_ring_.completed) {
        // Completed meanwhile: what is left staged of those messages will not be placed.
        while (staged_head_ != staged_tail_ && staged_[staged_head_ & (staged_.size() - 1)].msn < sq_ring_.completed) pop_staged();
        stage_msn_ = sq_ring_.completed;
        stage_k_ = 0;
    }
    // What the responder has taken in needs no staging; without a responder nothing lands.
    const SimQp* r = state_ == QpState::rts ? fabric_.find_qp(remote_qpn_) : nullptr;
    if (!r) {
        stage_msn_ = std::max(stage_msn_, sq_next_tx_);
        stage_k_ = 0;
        return UINT64_MAX;
    }
    const std::uint64_t mtu = fabric_.params.mtu;
    for (; stage_msn_ < sq_next_tx_; ++stage_msn_, stage_k_ = 0) {
        const std::uint64_t i = stage_msn_;
        const SqEntry& e = sq_at(i);
        if (!reads_source(e) || e.done || i < r->expected_msn_) continue;
        if (e.tx_start >= t) break;  // nothing of it has left (nor of what follows: they leave later)
        // A source whose region is gone is not read; the packet fails as it lands (place_packet).
        if (check_gather(i) != segments_fine) continue;
        const std::uint32_t packets = fabric_.packets(e.length);
        const Inbound& in = r->inbound_;
        const std::uint64_t base = tx_base(e);
        if (in.active && in.requester == qp_num && in.msn == i && in.base == base) {
            stage_k_ = std::max(stage_k_, in.placed);
        }
        const auto src = sq_sges(i);
        const std::uint64_t key = perm_key(i);
        // The program runs after this: a fold that cannot read its last packet here (before the program
        // runs) never completes, so none is started or continued.
        const bool fold = folds(e) && e.tx_start + fabric_.wire_ns(std::uint64_t{packets - 1} * mtu) < t;
        for (; stage_k_ < packets; ++stage_k_) {
            const std::uint64_t leaves = stage_k_ == 0 ? e.tx_start : e.tx_start + fabric_.wire_ns(std::uint64_t{stage_k_} * mtu);
            if (leaves >= t) break;
            const std::uint64_t offset =
                (key ? std::uint64_t{permute(stage_k_, packets, key)} : std::uint64_t{stage_k_}) * mtu;
            const auto n = static_cast<std::uint32_t>(std::min(mtu, e.length - offset));
            if (packets == 1 && e.length <= sizeof e.staged_word) {
                // A message of up to 8 bytes is staged in its send-queue entry.
                SqEntry& small = sq_at(i);
                if (src.size() == 1) {
                    std::memcpy(&small.staged_word, reinterpret_cast<const void*>(src[0].addr), n);
                } else {
                    const LocalSegment into = contiguous(reinterpret_cast<std::uint64_t>(&small.staged_word), n);
                    copy_range(src, {&into, 1}, 0, n);
                }
                small.word_staged = true;
                ++fabric_.stats.staged;
                continue;
            }
            std::uint64_t at = 0;
            std::byte* to = reserve_staging(n, at);
            if (fold && fold_source(i, base, stage_k_, offset, n, to)) {
                // fold_source stored it.
            } else if (src.size() == 1) {
                const auto* from = reinterpret_cast<const std::byte*>(src[0].addr + offset);
                if (n == 8) std::memcpy(to, from, 8);  // the common small write, without a call
                else std::memcpy(to, from, n);
            } else {
                const LocalSegment dst = contiguous(reinterpret_cast<std::uint64_t>(to) - offset, offset + n);
                copy_range(src, {&dst, 1}, offset, n);
            }
            if (staged_tail_ - staged_head_ == staged_.size()) grow_staged();
            staged_[staged_tail_++ & (staged_.size() - 1)] = {i, base, offset, at, stage_k_, n};
            ++fabric_.stats.staged;
        }
        if (stage_k_ < packets) break;
    }
    // The next packet to look at is due when it leaves.
    if (stage_msn_ < sq_next_tx_) stage_due_ = std::max(t, sq_at(stage_msn_).tx_start + fabric_.wire_ns(std::uint64_t{stage_k_} * mtu));
    return stage_due_;
}

void SimQp::grow_staged() {
    // Twice the slots, the records kept in order from slot 0.
    std::vector<Staged> bigger(std::max<std::size_t>(16, staged_.size() * 2));
    for (std::uint64_t j = staged_head_; j != staged_tail_; ++j) bigger[j - staged_head_] = staged_[j & (staged_.size() - 1)];
    staged_tail_ -= staged_head_;
    staged_head_ = 0;
    staged_.swap(bigger);
}

void SimQp::grow_staging(std::uint32_t n) {
    // A ring at least twice as large, the staged packets packed from its start.
    const std::uint64_t cap = stage_bytes_.size();
    const std::uint64_t live = bytes_tail_ - bytes_head_;
    std::vector<std::byte> bigger(std::bit_ceil(std::max<std::uint64_t>({cap * 2, (live + n) * 2, 65536})));
    std::uint64_t out = 0;
    for (std::uint64_t j = staged_head_; j != staged_tail_; ++j) {
        Staged& st = staged_[j & (staged_.size() - 1)];
        std::memcpy(&bigger[out], &stage_bytes_[st.at & (cap - 1)], st.n);
        st.at = out;
        out += st.n;
    }
    stage_bytes_.swap(bigger);
    bytes_head_ = 0;
    bytes_tail_ = out;
}

const SimQp::Staged* SimQp::staged_packet(std::uint64_t msn, std::uint64_t base, std::uint32_t k) noexcept {
    while (staged_head_ != staged_tail_) {
        const Staged& st = staged_[staged_head_ & (staged_.size() - 1)];
        if (st.msn > msn || (st.msn == msn && (st.base != base || st.k > k))) return nullptr;
        if (st.msn == msn && st.k == k) return &st;
        pop_staged();  // lost, or landed from another transmission: never placed
    }
    return nullptr;
}

void FabricState::key_staging(std::uint32_t node, const StageKey& key) {
    if (node >= stage_heaps_.size()) stage_heaps_.resize(node + 1);
    auto& heap = stage_heaps_[node];
    heap.push_back(key);
    std::push_heap(heap.begin(), heap.end(), [](const StageKey& a, const StageKey& b) { return a.due > b.due; });
    ++stage_keys_;
}

void FabricState::stage_sources() noexcept {
    for (std::uint32_t node = 0; node < stage_heaps_.size(); ++node) {
        auto& heap = stage_heaps_[node];
        if (heap.empty()) continue;
        // A store by this node's program falls at its program time: what left before that is staged now.
        const std::uint64_t t = program_time(node);
        while (!heap.empty() && heap.front().due < t) {
            StageKey& top = heap.front();
            SimQp* qp = find_qp(top.qpn);
            const std::uint64_t next = qp && qp->stage_gen() == top.gen ? qp->stage_until(t) : UINT64_MAX;
            if (next == UINT64_MAX) {
                std::pop_heap(heap.begin(), heap.end(), [](const StageKey& a, const StageKey& b) { return a.due > b.due; });
                heap.pop_back();
                --stage_keys_;
                continue;
            }
            // The same QP's next packet: the key moves down the heap to its new time.
            top.due = next;
            const StageKey moved = top;
            std::size_t at = 0;
            for (;;) {
                std::size_t child = 2 * at + 1;
                if (child >= heap.size()) break;
                if (child + 1 < heap.size() && heap[child + 1].due < heap[child].due) ++child;
                if (heap[child].due >= moved.due) break;
                heap[at] = heap[child];
                at = child;
            }
            heap[at] = moved;
        }
    }
}

}  // namespace weft::sim::detail
