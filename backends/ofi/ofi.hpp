// Internal declarations of the ofi backend (libfabric), shared by its setup files (ofi_plugin.cpp,
// ofi_domain.cpp, ofi_endpoint.cpp) and its data path (ofi_datapath.cpp). Not installed.
//
// Shape of the backend:
// - OfiDomain owns the fabric and domain fids, the fi_info chosen at open and a Profile: every decision
//   that depends on the provider (MR mode, how immediates travel, atomics, progress) is made once, there.
// - OfiCq wraps one fid_cq. It turns provider entries into weft completions through the rings of the
//   QPs bound to it, so completions leave in posting order whatever order the provider reports them in.
// - OfiQp owns one endpoint (MSG: plus a passive endpoint for the connection handshake; RDM: plus an
//   address vector) and two Rings of preallocated Slots, one per queue.
// - OfiSrq owns one shared receive context (fi_srx_context) and its preallocated entries; a QP on it binds
//   its endpoint to the context and its receives to a provider CQ of its own, which tells which QP took
//   each receive (ofi_srq.cpp). Where the provider has no usable context, OfiSrq is a queue of its own
//   that the QPs' bounce buffers are matched against (ofi_srq.cpp, "emulated").
#pragma once

#include "ofi_wire.hpp"

#include <weft/backend.hpp>
#include <weft/detail/errors.hpp>
#include <weft/detail/slot_ring.hpp>
#include <weft/error.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace weft::ofi {

inline constexpr std::uint32_t fi_api_version = FI_VERSION(1, 17);

// ---- RAII for libfabric objects

template <class T>
struct FidCloser {
    void operator()(T* p) const noexcept {
        if (p) fi_close(&p->fid);
    }
};
template <class T>
using Fid = std::unique_ptr<T, FidCloser<T>>;

struct InfoFree {
    void operator()(fi_info* p) const noexcept {
        if (p) fi_freeinfo(p);
    }
};
using InfoPtr = std::unique_ptr<fi_info, InfoFree>;

// Throws weft::Error for a failed fi_* call: `ret` is the call's negative return value.
// Every setup error of the backend (weft/detail/errors.hpp): errors.fail_fabric for a libfabric return code,
// errors.fail and .fail_errno for the others.
inline constexpr detail::ErrorSource errors{backend_name};
// Returns `ret` when it is not negative; throws through errors.fail_fabric otherwise.
inline long check(long ret, std::string_view call, std::string_view object, std::string context = {}) {
    if (ret < 0) errors.fail_fabric(ret, call, object, std::move(context));
    return ret;
}

// Sets libfabric's environment defaults the backend relies on (the MR cache off, rxm's universe size and
// shared receive context), once, before the process's first libfabric call that goes through the backend
// (ofi_plugin.cpp).
void prepare_libfabric();

// ---- What the chosen provider needs and offers, decided once at open

struct Profile {
    std::string provider;           // fabric_attr->prov_name, e.g. "tcp", "shm", "tcp;ofi_rxm"
    fi_ep_type ep_type = FI_EP_MSG;
    bool mr_local = false;          // FI_MR_LOCAL: every local buffer needs its fi_mr_desc
    bool virt_addr = false;         // FI_MR_VIRT_ADDR: targets are virtual addresses, not offsets
    bool prov_key = false;          // FI_MR_PROV_KEY: the provider picks MR keys
    bool our_keys = false;          // we pick keys (KeyMixer); they carry the atomic right
    bool native_imm = false;        // FI_RX_CQ_DATA: remote CQ data consumes a posted receive
    bool emulated_imm = false;      // write_with_imm = write + zero-length marker send (see ofi_datapath)
    bool atomics = false;
    bool fence = false;             // FI_FENCE in caps (otherwise fence is emulated, see ofi_datapath)
    // The provider moves data only inside calls on its CQs (shm, rxm, and tcp in 1.17, which starts its
    // progress thread only for blocking waits): a peer QP in this process is progressed by kicking its CQs
    // while a QP waits on it (OfiCq::kick_local_peers).
    bool needs_kicks = false;
    // progress=thread: the service thread progresses every CQ and drives the handshakes, so that a process
    // that never calls weft still answers its peers' writes, reads and atomics, as an RDMA NIC does.
    bool progress_thread = false;
    // The CQ's FI_WAIT_FD becomes readable when a peer's data arrives, without anyone progressing (verbs,
    // tcp, rxm over tcp, sockets). Not shm: its senders only set a flag in the receiver's shared memory.
    bool native_wait = false;
    bool verbs_status = false;      // prov_errno is an ibv_wc_status (the verbs provider)
    // Registrations are shared through libfabric's MR cache (two registrations of one buffer get one key,
    // with every remote right): a region's own rights are not enforced.
    bool mr_cache = false;
    bool wait_fd = false;           // CQs open with FI_WAIT_FD
    bool delivery_complete = false; // sends and writes complete once placed at the target
    // The provider checks a remote access's key, bounds and rights at the target before touching memory
    // (tcp, sockets, verbs and rxm over them). shm does not: its writes and reads are copied by the
    // requester straight into the target process (CMA).
    bool rma_checked = false;
    // Writes, reads and atomics may be posted: the provider checks them, or unchecked_rma=on.
    bool rma = false;
    // Shared receive contexts whose receives complete on the CQ bound to the endpoint that took them
    // (Feature::srq; tcp): a QP's own receive CQ then names the QP.
    bool srx = false;
    // No usable shared receive context (shm, rxm, verbs): Feature::srq through weft's own queue of posted
    // receives, fed from bounce buffers each QP on it receives into (OfiSrq, "emulated").
    bool srq_emulated = false;
    std::size_t srq_bounce_size = 0;  // the bytes of one bounce buffer (srq_bounce_size)
    std::uint32_t srq_bounces = 0;    // the bounce buffers of each QP on an emulated queue (srq_bounces)
    std::size_t inject_size = 0;
    std::size_t cq_data_size = 0;
    std::uint32_t iov_limit = 1;
    std::uint64_t msg_order = 0;
};

// Immediate encoding for emulated write_with_imm: the marker send's 64-bit CQ data carries the
// immediate (low 32 bits), the write length (bits 32..62) and this bit.
inline constexpr std::uint64_t imm_marker_bit = 1ull << 63;
inline constexpr std::uint64_t emulated_imm_max_length = (1ull << 31) - 1;

// Keys we choose (no FI_MR_PROV_KEY), where targets are virtual addresses (tcp, sockets, shm):
// atomic right << 63 | KeyMixer::key(the domain's registration count).
inline constexpr std::uint64_t key_atomic_bit = 1ull << 63;
// Where targets are offsets into the region (rxm over tcp), the requester finds the region base in the key:
// base << 16 | atomic right << 15 | KeyMixer::tag(registration count).
inline constexpr unsigned key_base_shift = 16;
inline constexpr std::uint64_t offset_key_atomic_bit = 1ull << 15;
inline constexpr std::uint64_t offset_key_tag_mask = offset_key_atomic_bit - 1;

// Turns a domain's registration count into key bits through permutations keyed by random numbers drawn
// when the domain opens. key(): 62 bits, so no key repeats within 2^62 registrations. tag(): 15 bits, so
// a key of one address repeats only after 2^15 registrations. A peer that saw some keys cannot tell the
// next one, nor the keys of another domain.
class KeyMixer {
public:
    KeyMixer();
    std::uint64_t key(std::uint64_t seq) const noexcept;
    std::uint64_t tag(std::uint64_t seq) const noexcept;

private:
    std::uint64_t permute(std::uint64_t x, unsigned half_bits) const noexcept;
    std::array<std::uint64_t, 4> round_keys_{};
};

// ---- Liveness (ofi_liveness.cpp)
//
// Every QP listens on a TCP socket of its own (port in its address) and never accepts on it. A QP connected
// to a peer with a finite `timeout` holds a TCP connection to the peer QP's socket: the kernels keep it
// (keepalive probes sized from timeout and retry_cnt), so it measures the peer's silence, not whether the
// peer's program runs or polls. It breaks (RST) when the peer QP closes its socket: when the QP is
// destroyed, goes to error, or its process ends, however it ends.

// The peer address a liveness connection goes to: the IP of the peer's endpoint name
// (wire::liveness_address), port from its address.
struct LivenessTarget {
    sockaddr_storage addr{};
    socklen_t len = 0;
};

// A TCP socket listening on `ip`'s address, port 0, that is never accepted on. Throws weft::Error.
int liveness_listen(const sockaddr_storage& ip, socklen_t len, std::uint16_t& port);
// A non-blocking connect to `to` with keepalive sized from `per_try` (the QP's timeout) and `tries`;
// the caller watches the socket for HUP/ERR. Returns -1 when no socket could be made (the peer then goes
// unwatched). The connect may still be in progress; `refused` says it was refused at once (the peer QP's
// listener is closed already: it is in error or gone).
int liveness_connect(const LivenessTarget& to, std::chrono::nanoseconds per_try, unsigned tries, bool& refused) noexcept;
// QueuePair::disconnect's goodbye: the one byte a QP writes, before it closes, on the liveness connections
// waiting at its listener. A peer whose connection breaks after this byte was told; one that breaks
// without it lost the QP.
inline constexpr char liveness_goodbye = 'B';
// Accepts the connections waiting at `listener` and writes the goodbye on each before closing it.
void liveness_say_goodbye(int listener) noexcept;
// Whether the goodbye waits on `conn`, the liveness connection to the peer (reads it when it does).
bool liveness_heard_goodbye(int conn) noexcept;

// ---- Registered regions, found by lkey on the data path (lock-free reads)

struct MrEntry {
    std::atomic<std::uint32_t> lkey{0};  // 0: free
    std::uint64_t addr = 0;
    std::uint64_t length = 0;
    void* desc = nullptr;
    bool local_write = false;
};

class MrTable {
public:
    static constexpr std::uint32_t chunk_bits = 10;
    static constexpr std::uint32_t chunk_size = 1u << chunk_bits;
    static constexpr std::uint32_t index_bits = 20;  // up to 1M live regions per domain
    static constexpr std::uint32_t max_chunks = (1u << index_bits) / chunk_size;
    static_assert((1u << index_bits) % chunk_size == 0);

    MrTable() = default;
    MrTable(const MrTable&) = delete;
    MrTable& operator=(const MrTable&) = delete;
    ~MrTable();

    // Returns the lkey of a new entry: index (low 20 bits, from 1) | generation << 20.
    std::uint32_t insert(std::uint64_t addr, std::uint64_t length, void* desc, bool local_write);
    void erase(std::uint32_t lkey) noexcept;
    // The live entry for `lkey`, or null.
    const MrEntry* find(std::uint32_t lkey) const noexcept {
        std::uint32_t index = lkey & ((1u << index_bits) - 1);
        MrEntry* chunk = chunks_[index >> chunk_bits].load(std::memory_order_acquire);
        if (chunk == nullptr || index == 0) return nullptr;
        const MrEntry& e = chunk[index & (chunk_size - 1)];
        return e.lkey.load(std::memory_order_acquire) == lkey ? &e : nullptr;
    }

private:
    std::array<std::atomic<MrEntry*>, max_chunks> chunks_{};
    std::mutex mu_;
    std::vector<std::uint32_t> free_;
    std::vector<std::uint8_t> generation_;
    std::uint32_t next_ = 1;
};

// A lock for data the poll path reads on every empty poll and the control path changes rarely (a CQ's bound
// QPs): an uncontended try_lock/unlock pair is one exchange and one store, against a pthread mutex's two
// library calls, about a third of weft's own cost of an empty poll. lock() yields while another holds it.
class TinyLock {
public:
    bool try_lock() noexcept { return !held_.exchange(true, std::memory_order_acquire); }
    void lock() noexcept {
        while (!try_lock()) {
            while (held_.load(std::memory_order_relaxed)) std::this_thread::yield();
        }
    }
    void unlock() noexcept { held_.store(false, std::memory_order_release); }

private:
    std::atomic<bool> held_{false};
};

class OfiCq;
class OfiQp;
class OfiSrq;
struct Ring;
struct Slot;

// An entry of a CQ's list of the bound QPs whose peer QP lives in this process (OfiCq::kicks_): each QP has
// one per CQ it is bound to. Linked and unlinked under the CQ's bound_mu_; walked by the CQ's consumer
// without it, since a QP is unlinked only as it is destroyed, which no poll of its CQs may overlap.
struct KickLink {
    OfiQp* qp = nullptr;
    std::atomic<KickLink*> next{nullptr};
};

// ---- Domain

class OfiDomain final : public detail::DomainImpl {
public:
    explicit OfiDomain(const Config& cfg);
    ~OfiDomain() override;

    std::unique_ptr<detail::MrImpl> register_memory(void* addr, std::size_t length, Access access) override;
    std::shared_ptr<detail::CqImpl> create_cq(const CqOptions& options) override;
    std::unique_ptr<detail::QpImpl> create_qp(const detail::QpSetup& setup) override;
    std::shared_ptr<detail::SrqImpl> create_srq(const SrqOptions& options) override;
    // weft::listen / weft::connect over a TCP rendezvous (ofi_cm.cpp).
    std::unique_ptr<detail::ListenerImpl> listen(const detail::HostPort& where) override;
    std::vector<std::byte> connect_to(detail::QpImpl& qp, const detail::HostPort& where,
                                      std::chrono::milliseconds timeout,
                                      std::span<const std::byte> private_data) override;
    // Asynchronous events: peer_disconnected so far (the liveness goodbye).
    int event_fd() override;
    bool next_event(AsyncEvent& out) override;
    // Queues an event (any thread; takes only the events' own lock).
    void push_event(const AsyncEvent& e) noexcept;

    const Profile& profile() const noexcept { return profile_; }
    fi_info* info() const noexcept { return info_.get(); }
    fid_fabric* fabric() const noexcept { return fabric_.get(); }
    fid_domain* domain() const noexcept { return domain_.get(); }
    const MrTable& mrs() const noexcept { return mrs_; }
    MrTable& mrs() noexcept { return mrs_; }

private:
    void choose_info(const Config& cfg);
    void fill_capabilities();

    InfoPtr info_;
    Profile profile_;
    Fid<fid_fabric> fabric_;
    Fid<fid_domain> domain_;
    MrTable mrs_;
    std::mutex key_mu_;
    std::uint64_t key_seq_ = 0;
    KeyMixer keys_;
    std::mutex events_mu_;
    std::deque<AsyncEvent> events_;  // events_mu_
    int event_fd_ = -1;              // an eventfd holding a count exactly while events_ is not empty
};

class OfiMr final : public detail::MrImpl {
public:
    OfiMr(std::shared_ptr<OfiDomain> dom, Fid<fid_mr> mr) : dom_(std::move(dom)), mr_(std::move(mr)) {}
    ~OfiMr() override;

private:
    std::shared_ptr<OfiDomain> dom_;
    Fid<fid_mr> mr_;
};

// ---- Slots and rings

enum class OpKind : std::uint8_t { none, send, write, read, fetch_add, compare_swap, recv, imm_marker };

// The operations a fence waits for: a later fenced request starts only once these have completed.
constexpr bool fence_orders(OpKind k) noexcept {
    return k == OpKind::read || k == OpKind::fetch_add || k == OpKind::compare_swap;
}

// One provider operation of a slot: the fi_context2 comes first so that a provider asking for
// FI_CONTEXT/FI_CONTEXT2 finds its scratch space at the op_context pointer.
struct OpRef {
    fi_context2 ctx;
    Slot* slot = nullptr;
};

// A queue entry: what the request was, what the provider must do for it, and how it ended.
struct Slot {
    std::array<OpRef, 2> ops;
    Ring* ring = nullptr;
    std::uint64_t seq = 0;          // position in the ring's sequence
    std::uint64_t id = 0;
    std::uint64_t raddr = 0;        // translated remote address
    std::uint64_t rkey = 0;
    std::uint64_t data = 0;         // remote CQ data
    std::uint64_t fi_flags = 0;
    std::uint64_t operand[2] = {0, 0};  // atomics: add/compare, swap
    iovec* iov = nullptr;           // ring-owned, max_sge entries
    void** desc = nullptr;
    std::uint32_t iov_count = 0;
    std::uint32_t length = 0;       // request length; receives: bytes placed
    std::uint32_t imm = 0;
    std::uint32_t vendor_err = 0;
    std::array<OpKind, 2> kind{OpKind::none, OpKind::none};
    std::uint8_t ops_total = 0;     // provider operations this slot needs (0: completed at post)
    std::uint8_t ops_posted = 0;
    // Provider operations not yet completed: the consumer counts completions down; the producer takes
    // back the operations it never handed over (a refused second half of a write_with_imm).
    std::atomic<std::uint8_t> ops_left{0};
    Opcode opcode = Opcode::send;   // opcode the completion reports
    WcStatus status = WcStatus::success;
    bool report = true;             // signaled (receives always)
    bool has_imm = false;
    bool inline_data = false;       // FI_INJECT: the payload must be copied before post returns
    // Fenced on a provider without FI_FENCE: handed over only once the ring has no read or atomic out.
    bool fence_wait = false;
    std::atomic<bool> done{false};
    // A receive the provider returned because the connection closed under it (OfiCq::absorb_error): it
    // stays outstanding, as on an RC QP that does not see its peer go, until the QP goes to error
    // (OfiQp::release_parked), when it completes flushed.
    std::atomic<bool> parked{false};

    // Counts one provider completion off; true when it was the last. A slot given up on at its QP's
    // transport deadline has none left, and a late completion of it changes nothing.
    bool complete_op() noexcept {
        std::uint8_t left = ops_left.load(std::memory_order_acquire);
        while (left != 0) {
            if (ops_left.compare_exchange_weak(left, static_cast<std::uint8_t>(left - 1), std::memory_order_acq_rel)) {
                return left == 1;
            }
        }
        return false;
    }
};

inline constexpr std::uint64_t no_seq = ~0ull;

struct Ring {
    OfiQp* qp = nullptr;
    OfiCq* cq = nullptr;
    bool send_side = true;
    std::uint32_t limit = 0;        // the QP's max_send / max_recv
    std::uint32_t mask = 0;         // storage is a power of two >= limit
    std::unique_ptr<Slot[]> slots;
    std::unique_ptr<iovec[]> iovs;
    std::unique_ptr<void*[]> descs;
    // Inline payloads of requests that could not be handed over during their post call (max_inline bytes
    // per slot): the caller may reuse its buffer as soon as post returns.
    std::unique_ptr<std::byte[]> inline_store;
    std::uint32_t inline_size = 0;

    // The shared ring's cursors (weft/detail/slot_ring.hpp): cursors.posted counts the slots filled (the
    // producer's; anyone holding the QP's lock moves it otherwise), cursors.retired the first slot not yet
    // reusable (the CQ's). Its flush cursor is not used: a slot completes `flushed` from flush_from on,
    // decided by whoever puts the QP in error while the CQ delivers in order (head).
    detail::SlotRing<std::uint64_t, detail::RingSync::shared> cursors;
    // Slots handed to the provider (or completed at post), moved like cursors.posted.
    std::atomic<std::uint64_t> posted{0};
    // Producer fast path allowed: the endpoint takes posts, nothing is backlogged, no error.
    std::atomic<bool> direct{false};
    // The producer's slow path (post_slow) left slots [posted, cursors.posted) behind; while set, direct is false
    // and the QP's lock holders hand them over. Unset, any slots between posted and cursors.posted belong to the
    // producer's fast path, which may be running without the lock: nobody else hands them over (the
    // producer either posts them all or ends in post_slow). Guarded by the QP's mu_.
    bool backlog = false;
    // Reads and atomics handed to the provider whose completion the CQ has not read yet (fence emulation).
    std::atomic<std::uint32_t> ordered_out{0};

    // Consumer side (the CQ): next slot to deliver.
    std::uint64_t head = 0;
    std::atomic<std::uint64_t> delivered{0};  // head, published for other threads (outstanding())
    std::atomic<std::uint64_t> flush_from{no_seq};  // slots at or after this complete `flushed`
    std::atomic<std::uint64_t> error_origin{no_seq};  // the slot whose error put the QP in error

    // Links in the CQ's lists.
    Ring* ready_next = nullptr;
    bool in_ready = false;
    Ring* inbox_next = nullptr;
    std::atomic<bool> in_inbox{false};

    Slot& at(std::uint64_t seq) noexcept { return slots[seq & mask]; }
};

// ---- Shared receive queue (ofi_srq.cpp)

// One receive of a shared receive queue; the fi_context2 comes first, as in OpRef. Entries are only ever
// read back from the private receive CQ of a QP on the queue, so nothing else arrives there.
struct SrqEntry {
    fi_context2 ctx;
    std::uint64_t id = 0;
    std::uint64_t seq = 0;  // position in the queue's posting order
    iovec* iov = nullptr;   // the queue's, max_sge entries
    void** desc = nullptr;
    std::uint32_t next_free = 0;
    std::uint32_t iov_count = 0;  // emulated queue: the segments with bytes
};

// Emulated queue: one bounce buffer of a QP on it, which the QP's endpoint receives into; the fi_context2
// comes first, as in OpRef. What arrived waits in the queue's arrival list until a receive of the queue
// is posted for it (the queue's match_mu_).
struct SrqBounce {
    fi_context2 ctx;
    OfiQp* qp = nullptr;
    std::byte* buf = nullptr;
    void* desc = nullptr;
    enum class State : std::uint8_t { idle, posted, arrived } state = State::idle;
    // What arrived: the entry's length, flags and data, or the provider's error for it (a message longer
    // than the buffer).
    std::uint64_t flags = 0;
    std::uint64_t data = 0;
    std::size_t len = 0;
    int err = 0;
    int prov_errno = 0;
    SrqBounce* next = nullptr;  // arrival list
};

// Emulated queue: the bounce buffers each QP on it keeps posted (srq_bounces), by default and at most.
inline constexpr std::uint32_t srq_bounces_default = 4;
inline constexpr std::uint32_t srq_bounces_max = 4096;
inline constexpr std::size_t srq_bounce_size_default = 64 * 1024;

// The most receives a shared receive queue holds: weft preallocates its entries (the providers' contexts
// allocate theirs as receives are posted).
inline constexpr std::uint32_t srq_max_wr = 1u << 16;

class OfiSrq final : public detail::SrqImpl {
public:
    OfiSrq(std::shared_ptr<OfiDomain> dom, const SrqOptions& options);
    ~OfiSrq() override;

    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept override;
    void arm_limit(std::uint32_t limit) override;

    fid_ep* fid() const noexcept { return srx_.get(); }
    const OfiDomain* owner() const noexcept { return dom_.get(); }
    bool emulated() const noexcept { return emulated_; }
    // Emulated queue: the provider CQ every QP on the queue binds its receives to (arrival order).
    fid_cq* bounce_cq() const noexcept { return bounce_cq_.get(); }
    // Emulated queue: keeps the queue's readers off the QPs' endpoints and bounces while one of them
    // posts its first bounces or closes its endpoint.
    std::unique_lock<std::mutex> quiesce_bounces() { return std::unique_lock(match_mu_); }
    // Emulated queue, from the consumer of `cq` (its srq_mu_ held): reads the bounce CQ, matches what
    // arrived with the queue's receives in posted order (copying each message into its receive, re-posting
    // the bounce), and moves the completions whose QP receives on `cq` into `out`, as far as `room` allows
    // (all when `closing`, which also drops the bounces of `closing`, whose endpoint is closed). Returns
    // how many entries and completions it handled.
    std::size_t pump(const OfiCq& cq, std::vector<std::pair<std::uint64_t, Completion>>& out, std::size_t room,
                     const OfiQp* closing) noexcept;
    // A receive came back from the provider (taken by a QP, or cancelled): frees its entry, and pushes
    // srq_limit_reached when fewer receives than an armed limit remain. Returns the receive's id.
    std::uint64_t retire(SrqEntry& e) noexcept;
    // Whether receives are posted and not yet come back (any thread).
    bool holds_receives() const noexcept { return held_.load(std::memory_order_relaxed) != 0; }

private:
    static constexpr std::uint32_t no_entry = ~0u;

    std::shared_ptr<OfiDomain> dom_;
    Fid<fid_ep> srx_;
    std::unique_ptr<SrqEntry[]> entries_;
    std::unique_ptr<iovec[]> iovs_;
    std::unique_ptr<void*[]> descs_;
    std::mutex mu_;                  // posts, retires and the limit (several QPs' CQs retire at once)
    std::uint32_t free_top_ = 0;     // mu_
    std::uint32_t outstanding_ = 0;  // posted, not yet retired (mu_)
    std::atomic<std::uint32_t> held_{0};  // outstanding_, for readers without mu_
    std::uint32_t limit_ = 0;        // armed limit, 0: disarmed (mu_)
    std::uint64_t next_seq_ = 0;     // mu_

    // Emulated queue (no srx_): receives wait in entries_ as a ring, entry seq % max_recv, taken in posted
    // order by the bounces that arrive.
    struct Taken {
        std::uint64_t id = 0;
        std::uint64_t seq = 0;
        std::uint32_t iov_count = 0;
        std::array<iovec, 64> iov;  // Profile::iov_limit is at most 64; filled up to iov_count
    };
    // Takes the oldest posted receive; false when none is. Counts it off as retire() does.
    bool take(Taken& out) noexcept;
    bool count_off() noexcept;
    void limit_crossed() noexcept;
    bool deliver_bounce(SrqBounce& b, const Taken& t, Completion& c) noexcept;
    bool emulated_ = false;
    Fid<fid_cq> bounce_cq_;
    std::mutex match_mu_;                       // the bounce CQ, the arrival list, done_, the bounces' states
    SrqBounce* arrived_head_ = nullptr;         // arrived, not yet matched, oldest first
    SrqBounce* arrived_tail_ = nullptr;
    struct Done {
        std::uint64_t seq;
        Completion c;
        const OfiCq* cq;  // the receive CQ of the QP that took it
    };
    std::vector<Done> done_;  // matched, not yet moved to their CQ; capacity reserved at creation
    std::array<fi_cq_data_entry, 16> entries_read_{};
};

// ---- Completion queue

class OfiCq final : public detail::CqImpl {
public:
    OfiCq(std::shared_ptr<OfiDomain> dom, const CqOptions& options);
    ~OfiCq() override;

    std::size_t poll(std::span<Completion> out) noexcept override;
    bool wait(std::chrono::nanoseconds timeout) override;
    // The provider's FI_WAIT_FD where it is woken by its peers (native_wait), else an eventfd the service
    // thread sets while it progresses this CQ. Created with the CQ; the call only switches on re-arming by
    // empty polls (and, without a native wait, the service thread's progress).
    int fd() override;
    std::uint32_t depth() const noexcept override { return depth_; }

    fid_cq* fid() const noexcept { return cq_.get(); }
    const OfiDomain* owner() const noexcept { return dom_.get(); }
    const Profile& profile() const noexcept { return *profile_; }

    // From any thread: `ring` has slots completed without a provider entry (synthetic completions).
    void notify(Ring& ring) noexcept;
    // Drives provider progress without consuming entries (safe from any thread). True when the provider
    // holds entries for poll() to read.
    bool kick() noexcept;
    // Kicks the CQs of peer QPs in this process that QPs bound here wait on (only those with requests out).
    void kick_local_peers() noexcept;
    // The service thread's round for an fd()-mode CQ: progresses it and its local peers, and sets the
    // descriptor when poll() has something. True when something was found.
    bool service_round() noexcept;
    // Whether a service round could find anything now: without a native wait, a request of a bound QP is
    // out; with one, a request of a bound QP whose peer lives in this process (it needs kicks).
    bool round_needed() noexcept;
    // Whether a QP bound to this CQ is connected: only then does progress=thread kick it (shm's progress
    // over an endpoint not yet enabled crashes).
    bool connected_qp() noexcept;
    // A bound QP whose peer lives in this process has a request out (this thread's kicks may be needed).
    bool local_peer_outstanding() noexcept;
    // From a post on a QP of this CQ: ends the doze of a wait() that found nothing to progress (shm, or a
    // native-wait CQ whose in-process peers had nothing out).
    void nudge() noexcept {
        if (dozing_.load(std::memory_order_relaxed) && dozing_.exchange(false, std::memory_order_acq_rel)) end_doze();
    }
    // Takes `n` of this CQ's entries for one queue of a QP, or throws weft::Error naming what is left
    // (the verbs provider: see CqEntries). release() gives them back.
    void reserve(std::uint32_t n, std::string_view queue);
    void release(std::uint32_t n) noexcept { reserved_.fetch_sub(n, std::memory_order_acq_rel); }
    // QPs on a shared receive queue whose receives complete here: their private provider CQs are read by
    // this CQ's consumer (pump) after its own.
    void add_srq_reader(OfiQp* qp);
    // Reads what is left in `qp`'s private CQ (its endpoint is closed) and forgets it.
    void remove_srq_reader(OfiQp* qp) noexcept;
    // QPs with a queue on this CQ (their loss is handled, and their local peers kicked, by its consumer).
    void bind(OfiQp* qp);
    void unbind(OfiQp* qp) noexcept;
    // A QP bound here now has a peer QP in this process (`link` is the QP's entry for this CQ), or is going.
    void local_peer_linked(KickLink& link) noexcept;
    void local_peer_unlinked(KickLink& link) noexcept;
    // From the service thread: a QP whose send queue is here lost its peer; the consumer handles it.
    void peer_lost() noexcept;
    // Makes the descriptor readable (fd() mode) and ends a wait() on the provider's wait object.
    void wake() noexcept;
    // Reads every pending provider entry into the rings (the consumer side; used on QP teardown).
    void drain_provider() noexcept;
    // Forgets `ring` (its QP is going away); the caller has drained the provider first.
    void detach(Ring& ring) noexcept;
    // Keeps the service thread and kicks from other threads away from this CQ's provider calls while the
    // caller closes an endpoint bound to it (ofi_rxm faults when an endpoint closes under a concurrent
    // fi_cq_read).
    std::unique_lock<std::mutex> quiesce() { return std::unique_lock(progress_mu_); }
    // Likewise for the private CQs of the QPs on a shared receive queue that this CQ reads.
    std::unique_lock<std::mutex> quiesce_srq() { return std::unique_lock(srq_mu_); }

private:
    // pump()'s argument when it is to make the first provider read itself.
    static constexpr ssize_t unread = std::numeric_limits<ssize_t>::min();
    // What poll() does beyond an empty provider read; `first` is that read's result, if poll() made it.
    std::size_t poll_here(std::span<Completion> out, ssize_t first = unread) noexcept;
    bool wait_step() noexcept;
    bool doze(std::chrono::nanoseconds left) noexcept;
    void end_doze() noexcept;
    // Reads the provider's entries into the rings; `first`: the result of a read already made.
    std::size_t pump(ssize_t first = unread) noexcept;
    // The consumer's kicks: the peers of the bound QPs in kicks_ that have a request out.
    void kick_waited_peers() noexcept;
    void absorb(const fi_cq_data_entry& e) noexcept;
    void absorb_error() noexcept;
    void slot_finished(Slot& s) noexcept;
    void link_ready(Ring& r) noexcept;
    void take_inbox() noexcept;
    std::size_t deliver(std::span<Completion> out, std::size_t n) noexcept;
    std::size_t deliver_inline(std::span<Completion> out, std::size_t n) noexcept;
    bool deliverable() noexcept;
    void idle() noexcept;
    void rearm() noexcept;
    void handle_losses() noexcept;
    std::size_t pump_srq() noexcept;
    std::size_t srq_room() noexcept;
    bool srq_wakes(const OfiQp& qp) const noexcept;
    // `closing`: the QP's endpoint is closed; what is left completes flushed.
    std::size_t read_srq_cq(OfiQp& qp, bool closing) noexcept;
    bool srq_ready() noexcept;
    std::size_t deliver_srq(std::span<Completion> out, std::size_t n) noexcept;

    std::shared_ptr<OfiDomain> dom_;
    const Profile* profile_;
    Fid<fid_cq> cq_;
    std::uint32_t depth_;
    std::atomic<std::uint64_t> reserved_{0};
    int wait_fd_ = -1;   // the provider's FI_WAIT_FD (native_wait)
    bool thread_progress_ = false;  // in the service thread's rounds for progress=thread
    int event_fd_ = -1;  // otherwise
    // With a native wait: an eventfd a dozing wait() polls beside wait_fd_, for nudges (fi_cq_signal would
    // leave the provider's descriptor readable until a read consumes an entry).
    int nudge_fd_ = -1;
    Ring* ready_head_ = nullptr;
    Ring* ready_tail_ = nullptr;
    std::atomic<Ring*> inbox_{nullptr};
    std::array<fi_cq_data_entry, 32> entries_{};

    // Reasons for poll() to leave its empty-poll path for poll_here(): fd() mode (an empty poll re-arms the
    // descriptor) and readers of a shared receive queue (delivered beside the rings), which stay once set,
    // and a peer loss for the consumer to handle (set by the service thread, cleared by handle_losses).
    static constexpr std::uint8_t detour_fd = 1;
    static constexpr std::uint8_t detour_srq = 2;
    static constexpr std::uint8_t detour_loss = 4;
    std::atomic<std::uint8_t> detours_{0};
    bool loss_pending() const noexcept { return (detours_.load(std::memory_order_relaxed) & detour_loss) != 0; }
    std::atomic<bool> fd_mode_{false};    // fd() was called: empty polls re-arm the descriptor
    std::atomic<bool> signaled_{false};   // event_fd_ holds a count
    std::atomic<std::uint32_t> local_links_{0};
    std::atomic<std::uint32_t> waiters_{0};  // threads in wait()
    std::atomic<bool> dozing_{false};        // a wait() sleeps on event_fd_ / nudge_fd_ until nudged
    std::mutex progress_mu_;  // provider calls from other threads (kicks, the service thread)
    TinyLock bound_mu_;
    std::vector<OfiQp*> bound_;
    std::atomic<KickLink*> kicks_{nullptr};  // the bound QPs with a peer in this process (see KickLink)
    // Shared-receive-queue completions: read from the readers' private CQs into srq_done_ in the order
    // they were read, delivered before the rings' (srq_mu_).
    std::atomic<std::uint32_t> srq_readers_n_{0};
    std::atomic<bool> srq_pending_{false};  // srq_done_ holds completions not yet delivered
    std::atomic<std::uint32_t> srq_unwoken_{0};  // readers that send on another CQ (wait() looks in slices)
    std::mutex srq_mu_;
    std::vector<OfiQp*> srq_readers_;
    // (posting sequence, completion); capacity reserved when the first reader comes, never grown by polls.
    std::vector<std::pair<std::uint64_t, Completion>> srq_done_;
    std::size_t srq_head_ = 0;  // next to deliver
    std::array<fi_cq_data_entry, 16> srq_entries_{};
};

// ---- Queue pair

// The CQ entries one queue of a QP holds on its CQ, given back when the QP goes. The verbs provider counts
// CQ credits: it sets aside one per receive slot of every endpoint bound for receiving and lets a send go
// only while a credit is left, so a CQ smaller than the queues bound to it stalls sends for good (seen on
// rxe: a 64-deep CQ shared by a QP of 64 receive slots never completed a send). Only for that provider.
class CqEntries {
public:
    CqEntries() = default;
    CqEntries(const CqEntries&) = delete;
    CqEntries& operator=(const CqEntries&) = delete;
    ~CqEntries() {
        if (cq_) cq_->release(n_);
    }
    void take(OfiCq& cq, std::uint32_t n, std::string_view queue) {
        cq.reserve(n, queue);
        cq_ = &cq;
        n_ = n;
    }

private:
    OfiCq* cq_ = nullptr;
    std::uint32_t n_ = 0;
};

class OfiQp final : public detail::QpImpl {
public:
    OfiQp(std::shared_ptr<OfiDomain> dom, const detail::QpSetup& setup);
    ~OfiQp() override;

    PostStatus post_send(std::span<const SendRequest> batch) noexcept override;
    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept override;
    std::vector<std::byte> address() const override;
    void connect(std::span<const std::byte> peer) override;
    QpState state() const noexcept override { return state_.load(std::memory_order_acquire); }
    // Goes to error, flushing what is outstanding, and tells the peer: in this process through the
    // registry, in another through the liveness goodbye. Needs a finite `timeout` across processes.
    void disconnect() override;
    // Goes to error without a goodbye: the peer learns as from a lost QP.
    void to_error() override;
    // The peer QP disconnected: its coming loss is a goodbye, and ends this QP with flushes instead of
    // transport_retry_exceeded.
    void peer_said_goodbye() noexcept;

    // Advances the connection handshake and posts backlogged requests. Returns true while the QP
    // still needs to be driven. Takes the QP's lock; `try_only` gives up when it is held elsewhere.
    bool drive(bool try_only) noexcept;
    // After connect(): drives the QP until its handshake ends. Throws weft::Error when it failed, or with
    // std::errc::timed_out at `deadline`.
    void await_connected(std::chrono::steady_clock::time_point deadline, std::string_view call);
    // Moves the QP to the error state because slot `origin_seq` of `origin` failed; `reason` is what the
    // origin reports when it has no status of its own (it was cancelled, or never reached the provider).
    void enter_error(Ring& origin, std::uint64_t origin_seq, WcStatus reason = WcStatus::general) noexcept;
    // A receive the provider gave back as its connection closed, the QP still up: parked (Slot::parked).
    void park(Slot& s) noexcept;
    // Completes the parked receives flushed, once the QP is in error.
    void release_parked() noexcept;
    // A provider error for `s` arrived after the QP was already in error: when `s` precedes the recorded
    // origin on its ring (providers report a broken connection's requests in any order), it becomes the
    // origin. Consumer side only.
    void lower_origin(Slot& s) noexcept;
    // The connected peer QP, in this process, is being destroyed or went to error: later sends fail at post.
    void peer_gone() noexcept;
    // From the service thread: the liveness connection to the peer broke (the peer QP was destroyed, went
    // to error, or its process ended; or, with a finite timeout, its host stopped answering).
    void liveness_lost() noexcept;
    // The consumer of the send CQ, after reading the provider's entries: once the peer has been lost for
    // loss_grace, the first unfinished send-queue request fails with transport_retry_exceeded and the QP goes
    // to error (requests the provider finished before keep their status). Returns false to be called again.
    bool handle_loss(std::chrono::steady_clock::time_point now) noexcept;
    bool lost() const noexcept { return peer_lost_.load(std::memory_order_acquire); }
    // Whether a request of either queue is posted and not yet delivered to the application; for a QP on a
    // shared receive queue, whether the queue holds receives (as a QP's own posted receives count).
    bool outstanding() const noexcept {
        return send_.cursors.posted.load(std::memory_order_relaxed) != send_.delivered.load(std::memory_order_relaxed) ||
               recv_.cursors.posted.load(std::memory_order_relaxed) != recv_.delivered.load(std::memory_order_relaxed) ||
               (srq_ && srq_->holds_receives());
    }
    // Progresses the CQs of the connected peer QP when it lives in this process.
    void kick_local_peer() noexcept;
    bool has_local_peer() const noexcept { return local_peer_linked_.load(std::memory_order_acquire); }
    std::array<std::shared_ptr<OfiCq>, 2> cqs() const { return {send_cq_, recv_cq_}; }
    // The private provider CQ of a QP on a shared receive queue (null otherwise, and on an emulated queue),
    // read by its receive CQ.
    fid_cq* srq_cq() const noexcept { return srq_cq_.get(); }
    // Emulated shared receive queue (the queue's match_mu_ held): hands bounce `b` to the endpoint, unless
    // the endpoint is gone or closing; cancels it again if the QP went to error meanwhile.
    void post_bounce(SrqBounce& b) noexcept;
    const OfiCq* recv_cq() const noexcept { return recv_cq_.get(); }
    OfiSrq* srq() const noexcept { return srq_.get(); }
    bool in_error() const noexcept { return error_.load(std::memory_order_acquire); }
    std::uint64_t nonce() const noexcept { return nonce_; }
    std::uint64_t peer_nonce() const noexcept { return peer_nonce_.load(std::memory_order_acquire); }
    bool connect_called() const noexcept { return connect_called_.load(std::memory_order_acquire); }

private:
    enum class Cm : std::uint8_t { idle, active_wait, passive_wait_request, passive_wait_established, done, failed };

    // Setup (ofi_endpoint.cpp)
    void open_msg();
    void open_rdm();
    void make_endpoint(fi_info* info, std::span<const std::byte> dest = {});
    void encode_address();
    bool drive_cm() noexcept;
    void accept_request(fi_info* request) noexcept;
    void established() noexcept;
    void connection_failed(int err) noexcept;
    void give_up(std::uint64_t seq, WcStatus status) noexcept;
    void fail_all() noexcept;
    void open_liveness();
    void watch_peer(const wire::PeerAddress& p) noexcept;
    void link_local_peer(std::uint64_t peer_nonce) noexcept;
    void close_liveness_listener() noexcept;

    // Data path (ofi_datapath.cpp)
    bool prepare_send(Slot& s, const SendRequest& r, bool flush) noexcept;
    bool prepare_recv(Slot& s, const RecvRequest& r, bool flush) noexcept;
    bool check_local(Slot& s, std::span<const LocalSegment> segs, bool need_write) noexcept;
    void finish_at_post(Slot& s, WcStatus status) noexcept;
    long issue(Slot& s, unsigned op) noexcept;
    bool post_range(Ring& r) noexcept;
    bool post_range_inline(Ring& r) noexcept;
    void post_backlog(Ring& r) noexcept;
    PostStatus post_slow(Ring& r, bool synthetic) noexcept;
    void stash_inline(Ring& r) noexcept;
    void cancel_receives() noexcept;
    void progress_own() noexcept;
    bool ready_to_post(const Ring& r) const noexcept;
    void refresh_direct() noexcept;

    friend class OfiCq;
    friend class OfiSrq;

    std::shared_ptr<OfiDomain> dom_;
    std::shared_ptr<OfiCq> send_cq_;
    std::shared_ptr<OfiCq> recv_cq_;
    const Profile& profile_;
    Capabilities dcaps_;

    // With a shared receive queue: the queue (kept alive while the QP lives) and the provider CQ the
    // endpoint's receives complete on. Declared before ep_, so that they close after it.
    std::shared_ptr<OfiSrq> srq_;
    Fid<fid_cq> srq_cq_;
    // Emulated shared receive queue: the bounce buffers (one allocation, registered where FI_MR_LOCAL).
    std::unique_ptr<std::byte[]> bounce_store_;
    Fid<fid_mr> bounce_mr_;
    std::vector<SrqBounce> bounces_;  // srq_bounces of them, sized at create_qp and never again (listed by address)
    bool bounces_closed_ = false;  // the endpoint closes: no more posts (the queue's match_mu_)
    Fid<fid_eq> eq_;
    Fid<fid_pep> pep_;
    Fid<fid_av> av_;
    Fid<fid_ep> ep_;
    Fid<fid_mr> operand_mr_;     // registers the slots' atomic operands when FI_MR_LOCAL
    void* operand_desc_ = nullptr;
    fi_addr_t peer_ = FI_ADDR_UNSPEC;

    CqEntries send_entries_;
    CqEntries recv_entries_;
    Ring send_;
    Ring recv_;

    std::mutex mu_;                       // slow paths: connecting, backlog, error
    std::atomic<QpState> state_{QpState::init};
    std::atomic<bool> error_{false};
    std::atomic<std::uint32_t> parked_{0};  // receives parked (Slot::parked)
    std::atomic<bool> connect_called_{false};
    std::atomic<bool> ep_ready_{false};   // the endpoint exists and takes receives
    std::atomic<bool> peer_gone_{false};  // the in-process peer QP was destroyed
    std::atomic<std::uint64_t> peer_nonce_{0};
    Cm cm_ = Cm::idle;
    std::uint64_t nonce_ = 0;
    std::vector<std::byte> my_address_;
    std::vector<std::byte> my_name_;
    wire::PeerAddress peer_addr_;
    std::string cm_error_;
    // The status of the request at the error origin when it has none of its own (connection lost).
    std::atomic<WcStatus> origin_status_{WcStatus::general};
    std::uint32_t origin_vendor_err_ = 0;

    // Liveness (see ofi_liveness.cpp): our listening socket, and the connection to the peer's.
    std::atomic<int> live_listen_{-1};
    std::uint16_t live_port_ = 0;
    sockaddr_storage live_ip_{};
    socklen_t live_ip_len_ = 0;
    std::atomic<int> live_conn_{-1};  // written before the watch starts, read by the service thread
    std::uint64_t live_watch_ = 0;
    std::chrono::nanoseconds live_per_try_{0};  // 4.096 us x 2^timeout; 0: timeout 0, the peer is not watched
    unsigned live_tries_ = 1;                    // retry_cnt + 1
    std::atomic<bool> peer_lost_{false};
    std::atomic<bool> goodbye_{false};           // the peer disconnected (QueuePair::disconnect)
    bool told_peer_ = false;                     // disconnect() said goodbye (mu_)
    bool loss_seen_ = false;                     // consumer side (the send CQ's)
    bool loss_handled_ = false;
    std::chrono::steady_clock::time_point loss_since_{};
    // The CQs of the connected peer QP when it lives in this process (kept alive while we may kick them).
    std::array<std::shared_ptr<OfiCq>, 2> local_peer_cqs_;
    std::atomic<bool> local_peer_linked_{false};
    std::array<KickLink, 2> kick_links_;  // on the send CQ's list, and on the receive CQ's when it differs
};

// How long a lost peer's requests may still complete from what the provider had before they fail: acks
// sent before the peer closed can reach a provider that progresses in its own thread after the news.
inline constexpr std::chrono::milliseconds loss_grace{100};

// ---- Process-wide bookkeeping: QPs by nonce, QPs that need driving, CQs that need manual progress

namespace registry {
void add_live(OfiQp* qp);
void remove_live(OfiQp* qp);
// Whether a QP with `nonce` lives in this process and has called connect().
bool peer_connecting(std::uint64_t nonce);
// Tells the QP of this process whose nonce is `nonce` that its peer is going away.
void tell_peer_gone(std::uint64_t nonce);
// Tells the QP of this process whose nonce is `nonce` that its peer disconnected (before it goes away).
void tell_peer_goodbye(std::uint64_t nonce);
// False while a QP with `nonce` lives in this process and its handshake is under way.
bool peer_settled(std::uint64_t nonce);

void want_attention(OfiQp* qp);
void drop_attention(OfiQp* qp);
// Drives every QP that needs it (connecting or backlogged). Cheap when none does.
void drive_all(bool try_only) noexcept;
// The number of QPs that asked for attention (ofi_plugin.cpp); read inline by every empty poll.
extern std::atomic<std::size_t> attention_size;
inline bool attention_pending() noexcept { return attention_size.load(std::memory_order_relaxed) != 0; }

// The connect()ed QP of this process whose nonce is `nonce`, or null. Its CQs, shared, for kicking.
std::array<std::shared_ptr<OfiCq>, 2> local_cqs(std::uint64_t nonce);
}  // namespace registry

// ---- The service thread (ofi_service.cpp): one per process, started on first need, blocked in the kernel
// while there is nothing to do. It watches liveness sockets (a hang-up tells the QP its peer is lost) and
// progresses the CQs in fd() mode whose provider is not woken by its peers (shm), backing off from 20 us to
// 1 ms between rounds while they stay idle.
namespace service {
// Watches the liveness connection `fd` of `qp`; on hang-up or error calls qp->liveness_lost() once.
// Returns an id for unwatch(). Throws weft::Error when the thread or its epoll set cannot be made.
std::uint64_t watch(int fd, OfiQp* qp);
// Stops watching; when it returns, no call for `id` runs or will run.
void unwatch(std::uint64_t id) noexcept;
// CQs the service thread runs OfiCq::service_round() on.
void add_round(OfiCq* cq);
void remove_round(OfiCq* cq) noexcept;
// Wakes `cq` (OfiCq::wake) at `when`, if it still exists then. Called from watch callbacks too.
void wake_at(const std::shared_ptr<OfiCq>& cq, std::chrono::steady_clock::time_point when) noexcept;
// A CQ entered fd() mode (counted until it is destroyed). While any CQ of the process is in fd() mode, the
// application may sleep on descriptors alone, so nothing else would drive the QPs that asked for attention
// (a handshake under way, requests held back): the thread drives them in rounds (registry::drive_all) as
// long as any is left, backing off like the other rounds.
void fd_mode_entered();
void fd_mode_left() noexcept;
// A CQ of a progress=thread domain (counted until it is destroyed): the thread drives the QPs that asked for
// attention as for fd() mode, never dozes longer than a round's longest pause, and also wakes when the
// provider's descriptor `wait_fd` (-1: none) reports new data (edge-triggered). stop_thread_progress undoes it.
void start_thread_progress(OfiCq* cq, int wait_fd);
void stop_thread_progress(OfiCq* cq, int wait_fd) noexcept;
// A QP asked for attention: wakes the thread for an attention round when a CQ is in fd() mode.
void attention_wanted() noexcept;
// Set while the thread sleeps because no round could find anything (OfiCq::round_needed). A post makes a
// request outstanding and calls nudge(), which wakes the thread then: one load while it is not dozing.
extern std::atomic<bool> dozing;
void wake_dozing() noexcept;
inline void nudge() noexcept {
    if (dozing.load(std::memory_order_relaxed)) wake_dozing();
}
}  // namespace service

// The status of a failed provider operation.
WcStatus map_error(const Profile& p, int err, int prov_errno) noexcept;

}  // namespace weft::ofi
