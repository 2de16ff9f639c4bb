// Private to the verbs plugin: the classes behind Domain, MemoryRegion, CompletionQueue and QueuePair on
// rdma-core, the RAII owners of its C handles, and the bookkeeping shared by setup and data path.
//
// Setup lives in verbs_domain.cpp (device, port, GID, capabilities, plugin record), verbs_cq.cpp
// (completion queue, channel, wait), verbs_qp.cpp (QP creation, address, connect) and verbs_cm.cpp
// (listen/connect by host:port over rdma_cm); the data path (post_send, post_recv, poll) lives in
// verbs_datapath.cpp. Shared receive queues: setup in verbs_srq.cpp, posting and their completions in
// verbs_datapath.cpp.
#pragma once

#include <weft/backend.hpp>
#include <weft/detail/errors.hpp>
#include <weft/detail/slot_ring.hpp>
#include <weft/error.hpp>

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

struct rdma_cm_id;
struct rdma_event_channel;

namespace weft::verbs {

inline constexpr std::string_view backend_name = "verbs";

class VerbsCq;
class VerbsQp;
class VerbsSrq;
class Connections;

// Every setup error of the backend (weft/detail/errors.hpp): errors.fail, .fail_errno.
inline constexpr detail::ErrorSource errors{backend_name};

// ---- RAII owners of rdma-core handles. Destroy failures cannot be reported from a destructor; rdma-core
// only fails them for handles still in use, which the ownership graph below rules out.

struct CloseContext {
    void operator()(ibv_context* c) const noexcept { ::ibv_close_device(c); }
};
struct DeallocPd {
    void operator()(ibv_pd* p) const noexcept { ::ibv_dealloc_pd(p); }
};
struct DeregMr {
    void operator()(ibv_mr* m) const noexcept { ::ibv_dereg_mr(m); }
};
struct DestroyCq {
    void operator()(ibv_cq* c) const noexcept { ::ibv_destroy_cq(c); }
};
struct DestroyChannel {
    void operator()(ibv_comp_channel* c) const noexcept { ::ibv_destroy_comp_channel(c); }
};
struct DestroyQp {
    void operator()(ibv_qp* q) const noexcept { ::ibv_destroy_qp(q); }
};
struct DestroySrq {
    void operator()(ibv_srq* s) const noexcept { ::ibv_destroy_srq(s); }
};
struct FreeDeviceList {
    void operator()(ibv_device** l) const noexcept { ::ibv_free_device_list(l); }
};

using ContextPtr = std::unique_ptr<ibv_context, CloseContext>;
using PdPtr = std::unique_ptr<ibv_pd, DeallocPd>;
using MrPtr = std::unique_ptr<ibv_mr, DeregMr>;
using CqPtr = std::unique_ptr<ibv_cq, DestroyCq>;
using ChannelPtr = std::unique_ptr<ibv_comp_channel, DestroyChannel>;
using QpPtr = std::unique_ptr<ibv_qp, DestroyQp>;
using SrqPtr = std::unique_ptr<ibv_srq, DestroySrq>;
using DeviceListPtr = std::unique_ptr<ibv_device*[], FreeDeviceList>;

// What post_send needs to know of a request opcode on a device, indexed by the opcode's byte (every value a
// weft::Opcode can hold, so a malformed one needs no range check).
struct OpInfo {
    std::uint8_t wr_opcode = 0;        // ibv_wr_opcode
    Opcode completion = Opcode::send;  // what its send-queue completion reports
    // A request opcode the device supports, not an atomic: a request with one segment in `sge`, a 32-bit
    // rkey and no flag that needs a look is valid once its length is checked.
    bool plain = false;
    bool atomic = false;
};
static_assert(sizeof(OpInfo) == 4);
using OpTable = std::array<OpInfo, 256>;

// A QP's view of OpInfo for its fast posting path: one load tells the slot's completion word and whether the
// request must go the general way (the opcode handed to the provider comes with the flags, from a table).
// A request is tested with one word: its opcode | flags << 8 | remote_backend << 16, and a byte of padding
// above them. A QP keeps two tables of them, by opcode: one for the builder that writes no immediate data,
// where a *_with_imm opcode is refused like one that is not plain, and one for the builder that writes it.
struct FastOp {
    std::uint16_t with_imm = 0;  // 1: imm_data goes to the provider (a *_with_imm opcode, the second table)
    std::uint16_t tail = 0;      // a WorkQueue slot's tail (a send-queue success: the opcode in bits 15..8)
    // Bits of the word that send a request to the general path: flags that need a look or mean nothing, a
    // remote region of another backend (never the opcode's bits, nor the padding's); every bit for an
    // opcode that goes there whatever its flags. A request is common when the word and-ed with reject is 0,
    // and its flags are then below 16. (Every bit catches every opcode: the one that is 0, send, is plain on
    // every device, as Capabilities::supports says.)
    std::uint32_t reject = 0xffffffff;
};
static_assert(sizeof(FastOp) == 8);
struct FastOpTable {
    std::array<FastOp, 256> without_imm;
    std::array<FastOp, 256> with_imm;
};

// The opened device and the port, GID and limits chosen at open. Every object made from a domain holds
// a shared_ptr to it, so the context and PD outlive the last MR, CQ and QP.
struct Device {
    // Declared before `pd` so that the PD is released first.
    ContextPtr context;
    PdPtr pd;

    std::string name;
    std::uint8_t port = 1;
    bool ethernet = false;          // RoCE: addressing needs a GID
    bool use_gid = false;           // a GRH goes on every packet (always on Ethernet, on IB if asked)
    int gid_index = -1;
    ibv_gid gid{};
    std::uint16_t lid = 0;
    ibv_mtu mtu = IBV_MTU_1024;
    std::optional<std::uint32_t> fixed_psn;
    std::uint8_t max_rd_atomic = 0;       // reads/atomics this side may have in flight (initiator depth)
    std::uint8_t max_dest_rd_atomic = 0;  // reads/atomics this side serves at once (responder resources)
    std::uint32_t max_sge_rd = 0;         // gather entries of an RDMA read, when the device says
    // Soft-RoCE (rxe): receives posted to a QP in error are not flushed until the QP enters error again, and
    // retry_cnt 7 means "retry forever" (docs/backends/verbs.md).
    bool rxe = false;
    Capabilities caps;
    OpTable ops{};  // from caps, by index_opcodes()

    // Shared receive queues (verbs_srq.cpp): which of the QueueTable entries kept for them are taken, the
    // generation each entry last had, and how many queues were created (their srq_num counts from 1).
    std::mutex srq_mutex;
    std::vector<std::uint16_t> srq_generations;
    std::vector<bool> srq_entries_taken;
    std::uint32_t srqs_created = 0;

    // The rdma_cm connections of QPs connected through weft::connect / Listener::accept, kept for disconnect,
    // and the events they raise (verbs_conn.cpp). Made when first needed; declared last, so it goes first.
    Connections& connections();
    Connections* connections_if_any() noexcept;
    std::mutex connections_mutex;
    std::unique_ptr<Connections> connections_;
    ~Device();
};

// Fills dev.ops from dev.caps (at open; the data-path benchmark calls it for its fake device).
void index_opcodes(Device& dev) noexcept;

// ---- Work-queue bookkeeping

// weft's view of one work queue of a QP (its send queue or its receive queue): a ring of slots, one per
// posted work request, holding the user's id and the opcode its completion reports. The ring has a power of
// two slots, at least as many as the queue the provider granted. The request posted as the p-th of the queue
// (counting from 0, modulo 2^32) sits in slot p & ring_mask and goes to the provider with wr_id = tag | p.
// `tag` names the entry of the CQ's QueueTable that leads back here, so a completion finds its slot with two
// array reads, and p tells whether the request is still outstanding.
//
// A send completion for position p also retires every older outstanding request: unsignaled requests before
// it are done (verbs reports send-queue completions in order). Occupancy is counted here, not left to the
// provider, so a batch that does not fit is refused whole before anything is posted.
//
// One thread posts, one thread polls the CQ; they may be different threads. Each writes its own counter and
// reads the other's (a single-producer, single-consumer ring: no read-modify-write on the data path).
// The cursors are the shared ring's (weft/detail/slot_ring.hpp): `posted`, written by the poster and published
// before the provider sees the requests, and `retired`, written by the poller (requests completed, or covered
// by a later send completion), each on a line of its own. The provider flushes a queue in error itself, so
// the ring's flush cursor is not used.
struct WorkQueue : detail::SlotRing<std::uint32_t, detail::RingSync::shared> {
    // A slot's tail: the last word of the Completion a success reports, status 0 and the opcode as the
    // completion reports it (send or write for the *_with_imm ones) in bits 15..8.
    static constexpr std::uint32_t tail_of(Opcode completion) noexcept {
        return static_cast<std::uint32_t>(completion) << 8;
    }
    static constexpr Opcode opcode_of(std::uint32_t tail) noexcept { return static_cast<Opcode>(tail >> 8); }

    // The slots, as two arrays (a poll finds both of a slot's words from its index, without a multiply): the
    // user's id and the tail. A receive queue has no tails (null: poll tells the kinds of queue apart by it):
    // a receive's is always tail_of(Opcode::recv).
    alignas(64) std::unique_ptr<std::uint64_t[]> ids;
    std::unique_ptr<std::uint32_t[]> tails;
    std::uint32_t ring_mask = 0;
    // Requests the provider holds at once (<= ring_mask + 1); 0 while the queue takes no requests (the send
    // queue before the QP reaches rts), so that one comparison refuses a batch for either reason.
    std::atomic<std::uint32_t> capacity{0};
    std::uint64_t tag = 0;
    bool is_recv = false;
    std::atomic<QpState>* state = nullptr;  // the owning QP's tracked state; the poller sets `error`
    ibv_qp* qp = nullptr;
    std::uint32_t qp_num = 0;  // qp's
    // Set on the entry of a shared receive queue, whose receives complete out of order and on any CQ of the
    // QPs using it: poll hands its completions to it (VerbsSrq::complete) instead of using the ring above.
    VerbsSrq* srq = nullptr;

    // Poster side, `head` being head(): how many more requests fit.
    std::uint32_t free_slots(std::uint32_t head) const noexcept {
        return SlotRing::free_slots(capacity.load(std::memory_order_relaxed), head);
    }
    // Poster side: the position posting may reach, retired + capacity as last read (read by the poster only).
    // The posts test a batch against it alone, one load, and read the poller's cursor and the capacity again
    // (refresh_limit) only when it says no: slots below it were retired when it was read, and capacity never
    // shrinks (0 until the QP may post, then the queue's), so a stale limit only refuses too early.
    std::uint32_t limit = 0;
    // Whether `n` more requests fit after `head` (n > 0), against the limit read again now.
    bool refresh_limit(std::uint32_t head, std::size_t n) noexcept {
        limit = head + free_slots(head);
        return n - 1 < static_cast<std::uint32_t>(limit - head);
    }
    // The slot of position `pos` in ids and tails.
    std::size_t at(std::uint32_t pos) const noexcept { return slot(pos, ring_mask); }
};

// wr_id layout: bits 63..48 generation, 47..32 QueueTable index, 31..0 slot (a queue position; for a shared
// receive queue, the index of the slot its free list gave).
inline constexpr unsigned wr_index_shift = 32;
inline constexpr unsigned wr_generation_shift = 48;

// Per-CQ table of the work queues that complete into it. Entries are attached and detached at setup
// (QP creation and destruction) under a mutex; poll reads them without locking. Storage comes in
// chunks that never move, so attaching a QP does not disturb a concurrent poll of other QPs. A
// generation in every wr_id makes completions of a destroyed QP (its flushed requests, which the
// provider may leave in the CQ) recognisable, so poll drops them instead of touching freed memory.
class QueueTable {
public:
    QueueTable() = default;
    QueueTable(const QueueTable&) = delete;
    QueueTable& operator=(const QueueTable&) = delete;

    static constexpr std::uint32_t chunk_size = 256;
    static constexpr std::uint32_t chunk_count = 256;
    static_assert(chunk_size * chunk_count <= (1u << (wr_generation_shift - wr_index_shift)),
                  "table indices must fit between the slot and the generation bits of wr_id");
    // The last `srq_entries` indices are kept for shared receive queues, whose receives may complete into
    // any CQ of the QPs using them: a queue has one such index in its device (Device::srq_entries_taken),
    // the same in every CQ's table, so that a receive's wr_id, fixed when it is posted, leads back to it
    // whichever QP takes it.
    static constexpr std::uint32_t srq_entries = 1024;
    static constexpr std::uint32_t first_srq_entry = chunk_size * chunk_count - srq_entries;
    static_assert(srq_entries % chunk_size == 0 && srq_entries < chunk_size * chunk_count);

    // Returns the tag (index and generation in wr_id position) that leads back to `wq`.
    std::uint64_t attach(WorkQueue* wq);
    void detach(std::uint64_t tag) noexcept;
    // Installs a shared receive queue's `wq` under its `tag` (a kept index and the generation its device
    // gave it), and removes it.
    void attach_srq(std::uint64_t tag, WorkQueue* wq);
    void detach_srq(std::uint64_t tag) noexcept;
    // The work queue a wr_id belongs to, or null for one of a detached queue.
    WorkQueue* find(std::uint64_t wr_id) const noexcept;
    // Changes whenever a queue is detached: a poller may keep what find() told it while this stays the same.
    std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }

private:
    struct Entry {
        std::atomic<WorkQueue*> wq{nullptr};
        std::atomic<std::uint16_t> generation{0};
    };
    // The entry of `index`, its chunk made if need be (mutex_ held).
    Entry& entry(std::uint32_t index);

    std::array<std::atomic<Entry*>, chunk_count> chunks_{};
    std::array<std::unique_ptr<Entry[]>, chunk_count> storage_{};
    std::atomic<std::uint64_t> epoch_{0};
    std::mutex mutex_;
    std::vector<std::uint32_t> free_;
    std::uint32_t next_ = 0;
};

// ---- The backend objects

class VerbsMr final : public detail::MrImpl {
public:
    VerbsMr(std::shared_ptr<Device> device, MrPtr mr, Access access);

private:
    std::shared_ptr<Device> device_;
    MrPtr mr_;
};

// Selects the constructors that run the data path over handles weft neither creates nor destroys: those of
// a fake provider, for the data-path benchmark (bench/verbs_datapath.cpp), which needs no device.
struct Adopt {};

class VerbsCq final : public detail::CqImpl {
public:
    VerbsCq(std::shared_ptr<Device> device, std::uint32_t depth);
    // `channel` may be null (then wait() and fd() must not be called).
    VerbsCq(Adopt, std::shared_ptr<Device> device, ibv_cq* cq, ibv_comp_channel* channel);

    std::size_t poll(std::span<Completion> out) noexcept override;
    bool wait(std::chrono::nanoseconds timeout) override;
    int fd() override;
    std::uint32_t depth() const noexcept override;

    ibv_cq* handle() const noexcept { return cq_handle_; }
    const Device& device() const noexcept { return *device_; }
    QueueTable& queues() noexcept { return queues_; }

    // Completion-entry accounting, so that the CQ never overruns: a device drops a completion that does not
    // fit (rxe leaves the QP ready and raises nothing), so every work queue on the CQ reserves, when it is
    // attached, an entry for each completion it can leave there (a slot is retired only when its completion
    // is polled). When the reservations outgrow the depth the CQ is resized; past the device's max_cqe, or
    // on a device that cannot resize, the queue is refused (resource_exhausted, naming the depth it needs).
    // `who` names the queue in that message. An adopted CQ (Adopt) is not accounted.
    void reserve(std::uint32_t entries, std::string_view who);
    void release(std::uint32_t entries) noexcept;

private:
    static constexpr std::size_t poll_batch = 16;  // work completions asked of the provider at a time

    // Polls the provider's CQ into `out`, translating each work completion; returns how many.
    std::size_t drain(std::span<Completion> out) noexcept;
    // Translates the first `got` entries of wc_ into `out` (which has room for them) and retires the
    // work-queue slots they cover; returns how many completions it wrote (those of destroyed QPs are dropped).
    std::size_t translate(Completion* out, std::size_t got) noexcept;
    // poll() once the provider returned `got` work completions (of min(poll_batch, out_.size()) asked for).
    // Kept out of poll(), which an empty CQ then leaves at once.
    [[gnu::noinline]] std::size_t took(std::size_t got) noexcept;
    // took(1), quicker for the common single completion.
    [[gnu::noinline]] std::size_t took_one() noexcept;
    // took() when the provider returned more than out_ has room for: the rest wait in held_.
    [[gnu::noinline]] std::size_t took_too_many(std::size_t got) noexcept;
    // poll() when wait() left completions behind: those first, then the CQ.
    std::size_t poll_held(std::span<Completion> out) noexcept;
    // poll() in fd mode when the CQ was found empty and may not be armed: drains the channel, arms, and
    // looks once more for a completion that came before the arm.
    [[gnu::noinline]] std::size_t rearm_and_drain() noexcept;
    // poll() when poll_cq_ found nothing (0), or did not look (-1: held completions first, or a provider error).
    [[gnu::noinline]] std::size_t not_found(int got) noexcept;
    // Stands in for the provider's poll while wait() holds completions: poll() then finds none and goes to
    // not_found, which hands out the held ones, in one predictable branch.
    static int report_held(ibv_cq* cq, int n, ibv_wc* wc);
    // Reads and acknowledges every pending channel event without blocking.
    void consume_events() noexcept;
    int arm() noexcept;

    std::shared_ptr<Device> device_;
    ChannelPtr channel_;  // declared before cq_: the CQ goes first
    CqPtr cq_;
    // What the data path uses: the handles above, or adopted ones (Adopt) that the owners above leave alone.
    ibv_comp_channel* channel_handle_ = nullptr;
    ibv_cq* cq_handle_ = nullptr;
    // What ibv_poll_cq calls (the provider's entry in the context's ops, fixed when the context was opened),
    // called directly; poll() calls poll_cq_, which is that entry, or report_held while held_ has completions.
    int (*provider_poll_cq_)(ibv_cq*, int, ibv_wc*) = nullptr;
    int (*poll_cq_)(ibv_cq*, int, ibv_wc*) = nullptr;
    std::span<Completion> out_;  // the poll under way's output, for took()
    QueueTable queues_;
    // What the provider writes into (only the poller touches it), and one entry more: translate() marks the
    // end of what the provider wrote there with a completion of no queue, which ends every run.
    std::array<ibv_wc, poll_batch + 1> wc_;
    // The work queue the last completion belonged to, kept from one poll to the next while the table's
    // epoch stays the same (no queue was detached): its wr_id bits 63..32, or 0.
    std::uint64_t last_epoch_ = 0;
    std::uint32_t last_key_ = 0;
    std::uint32_t last_send_key_ = 0;  // last_key_ when that queue is a send queue, else 0 (for took_one)
    WorkQueue* last_wq_ = nullptr;
    // Completions taken from the CQ and not yet handed out (by wait(), or by a poll into fewer than
    // poll_batch): the next poll returns them first.
    std::array<Completion, poll_batch> held_{};
    std::uint32_t held_begin_ = 0;
    std::uint32_t held_count_ = 0;
    std::mutex reserve_mutex_;
    std::uint64_t reserved_ = 0;  // completion entries the work queues on the CQ hold (reserve)
    int fd_mode_ = 0;  // 1 once fd() was asked for: an empty poll re-arms the channel when it may be disarmed
    // 1 in fd mode when a completion was taken from the CQ since it was last armed (which may have used up
    // the arming): the next empty poll arms again. Otherwise (0) an empty poll needs no system call.
    int rearm_ = 0;
};

// A shared receive queue (Feature::srq) over ibv_srq. Its receives go to the provider with wr_id =
// tag | slot, tag naming one of the QueueTable entries kept for shared queues; the queue installs itself
// there in the table of every CQ that a QP using it completes receives into (attach), so that poll finds it
// whichever QP took the receive.
//
// Receives complete out of order (each QP takes them as its messages come, and CQs are polled apart), so
// slots are not a ring: a free list gives them out. The poster keeps a private stack of free slots; pollers
// (of any CQ, any thread) hand completed slots back on a lock-free stack that the poster takes whole when its
// own runs short. A receive holds its slot until its completion is polled, so a batch that finds too few
// free slots is refused (queue_full) before anything is posted: the queue never holds more than the
// provider granted. (mlx5 too frees a receive of its shared queue only when its completion is polled.)
class VerbsSrq final : public detail::SrqImpl {
public:
    VerbsSrq(std::shared_ptr<Device> device, const SrqOptions& options);
    // A queue of a fake provider (the data-path tests), with the limits it granted.
    VerbsSrq(Adopt, std::shared_ptr<Device> device, ibv_srq* srq, std::uint32_t max_wr, std::uint32_t max_sge);
    ~VerbsSrq() override;

    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept override;
    void arm_limit(std::uint32_t limit) override;

    ibv_srq* handle() const noexcept { return handle_; }
    const Device& device() const noexcept { return *device_; }
    // Makes the receives' completions on `cq` findable (create_qp of a QP whose receives complete there).
    void attach(const std::shared_ptr<VerbsCq>& cq);
    // Translates a completion of one of this queue's receives into `c` and frees its slot; returns 1, or 0
    // for a wr_id that names no outstanding receive (the poller that calls it owns `w` and `c`).
    [[gnu::noinline]] std::size_t complete(const ibv_wc& w, Completion& c) noexcept;

private:
    static constexpr std::uint32_t no_slot = 0xffffffff;

    // Slots, free lists, work requests and the table tag, for the limits granted (max_recv, max_sge).
    void init_data_path();
    // Moves the slots that pollers handed back onto the poster's stack.
    void reclaim() noexcept;
    [[gnu::noinline, gnu::cold]] PostStatus refused_by_provider(const ibv_recv_wr* bad, std::uint32_t built) noexcept;

    std::shared_ptr<Device> device_;
    SrqPtr srq_;
    ibv_srq* handle_ = nullptr;  // srq_, or an adopted queue (Adopt) that srq_ leaves alone
    std::uint32_t entry_ = 0;  // its QueueTable index, among the kept ones
    WorkQueue wq_;             // what the CQs' tables point to: tag, and srq = this
    std::uint32_t slot_count_ = 0;
    // Per slot: the user's id, and whether a receive holds it (1) — set by the poster before the provider sees
    // the receive, cleared by the poller that completes it.
    std::unique_ptr<std::uint64_t[]> ids_;
    std::unique_ptr<std::atomic<std::uint8_t>[]> busy_;
    // Per free slot: the next one down its stack (either stack: a slot is on one at a time).
    std::unique_ptr<std::uint32_t[]> next_free_;
    std::uint32_t free_top_ = no_slot;  // the poster's stack
    std::uint32_t free_count_ = 0;
    alignas(64) std::atomic<std::uint32_t> returned_{no_slot};  // the pollers' stack
    alignas(64) std::unique_ptr<ibv_recv_wr[]> wrs_;  // slot_count_ + 1 chained, max_sge segments each
    std::unique_ptr<ibv_sge[]> sges_;
    std::mutex attach_mutex_;
    std::vector<std::weak_ptr<VerbsCq>> cqs_;  // where it is attached
};

// Moves a QP that is in error to error again, once per QP: `state` records it. rxe reads its receive queue
// only when its responder runs, and a receive rings no doorbell, so a receive posted to a QP in error would
// never be flushed, against the contract; re-entering error runs the responder. ERR -> ERR is legal on every
// device. Called by whoever learns of the error first (poll seeing an error completion, state() asking the
// device); post_recv does it for receives posted to a QP known to be in error.
void rerun_error_flush(ibv_qp* qp) noexcept;
void note_error(std::atomic<QpState>& state, ibv_qp* qp) noexcept;

// The transport attributes connect() needs, kept from QpOptions (whose CQ references do not outlive
// create_qp).
struct TransportOptions {
    std::uint8_t timeout = 14;
    std::uint8_t retry_cnt = 7;
    std::uint8_t rnr_retry = 7;
    std::uint8_t min_rnr_timer = 12;
};

// A work request of a QP's preallocated chain and the one segment its sg_list points to between posts, right
// after it: the fast paths, which post one segment, write it at a fixed distance from the request instead of
// reading sg_list first. A request of several segments (the general paths) points sg_list elsewhere for the
// time of its post.
template <class Wr>
struct WrSlot {
    Wr wr;
    ibv_sge sge;
};

class VerbsQp final : public detail::QpImpl {
public:
    VerbsQp(std::shared_ptr<Device> device, const detail::QpSetup& setup);
    // A QP of a fake provider, already connected (state rts), with the limits it granted.
    VerbsQp(Adopt, std::shared_ptr<Device> device, std::shared_ptr<VerbsCq> send_cq, std::shared_ptr<VerbsCq> recv_cq,
            ibv_qp* qp, const ibv_qp_cap& granted);
    ~VerbsQp() override;

    PostStatus post_send(std::span<const SendRequest> batch) noexcept override;
    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept override;
    std::vector<std::byte> address() const override;
    void connect(std::span<const std::byte> peer) override;
    QpState state() const noexcept override;
    // ibv_modify_qp to IBV_QPS_ERR; the flushes come as for any error (note_error).
    void to_error() override;
    // Closes the rdma_cm connection the QP was connected by (Connections); not_supported for a QP connected
    // by address exchange.
    void disconnect() override;
    // Still in init: connect() may be called (a refused handshake leaves it so).
    bool fresh() const noexcept { return state_.load(std::memory_order_relaxed) == QpState::init; }

private:
    void modify(ibv_qp_attr& attr, int mask, const char* transition, const std::string& context,
                std::string_view call);
    // Rings, work-request arrays and CQ table entries for the QP `handle_` with the limits `granted`.
    void init_data_path(const ibv_qp_cap& granted);
    // post_send for a batch that the fast checks did not clear: checks every request exactly, then builds.
    [[gnu::noinline]] PostStatus post_send_general(std::span<const SendRequest> batch) noexcept;
    // post_send of several requests (or none).
    [[gnu::noinline]] PostStatus post_batch(std::span<const SendRequest> batch) noexcept;
    // post_send of one request: the common one built with less set-up than a batch needs. WithImm: the
    // builder that writes imm_data, which post_one<false> hands a request it refuses.
    template <bool WithImm>
    [[gnu::noinline]] PostStatus post_one(const SendRequest& r) noexcept;
    // Why a batch of `n` requests does not fit: the QP takes none yet, the batch is empty, or the queue is full.
    [[gnu::noinline]] PostStatus post_send_refused(std::size_t n) const noexcept;
    // After the provider refused the chain posted from queue position `head`, stopping at `bad`.
    [[gnu::noinline, gnu::cold]] PostStatus send_refused_by_provider(std::uint32_t head, const ibv_send_wr* bad) noexcept;
    [[gnu::noinline, gnu::cold]] PostStatus recv_refused_by_provider(std::uint32_t head, const ibv_recv_wr* bad) noexcept;
    // Why a batch of `n` receives does not fit: it is empty, the queue is full, or receives come from srq_.
    [[gnu::noinline]] PostStatus post_recv_refused(std::size_t n) const noexcept;
    // post_recv for a batch with a request that is not one segment in `sge`.
    [[gnu::noinline]] PostStatus post_recv_general(std::span<const RecvRequest> batch) noexcept;
    // post_recv's body, in two copies: HelpFlush for a device that does not flush receives posted in error
    // (rxe), so that the other keeps no state across the provider call.
    template <bool HelpFlush>
    [[gnu::noinline]] PostStatus post_recv_fast(std::span<const RecvRequest> batch) noexcept;
    // Posting a receive to a QP that may be in error, on a device that does not flush it then (rxe).
    [[gnu::noinline]] void help_recv_flush(QpState before) noexcept;
    // Hands the chain built for queue positions head..end (ending before `after`) to the provider.
    PostStatus submit_send(std::uint32_t head, std::uint32_t end, WrSlot<ibv_send_wr>* after) noexcept;

    std::shared_ptr<Device> device_;
    std::shared_ptr<VerbsCq> send_cq_;  // declared before qp_: the QP goes first
    std::shared_ptr<VerbsCq> recv_cq_;
    std::shared_ptr<VerbsSrq> srq_;  // where its receives come from, or null (then rq_ holds them)
    // Completion entries reserved in send_cq_ and recv_cq_ (VerbsCq::reserve), given back on destruction.
    std::uint32_t reserved_send_ = 0;
    std::uint32_t reserved_recv_ = 0;
    QpPtr qp_;
    ibv_qp* handle_ = nullptr;  // qp_, or an adopted QP (Adopt) that qp_ leaves alone
    // What ibv_post_send and ibv_post_recv call (the provider's entries in the context's ops, fixed when the
    // context was opened), called directly: one load less a post.
    int (*provider_post_send_)(ibv_qp*, ibv_send_wr*, ibv_send_wr**) = nullptr;
    int (*provider_post_recv_)(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) = nullptr;
    TransportOptions transport_;
    std::uint32_t psn_ = 0;
    mutable std::atomic<QpState> state_{QpState::reset};

    WorkQueue sq_;
    WorkQueue rq_;
    std::uint32_t max_single_length_ = 0;  // the longest one segment may be: min(max_msg_size, 2^32 - 1)
    bool recv_flush_help_ = false;         // the device does not flush receives posted to a QP in error (rxe)
    FastOpTable send_ops_{};               // from the device's OpTable and what needs a closer look here
    // Work requests are built here, never on the heap per call: capacity + 1 chained entries (WrSlot), each
    // with a segment of its own and max_sge more in *_sges_ for the general paths. Between posts every entry
    // has num_sge 1 and sg_list at its own segment, which the fast paths leave as they are.
    std::unique_ptr<WrSlot<ibv_send_wr>[]> send_wrs_;
    std::unique_ptr<ibv_sge[]> send_sges_;
    // post_one's work request: one segment (one_sge_), no next, as set up in init_data_path.
    ibv_send_wr one_wr_{};
    ibv_sge one_sge_{};
    ibv_send_wr* one_bad_ = nullptr;  // where the provider says it stopped in post_one (nothing to learn there)
    std::unique_ptr<WrSlot<ibv_recv_wr>[]> recv_wrs_;
    std::unique_ptr<ibv_sge[]> recv_sges_;
    std::uint32_t send_sge_stride_ = 1;  // segments of send_sges_ per entry (max_send_sge)
    std::uint32_t recv_sge_stride_ = 1;
};

// The connections of QPs connected through rdma_cm (weft::connect / Listener::accept), kept after the
// handshake so that QueuePair::disconnect can close them as rdma_disconnect does, and so that a peer's
// close reaches this side (verbs_conn.cpp). Each kept rdma_cm id moves onto one event channel per domain,
// which a thread of the domain reads (started with the first connection): a DISCONNECTED on a connection
// this side did not close puts its QP in error (its outstanding work flushes) and files a
// peer_disconnected event. The domain's events come from here first (next_event), then from the device's
// async_fd; event_fd() is readable while this queue holds one.
class Connections {
public:
    Connections();
    ~Connections();
    Connections(const Connections&) = delete;
    Connections& operator=(const Connections&) = delete;

    // Starts the channel and its thread if not yet: called before a handshake, so that a failure here stops
    // it before any QP is touched.
    void start(std::string_view call);
    // Takes over `id`, whose handshake connected `qp` (the id's events all acknowledged). `closed`: the peer
    // closed it already (its DISCONNECTED came instead of ESTABLISHED): the QP goes to error now.
    void keep(rdma_cm_id* id, VerbsQp& qp, bool closed);
    // Closes the connection of `qp`: the QP goes to error and the peer is sent a DREQ, once. False when
    // `qp` has no kept connection (it was connected by address exchange).
    bool disconnect(VerbsQp& qp);
    // Forgets the connection of `qp`, being destroyed, and releases its id (which tells a peer not yet told,
    // as rdma_destroy_id does).
    void forget(const VerbsQp& qp) noexcept;

    // An eventfd readable while next_event has an event to give.
    int event_fd() const noexcept { return events_fd_; }
    bool next_event(AsyncEvent& out);

private:
    struct Entry {
        rdma_cm_id* id = nullptr;
        VerbsQp* qp = nullptr;
        bool closed = false;  // a DREQ went (disconnect) or came (the peer's close): nothing more to tell
    };

    void run() noexcept;
    // A DISCONNECTED on `id`: the peer closed. Returns whether this side must answer with rdma_disconnect.
    bool peer_closed(rdma_cm_id* id) noexcept;
    void file_event(std::uint32_t qp_num);  // with mutex_ held

    std::mutex mutex_;
    std::vector<Entry> entries_;
    std::vector<AsyncEvent> events_;  // oldest first
    std::size_t events_head_ = 0;
    int events_fd_ = -1;
    int stop_fd_ = -1;
    rdma_event_channel* channel_ = nullptr;
    std::thread thread_;
};

class VerbsDomain final : public detail::DomainImpl {
public:
    explicit VerbsDomain(std::shared_ptr<Device> device);
    ~VerbsDomain() override;

    std::unique_ptr<detail::MrImpl> register_memory(void* addr, std::size_t length, Access access) override;
    std::shared_ptr<detail::CqImpl> create_cq(const CqOptions& options) override;
    std::unique_ptr<detail::QpImpl> create_qp(const detail::QpSetup& setup) override;
    std::shared_ptr<detail::SrqImpl> create_srq(const SrqOptions& options) override;
    // host:port through rdma_cm (verbs_cm.cpp)
    std::unique_ptr<detail::ListenerImpl> listen(const detail::HostPort& where) override;
    std::vector<std::byte> connect_to(detail::QpImpl& qp, const detail::HostPort& where,
                                      std::chrono::milliseconds timeout,
                                      std::span<const std::byte> private_data) override;
    // asynchronous events: the context's async_fd (verbs_domain.cpp)
    int event_fd() override;
    bool next_event(AsyncEvent& out) override;

private:
    // Makes the context's async_fd non-blocking, once (ibv_get_async_event would block on an empty one).
    void nonblocking_events();

    std::shared_ptr<Device> device_;
    std::once_flag events_nonblocking_;
    // event_fd(): an epoll set of the device's async_fd and the connections' eventfd, made on first use.
    std::once_flag events_fd_made_;
    int events_fd_ = -1;
};

// ---- Helpers shared by the setup files

// Chains `count` work requests (plus a spare, so that every entry but the spare has a successor) and gives
// each `stride` segments of `sges`; every entry has num_sge 1.
template <class Wr>
std::unique_ptr<Wr[]> chain(std::uint32_t count, std::uint32_t stride, std::unique_ptr<ibv_sge[]>& sges) {
    auto wrs = std::make_unique<Wr[]>(count + 1);
    sges = std::make_unique<ibv_sge[]>(static_cast<std::size_t>(count + 1) * stride);
    for (std::uint32_t i = 0; i <= count; ++i) {
        wrs[i].next = i < count ? &wrs[i + 1] : nullptr;
        wrs[i].sg_list = &sges[static_cast<std::size_t>(i) * stride];
        wrs[i].num_sge = 1;
    }
    return wrs;
}

// Chains `count` slots (plus a spare, so that every entry but the spare has a successor), each request's
// sg_list at its own segment, num_sge 1; and gives `sges` `stride` segments per slot for requests of more.
template <class Wr>
std::unique_ptr<WrSlot<Wr>[]> chain_slots(std::uint32_t count, std::uint32_t stride, std::unique_ptr<ibv_sge[]>& sges) {
    auto slots = std::make_unique<WrSlot<Wr>[]>(count + 1);
    sges = std::make_unique<ibv_sge[]>(static_cast<std::size_t>(count + 1) * stride);
    for (std::uint32_t i = 0; i <= count; ++i) {
        slots[i].wr.next = i < count ? &slots[i + 1].wr : nullptr;
        slots[i].wr.sg_list = &slots[i].sge;
        slots[i].wr.num_sge = 1;
    }
    return slots;
}

// "fe80::1" style text of a GID, for messages.
std::string gid_text(const ibv_gid& gid);
// 256..4096, or 0 for an unknown enum value.
std::uint32_t mtu_bytes(ibv_mtu mtu) noexcept;
// Whether rdma_cm can be used here (its device node opens): Feature::listener (verbs_cm.cpp).
bool rdma_cm_usable() noexcept;

}  // namespace weft::verbs
