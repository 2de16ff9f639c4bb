// kv.hpp — a small key-value store on weft: GET by one-sided RDMA read, PUT through a log in the server's
// memory, written with write_with_imm.
//
//   kv::Server server(weft::open(config));                  // a table of 4096 slots, one registered region
//   auto dom = weft::open(config);                          // the clients' node (sim: same fabric)
//   kv::Client client(dom);
//   kv::link(server, client);          // address exchange; across processes Listener::accept / weft::connect
//   client.put(7, "seven");            // starts it; call server.progress() and client.progress() until the
//   ...                                // latter returns true: client.result().version == 1
//   client.get(7);                     // again until client.progress() is true: result().value == "seven"
//
// The table is a hash table of buckets of fixed-size slots (key, version, value up to 64 bytes, checksum)
// in one region the server registers with remote_read. A GET reads the key's whole bucket with one RDMA
// read and looks for the key there: the server's CPU is not involved (Pilaf, FaRM). A PUT is an RDMA
// write_with_imm of the request into the client's own ring of log entries in the server's memory (the
// immediate names the entry); its receive completion tells the server's program, which stores the slot and
// replies with its new version, so writers never race each other.
// Readers do race the writer: the server's CPU may store a slot while a NIC reads it, and a read of several
// packets reads memory packet by packet as the response leaves, so a read can return half an old slot and
// half a new one. Every slot carries a checksum of its contents; a GET that finds a slot that does not
// match it reads the bucket again (Client::Stats::torn_reads counts those).
//
// Keys are never moved or deleted: a key keeps its slot, and its version only grows. Everything here is
// driven by progress() calls from one thread: no thread of its own, no blocking call on the data path.
#pragma once

#include <weft/weft.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kv {

/// Bytes of one slot: version (8), key (8), value length (4), reserved (4), value (64), checksum (8).
constexpr std::size_t slot_size = 96;
/// The longest value.
constexpr std::size_t max_value = 64;
/// Bytes of every message, both ways (log entries, replies and the hello).
constexpr std::size_t message_size = 96;
/// Log entries of each client's ring in the server's memory.
constexpr std::uint32_t log_entries = 8;
/// The largest bucket a client reads in one GET.
constexpr std::uint32_t max_bucket_slots = 32;

/// One slot as the table holds it. version 0 means empty.
struct Slot {
    std::uint64_t version = 0;
    std::uint64_t key = 0;
    std::string value;
};
/// Writes `s` at `out` (slot_size bytes, little-endian) with its checksum.
void encode_slot(const Slot& s, std::byte* out);
/// The slot at `in`, or nothing when its checksum does not match its contents (a torn read).
std::optional<Slot> decode_slot(const std::byte* in);

/// Table geometry.
struct ServerOptions {
    std::uint32_t slots = 4096;        ///< a power of two
    std::uint32_t bucket_slots = 8;    ///< slots a key may occupy, read together by a GET (<= max_bucket_slots)
    std::uint32_t max_clients = 64;    ///< connections at once
};

/// The table's owner: applies PUTs, answers them, and lets clients read the table directly.
class Server {
public:
    /// Registers the table on `dom` (which it keeps) and creates its completion queue.
    explicit Server(weft::Domain dom, const ServerOptions& options = {});

    /// Stores `value` under `key` in the server's own memory, as a PUT does; the new version, or nothing
    /// when the key's bucket is full. Throws std::invalid_argument for a value longer than max_value.
    std::optional<std::uint64_t> store(std::uint64_t key, std::string_view value);

    /// Creates the QP of one more client (state init, its receive posted) and returns the client's index.
    /// Connect `qp(i)` (QueuePair::connect with the client's address, or Listener::accept), then welcome(i).
    std::size_t add_client();
    /// The QP of client `i`.
    weft::QueuePair& qp(std::size_t i) { return peers_.at(i).qp; }
    /// Sends client `i`, now connected, the descriptors of the table and of its log ring, and the geometry.
    void welcome(std::size_t i);

    /// Polls the completion queue once and handles what it returned: applies PUTs, replies, says goodbye.
    /// Returns the number of completions handled. Throws std::runtime_error on an error completion.
    std::size_t progress();
    /// Whether every client said goodbye and got its answer.
    bool done() const;

    /// The domain the table lives on (for weft::listen, and for the driver's program time on sim).
    weft::Domain& domain() { return dom_; }
    const weft::Domain& domain() const { return dom_; }
    /// PUTs applied so far, store() included.
    std::uint64_t puts() const { return puts_; }

private:
    struct Peer {
        weft::QueuePair qp;
        std::uint32_t entry = 0;       // the log entry of the request being handled or waiting
        bool reply_in_flight = false;  // its reply buffer belongs to the NIC until the send completes
        bool request_waiting = false;  // a request arrived meanwhile: handled once the buffer is free
        bool leaving = false, gone = false;
    };
    void handle(std::size_t i);
    void reply(std::size_t i);
    std::byte* rx(std::size_t i) { return messages_.data() + 2 * i * message_size; }
    std::byte* tx(std::size_t i) { return rx(i) + message_size; }
    std::byte* log_entry(std::size_t i, std::uint32_t entry) {
        return log_.data() + (i * log_entries + entry) * message_size;
    }

    weft::Domain dom_;
    ServerOptions options_;
    std::vector<std::byte> table_;
    weft::MemoryRegion table_mr_;
    std::vector<std::byte> messages_;  // per client: a receive buffer, then a reply buffer
    weft::MemoryRegion messages_mr_;
    std::vector<std::byte> log_;       // per client: a ring of log_entries requests the client writes
    weft::MemoryRegion log_mr_;
    weft::CompletionQueue cq_;
    std::vector<Peer> peers_;
    std::uint64_t puts_ = 0;
};

/// What an operation came back with.
enum class Status { ok, not_found, full };

/// The result of the last GET or PUT.
struct Result {
    Status status = Status::ok;
    std::uint64_t key = 0;
    std::uint64_t version = 0;  ///< the slot's version (0 when not found); for a PUT, the one it created
    std::string value;          ///< what a GET found
};

/// One connection to a Server; one operation at a time.
class Client {
public:
    /// Creates the QP, CQ and buffers on `dom` and posts the receive for the server's hello.
    explicit Client(weft::Domain& dom);

    /// The QP to connect (QueuePair::connect with the server's address, or weft::connect).
    weft::QueuePair& qp() { return qp_; }
    /// Whether the server's hello arrived (drive progress() until it has).
    bool ready() const { return table_.length() != 0; }
    /// Whether an operation is under way.
    bool busy() const { return op_ != Op::none; }

    /// Starts a GET (needs ready() and not busy()).
    void get(std::uint64_t key);
    /// Starts a PUT. Throws std::invalid_argument for a value longer than max_value.
    void put(std::uint64_t key, std::string_view value);
    /// Starts the goodbye; done when progress() returns true. The server forgets the client after it.
    void close();

    /// Polls the completion queue once; true when the operation under way completed (see result()).
    /// Throws std::runtime_error on an error completion or a malformed message.
    bool progress();
    /// The last completed operation's result.
    const Result& result() const { return result_; }

    struct Stats {
        std::uint64_t gets = 0, puts = 0;
        std::uint64_t torn_reads = 0;  ///< bucket reads that found a slot not matching its checksum
    };
    const Stats& stats() const { return stats_; }

private:
    enum class Op { none, get, put, close };
    void read_bucket();
    void write_request();
    void on_hello(std::uint32_t length);
    void on_reply(std::uint32_t length);

    std::vector<std::byte> buf_;  // receive | request | bucket
    weft::MemoryRegion mr_;
    weft::CompletionQueue cq_;
    weft::QueuePair qp_;
    weft::RemoteRegion table_;
    weft::RemoteRegion log_;  // this client's ring in the server's memory
    std::uint32_t next_entry_ = 0;
    std::uint32_t buckets_ = 0, bucket_slots_ = 0;
    Op op_ = Op::none;
    bool send_done_ = true, reply_done_ = true;
    unsigned attempts_ = 0;
    Result result_;
    Stats stats_;
};

/// Checks a history of operations for what a linearizable store must show, in the order this thread saw
/// them start and complete:
///  - a GET returns a value some PUT wrote for that key, or nothing before any PUT;
///  - one version of a key names one value, whoever saw it;
///  - for each client, a key's version never goes backwards;
///  - an operation that starts after a PUT completed sees that PUT's version or a later one.
class Checker {
public:
    void put_started(std::size_t client, std::uint64_t key, const std::string& value);
    void get_started(std::size_t client, std::uint64_t key);
    void completed(std::size_t client, const Result& r);
    /// What went wrong so far, one sentence each.
    const std::vector<std::string>& violations() const { return violations_; }

private:
    struct Pending {
        bool put = false;
        std::uint64_t key = 0, floor = 0;  // floor: the latest completed PUT's version when it started
        std::string value;                 // what a PUT writes
    };
    void violation(std::string what);
    std::map<std::uint64_t, std::set<std::string>> written_;      // key -> values PUTs carried
    std::map<std::pair<std::uint64_t, std::uint64_t>, std::string> seen_;  // (key, version) -> value
    std::map<std::pair<std::size_t, std::uint64_t>, std::uint64_t> last_;  // (client, key) -> version
    std::map<std::uint64_t, std::uint64_t> acknowledged_;          // key -> latest completed PUT's version
    std::map<std::size_t, Pending> pending_;
    std::vector<std::string> violations_;
};

/// Connects a new client QP of `server` to `client` in this process by exchanging QP addresses, then
/// welcomes it.
void link(Server& server, Client& client);

/// A mixed GET/PUT workload for run().
struct Workload {
    std::uint64_t ops = 10000;      ///< per client
    std::uint64_t keys = 64;        ///< keys 0 .. keys-1, chosen uniformly
    unsigned put_percent = 20;
    std::uint64_t seed = 1;         ///< of the workload's choices (not the simulator's)
};

/// What run() measured.
struct Report {
    std::uint64_t gets = 0, puts = 0, not_found = 0, full = 0, torn_reads = 0;
    std::chrono::duration<double> elapsed{};
    std::uint64_t virtual_ns = 0;  ///< simulated time the run took (sim only)
    std::vector<std::string> violations;
};

/// Runs `w` on `clients` (all on `client_dom`, connected and not yet ready) from this thread, driving
/// `server` too when it lives in this process, checks the history with a Checker, then closes every
/// client. On the simulator it polls the node whose program is furthest behind (docs/simulator.md,
/// "Program time"), and throws std::runtime_error when the fabric is idle and nothing is left to poll;
/// elsewhere when nothing completes for `stall_limit`.
Report run(const Workload& w, std::span<Client> clients, const weft::Domain& client_dom, Server* server,
           std::chrono::seconds stall_limit = std::chrono::seconds(10));

}  // namespace kv
