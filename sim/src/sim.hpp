// The simulator's internal model: a fabric of nodes (domains) with memory-region tables, queue pairs and
// completion queues, advanced by a discrete-event loop in virtual nanoseconds.
//
// One mutex per fabric guards everything in it; every entry point (post, poll, wait, setup) takes it, so
// progress is single-threaded and deterministic: events are ordered by (time, sequence number) and nothing
// depends on addresses or wall-clock time.
//
// RC model: a requester transmits its send-queue entries in order; each becomes one message of
// ceil(length / mtu) packets serialized on the sending node's link. The responder checks a message when
// its first packet arrives (keys, bounds, a receive to consume) and places the packets as they arrive, in
// address order or, with torn placement, in a seeded permutation; after the last packet it completes the
// message and answers with an acknowledgement. Messages execute strictly in sequence (message sequence
// numbers stand in for PSNs); a read or atomic may be deferred past later unfenced messages. RNR NAKs rewind
// the requester (go-back-N); missing acknowledgements trigger retransmission after the local ACK timeout.
// Completions are produced in posting order.
#pragma once

#include <weft/backend.hpp>
#include <weft/sim/fabric.hpp>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace weft::sim::detail {

class SimCq;
class SimDomain;
class SimQp;

/// Legal behaviours the seed may choose (`reorder=` key); bit flags.
enum Reorder : std::uint32_t {
    reorder_none = 0,
    reorder_torn = 1u << 0,              ///< packets of a message are placed in a seeded permutation
    reorder_read_after_write = 1u << 1,  ///< a read/atomic may execute after later unfenced messages
    reorder_jitter = 1u << 2,            ///< acknowledgements and responses arrive with seeded extra delay
    reorder_all = reorder_torn | reorder_read_after_write | reorder_jitter,
};

/// Which stack's documented deviations the simulator reproduces (`profile=` key).
enum class Profile : std::uint8_t { spec, rxe };

/// Fabric-wide parameters from the configuration string.
struct Params {
    std::string name = "default";
    std::uint64_t seed = 1;
    std::uint64_t latency_ns = 1000;   ///< one-way wire latency
    double gbps = 100.0;               ///< link bandwidth
    std::uint32_t mtu = 4096;          ///< packet payload size
    std::uint32_t reorder = reorder_all;
    Profile profile = Profile::spec;
    bool strict = false;               ///< abort on the first misuse
    bool check_sources = true;         ///< digest send/write sources at post and at acknowledgement
    double drop = 0;                   ///< probability a packet (request or response) is lost
    double duplicate = 0;              ///< probability a packet arrives twice
    double delay = 0;                  ///< probability a packet is held up by up to delay_ns
    std::uint64_t delay_ns = 10000;
    std::string trace_path;            ///< write the trace here when the fabric closes (empty: no trace)
    friend bool operator==(const Params&, const Params&) = default;
};

enum class EventKind : std::uint8_t {
    deliver,    ///< a request message reaches the responder `qpn`; `peer` is the requester
    ack,        ///< an acknowledgement or NAK for message `msn` reaches the requester `qpn`
    rnr_retry,  ///< the RNR back-off of requester `qpn` is over
    timeout,    ///< the local ACK timer of requester `qpn`
    place,      ///< the next packet of the message responder `qpn` is receiving lands
    deferred,   ///< responder `qpn` executes the read or atomic it deferred
};

struct Event {
    std::uint64_t time = 0;
    std::uint64_t seq = 0;
    std::uint64_t msn = 0;
    std::uint64_t base = 0;        ///< deliver: when the message's transmission began, plus latency
    std::uint32_t qpn = 0;
    std::uint32_t peer = 0;
    std::uint32_t generation = 0;  ///< for timers: the arm count it belongs to
    std::uint32_t from_node = 0;   ///< deliver, ack: the node that sent the packet
    EventKind kind = EventKind::deliver;
    WcStatus status = WcStatus::success;
};

enum class TraceKind : std::uint8_t { transmit, place, ack, completion, lost, deferred };

/// One trace record: fixed size, stored in a vector reserved when tracing starts (no allocation after).
struct TraceRecord {
    std::uint64_t time = 0;
    std::uint64_t end = 0;     ///< transmit, ack: when the last packet arrives
    std::uint64_t msn = 0;
    std::uint64_t id = 0;      ///< completion: the request id; place: the byte offset
    std::uint32_t node = 0;
    std::uint32_t qpn = 0;
    std::uint32_t peer = 0;    ///< transmit, ack: the destination QP; place: the packet index
    std::uint32_t bytes = 0;
    TraceKind kind = TraceKind::transmit;
    Opcode opcode = Opcode::send;
    WcStatus status = WcStatus::success;
};

/// splitmix64: tiny, fast, and the same sequence on every platform (std distributions are not).
class Rng {
public:
    explicit Rng(std::uint64_t seed) noexcept : state_(seed) {}
    std::uint64_t next() noexcept {
        std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    /// Uniform in [0, bound).
    std::uint64_t below(std::uint64_t bound) noexcept { return bound ? next() % bound : 0; }
    /// True with probability `p` (0 never draws).
    bool chance(double p) noexcept {
        return p > 0 && static_cast<double>(next() >> 11) * 0x1.0p-53 < p;
    }

private:
    std::uint64_t state_;
};

class FabricState {
public:
    FabricState(Params params, std::uint64_t id);

    /// Queues an event; sequence numbers break time ties in scheduling order.
    void schedule(Event e);
    /// Processes the earliest event; false when there is none.
    bool step();
    bool idle() const noexcept { return events_.empty(); }
    std::uint64_t next_event_time() const noexcept;

    /// Runs events until `done()` holds, the fabric is idle, virtual time would pass `deadline`, or
    /// `budget` events ran. Returns the number of events run.
    template <class Done>
    std::size_t run(Done done, std::uint64_t deadline, std::size_t budget) {
        std::size_t n = 0;
        while (n < budget && !done() && !events_.empty() && next_event_time() <= deadline) {
            step();
            ++n;
        }
        return n;
    }

    std::uint32_t add_qp(SimQp* qp);
    void remove_qp(std::uint32_t qpn) noexcept;
    SimQp* find_qp(std::uint32_t qpn) const noexcept;
    std::uint32_t add_node() noexcept { return next_node_++; }
    template <class F>
    void for_each_qp(F f) const {
        for (SimQp* qp : qps_) {
            if (qp) f(*qp);
        }
    }

    /// Serialization time of `bytes` on a link.
    std::uint64_t wire_ns(std::uint64_t bytes) const noexcept {
        return static_cast<std::uint64_t>(static_cast<double>(bytes) * ns_per_byte_ + 0.5);
    }
    /// Packets a message of `bytes` takes (at least one).
    std::uint32_t packets(std::uint64_t bytes) const noexcept {
        return bytes <= params.mtu ? 1u : static_cast<std::uint32_t>((bytes + params.mtu - 1) / params.mtu);
    }
    bool reorders(Reorder r) const noexcept { return (params.reorder & r) != 0; }
    /// Extra delay of an acknowledgement or response (0 unless jitter is on).
    std::uint64_t ack_jitter() noexcept {
        return reorders(reorder_jitter) ? rng.below(params.latency_ns / 2 + 1) : 0;
    }

    /// Sends a packet (a deliver or ack event) from node `from` through the fault model: it may be lost,
    /// held up or duplicated (config keys drop/delay/duplicate, Fabric::set_faults).
    void send_packet(Event e, std::uint32_t from) noexcept;
    /// Whether the link between two nodes carries packets at time `t` (cuts, crashes).
    bool link_up(std::uint32_t a, std::uint32_t b, std::uint64_t t) const noexcept;

    struct Cut {
        std::uint32_t a, b;
        std::uint64_t until;  ///< UINT64_MAX: for good
    };
    struct Rates {
        double drop = 0, duplicate = 0, delay = 0;
        std::uint64_t delay_ns = 0;
        bool any() const noexcept { return drop > 0 || duplicate > 0 || delay > 0; }
    } rates;
    std::vector<Cut> cuts;
    std::vector<std::uint8_t> crashed;         ///< node -> crashed
    std::vector<std::uint64_t> stalled_until;  ///< node -> deliveries to it wait until then
    unsigned fail_registrations = 0;
    unsigned fail_qp_creations = 0;
    Fabric::Stats stats{};

    bool tracing = false;
    std::vector<TraceRecord> trace;
    std::size_t trace_capacity = 0;
    std::uint64_t trace_overflow = 0;  ///< records not kept because the trace was full
    void record(const TraceRecord& r) noexcept {
        if (trace.size() < trace_capacity) trace.push_back(r);  // capacity reserved: never allocates
        else ++trace_overflow;
    }
    void start_trace(std::size_t capacity);
    std::string trace_json() const;
    std::string trace_text() const;
    ~FabricState();

    /// Records a misuse of the API: logged, printed to stderr, and fatal in strict mode. Fabric lock held.
    void report_misuse(std::string what);
    /// Moves the QPs of CQs that overran to error (deferred out of the push that overran). Fabric lock held.
    void handle_overruns() noexcept;
    std::vector<SimCq*> overrun_cqs;
    std::vector<std::string> misuse_log;

    /// Wakes threads blocked in CompletionQueue::wait on an idle fabric (only when there are any).
    void notify_post() {
        if (waiters_ > 0) cv_.notify_all();
    }

    /// Brings every CQ's eventfd up to date after work was added or done (cheap when no fd is in use).
    void sync_fds() noexcept;

    std::mutex mu;
    std::condition_variable cv_;
    std::vector<SimCq*> fd_cqs;  ///< CQs whose fd() was asked for
    int waiters_ = 0;
    const Params params;
    const std::uint64_t id;  ///< identifies this fabric instance inside QP addresses
    std::uint64_t now = 0;
    std::uint64_t events_run = 0;
    Rng rng;

private:
    std::vector<Event> events_;  // binary min-heap on (time, seq)
    std::uint64_t seq_ = 0;
    std::vector<SimQp*> qps_;            // slot -> QP
    std::vector<std::uint32_t> qp_gen_;  // slot -> generation, so a reused slot gets a new qpn
    std::vector<std::uint32_t> free_slots_;
    std::uint32_t next_node_ = 0;
    double ns_per_byte_;
};

/// Finds or creates the fabric called params.name. A fabric lives while a domain uses it. Throws when an
/// existing fabric of that name was opened with other parameters.
std::shared_ptr<FabricState> attach_fabric(const Params& params);

class SimMr final : public weft::detail::MrImpl {
public:
    SimMr(std::shared_ptr<SimDomain> domain, std::uint32_t slot);
    ~SimMr() override;

private:
    std::shared_ptr<SimDomain> domain_;
    std::uint32_t slot_;
};

class SimDomain final : public weft::detail::DomainImpl {
public:
    SimDomain(std::shared_ptr<FabricState> fabric, const Params& params);
    ~SimDomain() override;

    std::unique_ptr<weft::detail::MrImpl> register_memory(void* addr, std::size_t length, Access access) override;
    std::shared_ptr<weft::detail::CqImpl> create_cq(const CqOptions& options) override;
    std::unique_ptr<weft::detail::QpImpl> create_qp(const weft::detail::QpSetup& setup) override;
    // named rendezvous (sim_rendezvous.cpp)
    std::unique_ptr<weft::detail::ListenerImpl> listen(const weft::detail::HostPort& where) override;
    void connect_to(weft::detail::QpImpl& qp, const weft::detail::HostPort& where,
                    std::chrono::milliseconds timeout) override;

    /// The region a key names, or null (unknown, stale or deregistered key). Needs the fabric lock.
    const SimMr* find_mr(std::uint64_t key) const noexcept;
    void remove_mr(std::uint32_t slot) noexcept;

    std::uint64_t link_free = 0;  ///< when this node's outbound link is next idle (fabric lock)
    Profile profile() const noexcept { return fabric_->params.profile; }

    const std::shared_ptr<FabricState>& fabric() const noexcept { return fabric_; }
    std::uint32_t node() const noexcept { return node_; }

private:
    std::shared_ptr<FabricState> fabric_;
    std::uint32_t node_;
    std::vector<const SimMr*> mrs_;        // slot -> region
    std::vector<std::uint8_t> mr_gen_;     // slot -> generation
    std::vector<std::uint32_t> free_mr_slots_;
};

/// One entry of a completion queue, with what is needed to release the queue slot when it is polled.
struct CqEntry {
    Completion wc;
    std::uint64_t wqe = 0;  ///< index of the work request on its queue
    bool send_queue = false;
};

class SimCq final : public weft::detail::CqImpl {
public:
    SimCq(std::shared_ptr<SimDomain> domain, std::uint32_t depth);
    ~SimCq() override;

    std::size_t poll(std::span<Completion> out) noexcept override;
    bool wait(std::chrono::nanoseconds timeout) override;
    int fd() override;
    std::uint32_t depth() const noexcept override { return static_cast<std::uint32_t>(ring_.size()); }

    /// Adds a completion (fabric lock held). On overrun the entry is lost and the queue is marked.
    void push(const CqEntry& e) noexcept;
    bool empty() const noexcept { return count_ == 0; }
    bool overrun() const noexcept { return overrun_; }
    const SimDomain& domain() const noexcept { return *domain_; }
    /// The queue overran: it is in error and takes no more entries.
    bool in_error() const noexcept { return overrun_; }
    /// Keeps the eventfd readable exactly when poll() may return something (fabric lock held).
    void sync_fd() noexcept;

private:
    std::shared_ptr<SimDomain> domain_;
    std::vector<CqEntry> ring_;
    std::size_t head_ = 0;
    std::size_t count_ = 0;
    bool overrun_ = false;
    int event_fd_ = -1;
    bool fd_armed_ = false;
};

/// A send-queue entry: the request as posted, with its own copy of the gather list.
struct SqEntry {
    std::uint64_t id = 0;
    std::uint64_t remote_addr = 0;
    std::uint64_t rkey = 0;
    std::uint64_t compare_add = 0;
    std::uint64_t swap = 0;
    std::uint64_t length = 0;
    std::uint32_t num_sge = 0;
    std::uint32_t imm = 0;
    Opcode opcode = Opcode::send;
    SendFlags flags = SendFlags::none;
    std::uint64_t digest = 0;         ///< of the source bytes at post time (check_sources)
    bool done = false;                ///< its final status is known
    WcStatus status = WcStatus::success;
};

struct RqEntry {
    std::uint64_t id = 0;
    std::uint64_t length = 0;
    std::uint32_t num_sge = 0;
};

class SimQp final : public weft::detail::QpImpl {
public:
    SimQp(std::shared_ptr<SimDomain> domain, const weft::detail::QpSetup& setup);
    ~SimQp() override;

    // setup (sim_qp.cpp)
    std::vector<std::byte> address() const override;
    void connect(std::span<const std::byte> peer) override;
    QpState state() const noexcept override;

    // data path (sim_datapath.cpp)
    PostStatus post_send(std::span<const SendRequest> batch) noexcept override;
    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept override;

    // event handlers, fabric lock held (sim_datapath.cpp)
    void on_deliver(const Event& e) noexcept;
    void on_ack(const Event& e) noexcept;
    void on_rnr_retry(const Event& e) noexcept;
    void on_timeout(const Event& e) noexcept;
    void on_place(const Event& e) noexcept;
    /// A timer or follow-up event that was cancelled; it is dropped without advancing the clock.
    bool drop_if_stale(const Event& e) noexcept;
    void on_deferred(const Event& e) noexcept;
    /// Moves the QP to error because its CQ overran.
    void on_cq_error() noexcept { enter_error(); }
    bool uses_cq(const SimCq* cq) const noexcept { return send_cq_.get() == cq || recv_cq_.get() == cq; }
    /// Describes, for a misuse report, the posted requests of this QP that still use region `lkey`; empty
    /// when none does.
    std::string references(std::uint32_t lkey) const;
    const SimDomain& domain() const noexcept { return *domain_; }
    /// A polled completion frees its queue slot and every earlier one of that queue.
    void release(bool send_queue, std::uint64_t wqe) noexcept;

private:
    friend class SimCq;

    std::span<const LocalSegment> sq_sges(std::uint64_t i) const noexcept {
        return {&sq_sge_[(i % sq_.size()) * max_sge_], sq_[i % sq_.size()].num_sge};
    }
    std::span<const LocalSegment> rq_sges(std::uint64_t i) const noexcept {
        return {&rq_sge_[(i % rq_.size()) * max_sge_], rq_[i % rq_.size()].num_sge};
    }
    SqEntry& sq_at(std::uint64_t i) noexcept { return sq_[i % sq_.size()]; }
    const SqEntry& sq_at(std::uint64_t i) const noexcept { return sq_[i % sq_.size()]; }
    RqEntry& rq_at(std::uint64_t i) noexcept { return rq_[i % rq_.size()]; }
    const RqEntry& rq_at(std::uint64_t i) const noexcept { return rq_[i % rq_.size()]; }

    void transmit_pending() noexcept;
    /// 0 when the local segments of send-queue entry `i` are usable, else why not.
    int check_local(std::uint64_t i) noexcept;
    void arm_timer() noexcept;
    void complete_in_order() noexcept;
    void enter_error() noexcept;
    void flush_send_from(std::uint64_t first) noexcept;
    void flush_recv() noexcept;
    void emit_send(std::uint64_t i, WcStatus status) noexcept;
    void report_source_changed(std::uint64_t i);
    /// Compares the source of send-queue entry `i` with its digest at post (check_sources).
    void check_source(std::uint64_t i) noexcept;
    void emit_recv(std::uint64_t i, WcStatus status, Opcode op, std::uint32_t byte_len, bool has_imm,
                   std::uint32_t imm) noexcept;
    void send_ack(std::uint32_t requester, std::uint64_t msn, WcStatus status, std::uint64_t response_bytes) noexcept;
    /// Responder side, first packet of send/write message `msn` of requester `q`: checks it and consumes a
    /// receive; returns the status to answer with (success: its packets may be placed).
    WcStatus begin_message(SimQp& q, std::uint64_t msn) noexcept;
    /// Places packet `k` (in arrival order) of the inbound message; false when it failed (already handled).
    bool place_packet(std::uint32_t k) noexcept;
    // True while this QP, as requester, still holds message `msn` outstanding: not completed, not flushed.
    // A responder reads a requester's send-queue entry only then. A request flushed by the requester's
    // error never takes effect, and its slot, which the program may reuse at once, is never read.
    bool holds(std::uint64_t msn) const noexcept {
        return state_ != QpState::error && msn >= sq_completed_ && msn < sq_posted_;
    }
    /// Places whatever of the inbound message is left and completes it.
    void finish_inbound() noexcept;
    void trace_place(std::uint32_t packet, std::uint64_t offset, std::uint64_t n) noexcept;
    void schedule_place() noexcept;
    /// Responder side: checks read/atomic `msn` of `q`; success when it may execute.
    WcStatus check_response(SimQp& q, std::uint64_t msn) noexcept;
    /// Executes a checked read/atomic and answers it.
    void execute_response(SimQp& q, std::uint64_t msn) noexcept;
    void run_deferred() noexcept;
    const SimMr* check_remote(std::uint64_t rkey, std::uint64_t addr, std::uint64_t length, Access right) const noexcept;
    WcStatus local_key_error(int why) const noexcept;

    std::shared_ptr<SimDomain> domain_;
    FabricState& fabric_;
    std::shared_ptr<SimCq> send_cq_;
    std::shared_ptr<SimCq> recv_cq_;
    QpOptions options_;
    QpState state_ = QpState::init;
    std::uint32_t remote_qpn_ = 0;
    std::uint32_t max_sge_ = 1;
    std::uint32_t max_inline_ = 0;

    // send queue: [sq_released, sq_completed) done but not yet polled, [sq_completed, sq_next_tx) on the
    // wire, [sq_next_tx, sq_posted) waiting to be transmitted
    std::vector<SqEntry> sq_;
    std::vector<LocalSegment> sq_sge_;
    std::vector<std::byte> sq_inline_;
    std::uint64_t sq_posted_ = 0;
    std::uint64_t sq_next_tx_ = 0;
    std::uint64_t sq_completed_ = 0;
    std::uint64_t sq_released_ = 0;
    std::uint64_t tx_stop_ = UINT64_MAX;  ///< an entry that failed its local check: transmit none from it on

    // receive queue: [rq_released, rq_consumed) consumed but not yet polled, [rq_consumed, rq_posted) free
    std::vector<RqEntry> rq_;
    std::vector<LocalSegment> rq_sge_;
    std::uint64_t rq_posted_ = 0;
    std::uint64_t rq_consumed_ = 0;
    std::uint64_t rq_released_ = 0;

    // requester transport state
    std::uint64_t rd_atomic_end_ = 0;  ///< one past the last read/atomic transmitted (fence waits for it)
    std::uint64_t tx_high_ = 0;        ///< one past the highest message ever transmitted
    std::uint64_t cumulative_done_ = 0;  ///< sends/writes below it were marked done by a cumulative ACK
    std::uint32_t rnr_count_ = 0;
    std::uint32_t retry_count_ = 0;
    bool rnr_wait_ = false;
    std::uint32_t rnr_gen_ = 0;
    std::uint64_t last_progress_ = 0;
    bool timer_armed_ = false;
    bool timer_pending_ = false;      ///< a timeout event of generation timer_gen_ is in the heap
    std::uint64_t timer_due_ = 0;     ///< its time
    std::uint32_t timer_gen_ = 0;

    // responder state
    std::uint64_t expected_msn_ = 0;
    bool nak_sent_ = false;  ///< a NAK is outstanding: out-of-sequence messages are dropped silently

    /// The send/write message whose packets are landing.
    struct Inbound {
        bool active = false;
        std::uint32_t requester = 0;
        std::uint32_t packets = 0;
        std::uint32_t placed = 0;     ///< packets placed so far (in arrival order)
        std::uint32_t gen = 0;        ///< matches the pending place event
        std::uint32_t from_node = 0;  ///< the requester's node (its packets cross that link)
        std::uint64_t msn = 0;
        std::uint64_t base = 0;       ///< arrival of packet k = base + wire_ns(end of packet k)
        std::uint64_t length = 0;
        std::uint64_t rq = 0;         ///< the receive it consumed (send, write_with_imm)
        std::uint64_t perm_key = 0;   ///< placement permutation (torn)
        bool consumes_recv = false;
    } inbound_;

    /// The read or atomic executing later than messages behind it (read_after_write).
    struct Deferred {
        bool active = false;
        std::uint32_t requester = 0;
        std::uint32_t gen = 0;
        std::uint64_t msn = 0;
    } deferred_;
};

/// IB encodings to virtual nanoseconds.
std::uint64_t ack_timeout_ns(std::uint8_t timeout) noexcept;
std::uint64_t rnr_delay_ns(std::uint8_t min_rnr_timer) noexcept;

}  // namespace weft::sim::detail
