// Conformance harness: the backend under test, a connected pair of QPs, and completion helpers.
//
// Every case in tests/conformance runs against the configuration given as `-- --backend=CONFIG` (or
// $WEFT_CONFORMANCE_BACKEND, or $WEFT_BACKEND, or "sim"). Cases that need an optional feature declare it
// with `*weft::test::needs(Feature::x)`, which Boost.Test reports as a skip with the reason.
//
// With `--peer=process` side b of every Pair lives in a second process (peer.hpp); its handles are proxies,
// and its memory comes from an arena both processes map. Memory a side's domain registers must therefore
// come from Side::memory() (or Memory), never from a plain vector.
#pragma once

#include "peer.hpp"

#include <weft/weft.hpp>

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <initializer_list>
#include <string_view>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace weft::test {

/// The backend configuration named by `--backend=CONFIG` in argv, or the environment (see above).
std::string config_from(int argc, char** argv);
/// The backend configuration under test.
const std::string& backend_config();
/// Capabilities of the backend under test (opened once).
const Capabilities& backend_caps();

/// A precondition decorator: the case is skipped, with the feature named, when the backend lacks it.
boost::unit_test::precondition needs(Feature f);

/// A precondition decorator: the case is skipped, with `reason` (a string literal), unless `holds()` is true
/// for the backend under test.
boost::unit_test::precondition only_if(bool (*holds)(), const char* reason);

/// A documented difference of one stack from the specification: where the specification says a status,
/// the stack named by `profile` reports `status`.
struct Deviation {
    std::string_view profile;
    WcStatus status;
};

/// The status the backend under test must report where the specification says `spec`. Each deviation is
/// listed at its test and in docs/semantics.md; the comparison stays exact.
WcStatus expected(WcStatus spec, std::initializer_list<Deviation> deviations = {});

/// How long a helper waits for a completion on a real backend before failing.
inline constexpr std::chrono::seconds completion_deadline{10};

/// Opens the backend under test for a side b: in the peer process in two-process mode, here otherwise.
Domain open_side_b();

/// Zeroed bytes that `dom` can register: a vector when the domain is in this process, a block of the
/// shared arena when it is in the peer process.
class Memory {
public:
    Memory() = default;
    Memory(const Domain& dom, std::size_t bytes);

    std::span<std::byte> bytes() const noexcept { return bytes_; }

private:
    std::vector<std::byte> local_;
    peer::Block shared_;
    std::span<std::byte> bytes_;
};

/// One side: a domain, its CQ, a QP, and a registered buffer.
struct Side {
    Side();
    ~Side();
    Side(const Side&) = delete;
    Side& operator=(const Side&) = delete;

    Domain domain;
    CompletionQueue cq;
    QueuePair qp;
    Memory storage;              ///< what `buf` views; released after `mr`
    std::span<std::byte> buf;
    MemoryRegion mr;

    /// Zeroed bytes this side's domain can register.
    Memory memory(std::size_t bytes) const { return Memory(domain, bytes); }
    /// Makes `buf` a fresh zeroed buffer of `bytes` for this side's domain.
    void allocate(std::size_t bytes);
    LocalSegment seg(std::size_t off, std::size_t len) const { return mr.slice(off, len); }
    RemoteRegion remote(std::size_t off, std::size_t len) const { return mr.remote().slice(off, len); }
    void fill(std::size_t off, std::size_t len, std::uint8_t seed);
    bool holds(std::size_t off, std::size_t len, std::uint8_t seed) const;
};

/// Asks Pair for two QPs that are not connected yet.
struct Unconnected {};
inline constexpr Unconnected unconnected{};

/// Two connected QPs, `a` (usually the requester) and `b`, each on its own domain.
struct Pair {
    static constexpr std::size_t buffer_size = 64 * 1024;

    explicit Pair(QpOptions options = {}, Access access = all_access);
    /// Both sides set up as above, their QPs still in init; connect() connects them.
    Pair(Unconnected, QpOptions options = {}, Access access = all_access);
    ~Pair();

    /// Connects a to b and b to a, and waits (two processes) until both are ready to send.
    void connect();
    /// Connects them instead through weft::listen on a's domain and weft::connect from b (Feature::listener),
    /// as a program that meets its peer by host:port does.
    void connect_through_listener();
    Pair(const Pair&) = delete;
    Pair& operator=(const Pair&) = delete;

    Side a;
    Side b;
};

/// How long a handshake through a listener may take.
inline constexpr std::chrono::milliseconds handshake_timeout{10000};

/// Where a listener of `dom` listens: $WEFT_CONFORMANCE_LISTEN (host:port) when set; otherwise
/// "conformance:0" on the simulator, 127.0.0.1:0 on ofi, and on verbs the IPv4 address of the domain's RoCE
/// v2 GID, read from sysfs (on the Soft-RoCE guest, 192.0.2.1:0).
std::string listen_address(const Domain& dom);

/// Connects `a` to `b` and `b` to `a`, and waits (two processes) until both are ready to send.
void connect_both(QueuePair& a, QueuePair& b);

/// When $WEFT_CONFORMANCE_RECORD names a file, every completion a case receives and a digest of both
/// buffers at its end are appended there, one line each, so two backends' runs can be compared line by line
/// (tests/CMakeLists.txt: the differential check of sim:profile=rxe against a real rxe device).
void record(const CompletionQueue& cq, const Completion& c);

/// While one is alive nothing is recorded for $WEFT_CONFORMANCE_RECORD. For cases that run on the simulator
/// but are skipped on the stack whose recording is compared with it (declare it before the Pair).
class Unrecorded {
public:
    Unrecorded();
    ~Unrecorded();
    Unrecorded(const Unrecorded&) = delete;
    Unrecorded& operator=(const Unrecorded&) = delete;
};

/// The next asynchronous event of `dom` within `patience` (each call lets the simulator move on, as a poll
/// does), or nothing.
std::optional<AsyncEvent> await_event(Domain& dom, std::chrono::milliseconds patience = completion_deadline);

/// Polls `cq` until one completion arrives or the deadline passes (then fails the test).
Completion next(CompletionQueue& cq);
/// Polls `cq` for up to `attempts` polls (sim) or `patience` (real backends); nullopt when nothing came.
std::optional<Completion> maybe_next(CompletionQueue& cq, std::chrono::milliseconds patience = std::chrono::milliseconds(50));
/// Asserts that nothing more is pending on `cq` for a short while.
void expect_empty(CompletionQueue& cq);

}  // namespace weft::test
