// weft/sim/fabric.hpp — control of the simulated fabric behind `sim` domains.
//
// Every Domain opened with the same `fabric=NAME` shares one simulated fabric: its nodes, queue pairs and
// virtual clock. Progress normally happens inside CompletionQueue::poll/wait; this API lets a test drive
// it explicitly, look at the clock, inject faults and read the misuse reports (docs/simulator.md).
//
//   auto a = weft::open("sim:fabric=t1,seed=7,mtu=1024");
//   auto b = weft::open("sim:fabric=t1,seed=7,mtu=1024");  // a second node on the same fabric
//   ...post work...
//   auto fab = weft::sim::Fabric::of(a);
//   fab.run_until_idle();                                  // deliver everything in flight
//   std::cout << fab.now() << " ns of virtual time\n";
//   fab.cut(a, b, std::chrono::milliseconds(5));           // lose every packet between them for 5 ms
//   for (const auto& m : fab.misuse()) std::cerr << m << '\n';   // e.g. memory released while in use
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <weft/domain.hpp>

namespace weft::sim {

namespace detail {
class FabricState;
}

/// Configuration keys of the `sim` backend, for reference (docs/simulator.md has the model):
///   seed=N        RNG seed for every choice the semantics allow (default 1)
///   fabric=NAME   domains with the same name share a fabric (default "default")
///   latency_ns=N  one-way latency per packet (default 1000)
///   gbps=X        link bandwidth in Gbit/s (default 100)
///   mtu=N         packet payload: 256, 512, 1024, 2048, 4096 (default 4096)
///   reorder=R     legal behaviours chosen by the seed: all (default), none, or names joined by '|' from
///                 torn, read_after_write, jitter, qp_paths, program
///   program_ns=N  reorder=program: the longest pause of a program between two API calls (default 5000)
///   programs=P    per_node (default: each domain is its own program) or one (all calls form one program)
///   profile=P     spec (default) or rxe: whose error statuses to report
///   strict=1      abort on the first misuse instead of only reporting it
///   check_sources=0  do not digest send/write sources to catch buffers changed in flight (default 1)
///   drop=P, duplicate=P, delay=P  probabilities that a packet is lost, arrives twice, or is held up by up to
///                 delay_ns (default 10000); RC retransmission hides them from the program
///   schedule=T    systematic exploration: take the choices of schedule token T (weft::testing::explore)
///   trace=PATH    record a trace from the start and write it to PATH as Perfetto JSON at the end
// libweft builds the simulator with hidden visibility (its internals are not part of the ABI); this class is
// the simulator's public face and is exported.
class __attribute__((visibility("default"))) Fabric {
public:
    /// A duration meaning "until healed" (cut) or "for good" (stall).
    static constexpr std::chrono::nanoseconds forever = std::chrono::nanoseconds::max();

    /// Packet fault probabilities, applied to every packet (requests, acknowledgements, read responses).
    struct Faults {
        double drop = 0;       ///< lost; the requester's ACK timeout or a sequence NAK recovers it
        double duplicate = 0;  ///< arrives twice; the responder acknowledges the copy again
        double delay = 0;      ///< held up by 1..max_delay ns; a later packet may overtake it (sequence NAK)
        std::chrono::nanoseconds max_delay{10000};  ///< longest delay of a delayed packet
    };
    /// Counters of what the fault model did.
    struct Stats {
        std::uint64_t dropped = 0;     ///< by drop=, a cut link or a crashed node
        std::uint64_t duplicated = 0;  ///< by duplicate=
        std::uint64_t delayed = 0;     ///< by delay=
        std::uint64_t retransmitted = 0;  ///< requests sent again after a timeout or a sequence NAK
        std::uint64_t reread = 0;      ///< reads executed again for a retransmitted request (memory read anew)
        /// Send/write packets whose source bytes were copied as they left, because the program could run
        /// before they landed (docs/simulator.md, "Sources read at transmission").
        std::uint64_t staged = 0;
    };

    /// The fabric of a `sim` domain. Throws weft::Error (invalid_argument) for a domain of another backend.
    static Fabric of(const Domain& domain);

    /// Virtual time in nanoseconds since the fabric was created.
    std::uint64_t now() const;
    /// Program time (reorder=program): when the last API call of `node`'s program took effect, never before
    /// now(). A thread driving several nodes polls the one furthest behind first, so that no node's program
    /// runs ahead and drags the fabric's time past what the others have yet to do (docs/simulator.md,
    /// "Program time"). Without program time, now().
    std::uint64_t program_time(const Domain& node) const;
    /// Processes events until nothing is in flight (or `max_events` ran); returns the number processed.
    std::size_t run_until_idle(std::size_t max_events = SIZE_MAX);
    /// Processes the events of the next `duration` of virtual time and advances the clock by it.
    void run_for(std::chrono::nanoseconds duration);
    /// True when no message, acknowledgement or timer is pending.
    bool idle() const;

    /// The fabric's name (the `fabric` key).
    const std::string& name() const;
    /// The seed every random choice comes from (the `seed` key).
    std::uint64_t seed() const;
    /// Events processed since the fabric was created.
    std::uint64_t events_processed() const;

    // ---- faults (every random choice comes from the fabric's seed)

    /// Replaces the packet fault probabilities (initially from the drop/duplicate/delay keys).
    void set_faults(const Faults& faults);
    /// The packet fault probabilities in force.
    Faults faults() const;
    /// Cuts the link between the nodes of two domains for `duration` of virtual time (or until heal()):
    /// packets between them are lost, so RC requests end in transport_retry_exceeded after
    /// timeout x (retry_cnt + 1) unless the link comes back first.
    void cut(const Domain& a, const Domain& b, std::chrono::nanoseconds duration = forever);
    /// Restores a link cut with cut().
    void heal(const Domain& a, const Domain& b);
    /// The node of `domain` stops for good: it sends, receives and completes nothing more (its memory stays
    /// as it was, even for a read or atomic its peer executes later), and its QPs may be destroyed with
    /// sends in flight without a misuse report.
    void crash(const Domain& domain);
    /// The port of `domain`'s node goes down for `duration` of virtual time (or until port_up()): every
    /// packet to or from the node is lost, as with a cut of all its links, and its QPs stay as they are
    /// (RC requests end in transport_retry_exceeded unless the port comes back within the retry budget).
    /// The domain reports EventType::port_error at once (Domain::next_event) and port_active when the port
    /// comes back; a call while the port is down only changes when it comes back.
    void port_down(const Domain& domain, std::chrono::nanoseconds duration = forever);
    /// Brings a port taken down with port_down() back now (port_active); nothing when it is up.
    void port_up(const Domain& domain);
    /// The node of `domain` takes up no incoming request for `duration`; requests wait, in order.
    void stall(const Domain& domain, std::chrono::nanoseconds duration);
    /// The next `count` register_memory / create_qp calls on this fabric throw weft::Error
    /// (resource_exhausted, "injected").
    void fail_next_registration(unsigned count = 1);
    /// Like fail_next_registration, for create_qp.
    void fail_next_qp_creation(unsigned count = 1);
    /// What the fault model did so far.
    Stats stats() const;

    /// Systematic exploration: the choice points a fabric called `name`, opened with `schedule=`, met — one
    /// entry per point in the order met, its number of alternatives (2 or 3) — recorded when it closed.
    /// Taken: a second call returns nothing until another such fabric of that name closes.
    static std::vector<std::uint8_t> explored_choices(const std::string& name);

    // ---- trace

    /// Starts recording (again, from empty) up to `max_records` records: every request transmission, packet
    /// placement, acknowledgement or NAK, completion, lost packet and deferred read. The storage is reserved
    /// here; recording never allocates, and stops counting records once full. Same program and seed give
    /// the same trace. The key `trace=PATH` starts one at fabric creation and writes it to PATH when the
    /// last domain of the fabric closes.
    void start_trace(std::size_t max_records = std::size_t{1} << 20);
    /// Stops recording; the records so far stay readable.
    void stop_trace();
    /// The trace as Chrome/Perfetto trace-event JSON (ui.perfetto.dev or chrome://tracing): one process
    /// per node, one thread per QP, times in virtual microseconds.
    std::string trace_json() const;
    /// The same trace as a compact text log, one line per record, ordered as recorded:
    ///   "   12.345 us  node 0 qp 65537  transmit write msn=3 bytes=4096 -> qp 131074"
    /// Handy for diffing two runs or a failing seed against a passing one.
    std::string trace_text() const;

    /// Misuses of the API seen so far, oldest first, one sentence each (each is also printed to stderr as it
    /// happens; with `strict=1` the first one aborts the process). Recorded: a memory region deregistered
    /// while posted send work uses it, a message arriving into a receive whose region was deregistered, a
    /// completion-queue overrun (the CQ and its QPs go to error), a QP destroyed with sends in flight.
    std::vector<std::string> misuse() const;
    /// Forgets the recorded misuses.
    void clear_misuse();

    /// Misuses recorded by every fabric of the process since it started (clear_misuse() does not lower
    /// it), and the text of the latest one. weft::testing::sweep compares it around each seed.
    struct MisuseTally {
        std::uint64_t count = 0;  ///< misuses recorded in this process
        std::string last;         ///< the latest one's sentence; empty when none
    };
    /// The process-wide tally of misuses (see MisuseTally).
    static MisuseTally misuse_tally();

private:
    explicit Fabric(std::shared_ptr<detail::FabricState> state) : state_(std::move(state)) {}
    std::shared_ptr<detail::FabricState> state_;
};

}  // namespace weft::sim
