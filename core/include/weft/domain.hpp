// weft/domain.hpp — opening a backend and the objects it creates.
//
//   auto dom = weft::open();                                  // $WEFT_BACKEND, or "sim"
//   auto cq  = dom.create_cq({.depth = 256});
//   auto qp  = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 128, .max_recv = 128});
//   auto mr  = dom.register_memory(buffer, weft::Access::local_write | weft::Access::remote_write);
//   exchange(qp.address(), mr.remote().encode());             // any out-of-band channel
//   qp.connect(peer_address);
//   weft::Completion wc[16];
//   for (auto& c : cq.poll(wc)) handle(c);
//
// Handles are move-only; destroying one releases what it holds. A child keeps what it depends on alive:
// a QueuePair keeps its CQs and its Domain, a MemoryRegion keeps its Domain.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weft/completion.hpp>
#include <weft/config.hpp>
#include <weft/memory.hpp>
#include <weft/request.hpp>
#include <weft/status.hpp>
#include <weft/types.hpp>

namespace weft {

namespace detail {
class DomainImpl;
class CqImpl;
class QpImpl;
class SrqImpl;
}  // namespace detail

/// Optional features a backend may lack. The conformance suite skips, visibly, on missing ones.
enum class Feature : std::uint32_t {
    send_with_imm = 1u << 0,
    write_with_imm = 1u << 1,
    read = 1u << 2,
    atomics = 1u << 3,      ///< fetch_add and compare_swap
    fence = 1u << 4,
    inline_data = 1u << 5,
    solicited = 1u << 6,
    wait = 1u << 7,         ///< CompletionQueue::wait blocks until a completion
    cq_fd = 1u << 8,        ///< CompletionQueue::fd gives a pollable descriptor
    rnr = 1u << 9,          ///< receiver-not-ready retries with rnr_retry (RC transport)
    error_flush = 1u << 10, ///< a QP in error flushes outstanding and later requests
    remote_access_check = 1u << 11,  ///< bad rkey/bounds/rights produce remote_access errors
    zero_length = 1u << 12, ///< zero-length sends, writes and reads
    listener = 1u << 13,    ///< weft::listen / weft::connect by host:port (weft/listener.hpp)
    disconnect = 1u << 14,  ///< QueuePair::disconnect tells the peer, which is not left to time out
    async_events = 1u << 15,  ///< Domain::event_fd and Domain::next_event report asynchronous events
    srq = 1u << 16,         ///< shared receive queues (Domain::create_srq, QpOptions::srq)
};
constexpr Feature operator|(Feature a, Feature b) noexcept {
    return static_cast<Feature>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
std::string_view to_string(Feature f) noexcept;

/// What a domain can do; fixed when the domain is opened.
struct Capabilities {
    BackendKind kind = BackendKind::sim;  ///< which backend opened the domain
    std::string backend;            ///< "sim", "verbs", "ofi"
    std::string device;             ///< device, provider or fabric name
    /// Which stack's documented deviations from the specification apply ("spec", "rxe", ...); see
    /// docs/semantics.md. The simulator takes it from its `profile` key.
    std::string profile = "spec";
    std::uint32_t features = 0;     ///< Feature bits
    std::uint32_t max_qp_wr = 0;    ///< largest max_send / max_recv
    std::uint32_t max_sge = 0;      ///< largest gather/scatter list of one request
    std::uint32_t max_inline = 0;   ///< largest inline payload of a send request, in bytes
    std::uint32_t max_cqe = 0;      ///< largest CompletionQueue depth
    std::uint64_t max_msg_size = 0; ///< largest message of one request, in bytes
    std::uint64_t max_mr_size = 0;  ///< largest registered region, in bytes
    /// Largest private data weft::connect and Listener::accept carry each way, in bytes (0 without
    /// Feature::listener); see weft/listener.hpp.
    std::uint32_t max_private_data = 0;
    /// Largest SrqOptions::max_recv (0 without Feature::srq).
    std::uint32_t max_srq_wr = 0;
    /// Largest SrqOptions::max_sge (0 without Feature::srq).
    std::uint32_t max_srq_sge = 0;

    /// Whether the domain has optional feature `f`.
    bool has(Feature f) const noexcept { return (features & static_cast<std::uint32_t>(f)) != 0; }
    /// Whether request opcode `op` is supported at all.
    bool supports(Opcode op) const noexcept;
};

class CompletionQueue;

/// Refers to a CompletionQueue in QpOptions without copying it.
class CqRef {
public:
    CqRef() noexcept = default;
    /// Refers to `cq`, which must outlive the call that takes the options.
    CqRef(CompletionQueue& cq) noexcept : cq_(&cq) {}  // NOLINT(google-explicit-constructor): reads naturally
    /// The queue referred to; null when none was given.
    CompletionQueue* get() const noexcept { return cq_; }

private:
    CompletionQueue* cq_ = nullptr;
};

class SharedReceiveQueue;

/// Refers to a SharedReceiveQueue in QpOptions without copying it.
class SrqRef {
public:
    SrqRef() noexcept = default;
    /// Refers to `srq`, which must outlive the call that takes the options.
    SrqRef(SharedReceiveQueue& srq) noexcept : srq_(&srq) {}  // NOLINT(google-explicit-constructor): reads naturally
    /// The queue referred to; null when none was given.
    SharedReceiveQueue* get() const noexcept { return srq_; }

private:
    SharedReceiveQueue* srq_ = nullptr;
};

/// Options of Domain::create_cq.
struct CqOptions {
    /// The size of this struct as the program was compiled: set by its default, never by hand. The struct
    /// grows only by members added at its end, so libweft takes the options of a program built against an
    /// older weft (a smaller size) with the defaults of the members added since, and refuses a size it does
    /// not know (a program built against a newer weft) with an error that says so.
    std::uint32_t struct_size = sizeof(CqOptions);
    std::uint32_t depth = 256;  ///< completions the queue holds; the backend may round up
    /// Any number of threads may poll and wait on this CQ at once (weft serializes them with a lock). Off,
    /// one thread at a time may poll or wait — any thread, not necessarily the same one each time.
    bool thread_safe = false;
};

/// RC queue-pair options. Transport attributes carry their verbs meanings (IB spec encodings).
struct QpOptions {
    /// The size of this struct as the program was compiled: set by its default, never by hand. The struct
    /// grows only by members added at its end, so libweft takes the options of a program built against an
    /// older weft (a smaller size) with the defaults of the members added since, and refuses a size it does
    /// not know (a program built against a newer weft) with an error that says so.
    std::uint32_t struct_size = sizeof(QpOptions);
    CqRef send_cq;                      ///< where completions of send-queue requests go (required)
    CqRef recv_cq;                      ///< where completions of receives go (required; may be send_cq)
    std::uint32_t max_send = 128;       ///< send-queue requests outstanding at once
    std::uint32_t max_recv = 128;       ///< receives outstanding at once (ignored with srq)
    std::uint32_t max_sge = 1;          ///< per request, send and receive (receives: the SRQ's, with srq)
    std::uint32_t max_inline = 0;       ///< bytes of inline payload per send request
    std::uint8_t timeout = 14;          ///< local ACK timeout: 4.096 us * 2^timeout (0 = infinite)
    std::uint8_t retry_cnt = 7;         ///< transport retries before transport_retry_exceeded (0..7)
    std::uint8_t rnr_retry = 7;         ///< RNR retries before rnr_retry_exceeded (0..7; 7 = forever)
    std::uint8_t min_rnr_timer = 12;    ///< RNR NAK delay this QP asks of its peer (IB encoding 0..31)
    /// Any number of threads may post to each queue at once (weft serializes them: one lock per queue).
    /// Off, one thread at a time posts sends and one at a time posts receives (they may be two threads).
    bool thread_safe = false;
    /// Takes every receive from this shared receive queue of the same domain (Feature::srq) instead of a
    /// receive queue of its own: QueuePair::post_recv is then refused and QpCaps::max_recv is 0. The QP keeps
    /// the queue alive.
    SrqRef srq{};
};

/// Options of Domain::create_srq.
struct SrqOptions {
    /// The size of this struct as the program was compiled: set by its default, never by hand. The struct
    /// grows only by members added at its end, so libweft takes the options of a program built against an
    /// older weft (a smaller size) with the defaults of the members added since, and refuses a size it does
    /// not know (a program built against a newer weft) with an error that says so.
    std::uint32_t struct_size = sizeof(SrqOptions);
    std::uint32_t max_recv = 1024;  ///< receives posted and not yet taken by a message, at once
    std::uint32_t max_sge = 1;      ///< segments per receive
    /// Arms the limit event at once, as SharedReceiveQueue::arm_limit would (0: not armed).
    std::uint32_t limit = 0;
    /// Any number of threads may post at once (weft serializes them with a lock). Off, one thread at a time
    /// posts — any thread, not necessarily the same one each time.
    bool thread_safe = false;
};

/// The limits a created QP really got (backends may grant more than asked).
struct QpCaps {
    std::uint32_t max_send = 0;    ///< send-queue requests outstanding at once
    std::uint32_t max_recv = 0;    ///< receives outstanding at once
    std::uint32_t max_sge = 0;     ///< segments per request
    std::uint32_t max_inline = 0;  ///< inline payload bytes per send request
};

/// Completions of the requests of the QPs that use it (Domain::create_cq). Move-only; QPs keep it alive.
///
/// Threads: one thread at a time may poll() or wait() — any thread, not always the same — unless the CQ
/// was created with CqOptions::thread_safe. fd() and depth() may be called from any thread. The same on
/// every backend; the simulator reports two threads inside poll/wait at once as a misuse.
class CompletionQueue {
public:
    /// An empty handle (false); assign one from Domain::create_cq.
    CompletionQueue() noexcept;
    /// Wraps a backend's queue (for backends and tests; users call Domain::create_cq).
    explicit CompletionQueue(std::shared_ptr<detail::CqImpl> impl) noexcept;
    /// Takes the queue from `other`, which becomes empty.
    CompletionQueue(CompletionQueue&& other) noexcept;
    /// Releases this handle's queue and takes the one of `other`.
    CompletionQueue& operator=(CompletionQueue&& other) noexcept;
    ~CompletionQueue();

    /// Whether the handle holds a queue.
    explicit operator bool() const noexcept { return impl_ != nullptr; }

    /// Fills a prefix of `out` with completions and returns it; empty when there are none. Never blocks,
    /// throws or allocates. On the simulator, polling an empty queue advances virtual time.
    std::span<Completion> poll(std::span<Completion> out) noexcept;

    /// Blocks until a completion is ready (true) or `timeout` passes (false). Needs Feature::wait.
    bool wait(std::chrono::nanoseconds timeout);
    /// A descriptor that becomes readable when poll() may return completions (for epoll); -1 without
    /// Feature::cq_fd. After it fires, poll until empty, then wait on it again.
    int fd() const;

    /// Completions the queue holds (at least CqOptions::depth).
    std::uint32_t depth() const noexcept;
    /// The number that names this queue in AsyncEvent::cq_num (a cq_error event): never 0, and unique in
    /// the process (a number comes back only after 2^32 - 1 more queues).
    std::uint32_t cq_num() const noexcept;
    /// The backend's object (for backends and tests).
    detail::CqImpl* impl() const noexcept { return impl_.get(); }
    /// The backend's object, shared (for backends and tests).
    const std::shared_ptr<detail::CqImpl>& shared_impl() const noexcept { return impl_; }

private:
    std::shared_ptr<detail::CqImpl> impl_;
};

/// A shared receive queue (Domain::create_srq, Feature::srq): receives that any QP created with it in
/// QpOptions::srq takes, in the order they were posted, as its messages arrive — a server with many
/// clients posts its receives once, not once per client. Move-only; the QPs using it keep it alive, and
/// once no handle and no QP holds it, the receives still in it are dropped without completions (as
/// ibv_destroy_srq drops them).
///
/// Semantics (the IB specification's, docs/semantics.md):
/// - A receive's completion goes to the recv_cq of the QP whose message took it, with that QP's qp_num.
/// - A message that finds the queue empty is answered with an RNR NAK, as on a QP with no receive posted.
/// - A QP in error flushes only the receives it had taken; those in the queue stay there for the other QPs.
///   Where the stack reports it (not Soft-RoCE), EventType::qp_last_wqe_reached then says the QP takes none.
/// - arm_limit(n): once fewer than n receives remain in the queue after a message took one, the domain
///   reports EventType::srq_limit_reached (Domain::next_event) and the limit is disarmed.
///
/// Threads: one thread at a time may post_recv() unless SrqOptions::thread_safe; arm_limit() likewise.
class SharedReceiveQueue {
public:
    /// An empty handle (false); assign one from Domain::create_srq.
    SharedReceiveQueue() noexcept;
    /// Wraps a backend's queue (for backends and tests; users call Domain::create_srq).
    explicit SharedReceiveQueue(std::shared_ptr<detail::SrqImpl> impl) noexcept;
    /// Takes the queue from `other`, which becomes empty.
    SharedReceiveQueue(SharedReceiveQueue&& other) noexcept;
    /// Releases this handle's queue and takes the one of `other`.
    SharedReceiveQueue& operator=(SharedReceiveQueue&& other) noexcept;
    ~SharedReceiveQueue();

    /// Whether the handle holds a queue.
    explicit operator bool() const noexcept { return impl_ != nullptr; }

    /// Posts a batch of receives: all or none, no allocation, no exception. queue_full when more than
    /// max_recv() would wait in the queue.
    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept;
    /// Posts a braced batch of receives.
    PostStatus post_recv(std::initializer_list<RecvRequest> batch) noexcept {
        return post_recv(std::span<const RecvRequest>(batch.begin(), batch.size()));
    }
    /// Arms the limit event (see the class comment); 0 disarms it. Throws weft::Error when `limit` exceeds
    /// max_recv().
    void arm_limit(std::uint32_t limit);

    /// Receives the queue holds at once (at least SrqOptions::max_recv).
    std::uint32_t max_recv() const noexcept;
    /// Segments per receive (at least SrqOptions::max_sge).
    std::uint32_t max_sge() const noexcept;
    /// Names the queue in AsyncEvent::srq_num.
    std::uint32_t srq_num() const noexcept;
    /// The backend's object (for backends and tests).
    detail::SrqImpl* impl() const noexcept { return impl_.get(); }
    /// The backend's object, shared (for backends and tests).
    const std::shared_ptr<detail::SrqImpl>& shared_impl() const noexcept { return impl_; }

private:
    std::shared_ptr<detail::SrqImpl> impl_;
};

/// A reliable connection to one peer QP (Domain::create_qp). Move-only; destroying it destroys the QP.
///
/// Threads: one thread at a time may post_send() and one at a time post_recv(); the two may be different
/// threads, and neither needs to be the thread polling the CQs. QpOptions::thread_safe lets any number
/// post at once. address(), state() and qp_num() may be called from any thread. Destroy a QP only when
/// no other thread is inside a call on it or polling its CQs. The same on every backend; the simulator
/// reports two threads posting to one queue at once as a misuse.
class QueuePair {
public:
    /// An empty handle (false); assign one from Domain::create_qp.
    QueuePair() noexcept;
    /// Wraps a backend's QP (for backends and tests; users call Domain::create_qp).
    explicit QueuePair(std::unique_ptr<detail::QpImpl> impl) noexcept;
    /// Takes the QP from `other`, which becomes empty.
    QueuePair(QueuePair&& other) noexcept;
    /// Destroys this handle's QP and takes the one of `other`.
    QueuePair& operator=(QueuePair&& other) noexcept;
    ~QueuePair();

    /// Whether the handle holds a QP.
    explicit operator bool() const noexcept { return impl_ != nullptr; }

    /// Bytes to hand to the peer, which passes them to its connect().
    std::vector<std::byte> address() const;
    /// Connects to the peer QP whose address() is `peer` and makes this QP ready to send (RTS). Throws
    /// weft::Error on malformed bytes, a peer of another backend or fabric, or a QP already connected.
    void connect(std::span<const std::byte> peer);

    /// Posts a batch to the send queue: one call into the backend, no allocation, no exception.
    PostStatus post_send(std::span<const SendRequest> batch) noexcept;
    /// Posts a braced batch: `qp.post_send({weft::write(...), weft::read(...)})`.
    PostStatus post_send(std::initializer_list<SendRequest> batch) noexcept {
        return post_send(std::span<const SendRequest>(batch.begin(), batch.size()));
    }
    /// Posts a batch to the receive queue. Allowed before connect().
    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept;
    /// Posts a braced batch of receives.
    PostStatus post_recv(std::initializer_list<RecvRequest> batch) noexcept {
        return post_recv(std::span<const RecvRequest>(batch.begin(), batch.size()));
    }

    /// Closes the connection (Feature::disconnect), as rdma_disconnect does: this QP goes to error, so every
    /// request and receive still outstanding completes flushed, in order; the peer QP is told and goes to
    /// error too, its outstanding requests and receives completing flushed with no error before them, without
    /// waiting for a timeout (unless the network between them is down: then it learns as from any loss).
    /// Requests this QP had not seen acknowledged may or may not have taken effect at the peer; wait for
    /// their completions first for a clean close. Calling it again, or on a QP already in error, only tells
    /// the peer if it was not told yet. On verbs only a QP connected by weft::connect or Listener::accept
    /// has a connection to close (rdma_cm's), and destroying such a QP tells its peer too. Throws
    /// weft::Error: Errc::invalid_state on a QP never connected, Errc::not_supported without
    /// Feature::disconnect or (verbs) for a QP connected by address exchange.
    void disconnect();
    /// Moves the QP to error, as ibv_modify_qp(IBV_QPS_ERR) does: every request and receive still outstanding
    /// completes flushed, each queue in order, and so does every later one — the way to drain a QP before
    /// destroying it. The peer is not told: its requests to this QP end as with a lost peer
    /// (transport_retry_exceeded); disconnect() closes a connection instead. Allowed in any state, connected
    /// or not; on a QP already in error it changes nothing. (ofi's verbs provider cannot cancel a receive:
    /// there the connection is shut down, and the peer's outstanding work flushes too.)
    void to_error();

    /// The QP's state (verbs meanings): init when created, rts once connected, error after a failure.
    QpState state() const noexcept;
    /// The QP's number, as in Completion::qp_num.
    std::uint32_t qp_num() const noexcept;
    /// The limits the QP really got.
    const QpCaps& caps() const noexcept;
    /// The backend's object (for backends and tests).
    detail::QpImpl* impl() const noexcept { return impl_.get(); }

private:
    std::unique_ptr<detail::QpImpl> impl_;
};

/// An opened backend (weft::open): registers memory, creates completion queues and queue pairs.
/// Move-only; the objects it creates keep it alive.
class Domain {
public:
    /// An empty handle (false); assign one from weft::open.
    Domain() noexcept;
    /// Wraps a backend's domain (for backends and tests; users call weft::open).
    explicit Domain(std::shared_ptr<detail::DomainImpl> impl) noexcept;
    /// Takes the domain from `other`, which becomes empty.
    Domain(Domain&& other) noexcept;
    /// Releases this handle's domain and takes the one of `other`.
    Domain& operator=(Domain&& other) noexcept;
    ~Domain();

    /// Whether the handle holds a domain.
    explicit operator bool() const noexcept { return impl_ != nullptr; }

    /// Registers `memory` with `access`. Throws weft::Error when the backend refuses (size, rights,
    /// resources). The bytes must outlive the region.
    MemoryRegion register_memory(std::span<std::byte> memory, Access access);
    /// Registers the `length` bytes at `addr` with `access`, like the span overload.
    MemoryRegion register_memory(void* addr, std::size_t length, Access access);

    /// Creates a completion queue. Throws weft::Error when the depth is 0 or exceeds Capabilities::max_cqe.
    CompletionQueue create_cq(const CqOptions& options = {});
    /// Throws weft::Error when a CQ is missing or a limit exceeds the capabilities (naming the limit).
    QueuePair create_qp(const QpOptions& options);
    /// Creates a shared receive queue (Feature::srq). Throws weft::Error without the feature, or when a
    /// limit is 0 or exceeds Capabilities::max_srq_wr / max_srq_sge, or `limit` exceeds max_recv.
    SharedReceiveQueue create_srq(const SrqOptions& options = {});

    /// What the domain can do.
    const Capabilities& capabilities() const noexcept;
    /// The configuration this domain was opened with.
    const Config& config() const noexcept;

    /// Asynchronous events (Feature::async_events): what happens to the domain's objects outside any call
    /// on them, as ibv_get_async_event reports it. A descriptor for poll(2)/epoll, readable while
    /// next_event() may have something; it belongs to the domain (do not close it). Throws weft::Error
    /// (Errc::not_supported) without the feature.
    int event_fd() const;
    /// The next asynchronous event, or nothing when none is pending; never blocks. Events of one domain come
    /// in the order they happened. On the simulator, calling it also moves simulated time on, as a poll does.
    /// Throws weft::Error (Errc::not_supported) without Feature::async_events.
    std::optional<AsyncEvent> next_event();
    /// The backend's object (for backends and tests).
    detail::DomainImpl* impl() const noexcept { return impl_.get(); }
    /// The backend's object, shared (for backends and tests).
    const std::shared_ptr<detail::DomainImpl>& shared_impl() const noexcept { return impl_; }

private:
    std::shared_ptr<detail::DomainImpl> impl_;
};

/// Opens the backend named by `config` (see weft/config.hpp). Throws weft::Error for an unknown backend
/// or key, a bad value, or a backend unusable here (saying why).
Domain open(std::string_view config);
/// Opens $WEFT_BACKEND, or "sim" when it is unset or empty.
Domain open();
/// The configuration open() would use: $WEFT_BACKEND, or "sim".
std::string default_config();

/// A backend known to this build, and whether it can run here.
struct BackendInfo {
    std::string name;             ///< "sim", "verbs", "ofi": the first word of a config string
    std::string summary;          ///< one line saying what it is
    bool usable = false;          ///< whether weft::open can open it here
    std::string reason;           ///< why not, when unusable
    std::string module;           ///< the plugin file it comes from; empty for built-ins
    std::vector<KeySpec> keys;    ///< accepted configuration keys (empty when the plugin did not load)
};
std::vector<BackendInfo> backends();

// ---- The objects behind the handles that carry the data path (the rest of the backend interface is in
// weft/backend.hpp, which says the contract). They are declared here so that poll, post_send and post_recv
// are inline: a program's poll or post is one indirect call into its backend, with no call into libweft
// before it.
namespace detail {

class CqImpl {
public:
    virtual ~CqImpl() = default;
    /// Fills up to out.size() completions; returns how many. `out` is never empty.
    virtual std::size_t poll(std::span<Completion> out) noexcept = 0;
    virtual bool wait(std::chrono::nanoseconds timeout) = 0;
    virtual int fd() = 0;
    virtual std::uint32_t depth() const noexcept = 0;

    /// Names the queue in AsyncEvent::cq_num; set by the core when the queue is created, before the backend
    /// can report an event of it.
    std::uint32_t cq_num = 0;
};

/// A shared receive queue (Feature::srq). The core fills srq_num, max_recv and max_sge from what the
/// backend granted, and `domain`.
class SrqImpl {
public:
    virtual ~SrqImpl() = default;
    /// Posts all of the batch or none of it (the core's checks have not run: call validate_recv_batch).
    virtual PostStatus post_recv(std::span<const RecvRequest> batch) noexcept = 0;
    /// Arms the limit event (0 disarms); the core has checked limit <= max_recv.
    virtual void arm_limit(std::uint32_t limit) = 0;

    std::uint32_t srq_num = 0;
    std::uint32_t max_recv = 0;
    std::uint32_t max_sge = 0;
    /// The domain that created it; set by the core.
    std::shared_ptr<DomainImpl> domain;
};

class QpImpl {
public:
    virtual ~QpImpl() = default;
    virtual PostStatus post_send(std::span<const SendRequest> batch) noexcept = 0;
    virtual PostStatus post_recv(std::span<const RecvRequest> batch) noexcept = 0;
    virtual std::vector<std::byte> address() const = 0;
    virtual void connect(std::span<const std::byte> peer) = 0;
    virtual QpState state() const noexcept = 0;
    /// Optional (Feature::disconnect); the core has checked that the QP was connected. The default throws
    /// Errc::not_supported.
    virtual void disconnect();
    /// Moves the QP to error without telling the peer (QueuePair::to_error).
    virtual void to_error() = 0;

    std::uint32_t qp_num = 0;
    QpCaps caps{};
    /// The domain that created this QP; set by the core (Domain::create_qp), so weft::connect(qp, ...) can
    /// reach the backend. Released after the derived destructor has destroyed the QP.
    std::shared_ptr<DomainImpl> domain;
};

}  // namespace detail

// Each a check for an empty handle and one virtual call.
inline std::span<Completion> CompletionQueue::poll(std::span<Completion> out) noexcept {
    if (!impl_ || out.empty()) [[unlikely]] return out.first(0);
    return out.first(impl_->poll(out));
}

inline PostStatus QueuePair::post_send(std::span<const SendRequest> batch) noexcept {
    if (!impl_) [[unlikely]] return PostStatus::not_connected("the queue pair handle is empty");
    return impl_->post_send(batch);
}

inline PostStatus QueuePair::post_recv(std::span<const RecvRequest> batch) noexcept {
    if (!impl_) [[unlikely]] return PostStatus::not_connected("the queue pair handle is empty");
    return impl_->post_recv(batch);
}

inline PostStatus SharedReceiveQueue::post_recv(std::span<const RecvRequest> batch) noexcept {
    if (!impl_) [[unlikely]] return PostStatus::not_connected("the shared receive queue handle is empty");
    return impl_->post_recv(batch);
}

}  // namespace weft
