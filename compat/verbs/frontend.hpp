// The libibverbs front end's objects: each verbs object is the rdma-core struct a program sees, extended
// with the weft handle behind it. A program's pointer (ibv_pd*, ibv_mr*, ...) is cast back to ours with
// static_cast, since ours derives from it; CQs and QPs derive from the extended structs (ibv_cq_ex,
// ibv_qp_ex), which begin with the plain ones, and cq_of/qp_of convert. Nothing but this library creates
// them.
#pragma once

#include <infiniband/verbs.h>

#include <weft/domain.hpp>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace weft::compat {

struct Srq;
struct Cq;

// The slots of the port's GID table; only GID 0 is populated (device.cpp), the others are empty, as on a
// real port.
constexpr int gid_table_len = 16;

// The rkeys ibv_rereg_mr kept while the weft region behind them changed (a new registration has new keys,
// but the program's peers go on using the rkey they were given, as on a device that keeps an MR's keys
// across a re-registration), and the verbs rkeys given to regions whose weft rkey has more than 32 bits. Each maps the verbs rkey to the weft rkey of the region now behind it;
// check_peer_access re-aims a request at that region. One per context, shared with the QPs connected to
// the context's QPs. A verbs rkey is unique in its context: a new region whose weft rkey is kept here is
// registered again (objects.cpp).
//
// A QP connected to a QP of another process (rendezvous.cpp) has one of its own for the peer process
// (`remote_lid` set): it is filled as the peer's keys are first used, from what the peer published.
struct RkeyAliases {
    std::atomic<std::size_t> size{0};  // read without the lock: most contexts never have one
    mutable std::mutex mu;
    mutable std::unordered_map<std::uint32_t, std::uint64_t> weft_rkey;
    std::uint16_t remote_lid = 0;  // the peer process's LID, for the aliases of another process

    // The weft rkey behind verbs rkey `rkey`: `rkey` itself unless ibv_rereg_mr kept it or it is an alias.
    std::uint64_t resolve(std::uint64_t rkey) const noexcept {
        if (remote_lid) return resolve_remote(rkey);
        if (size.load(std::memory_order_acquire) == 0 || rkey > UINT32_MAX) return rkey;
        std::lock_guard lock(mu);
        auto it = weft_rkey.find(static_cast<std::uint32_t>(rkey));
        return it == weft_rkey.end() ? rkey : it->second;
    }
    std::uint64_t resolve_remote(std::uint64_t rkey) const noexcept;  // rendezvous.cpp
    bool kept(std::uint64_t rkey) const {
        std::lock_guard lock(mu);
        return rkey <= UINT32_MAX && weft_rkey.count(static_cast<std::uint32_t>(rkey)) != 0;
    }
};

// Several processes (rendezvous.cpp, docs/verbs-frontend.md): on ofi, each process claims a LID of its own
// and publishes its QPs' addresses and its rkey aliases in a per-host directory. Off on the simulator (and
// when the directory is not usable): the LID is 1 and QPs connect within the process.
//
// The node GUID: "weft" in the upper bytes, the port's LID in the lowest two, so that a GID (fe80:: + GUID)
// names the process as the LID does.
constexpr std::uint64_t node_guid_base = 0x7765667400000000ull;
bool host_wide() noexcept;
std::uint16_t port_lid() noexcept;
std::uint64_t node_guid() noexcept;
// The LID in a GID's interface ID (a node GUID of the front end's), or nullopt for a GUID not of this form.
std::optional<std::uint16_t> lid_of_guid(std::uint64_t guid) noexcept;
// Publishes QP `qp_num`'s weft address (a failure is logged: only other processes lose it); withdraws it.
void publish_qp(std::uint32_t qp_num, std::span<const std::byte> address) noexcept;
void withdraw_qp(std::uint32_t qp_num) noexcept;
// Publishes the weft rkey behind verbs rkey `rkey` (a failure is logged: only other processes lose it).
void publish_rkey(std::uint32_t rkey, std::uint64_t weft_rkey) noexcept;
void withdraw_rkey(std::uint32_t rkey) noexcept;
// The weft address of QP `qp_num` of the process with LID `lid`. Throws weft::Error saying why there is none.
std::vector<std::byte> peer_address(std::uint16_t lid, std::uint32_t qp_num);

// An opened device: rdma-core's extended context (abi_compat = __VERBS_ABI_IS_EXTENDED, so verbs.h's
// inline functions find query_port) over one weft Domain.
struct Context : verbs_context {
    Domain domain;
    // The domain's descriptor (Domain::event_fd, owned by the domain) in the epoll set that is async_fd;
    // -1 when the backend reports no asynchronous events.
    int event_fd = -1;
    // The context's SRQs by weft's srq_num, which asynchronous events name.
    std::mutex srq_mu;
    std::unordered_map<std::uint32_t, Srq*> srqs;
    // The context's CQs by weft's cq_num, which a CQ error event names.
    std::mutex cq_mu;
    std::unordered_map<std::uint32_t, Cq*> cqs;
    // A region without remote rights. A write, read or atomic that the peer QP's access flags forbid is
    // aimed at the peer context's one, so that it completes with IBV_WC_REM_ACCESS_ERR and the QP goes to
    // error, as when a responder refuses it: weft QPs have no access flags of their own.
    std::array<std::byte, 8> refused_bytes{};
    MemoryRegion refusing;
    std::shared_ptr<RkeyAliases> aliases = std::make_shared<RkeyAliases>();
};

// `users` counts the regions and QPs made with it: a PD or CQ in use is not destroyed (EBUSY, as in
// rdma-core, where the kernel refuses).
struct Pd : ibv_pd {
    std::atomic<int> users{0};
};

// An address handle: the address vector it was created with. Only UD QPs take one, and there are none, so
// nothing reads it yet.
struct Ah : ibv_ah {
    ibv_ah_attr attr{};
};

// A shared receive queue. `limit` is the armed limit ibv_query_srq reports: set by ibv_modify_srq,
// cleared when ibv_get_async_event returns the limit event. `events_reported` counts the events
// ibv_get_async_event returned for it (under srq->mutex); ibv_destroy_srq waits until as many are acked.
struct Srq : ibv_srq {
    SharedReceiveQueue queue;
    std::atomic<int> users{0};
    std::atomic<std::uint32_t> limit{0};
    std::uint32_t events_reported = 0;
};

// `rkey` is the region's weft rkey until ibv_rereg_mr replaces the region; from then on the context's
// RkeyAliases map it to the current region's.
struct Mr : ibv_mr {
    MemoryRegion region;
};


// A completion channel: `fd` is an epoll descriptor holding the weft descriptor (CompletionQueue::fd) of
// each armed CQ of the channel, so that it is readable when ibv_get_cq_event may find an event.
struct Channel : ibv_comp_channel {
    std::mutex mu;
    std::vector<Cq*> cqs;  // the CQs created with this channel
};

// A CQ is rdma-core's extended CQ for every CQ, as in rdma-core's verbs_cq: ibv_cq is its prefix, so an
// ibv_cq* converts back (cq_of). The _ex function pointers are set for CQs from ibv_create_cq_ex.
struct Cq : ibv_cq_ex {
    CompletionQueue queue;
    std::atomic<int> users{0};
    // Completion events (CQs of a channel only): armed by ibv_req_notify_cq, disarmed by the event. The
    // completions ibv_get_cq_event polled to find one wait in `pending` and are polled before the queue's.
    Channel* events = nullptr;
    int event_fd = -1;            // the queue's fd(), in events->fd while armed
    bool armed = false;           // under events->mu
    std::mutex pending_mu;
    std::deque<Completion> pending;
    // Extended polling: the completion between start_poll and end_poll, and the lock held meanwhile.
    Completion current{};
    std::mutex poll_mu;
    std::atomic<bool> polling{false};
    std::uint32_t events_reported = 0;  // asynchronous events returned for it (under `mutex`), as Srq's
};

inline Cq& cq_of(ibv_cq* cq) noexcept { return static_cast<Cq&>(*reinterpret_cast<ibv_cq_ex*>(cq)); }
inline Cq& cq_of(ibv_cq_ex* cq) noexcept { return static_cast<Cq&>(*cq); }
inline ibv_cq* base_of(Cq& cq) noexcept { return ibv_cq_ex_to_cq(&cq); }

// The requests of an extended QP between ibv_wr_start and ibv_wr_complete (qp_ex.cpp). The storage is
// reserved when the QP is created, for max_send requests, so that building them never allocates.
struct WrBatch {
    std::mutex mu;  // held from ibv_wr_start to ibv_wr_complete / ibv_wr_abort, as providers lock the SQ
    std::vector<SendRequest> requests;
    std::vector<LocalSegment> gather;  // segments of requests with more than one
    std::vector<std::byte> inline_bytes;  // inline payloads, copied when set
    std::size_t inline_used = 0;
    SendRequest* current = nullptr;  // the request the setters fill: the last one, or `scratch`
    SendRequest scratch;             // takes the requests that do not fit or are refused
    int error = 0;  // the first builder error; ibv_wr_complete returns it and posts nothing
};

// An RC queue pair, rdma-core's extended QP for every QP (ibv_qp is its prefix, so an ibv_qp* converts
// back with qp_of). The weft QP is created with it (so receives can be posted from INIT on) and connected
// at RTR; `attr` keeps what ibv_modify_qp was given, for ibv_query_qp. QPs created with send_ops_flags
// have the work-request builders (ibv_qp_to_qp_ex returns them). A QP on an SRQ takes its receives there
// (`srq`); `events_reported` counts the asynchronous events returned for it, as Srq's.
struct Qp : ibv_qp_ex {
    QueuePair queue;
    Srq* srq = nullptr;
    std::uint32_t events_reported = 0;
    ibv_qp_attr attr{};
    ibv_qp_cap cap{};
    bool sq_sig_all = false;
    bool extended = false;
    WrBatch batch;
    // This QP's qp_access_flags, shared with the QP connected to it, which checks its remote requests
    // against them (check_peer_access); the peer's, and where the peer refuses requests.
    std::shared_ptr<std::atomic<unsigned>> access = std::make_shared<std::atomic<unsigned>>(0u);
    std::shared_ptr<const std::atomic<unsigned>> peer_access;
    RemoteRegion peer_refusing;
    std::shared_ptr<const RkeyAliases> peer_aliases;  // the peer context's
};

inline Qp& qp_of(ibv_qp* qp) noexcept { return static_cast<Qp&>(*reinterpret_cast<ibv_qp_ex*>(qp)); }
inline Qp& qp_of(ibv_qp_ex* qp) noexcept { return static_cast<Qp&>(*qp); }

// Aims a write, read or atomic at the region its rkey names now (RkeyAliases), or at the peer's refusing
// region when the peer QP's access flags forbid it.
inline void check_peer_access(const Qp& qp, SendRequest& r) noexcept {
    unsigned need = 0;
    switch (r.opcode) {
        case Opcode::write:
        case Opcode::write_with_imm: need = IBV_ACCESS_REMOTE_WRITE; break;
        case Opcode::read: need = IBV_ACCESS_REMOTE_READ; break;
        case Opcode::compare_swap:
        case Opcode::fetch_add: need = IBV_ACCESS_REMOTE_ATOMIC; break;
        default: return;
    }
    if (qp.peer_aliases) r.rkey = qp.peer_aliases->resolve(r.rkey);
    if (qp.peer_access && !(qp.peer_access->load(std::memory_order_relaxed) & need)) {
        r.remote_addr = qp.peer_refusing.addr();
        r.rkey = qp.peer_refusing.rkey();
    }
}

inline Context& context_of(ibv_context* c) noexcept { return static_cast<Context&>(*verbs_get_ctx(c)); }

// The operations verbs.h's inline functions call through ibv_context::ops (datapath.cpp).
void install_ops(ibv_context_ops& ops) noexcept;

// The verbs_context operations of the extended verbs: ibv_create_cq_ex, ibv_create_qp_ex (objects.cpp),
// ibv_create_srq_ex (srq.cpp), ibv_query_device_ex (device.cpp).
ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);
ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);
ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size);

// Sets the ibv_cq_ex polling functions of an extended CQ (cq_ex.cpp).
void install_cq_ex_ops(Cq& cq) noexcept;
// Sets the work-request builders of an extended QP and reserves their storage (qp_ex.cpp).
void install_qp_ex_ops(Qp& qp);
// The verbs opcode of a completion (datapath.cpp).
ibv_wc_opcode to_wc_opcode(Opcode op) noexcept;
// weft's flags for ibv_send_flags `f` (with sq_sig_all); EINVAL for flags weft has none for (datapath.cpp).
int to_send_flags(unsigned f, bool sig_all, SendFlags& out) noexcept;
// The errno value ibv_post_send / ibv_wr_complete return for a refused batch (datapath.cpp).
int errno_of(const PostStatus& st) noexcept;

// Asynchronous events (events.cpp): makes the context's async_fd, an epoll descriptor holding the
// domain's event descriptor; closes it.
int open_async_fd(Context& ctx) noexcept;
void close_async_fd(Context& ctx) noexcept;
// The QP of this context numbered `qp_num`, with one more event reported for it; null when there is none
// (objects.cpp).
ibv_qp* qp_for_event(Context& ctx, std::uint32_t qp_num) noexcept;
// Waits until the program has acknowledged every event returned for an object (events_completed reaches
// `reported`), as rdma-core's destroy verbs do.
inline void wait_for_acks(pthread_mutex_t& mu, pthread_cond_t& cond, const std::uint32_t& completed,
                          const std::uint32_t& reported) noexcept {
    pthread_mutex_lock(&mu);
    while (completed != reported) pthread_cond_wait(&cond, &mu);
    pthread_mutex_unlock(&mu);
}

// Fills a prefix of `out` with the CQ's completions: first those a completion event left pending, then
// the queue's (channel.cpp).
std::span<Completion> take(Cq& cq, std::span<Completion> out) noexcept;
// The CQ's part in its channel: joining it at creation (makes the weft descriptor), arming, leaving it.
void join_channel(Cq& cq, Channel& channel);
int arm(Cq& cq) noexcept;
void leave_channel(Cq& cq) noexcept;

// The errno value for the exception being handled (weft::Error, bad_alloc, ...); logs it under `call`.
// Call only inside a catch block.
int current_errno(const char* call) noexcept;

// Runs `f` (returning an errno value, 0 on success) and turns an exception into its errno value.
template <class F>
int guarded(const char* call, F&& f) noexcept {
    try {
        return f();
    } catch (...) {
        return current_errno(call);
    }
}

// Runs `f` (returning a pointer); on an exception sets errno and returns null.
template <class F>
auto guarded_ptr(const char* call, F&& f) noexcept -> decltype(f()) {
    try {
        return f();
    } catch (...) {
        errno = current_errno(call);
        return nullptr;
    }
}

// Sets errno to `err` and returns null: the failure of a verb that returns a pointer.
inline std::nullptr_t fail(int err) noexcept {
    errno = err;
    return nullptr;
}

}  // namespace weft::compat
