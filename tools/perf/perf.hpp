// weft-perf's engine: what one measurement is (Spec), the memory and QP of one side (Side), the side that
// measures (Requester) and the side that answers (Responder). main.cpp drives them in one process or in
// two (control.cpp carries the specs and results between the processes).
//
// Memory of a side, one registered region:
//   [ A: area bytes ][ B: area bytes ][ atomics: counter (8) + results (8 x max_depth), 64-aligned ]
// A holds the sources of writes and sends and is where reads land; B is what the peer writes into and
// reads from, and holds the receive buffers. A test cuts A and B into slots of `stride` bytes; request j
// uses source slot j % slots and target slot j % slots, so a slot's contents are a function of the slot
// alone (pattern(salt, slot)) and never change while a request uses them. Latency tests stamp their
// iteration into slot 0 instead and wait for each request's completion before stamping the next.
#pragma once

#include <weft/weft.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft_perf {

enum class Op : std::uint8_t { write, write_imm, read, send, fetch_add, compare_swap };
inline constexpr Op all_ops[] = {Op::write, Op::write_imm, Op::read, Op::send, Op::fetch_add, Op::compare_swap};

std::string_view name(Op op) noexcept;
std::optional<Op> parse_op(std::string_view text) noexcept;
constexpr bool is_atomic(Op op) noexcept { return op == Op::fetch_add || op == Op::compare_swap; }
/// Latency is measured as a ping-pong (both sides send) for these; as a lone round trip for read/atomics.
constexpr bool is_ping_pong(Op op) noexcept { return op == Op::write || op == Op::write_imm || op == Op::send; }
/// Whether the op consumes a receive at the peer.
constexpr bool consumes_receive(Op op) noexcept { return op == Op::write_imm || op == Op::send; }
/// The capability the op needs, or empty when every backend has it.
std::optional<weft::Feature> feature_of(Op op) noexcept;
/// Empty when `caps` supports `op`; why not otherwise.
std::string unsupported(Op op, const weft::Capabilities& caps);

enum class Test : std::uint8_t { lat, bw };
std::string_view name(Test t) noexcept;

/// One measurement. Travels from client to server in two-process mode.
struct Spec {
    Op op = Op::write;
    Test test = Test::bw;
    std::uint32_t size = 65536;     ///< bytes per request (8 for atomics)
    std::uint32_t iters = 5000;     ///< measured requests (bw) or round trips (lat)
    std::uint32_t warmup = 0;       ///< requests or round trips before the clock starts
    std::uint32_t depth = 128;      ///< requests in flight (bw)
    std::uint32_t cq_mod = 100;     ///< one signaled request in every cq_mod (bw)
    std::uint32_t batch = 1;        ///< requests per post_send call (bw)
    std::uint32_t inline_size = 0;  ///< requests of at most this many bytes go inline (send and writes)
    std::uint32_t rx_depth = 512;   ///< receives the responder keeps posted (bw of send / write_imm)
    bool check = false;             ///< compare every byte, not only the stamps and a final image

    std::uint64_t total() const noexcept { return std::uint64_t{warmup} + iters; }
    bool uses_inline() const noexcept {
        return size <= inline_size && inline_size > 0 && (op == Op::write || op == Op::write_imm || op == Op::send);
    }
};

/// How a test cuts the areas into slots.
struct Layout {
    std::uint32_t stride = 64;   ///< bytes per slot (size rounded up to 64)
    std::uint32_t slots = 1;     ///< source and target slots
    std::uint32_t receives = 1;  ///< receives the responder keeps posted (each in its own slot of B)
};
Layout layout_of(const Spec& s, std::uint64_t area);

/// Fixed at setup for the whole run (both sides agree on it).
struct Setup {
    std::uint64_t area = 8u << 20;  ///< bytes of A and of B each
    std::uint32_t max_depth = 512;  ///< send and receive queue depth
    std::uint32_t inline_size = 0;
    bool atomics = true;            ///< register with remote_atomic (only where the backend has atomics)
};

/// What a latency test measured: microseconds per operation (one way for ping-pongs, as perftest).
struct LatencyStats {
    double min = 0, max = 0, typical = 0, avg = 0, stdev = 0, p99 = 0, p999 = 0;
};
LatencyStats summarize(std::vector<double>& us);

/// A failure that ends the run: reported on stderr, exit status `code`.
struct Failure {
    std::string why;
    int code = 1;
};
[[noreturn]] void fail(std::string why, int code = 1);

/// Gives up when no completion came for this long (a stall is reported, never waited on forever).
inline constexpr auto stall_limit = std::chrono::seconds(20);

// ---- Memory and queue pair of one side

class Side {
public:
    /// Opens the domain and registers memory; the data QP is made by make_qp (after the peer is known in
    /// two-process mode).
    Side(const char* role, weft::Domain domain, const Setup& setup);
    ~Side();
    Side(const Side&) = delete;
    Side& operator=(const Side&) = delete;

    void make_qp();
    /// The peer's region (its whole registered memory, laid out as ours).
    void set_peer(const weft::RemoteRegion& peer);

    const char* role;
    Setup setup;
    weft::Domain dom;
    weft::CompletionQueue cq;
    weft::QueuePair qp;
    weft::MemoryRegion mr;

    std::byte* a() const noexcept { return base_; }
    std::byte* b() const noexcept { return base_ + setup.area; }
    std::uint64_t* counter() const noexcept { return reinterpret_cast<std::uint64_t*>(base_ + 2 * setup.area); }
    std::uint64_t* results() const noexcept { return counter() + 8; }
    weft::LocalSegment a_slot(std::uint64_t offset, std::uint32_t len) const { return mr.slice(offset, len); }
    weft::LocalSegment b_slot(std::uint64_t offset, std::uint32_t len) const {
        return mr.slice(setup.area + offset, len);
    }
    weft::LocalSegment result_slot(std::uint32_t k) const { return mr.slice(2 * setup.area + 64 + 8 * std::uint64_t{k}, 8); }
    /// The peer's B at `offset`, its counter.
    std::uint64_t peer_b_addr() const noexcept { return peer_.addr() + setup.area; }
    std::uint64_t peer_counter_addr() const noexcept { return peer_.addr() + 2 * setup.area; }
    std::uint64_t peer_rkey() const noexcept { return peer_.rkey(); }

    /// Receives posted and not yet consumed (tests leave some; drain() consumes them).
    std::uint32_t posted_receives = 0;

    std::size_t bytes() const noexcept { return bytes_; }

private:
    std::byte* base_ = nullptr;
    std::size_t bytes_ = 0;
    weft::RemoteRegion peer_;
};

/// Fills `len` bytes with the pattern of (salt, slot).
void fill_pattern(std::byte* p, std::uint32_t len, std::uint8_t salt, std::uint32_t slot) noexcept;
/// The first offset where the `len` bytes at `p` differ from the pattern's bytes [from, from + len), or -1.
long long pattern_mismatch(const std::byte* p, std::uint32_t len, std::uint8_t salt, std::uint32_t slot,
                           std::uint32_t from = 0) noexcept;
inline constexpr std::uint8_t client_salt = 0x5a, server_salt = 0xc3;

/// The measuring side of a test. `idle()` is called whenever it waits (in one process: the responder's
/// step; in two: nothing).
class Requester {
public:
    explicit Requester(Side& s) : s_(s) {}

    /// Prepares memory and receives for `spec`.
    void begin(const Spec& spec);
    /// Runs a latency test; returns the per-operation samples in microseconds.
    template <class Idle>
    std::vector<double> run_lat(Idle&& idle);
    /// Runs a bandwidth test; returns the seconds from the first measured post to the last completion.
    template <class Idle>
    double run_bw(Idle&& idle);
    /// Checks what only the requester can see (reads' data, atomics' results); empty when all is well.
    std::string finish();

    /// A progress line on stderr every half second while a run lasts, when on.
    bool progress = false;
    std::string label;

private:
    template <class Idle>
    void wait_echo(std::uint64_t i, Idle& idle);
    template <class Idle>
    void wait_sends(Idle& idle);
    void show_progress(std::uint64_t done, std::uint64_t total, bool last);
    [[noreturn]] void error_completion(const weft::Completion& c, const char* what);
    [[noreturn]] void stalled(const char* what);
    void repost_receive(std::uint64_t id);

    Side& s_;
    Spec spec_{};
    Layout lay_{};
    std::vector<weft::SendRequest> templates_;  // one per slot: everything but id, flags and operands
    std::vector<weft::LocalSegment> results_;   // atomics' result slots
    std::vector<weft::SendRequest> batch_;
    std::uint64_t sends_out_ = 0;  // lat: requests not yet completed
    std::chrono::steady_clock::time_point progress_at_{};
    bool progress_shown_ = false;
};

/// The answering side of a test: echoes ping-pongs, keeps receives posted, and checks what arrived.
class Responder {
public:
    explicit Responder(Side& s) : s_(s) {}

    void begin(const Spec& spec);
    /// Polls once and reacts. Never blocks.
    void step();
    /// True once the responder has seen every message it waits for (ping-pongs and receives); always true
    /// for tests it only serves passively (writes, reads and atomics into its memory).
    bool done() const noexcept { return done_; }
    /// Checks what arrived; empty when all is well.
    std::string finish();

private:
    void on_message(std::uint64_t n, const weft::Completion* c);
    [[noreturn]] void error_completion(const weft::Completion& c);

    Side& s_;
    Spec spec_{};
    Layout lay_{};
    void post_echo();

    std::uint64_t seen_ = 0;     // messages taken (ping-pong round trips, or receives)
    std::uint64_t sends_out_ = 0;
    bool echo_pending_ = false;  // a ping-pong message arrived; its echo waits for the previous one's completion
    bool done_ = true;
    weft::SendRequest echo_{};
    std::string error_;
    std::vector<weft::RecvRequest> reposts_;
};

/// Consumes the receives a side left posted after a test: each side sends as many zero-length messages as
/// the other has receives posted, and waits until its own are consumed and its sends complete.
class Drainer {
public:
    Drainer(Side& s, std::uint32_t peer_left) : s_(s), to_send_(peer_left) {}
    /// Posts what fits and polls once. Never blocks.
    void step();
    bool done() const noexcept { return to_send_ == 0 && out_ == 0 && s_.posted_receives == 0; }
    /// Steps until done, failing after stall_limit without progress.
    void run();

private:
    Side& s_;
    std::uint32_t to_send_;
    std::uint32_t out_ = 0;
};

}  // namespace weft_perf

#include "perf_impl.hpp"
