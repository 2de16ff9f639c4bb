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
// message and answers with an acknowledgement. A packet carries the bytes its source held as it left the
// requester: those still on the wire when the program may run again are staged then. Messages execute
// strictly in sequence (message sequence numbers stand in for PSNs); a read or atomic may be deferred past
// later unfenced messages. RNR NAKs rewind the requester (go-back-N); missing acknowledgements trigger
// retransmission after the local ACK timeout. Completions are produced in posting order.
//
// The simulator's classes are hidden from the library's exported symbols: nothing outside libweft names
// them, and calls among them then bind directly (no PLT) and may be inlined.
#pragma once

#include "event_queue.hpp"

#include <weft/backend.hpp>
#include <weft/detail/errors.hpp>
#include <weft/detail/slot_ring.hpp>
#include <weft/sim/fabric.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace weft::sim::detail {

/// Every setup error of the simulator (weft/detail/errors.hpp).
inline constexpr weft::detail::ErrorSource errors{"sim"};

class SimCq;
class SimDomain;
class SimQp;
class SimSrq;
struct SqEntry;

/// Legal behaviours the seed may choose (`reorder=` key); bit flags.
enum Reorder : std::uint32_t {
    reorder_none = 0,
    reorder_torn = 1u << 0,              ///< packets of a message are placed in a seeded permutation
    reorder_read_after_write = 1u << 1,  ///< a read/atomic may execute after later unfenced messages
    reorder_jitter = 1u << 2,            ///< acknowledgements and responses arrive with seeded extra delay
    reorder_qp_paths = 1u << 3,          ///< each QP sends on its own engine and path: QPs overtake each other
    reorder_program = 1u << 4,           ///< each API call takes effect after a seeded delay of program time
    reorder_all = reorder_torn | reorder_read_after_write | reorder_jitter | reorder_qp_paths | reorder_program,
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
    bool check_sources = true;         ///< digest send/write sources at post and at acknowledgement, stage them in flight
    double drop = 0;                   ///< probability a packet (request or response) is lost
    double duplicate = 0;              ///< probability a packet arrives twice
    double delay = 0;                  ///< probability a packet is held up by up to delay_ns
    std::uint64_t delay_ns = 10000;
    std::uint64_t program_ns = 5000;   ///< reorder=program: the longest pause of a program between two calls
    bool programs_per_node = true;     ///< programs=per_node: each node runs its own program clock
    std::string trace_path;            ///< write the trace here when the fabric closes (empty: no trace)
    bool exploring = false;            ///< schedule= given: choices come from the token, not the seed
    std::vector<std::uint8_t> schedule;  ///< the forced choices (schedule= token)
    friend bool operator==(const Params&, const Params&) = default;
};

enum class EventKind : std::uint8_t {
    deliver,    ///< a request message reaches the responder `qpn`; `peer` is the requester
    ack,        ///< an acknowledgement or NAK for message `msn` reaches the requester `qpn`
    rnr_retry,  ///< the RNR back-off of requester `qpn` is over
    timeout,    ///< the local ACK timer of requester `qpn`
    place,      ///< the next packet of the message responder `qpn` is receiving lands
    deferred,   ///< responder `qpn` executes the read or atomic it deferred
    respond,    ///< responder `qpn` reads the next packet of the read response it is sending
    disconnect, ///< QP `peer` disconnected: the notice reaches its peer `qpn` (as a CM DREQ, on its own path)
    port,       ///< the port of node `peer` comes back up (Fabric::port_down with a duration); `generation`
                ///< is the outage it ends
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

/// Systematic exploration (`schedule=` key, weft::testing::explore): every seeded choice becomes a choice
/// point with two or three alternatives. The token forces the first choices; every later one takes
/// alternative 0. The number of alternatives of each choice point met is recorded, in order.
struct Chooser {
    std::vector<std::uint8_t> forced;
    std::vector<std::uint8_t> arity;
    std::size_t pos = 0;
    unsigned choose(unsigned alternatives) {
        const unsigned c = pos < forced.size() ? std::min<unsigned>(forced[pos], alternatives - 1) : 0;
        arity.push_back(static_cast<std::uint8_t>(alternatives));
        ++pos;
        return c;
    }
};

/// splitmix64: tiny, fast, and the same sequence on every platform (std distributions are not). When a
/// Chooser is attached, draws come from it instead: the extremes and the middle of a range, both outcomes
/// of a chance.
class Rng {
public:
    explicit Rng(std::uint64_t seed) noexcept : state_(seed) {}
    std::uint64_t next() noexcept {
        if (chooser) return chooser->choose(2) ? 0x2545f4914f6cdd1dull : 0x9e3779b97f4a7c15ull;
        std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    /// Uniform in [0, bound).
    std::uint64_t below(std::uint64_t bound) noexcept {
        if (chooser) {
            if (bound <= 1) return 0;
            const unsigned c = chooser->choose(bound == 2 ? 2 : 3);
            return c == 0 ? 0 : c == 1 ? bound - 1 : bound / 2;
        }
        return bound ? next() % bound : 0;
    }
    /// True with probability `p` (0 never draws).
    bool chance(double p) noexcept {
        if (!(p > 0)) return false;
        if (chooser) return chooser->choose(2) == 1;
        return static_cast<double>(next() >> 11) * 0x1.0p-53 < p;
    }
    Chooser* chooser = nullptr;

private:
    std::uint64_t state_;
};

class [[gnu::visibility("hidden")]] FabricState {
public:
    FabricState(Params params, std::uint64_t id);

    /// Queues an event (stamping its sequence number); sequence numbers break time ties in scheduling order.
    void schedule(Event& e) {
        e.seq = seq_++;
        events_.push(e);
    }
    /// Processes the earliest event; false when there is none.
    bool step();
    bool idle() const noexcept { return events_.empty(); }
    std::uint64_t next_event_time() noexcept { return events_.empty() ? now : events_.top().time; }

    /// Runs events until `done()` holds, the fabric is idle, virtual time would pass `deadline`, or
    /// `budget` events ran. Returns the number of events run.
    template <class Done>
    std::size_t run(Done done, std::uint64_t deadline, std::size_t budget) {
        // run_left_ counts down this call's events, those run_inline() lets an event run included.
        run_deadline_ = deadline;
        run_left_ = budget;
        while (run_left_ != 0 && !done() && !events_.empty() && next_event_time() <= deadline) {
            --run_left_;
            step();
        }
        const std::size_t n = budget - run_left_;
        run_left_ = 0;
        return n;
    }
    /// Whether the event being run may go on, as if it were the next event, at time `t`: nothing else is
    /// due by then, and run() would have run one more event at `t` (its deadline, its budget). Then it
    /// counts as an event and the clock moves to `t`. A handler whose next step would come to the same
    /// (its follow-up event at `t` ahead of any other) saves the event (SimQp::on_place).
    bool run_inline(std::uint64_t t) noexcept {
        if (run_left_ == 0 || t > run_deadline_ || (!events_.empty() && events_.top().time <= t)) return false;
        --run_left_;
        ++events_run;
        now = std::max(now, t);
        return true;
    }

    /// Sources read at transmission: a send or write packet takes its bytes from the source as it leaves.
    /// The program can change a source only between two calls, so a packet that leaves and lands while the
    /// fabric runs reads the source as it lands; one still on the wire when the program may run again has its
    /// bytes staged then, once (SimQp::stage_until). Each requester QP with packets to stage keeps one key
    /// in its node's heap: when its next packet leaves. Called as every call that runs the fabric or moves a
    /// program's time hands control back (ReturnToProgram); cheap when no key is due.
    void stage_if_due() noexcept {
        if (stage_keys_ != 0) stage_sources();
    }
    /// Declared after the fabric lock in an API call: stages what must be as the call returns, on every path,
    /// and starts a new source epoch (the program may now change its memory).
    struct ReturnToProgram {
        FabricState& fabric;
        ~ReturnToProgram() {
            fabric.stage_if_due();
            if (fabric.params.check_sources) fabric.program_may_run();
        }
    };

    /// check_sources: source epochs. A source's bytes read in one epoch still hold in any later moment of it,
    /// so a send or write whose packets were all read in the epoch its acknowledgement arrives in needs its
    /// source read no more (SimQp::fold_source). An epoch ends as control returns to the program, and when the
    /// fabric stores into memory that overlaps a source read in it (stored()). A store of a second thread made
    /// while another is inside a call has no place among epochs, so once a second thread has called into the
    /// fabric every source is read again at its acknowledgement, as without epochs.
    std::uint64_t source_epoch() const noexcept { return several_threads_ ? 0 : source_epoch_; }
    void program_may_run() noexcept {
        const std::thread::id self = std::this_thread::get_id();
        if (self != last_caller_) {
            several_threads_ |= last_caller_ != std::thread::id();
            last_caller_ = self;
        }
        new_source_epoch();
    }
    void new_source_epoch() noexcept {
        ++source_epoch_;
        read_lo_ = UINT64_MAX;
        read_hi_ = 0;
    }
    /// A source range read in this epoch.
    void source_read(std::uint64_t addr, std::uint64_t n) noexcept {
        read_lo_ = std::min(read_lo_, addr);
        read_hi_ = std::max(read_hi_, addr + n);
    }
    /// The fabric stores into [addr, addr + n) of a program's memory.
    void stored(std::uint64_t addr, std::uint64_t n) noexcept {
        if (addr < read_hi_ && addr + n > read_lo_) new_source_epoch();
    }
    struct StageKey {
        std::uint64_t due = 0;  ///< when the QP's next packet to stage leaves
        std::uint32_t qpn = 0;
        std::uint32_t gen = 0;  ///< the QP's key generation it was made for (a newer key replaces it)
    };
    void key_staging(std::uint32_t node, const StageKey& key);

    /// Where a QP's send queue lives, kept in the QP table, so the entry an event is about can be prefetched
    /// without reading the QP first.
    struct SendRing {
        const SqEntry* entries = nullptr;
        const LocalSegment* segments = nullptr;
        std::uint32_t mask = 0;  ///< slots - 1 (a power of two of slots)
        std::uint32_t max_sge = 0;
    };
    /// Enters a QP in the table and returns its number. Throws when the table is full (max_qps).
    std::uint32_t add_qp(SimQp* qp, const SendRing& ring);
    void remove_qp(std::uint32_t qpn) noexcept;
    /// The live QP numbered `qpn`, or null (never created, destroyed, or its slot reused since).
    SimQp* find_qp(std::uint32_t qpn) const noexcept;
    /// The most queue pairs a fabric holds at once.
    static constexpr std::uint32_t max_qps = (1u << 24) - 1;
    std::uint32_t add_node(SimDomain* domain) {
        program_clock_.push_back(0);
        node_domains.push_back(domain);
        return next_node_++;
    }

    /// Program time (reorder=program). An API call of `node` is where the program's own time shows: the
    /// program took a seeded while to reach it, and the NIC went on meanwhile. Returns the virtual time at
    /// which the call takes effect. A call that `observes` (poll, wait, registration) first runs the fabric
    /// up to that time. A post does too when all nodes form one program (programs=one); with a program per
    /// node it runs nothing and its work waits for that time instead, so one node's program may run ahead
    /// of another's. Without reorder=program every call takes effect now, as before.
    std::uint64_t enter_call(std::uint32_t node, bool observes) noexcept;
    /// When the last API call of `node`'s program took effect (program time; the fabric's time without it).
    std::uint64_t program_time(std::uint32_t node) const noexcept {
        if (!reorders(reorder_program)) return now;
        return std::max(now, program_clock_[params.programs_per_node ? node : 0]);
    }
    /// The program of `node` waited (in a poll) until the fabric's current time.
    void program_waited(std::uint32_t node) noexcept {
        std::uint64_t& clock = program_clock_[params.programs_per_node ? node : 0];
        clock = std::max(clock, now);
    }
    /// Two nodes' programs synchronised (a connection handshake): each resumes after the later of the two.
    void join_programs(std::uint32_t a, std::uint32_t b) noexcept {
        program_clock_[a] = program_clock_[b] = std::max(program_clock_[a], program_clock_[b]);
        stage_if_due();
    }
    template <class F>
    void for_each_qp(F f) const {
        for (const QpSlot& s : qps_) {
            if (s.qp) f(*s.qp);
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
        return reorders(reorder_jitter) ? rng.below(params.latency_ns * 2 + 1) : 0;
    }

    /// Sends a packet (a deliver or ack event) from node `from` through the fault model: it may be lost,
    /// held up or duplicated (config keys drop/delay/duplicate, Fabric::set_faults).
    void send_packet(Event& e, std::uint32_t from) noexcept {
        e.from_node = from;
        if (rates.any()) {
            send_faulty(e);
            return;
        }
        schedule(e);
    }
    /// Whether the link between two nodes carries packets at time `t` (cuts, crashes, ports down).
    bool link_up(std::uint32_t a, std::uint32_t b, std::uint64_t t) const noexcept;
    /// Whether `node` crashed (Fabric::crash): it takes nothing in any more, read responses included.
    bool node_crashed(std::uint32_t node) const noexcept { return node < crashed.size() && crashed[node]; }

    struct Cut {
        std::uint32_t a, b;
        std::uint64_t until;  ///< UINT64_MAX: for good
    };
    struct Rates {
        double drop = 0, duplicate = 0, delay = 0;
        std::uint64_t delay_ns = 0;
        bool on = false;  ///< any() as update() last found it: the one test every packet makes
        bool any() const noexcept { return on; }
        /// Called after the rates change.
        void update() noexcept { on = drop > 0 || duplicate > 0 || delay > 0; }
    } rates;
    std::vector<Cut> cuts;
    std::vector<std::uint8_t> crashed;         ///< node -> crashed
    std::vector<std::uint64_t> stalled_until;  ///< node -> deliveries to it wait until then
    std::vector<std::uint64_t> port_down_until;  ///< node -> its port is down until then (0: up)
    std::vector<std::uint32_t> port_outages;     ///< node -> how many times its port went down
    std::vector<SimDomain*> node_domains;        ///< node -> its domain (null once destroyed)
    /// Set once a link was cut, a node crashed or stalled, or a port went down: only then does step() look
    /// at them for each event (held_by_nodes).
    bool nodes_touched = false;
    /// Fabric::port_down / port_up: the port of `node` goes down until `until` (UINT64_MAX: until
    /// port_up), or comes back up; each change is an event of the node's domain.
    void port_down(std::uint32_t node, std::uint64_t until);
    void port_up(std::uint32_t node);
    bool port_is_down(std::uint32_t node, std::uint64_t t) const noexcept {
        return node < port_down_until.size() && t < port_down_until[node];
    }
    unsigned fail_registrations = 0;
    unsigned fail_qp_creations = 0;
    std::uint32_t srqs_created = 0;  ///< numbers the shared receive queues (SharedReceiveQueue::srq_num)
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
    std::vector<SimDomain*> fd_domains;  ///< domains whose event_fd() was asked for
    int waiters_ = 0;
    const Params params;
    const std::uint64_t id;  ///< identifies this fabric instance inside QP addresses
    std::uint64_t now = 0;
    std::uint64_t events_run = 0;
    Rng rng;

private:
    // QP numbers: s = slot + 1 (never 0) with its low 16 bits in bits 0-15, its high 8 bits in bits 24-31,
    // and the slot's generation in bits 16-23, so a reused slot gets a new number. Below 65,536 QPs the
    // numbers fit in 24 bits as in verbs.
    static std::uint32_t slot_of(std::uint32_t qpn) noexcept { return ((qpn >> 24) << 16 | (qpn & 0xffff)) - 1; }

    EventQueue<Event> events_;
    std::uint64_t seq_ = 0;
    std::uint64_t run_deadline_ = 0;  // run(): its deadline, and how many more events its budget allows
    std::size_t run_left_ = 0;
    // A QP and where its send queue lives, in one half line: an event's QP and send-queue entry are asked
    // for after one look at the table.
    struct alignas(32) QpSlot {
        SimQp* qp = nullptr;
        SendRing ring;
    };
    std::vector<QpSlot> qps_;           // slot -> QP
    std::vector<std::uint8_t> qp_gen_;  // slot -> generation
    std::vector<std::uint32_t> free_slots_;
    std::uint32_t next_node_ = 0;
    double ns_per_byte_;
    void send_faulty(Event& e) noexcept;
    /// Whether event `e` for `qp` is dropped (a crashed node, a link down) or put off (a stalled node) and
    /// rescheduled; step() asks only once nodes_touched.
    bool held_by_nodes(Event& e, const SimQp& qp) noexcept;
    /// Asks for the lines of the QP the next event is for, while the current one runs.
    void prefetch_next() noexcept;
    /// The QP slots from which on prefetch_next() pays: below, every QP's state stays in cache.
    static constexpr std::size_t prefetch_from_qps = 64;
    /// Stages, on every node, the packets that left before that node's program time (sim_datapath.cpp).
    void stage_sources() noexcept;

    std::vector<std::vector<StageKey>> stage_heaps_;  // node -> min-heap of staging keys by `due`
    std::size_t stage_keys_ = 0;                      // keys in all heaps, stale ones included

    // Source epochs (source_epoch()): the current one, the bounds of the sources read in it, the thread of
    // the last call, and whether calls came from more than one thread.
    std::uint64_t source_epoch_ = 1;
    std::uint64_t read_lo_ = UINT64_MAX, read_hi_ = 0;
    std::thread::id last_caller_;
    bool several_threads_ = false;

    std::vector<std::uint64_t> program_clock_;  // node -> when its program's last call took effect
    std::unique_ptr<Chooser> chooser_;          // schedule=: the choice points, shared by both generators
    Rng program_rng_;                           // program delays: a stream apart from the fabric's choices
};

/// Finds or creates the fabric called params.name. A fabric lives while a domain uses it. Throws when an
/// existing fabric of that name was opened with other parameters.
std::shared_ptr<FabricState> attach_fabric(const Params& params);

class [[gnu::visibility("hidden")]] SimMr final : public weft::detail::MrImpl {
public:
    SimMr(std::shared_ptr<SimDomain> domain, std::uint32_t slot);
    ~SimMr() override;

private:
    std::shared_ptr<SimDomain> domain_;
    std::uint32_t slot_;
};

class [[gnu::visibility("hidden")]] SimDomain final : public weft::detail::DomainImpl {
public:
    SimDomain(std::shared_ptr<FabricState> fabric, const Params& params);
    ~SimDomain() override;

    std::unique_ptr<weft::detail::MrImpl> register_memory(void* addr, std::size_t length, Access access) override;
    std::shared_ptr<weft::detail::CqImpl> create_cq(const CqOptions& options) override;
    std::unique_ptr<weft::detail::QpImpl> create_qp(const weft::detail::QpSetup& setup) override;
    std::shared_ptr<weft::detail::SrqImpl> create_srq(const SrqOptions& options) override;
    // named rendezvous (sim_rendezvous.cpp)
    std::unique_ptr<weft::detail::ListenerImpl> listen(const weft::detail::HostPort& where) override;
    std::vector<std::byte> connect_to(weft::detail::QpImpl& qp, const weft::detail::HostPort& where,
                                      std::chrono::milliseconds timeout,
                                      std::span<const std::byte> private_data) override;

    /// What the data path checks of a registered region, kept in the domain's table itself so a lookup
    /// touches one slot and not the region object.
    struct MrSlot {
        std::uint64_t base = 0;
        std::uint64_t length = 0;
        Access access{};
        std::uint8_t gen = 0;  ///< bumped at each registration in the slot: a stale key no longer matches
        bool live = false;
    };
    /// The region a key names, or null (unknown, stale or deregistered key). Needs the fabric lock.
    const MrSlot* find_mr(std::uint64_t key) const noexcept {
        const std::uint64_t slot_plus_one = key >> 8;
        if (slot_plus_one == 0 || slot_plus_one > mrs_.size()) return nullptr;
        const MrSlot& m = mrs_[slot_plus_one - 1];
        return m.live && (key & 0xff) == m.gen ? &m : nullptr;
    }
    void remove_mr(std::uint32_t slot) noexcept;
    /// Counts deregistrations (from 1): a region check that passed while it read e still holds while it does,
    /// since only a deregistration can make a key or a range that was valid invalid.
    std::uint64_t mr_epoch = 1;

    std::uint64_t link_free = 0;  ///< when this node's outbound link is next idle (fabric lock)
    Profile profile() const noexcept { return fabric_->params.profile; }

    const std::shared_ptr<FabricState>& fabric() const noexcept { return fabric_; }
    std::uint32_t node() const noexcept { return node_; }

    // asynchronous events (sim_domain.cpp)
    int event_fd() override;
    bool next_event(AsyncEvent& out) override;
    /// Queues an event (fabric lock held).
    void push_event(const AsyncEvent& e) noexcept;
    /// Keeps the event fd readable exactly when next_event() may give something (fabric lock held).
    void sync_event_fd() noexcept;

private:
    std::shared_ptr<FabricState> fabric_;
    std::uint32_t node_;
    std::deque<AsyncEvent> events_;  // fabric lock
    int event_fd_ = -1;
    bool event_fd_armed_ = false;
    std::vector<MrSlot> mrs_;  // slot -> region
    std::vector<std::uint32_t> free_mr_slots_;
};

/// Makes the eventfd `fd` readable exactly when `want` is true; `armed` remembers which it is now (the CQs'
/// and the domains' descriptors; fabric lock held).
void set_readable(int fd, bool want, bool& armed) noexcept;

/// The thread contract (docs/semantics.md, "Threads"): one thread at a time in a call of a kind on one
/// object. Counts the threads inside such a call; a second one arriving while the first is still inside
/// breaks the contract, which the caller reports as a misuse once it holds the fabric lock.
class OneAtATime {
public:
    /// Enters; true when another thread is inside already.
    bool enter() noexcept { return inside_.fetch_add(1, std::memory_order_acq_rel) != 0; }
    void leave() noexcept { inside_.fetch_sub(1, std::memory_order_release); }
    struct Scope {
        OneAtATime& gate;
        bool overlapped;
        explicit Scope(OneAtATime& g) noexcept : gate(g), overlapped(g.enter()) {}
        ~Scope() { gate.leave(); }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;
    };

private:
    std::atomic<int> inside_{0};
};

/// One entry of a completion queue, with what is needed to release the queue slot when it is polled.
struct CqEntry {
    Completion wc;
    std::uint64_t wqe = 0;  ///< index of the work request on its queue
    bool send_queue = false;
};

class [[gnu::visibility("hidden")]] SimCq final : public weft::detail::CqImpl {
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
    /// Reports two threads inside poll/wait at once (fabric lock held; a misuse report may allocate).
    void report_overlap(FabricState& f);

private:
    std::shared_ptr<SimDomain> domain_;
    std::vector<CqEntry> ring_;
    std::size_t head_ = 0;
    std::size_t count_ = 0;
    bool overrun_ = false;
    OneAtATime pollers_;  ///< threads inside poll or wait
    int event_fd_ = -1;
    bool fd_armed_ = false;
};

/// A send-queue entry: the request as posted, with its own copy of the gather list. Everything a request
/// reads and writes on its way fits one cache line, the entry's own; the operands only some opcodes carry
/// live beside the ring (SqOperands), and a transmission's Event::base is derived (SimQp::tx_base).
/// The cursors of a QP's send and receive rings (the backends' shared ring, weft/detail/slot_ring.hpp),
/// moved only under the fabric lock: `posted`, `completed` (the flush cursor: the completion of every
/// request before it is decided) and `retired` (a polled completion frees its slot and every earlier one).
using QueueRing = weft::detail::SlotRing<std::uint64_t, weft::detail::RingSync::single>;

struct alignas(64) SqEntry {
    std::uint64_t id = 0;
    std::uint64_t remote_addr = 0;
    std::uint64_t rkey = 0;
    std::uint64_t digest = 0;           ///< of the source bytes at post time (check_sources)
    std::uint64_t sources_checked = 0;  ///< the domain's mr_epoch when its gather list last passed the check (0: never)
    /// Until its first transmission, the program time of the post: it is not transmitted earlier. Then when
    /// its latest transmission began to leave the requester. A retransmission starts no earlier than the
    /// engine is next free, which is after that, so the post's time is not needed again.
    std::uint64_t tx_start = 0;
    std::uint64_t staged_word = 0;  ///< a payload of up to 8 bytes, staged (SimQp::stage_until)
    std::uint32_t length = 0;       ///< at most the domain's max_msg_size, 2^31
    Opcode opcode = Opcode::send;
    SendFlags flags = SendFlags::none;
    WcStatus status = WcStatus::success;
    std::uint8_t num_sge : 6 = 0;   ///< at most the domain's max_sge, 32
    bool done : 1 = false;          ///< its final status is known
    bool word_staged : 1 = false;   ///< staged_word holds the payload of its latest transmission
};
static_assert(sizeof(SqEntry) == 64);

/// What a send-queue entry carries only for some opcodes or transmissions, in a ring of its own indexed
/// like the send queue: written and read only when the entry has it.
struct SqOperands {
    std::uint64_t compare_add = 0;  ///< atomics
    std::uint64_t swap = 0;         ///< compare_swap
    std::uint64_t perm_key = 0;     ///< a transmission whose packets are torn: their order
    std::uint32_t imm = 0;          ///< an opcode that consumes a receive
    /// check_sources, a source read by fold_source: the source epoch in which all its bytes were read and
    /// matched the digest at post (0: none yet).
    std::uint64_t source_clean = 0;
};

struct RqEntry {
    std::uint64_t id = 0;
    std::uint64_t length = 0;
    std::uint64_t ready_at = 0;  ///< program time of the post: no message consumes it earlier
    std::uint32_t num_sge = 0;
};

/// A shared receive queue: the receives posted and not yet taken, oldest first, in a ring. A message of an
/// attached QP takes the oldest whose post has taken effect into the QP's own receive ring (SimQp::
/// take_receive); the QP keeps it there until the message completes, and uses it again if the message is
/// lost and resent, as a responder keeps the WQE it fetched.
class [[gnu::visibility("hidden")]] SimSrq final : public weft::detail::SrqImpl {
public:
    SimSrq(std::shared_ptr<SimDomain> domain, const SrqOptions& options, std::uint32_t number);
    ~SimSrq() override;

    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept override;
    void arm_limit(std::uint32_t limit) override;

    /// Whether a receive is posted whose post has taken effect by `now` (fabric lock held).
    bool ready(std::uint64_t now) const noexcept { return head_ < tail_ && at(head_).ready_at <= now; }
    /// Moves the oldest receive into `entry` and `sges` (room for max_sge segments), reporting the limit
    /// event when it leaves fewer than the armed limit (fabric lock held; ready() was true).
    void take(RqEntry& entry, LocalSegment* sges) noexcept;
    const SimDomain& domain() const noexcept { return *domain_; }

private:
    std::size_t slot(std::uint64_t i) const noexcept { return static_cast<std::size_t>(i & (ring_.size() - 1)); }
    const RqEntry& at(std::uint64_t i) const noexcept { return ring_[slot(i)]; }

    std::shared_ptr<SimDomain> domain_;
    FabricState& fabric_;
    std::vector<RqEntry> ring_;
    std::vector<LocalSegment> sges_;
    std::uint32_t stride_;
    std::uint64_t head_ = 0, tail_ = 0;  ///< [head, tail) posted and not taken
    std::uint32_t limit_ = 0;            ///< armed limit (0: disarmed)
    OneAtATime posters_;
};

// Aligned so that the lines FabricState::prefetch_next asks for are the same for every QP.
class [[gnu::visibility("hidden")]] alignas(64) SimQp final : public weft::detail::QpImpl {
public:
    SimQp(std::shared_ptr<SimDomain> domain, const weft::detail::QpSetup& setup);
    ~SimQp() override;

    // setup (sim_qp.cpp)
    std::vector<std::byte> address() const override;
    void connect(std::span<const std::byte> peer) override;
    QpState state() const noexcept override;
    void disconnect() override;
    void to_error() override;

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
    void on_respond(const Event& e) noexcept;
    /// The peer disconnected: this QP goes to error.
    void on_disconnect(const Event& e) noexcept;
    /// Stages the bytes of this requester's packets that left before `t` and have not landed (fabric lock
    /// held). Returns when the next one leaves (UINT64_MAX: none to stage); its key is then moved to that time.
    std::uint64_t stage_until(std::uint64_t t) noexcept;
    std::uint32_t stage_gen() const noexcept { return stage_gen_; }
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

    // The rings hold a power of two of entries, at least the queue's capacity, so the slot of request i is
    // a mask, not a division (the capacity checks use caps).
    std::size_t sq_slot(std::uint64_t i) const noexcept { return static_cast<std::size_t>(i & sq_mask_); }
    std::size_t rq_slot(std::uint64_t i) const noexcept { return static_cast<std::size_t>(i & (rq_.size() - 1)); }
    std::span<const LocalSegment> sq_sges(std::uint64_t i) const noexcept {
        return {&sq_sge_[sq_slot(i) * max_sge_], sq_[sq_slot(i)].num_sge};
    }
    std::span<const LocalSegment> rq_sges(std::uint64_t i) const noexcept {
        return {&rq_sge_[rq_slot(i) * rq_stride_], rq_[rq_slot(i)].num_sge};
    }
    SqEntry& sq_at(std::uint64_t i) noexcept { return sq_[sq_slot(i)]; }
    SqOperands& operands_at(std::uint64_t i) noexcept { return sq_operands_[sq_slot(i)]; }
    const SqOperands& operands_at(std::uint64_t i) const noexcept { return sq_operands_[sq_slot(i)]; }
    /// The Event::base of entry `e`'s latest transmission: it names that transmission at the responder.
    std::uint64_t tx_base(const SqEntry& e) const noexcept { return e.tx_start + tx_delay_; }
    /// The packet order of entry `i`'s latest transmission (torn placement); 0: in order. It is drawn at each
    /// transmission of a send or write longer than one packet when torn placement is on.
    std::uint64_t perm_key(std::uint64_t i) const noexcept {
        const SqEntry& e = sq_at(i);
        if (e.length <= fabric_.params.mtu || !fabric_.reorders(reorder_torn)) return 0;
        return e.opcode == Opcode::read || is_atomic(e.opcode) ? 0 : operands_at(i).perm_key;
    }
    const SqEntry& sq_at(std::uint64_t i) const noexcept { return sq_[sq_slot(i)]; }
    RqEntry& rq_at(std::uint64_t i) noexcept { return rq_[rq_slot(i)]; }
    const RqEntry& rq_at(std::uint64_t i) const noexcept { return rq_[rq_slot(i)]; }

    void transmit_pending() noexcept;
    /// 0 when the local segments of send-queue entry `i` are usable, else why not.
    int check_local(std::uint64_t i) noexcept;
    /// 0 when the gather list of send-queue entry `i` (not inline) lies in registered regions, else why not;
    /// checked again only after a deregistration in this domain.
    int check_gather(std::uint64_t i) noexcept {
        return sq_at(i).sources_checked == domain_->mr_epoch ? 0 : check_gather_again(i);
    }
    int check_gather_again(std::uint64_t i) noexcept;
    void arm_timer() noexcept;
    void complete_in_order() noexcept;
    void enter_error() noexcept;
    /// The responder goes to error because of an incoming request no receive completion reports: a
    /// peer's access outside a region or without the right (`access`), or an invalid request. The spec
    /// raises an affiliated asynchronous error, qp_fatal here (IBV_EVENT_QP_ACCESS_ERR, _REQ_ERR); rxe
    /// raises none (docs/simulator.md).
    void fail_responder(bool access) noexcept;
    void flush_send() noexcept;
    void flush_recv() noexcept;
    void emit_send(std::uint64_t i, WcStatus status) noexcept;
    void report_source_changed(std::uint64_t i);
    /// Compares the source of send-queue entry `i` with its digest at post (check_sources), unless its
    /// packets' reads showed it unchanged in the current source epoch.
    void check_source(std::uint64_t i) noexcept;
    /// Whether the reads of entry `e`'s source are folded into a digest as they happen (check_sources, one
    /// source segment, several packets; not inline).
    bool folds(const SqEntry& e) const noexcept {
        return e.length > fabric_.params.mtu && e.num_sge == 1 && fabric_.params.check_sources &&
               e.opcode != Opcode::read && !is_atomic(e.opcode) && !has(e.flags, SendFlags::inline_data);
    }
    /// Packet `k` (leaving order) of transmission `base` of entry `msn` reads its `n` bytes at `offset` of
    /// the source: folded into the digest of the transmission's reads while every read falls in one source
    /// epoch; after the last packet, a digest equal to the one at post marks the source clean in that epoch.
    /// Given `to` (not overlapping the source), a folded packet is copied there in the same pass; returns
    /// whether it was (else the caller copies it).
    [[gnu::noinline]] bool fold_source(std::uint64_t msn, std::uint64_t base, std::uint32_t k, std::uint64_t offset,
                                       std::uint32_t n, std::byte* to) noexcept;
    void emit_recv(std::uint64_t i, WcStatus status, Opcode op, std::uint32_t byte_len, bool has_imm,
                   std::uint32_t imm) noexcept;
    void send_ack(std::uint32_t requester, std::uint64_t msn, WcStatus status, std::uint64_t response_bytes) noexcept;
    /// Responder side, first packet of send/write message `msn` of requester `q`: checks it and consumes a
    /// receive; returns the status to answer with (success: its packets may be placed).
    WcStatus begin_message(SimQp& q, std::uint64_t msn) noexcept;
    /// Whether a receive is posted for the next message: one the program's post has taken effect for (one
    /// this QP took from its shared receive queue earlier and kept, or the queue's oldest).
    bool receive_ready() const noexcept {
        if (rq_ring_.completed < rq_ring_.posted) return rq_at(rq_ring_.completed).ready_at <= fabric_.now;
        return srq_ && rq_ring_.posted - rq_ring_.retired < rq_.size() && srq_->ready(fabric_.now);
    }
    /// Consumes the receive receive_ready() found; returns its index in the receive ring.
    std::uint64_t take_receive() noexcept {
        if (rq_ring_.completed == rq_ring_.posted) {
            const std::uint64_t i = rq_ring_.posted++;
            srq_->take(rq_at(i), &rq_sge_[rq_slot(i) * rq_stride_]);
        }
        return rq_ring_.completed++;
    }
    /// Places packet `k` (in arrival order) of the inbound message; false when it failed (already handled).
    bool place_packet(std::uint32_t k) noexcept;
    /// place_packet's end for a write from one source segment whose reads are folded (requester `q`):
    /// packet `k`, the `p`-th of the message, its `n` bytes at `offset`.
    [[gnu::noinline]] bool place_folded(SimQp& q, std::uint32_t k, std::uint32_t p, std::uint64_t offset,
                                        std::uint32_t n) noexcept;
    // True while this QP, as requester, still holds message `msn` outstanding: not completed, not flushed.
    // A responder reads a requester's send-queue entry only then. A request flushed by the requester's
    // error never takes effect, and its slot, which the program may reuse at once, is never read.
    bool holds(std::uint64_t msn) const noexcept {
        return state_ != QpState::error && msn >= sq_ring_.completed && msn < sq_ring_.posted;
    }
    /// Places whatever of the inbound message is left and completes it.
    void finish_inbound() noexcept;
    /// Places the next packet of the inbound message as it lands (or loses it); true when more are to come.
    bool place_next() noexcept;
    // Staging (sources read at transmission). Packet k of a message leaves k-th, at tx_start + wire_ns(k *
    // mtu); with torn placement it carries the bytes of offset permute(k) * mtu, and lands k-th.
    /// Whether send-queue entry `e`'s packets are read from the program's source (not inline, not empty).
    static bool reads_source(const SqEntry& e) noexcept;
    /// After transmitting entry `i`: a retransmission drops what was staged of it and after it.
    void restage_from(std::uint64_t i) noexcept;
    /// Keys the packet at the staging cursor if it was transmitted and is due before the current key.
    void arm_staging() noexcept;
    struct Staged;
    /// The staged packet `k` of transmission `base` of message `msn`, or null (read the source); staged
    /// packets before it are dropped. A found one stays at the front until pop_staged().
    const Staged* staged_packet(std::uint64_t msn, std::uint64_t base, std::uint32_t k) noexcept;
    const std::byte* staged_data(const Staged& st) const noexcept;
    void pop_staged() noexcept;
    /// Room for `n` contiguous bytes at the back of the staging ring; `at` is where they start.
    std::byte* reserve_staging(std::uint32_t n, std::uint64_t& at);
    void grow_staging(std::uint32_t n);
    void grow_staged();
    void trace_place(std::uint32_t packet, std::uint64_t offset, std::uint64_t n) noexcept;
    void schedule_place() noexcept;
    /// Responder side: checks read/atomic `msn` of `q`; success when it may execute.
    WcStatus check_response(SimQp& q, std::uint64_t msn) noexcept;
    /// Executes a checked read/atomic and answers it.
    void execute_response(SimQp& q, std::uint64_t msn) noexcept;
    void run_deferred() noexcept;
    /// Reads the next packet of the read response in progress; false when the response ended early.
    bool respond_packet() noexcept;
    /// Reads whatever of the read response in progress is left, at once.
    void finish_response() noexcept;
    /// An acknowledgement or response leaving this node's link at `departs`.
    void send_ack_at(std::uint32_t requester, std::uint64_t msn, WcStatus status, std::uint64_t departs,
                     std::uint64_t response_bytes) noexcept;
    const SimDomain::MrSlot* check_remote(std::uint64_t rkey, std::uint64_t addr, std::uint64_t length, Access right) const noexcept;
    WcStatus local_key_error(int why) const noexcept;

    // The members every event of the QP reads come first, so they share the few lines prefetched for it
    // (FabricState::prefetch_next); what setup and rarer paths need comes after.
    std::shared_ptr<SimDomain> domain_;
    FabricState& fabric_;

    // send queue: [retired, completed) done but not yet polled, [completed, sq_next_tx) on the wire,
    // [sq_next_tx, posted) waiting to be transmitted
    std::vector<SqEntry> sq_;
    std::vector<LocalSegment> sq_sge_;
    QueueRing sq_ring_;
    std::uint64_t sq_next_tx_ = 0;
    std::uint64_t tx_stop_ = UINT64_MAX;  ///< an entry that failed its local check: transmit none from it on
    std::uint64_t cumulative_done_ = 0;  ///< sends/writes below it were marked done by a cumulative ACK
    std::uint64_t last_progress_ = 0;
    std::uint64_t expected_msn_ = 0;     ///< responder: the message it takes next
    QpState state_ = QpState::init;
    bool rnr_wait_ = false;
    bool timer_armed_ = false;
    bool timer_pending_ = false;      ///< a timeout event of generation timer_gen_ is in the heap
    bool nak_sent_ = false;  ///< responder: a NAK is outstanding, out-of-sequence messages are dropped silently
    std::uint32_t remote_qpn_ = 0;
    bool told_peer_ = false;  ///< disconnect() has sent its notice
    std::uint32_t sq_mask_ = 0;  ///< sq_.size() - 1: the slot of request i is i & sq_mask_
    std::uint32_t max_sge_ = 1;
    std::uint32_t timer_gen_ = 0;
    std::uint64_t timer_due_ = 0;     ///< its time
    std::uint64_t ack_timeout_ = 0;   ///< options_.timeout in ns (0: none)
    std::uint8_t min_rnr_timer_ = 0;  ///< options_.min_rnr_timer, which this QP's RNR NAKs carry
    OneAtATime send_posters_;         ///< threads inside post_send
    std::shared_ptr<SimCq> send_cq_;
    std::shared_ptr<SimCq> recv_cq_;

    // requester transport state
    std::uint64_t rd_atomic_end_ = 0;  ///< one past the last read/atomic transmitted (fence waits for it)
    std::uint64_t tx_high_ = 0;        ///< one past the highest message ever transmitted
    std::uint32_t rnr_count_ = 0;
    std::uint32_t retry_count_ = 0;
    std::uint32_t rnr_gen_ = 0;
    // reorder=qp_paths: when this QP's own send engine is next idle, and the extra latency of its path
    // (chosen from the seed and the QP number at connect, 0..latency_ns).
    std::uint64_t engine_free_ = 0;
    std::uint64_t path_ns_ = 0;
    std::uint64_t tx_delay_ = 0;  ///< from a transmission's start to its Event::base: latency, and path_ns_ with qp_paths

    // Staging: the cursor (the next packet to look at: message stage_msn_, packet stage_k_ in leaving
    // order), the due time of its valid key (UINT64_MAX: none), and the staged packets, oldest first, with
    // their bytes in a ring (both rings keep their capacity; a packet's bytes are contiguous). The cursor
    // and the bounds of the packets' ring are read for every message; the rings are further down.
    std::uint64_t stage_msn_ = 0;
    std::uint32_t stage_k_ = 0;
    std::uint32_t stage_gen_ = 0;
    std::uint64_t stage_due_ = UINT64_MAX;
    std::uint64_t staged_head_ = 0, staged_tail_ = 0;

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
        std::uint64_t checked = 0;    ///< the domain's mr_epoch when the message's target passed its check
        bool consumes_recv = false;
    } inbound_;

    /// The read response being sent: the responder reads its memory packet by packet as each leaves, so
    /// the data can mix what was there before and after a store, or another QP's write, that lands meanwhile.
    struct Response {
        bool active = false;
        std::uint32_t requester = 0;
        std::uint32_t gen = 0;
        std::uint32_t packets = 0;
        std::uint32_t next = 0;       ///< the next packet to read
        std::uint64_t msn = 0;
        std::uint64_t start = 0;      ///< when its first packet leaves
    } response_;

    /// The read or atomic executing later than messages behind it (read_after_write).
    struct Deferred {
        bool active = false;
        std::uint32_t requester = 0;
        std::uint32_t gen = 0;
        std::uint64_t msn = 0;
    } deferred_;

    // receive queue: [retired, completed) consumed but not yet polled, [completed, posted) posted and free.
    // With a shared receive queue, the few receives taken from it and not yet completed: a completion
    // releases its entry at once.
    std::shared_ptr<SimSrq> srq_;
    std::uint32_t rq_stride_ = 1;  ///< segments per receive entry
    std::vector<RqEntry> rq_;
    std::vector<LocalSegment> rq_sge_;
    QueueRing rq_ring_;

    // The staged packets (see stage_msn_ above).
    struct Staged {
        std::uint64_t msn = 0;
        std::uint64_t base = 0;    ///< the transmission (SimQp::tx_base)
        std::uint64_t offset = 0;  ///< the packet's offset in the message
        std::uint64_t at = 0;      ///< where its bytes start in stage_bytes_ (a running count)
        std::uint32_t k = 0;     ///< its place in leaving order
        std::uint32_t n = 0;
    };
    std::vector<Staged> staged_;
    std::vector<std::byte> stage_bytes_;
    std::uint64_t bytes_head_ = 0, bytes_tail_ = 0;

    // The digest of the source reads of one transmission (fold_source): the lanes' sums of words (a) and of
    // words times their block's index in the message (c); `epoch` 0 when no fold is under way.
    struct Fold {
        std::uint64_t msn = 0;
        std::uint64_t base = 0;
        std::uint64_t epoch = 0;
        std::uint32_t next = 0;  ///< the packet expected next
        std::uint64_t a[8]{}, c[8]{};
    } fold_;

    QpOptions options_;
    std::uint32_t max_inline_ = 0;
    std::vector<std::byte> sq_inline_;
    std::vector<SqOperands> sq_operands_;  // slot -> what only some send-queue entries carry
    OneAtATime recv_posters_;  ///< threads inside post_recv
};

inline SimQp* FabricState::find_qp(std::uint32_t qpn) const noexcept {
    const std::uint32_t slot = slot_of(qpn);
    if (slot >= qps_.size()) return nullptr;
    SimQp* qp = qps_[slot].qp;
    return qp && qp->qp_num == qpn ? qp : nullptr;
}

// Called for every event (FabricState::step, another file): inline, so that the common case costs a compare.
inline bool SimQp::drop_if_stale(const Event& e) noexcept {
    switch (e.kind) {
        case EventKind::timeout:
            if (e.generation != timer_gen_) return true;
            if (!timer_armed_) {
                timer_pending_ = false;
                return true;
            }
            return false;
        case EventKind::rnr_retry: return !rnr_wait_ || e.generation != rnr_gen_;
        case EventKind::place: return !inbound_.active || e.generation != inbound_.gen;
        case EventKind::deferred: return !deferred_.active || e.generation != deferred_.gen;
        case EventKind::respond: return !response_.active || e.generation != response_.gen;
        default: return false;
    }
}

inline std::byte* SimQp::reserve_staging(std::uint32_t n, std::uint64_t& at) {
    for (;;) {
        const std::uint64_t cap = stage_bytes_.size();
        std::uint64_t pos = bytes_tail_;
        if (cap != 0 && (pos & (cap - 1)) + n > cap) pos += cap - (pos & (cap - 1));  // contiguous: skip the end
        if (cap != 0 && pos + n - bytes_head_ <= cap) {
            bytes_tail_ = pos + n;
            at = pos;
            return &stage_bytes_[pos & (cap - 1)];
        }
        grow_staging(n);
    }
}

inline const std::byte* SimQp::staged_data(const Staged& st) const noexcept {
    return &stage_bytes_[st.at & (stage_bytes_.size() - 1)];
}

inline void SimQp::pop_staged() noexcept {
    const Staged& st = staged_[staged_head_++ & (staged_.size() - 1)];
    bytes_head_ = staged_head_ == staged_tail_ ? bytes_tail_ : st.at + st.n;
}

/// IB encodings to virtual nanoseconds.
std::uint64_t ack_timeout_ns(std::uint8_t timeout) noexcept;
std::uint64_t rnr_delay_ns(std::uint8_t min_rnr_timer) noexcept;

}  // namespace weft::sim::detail
