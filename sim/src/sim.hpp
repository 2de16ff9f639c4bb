// The simulator's internal model: a fabric of nodes (domains) with memory-region tables, queue pairs and
// completion queues, advanced by a discrete-event loop in virtual nanoseconds.
//
// One mutex per fabric guards everything in it; every entry point (post, poll, wait, setup) takes it, so
// progress is single-threaded and deterministic: events are ordered by (time, sequence number) and nothing
// depends on addresses or wall-clock time.
//
// RC model: a requester transmits its send-queue entries in order; each becomes one message that arrives
// at the responder after serialization and latency; the responder executes messages strictly in sequence
// (message sequence numbers stand in for PSNs) and answers with an acknowledgement, an RNR NAK or an error
// NAK. RNR NAKs rewind the requester (go-back-N); missing acknowledgements trigger retransmission after the
// local ACK timeout. Completions are produced in posting order.
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

/// Fabric-wide parameters from the configuration string.
struct Params {
    std::string name = "default";
    std::uint64_t seed = 1;
    std::uint64_t latency_ns = 1000;   ///< one-way wire latency
    double gbps = 100.0;               ///< link bandwidth
    friend bool operator==(const Params&, const Params&) = default;
};

enum class EventKind : std::uint8_t {
    deliver,    ///< a request message reaches the responder `qpn`; `peer` is the requester
    ack,        ///< an acknowledgement or NAK for message `msn` reaches the requester `qpn`
    rnr_retry,  ///< the RNR back-off of requester `qpn` is over
    timeout,    ///< the local ACK timer of requester `qpn`
};

struct Event {
    std::uint64_t time = 0;
    std::uint64_t seq = 0;
    std::uint64_t msn = 0;
    std::uint32_t qpn = 0;
    std::uint32_t peer = 0;
    std::uint32_t generation = 0;  ///< for timers: the arm count it belongs to
    EventKind kind = EventKind::deliver;
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

    /// The region a key names, or null (unknown, stale or deregistered key). Needs the fabric lock.
    const SimMr* find_mr(std::uint64_t key) const noexcept;
    void remove_mr(std::uint32_t slot) noexcept;

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
    /// A polled completion frees its queue slot and every earlier one of that queue.
    void release(bool send_queue, std::uint64_t wqe) noexcept;

private:
    friend class SimCq;

    std::span<LocalSegment> sq_sges(std::uint64_t i) noexcept {
        return {&sq_sge_[(i % sq_.size()) * max_sge_], sq_[i % sq_.size()].num_sge};
    }
    std::span<LocalSegment> rq_sges(std::uint64_t i) noexcept {
        return {&rq_sge_[(i % rq_.size()) * max_sge_], rq_[i % rq_.size()].num_sge};
    }
    SqEntry& sq_at(std::uint64_t i) noexcept { return sq_[i % sq_.size()]; }
    RqEntry& rq_at(std::uint64_t i) noexcept { return rq_[i % rq_.size()]; }

    void transmit_pending() noexcept;
    bool check_local(std::uint64_t i) noexcept;
    void arm_timer() noexcept;
    void complete_in_order() noexcept;
    void enter_error() noexcept;
    void flush_send_from(std::uint64_t first) noexcept;
    void flush_recv() noexcept;
    void emit_send(std::uint64_t i, WcStatus status) noexcept;
    void emit_recv(std::uint64_t i, WcStatus status, Opcode op, std::uint32_t byte_len, bool has_imm,
                   std::uint32_t imm) noexcept;
    void send_ack(std::uint32_t requester, std::uint64_t msn, WcStatus status, std::uint64_t response_bytes) noexcept;
    /// Responder side: executes message `msn` of requester `q`; returns the status to acknowledge with.
    WcStatus execute(SimQp& q, std::uint64_t msn) noexcept;
    const SimMr* check_remote(std::uint64_t rkey, std::uint64_t addr, std::uint64_t length, Access right) const noexcept;
    std::uint64_t wire_time(std::uint64_t bytes) const noexcept;

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
    std::uint64_t link_free_ = 0;     ///< when this QP's outbound link is next idle
    std::uint32_t rnr_count_ = 0;
    std::uint32_t retry_count_ = 0;
    bool rnr_wait_ = false;
    std::uint32_t rnr_gen_ = 0;
    std::uint64_t last_progress_ = 0;
    bool timer_armed_ = false;
    std::uint32_t timer_gen_ = 0;

    // responder state
    std::uint64_t expected_msn_ = 0;
};

/// IB encodings to virtual nanoseconds.
std::uint64_t ack_timeout_ns(std::uint8_t timeout) noexcept;
std::uint64_t rnr_delay_ns(std::uint8_t min_rnr_timer) noexcept;

}  // namespace weft::sim::detail
