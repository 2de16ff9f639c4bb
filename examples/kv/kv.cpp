// kv.cpp — the key-value store's server, client, history checker and single-threaded driver.
//
// Wire formats, little-endian, so that the two sides need not share a compiler or an architecture:
//
//   slot     0 version u64 | 8 key u64 | 16 length u32 | 20 zero u32 | 24 value[64] | 88 checksum u64
//   message  0 magic u32 | 4 kind u32 | 8 key or version u64 | 16 length or slots u32 |
//            20 bucket slots u32 (hello) | 24 value[64], or (hello) the table's RemoteRegion at 24 and
//            the client's log ring's at 60
//
// Requests (put, bye) are log entries the client writes into its ring with write_with_imm, the immediate
// naming the entry; replies and the hello are sends.
//
// The checksum is FNV-1a over the slot's first 88 bytes. A reader that finds it wrong has read parts of two
// versions of the slot and reads again; the chance that a mix matches is 2^-64.
#include "kv.hpp"

#include <weft/sim/fabric.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace kv {
namespace {

constexpr std::uint32_t magic = 0x31766b77;  // "wkv1"
enum class Kind : std::uint32_t { hello = 1, put = 2, stored = 3, full = 4, bye = 5 };
constexpr std::size_t checksummed = slot_size - 8;
static_assert(24 + max_value + 8 == slot_size && 24 + max_value <= message_size);
constexpr std::size_t log_descriptor_at = 24 + weft::RemoteRegion::encoded_size;
static_assert(log_descriptor_at + weft::RemoteRegion::encoded_size <= message_size);

// The client's work request ids: one per kind of request it can have outstanding.
constexpr std::uint64_t recv_id = 1, send_id = 2, read_id = 3;
// Reads of one bucket before a GET gives up: a writer that rewrites a slot faster than a read can take
// it starves readers, which the store does not try to prevent.
constexpr unsigned max_attempts = 1000;

void put_u32(std::byte* p, std::uint32_t v) {
    for (int k = 0; k < 4; ++k) p[k] = static_cast<std::byte>(v >> (8 * k));
}
void put_u64(std::byte* p, std::uint64_t v) {
    for (int k = 0; k < 8; ++k) p[k] = static_cast<std::byte>(v >> (8 * k));
}
std::uint32_t get_u32(const std::byte* p) {
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v |= static_cast<std::uint32_t>(p[k]) << (8 * k);
    return v;
}
std::uint64_t get_u64(const std::byte* p) {
    std::uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v |= static_cast<std::uint64_t>(p[k]) << (8 * k);
    return v;
}

std::uint64_t checksum(const std::byte* p) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (std::size_t i = 0; i < checksummed; ++i) h = (h ^ static_cast<std::uint64_t>(p[i])) * 0x100000001b3ull;
    return h;
}

// splitmix64's finaliser: spreads nearby keys over the buckets.
std::uint64_t mix(std::uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void write_header(std::byte* m, Kind kind, std::uint64_t word) {
    std::memset(m, 0, message_size);
    put_u32(m, magic);
    put_u32(m + 4, static_cast<std::uint32_t>(kind));
    put_u64(m + 8, word);
}

// The kind of the message at `m`, which arrived as `length` bytes.
Kind read_kind(std::uint32_t length, const std::byte* m, const char* who) {
    if (length != message_size || get_u32(m) != magic) {
        throw std::runtime_error(std::string(who) + ": a " + std::to_string(length) +
                                 "-byte message that is not the store's (is the peer a weft-kv of this version?)");
    }
    return static_cast<Kind>(get_u32(m + 4));
}

void must(weft::PostStatus st, const char* what) {
    if (!st) throw std::runtime_error(std::string(what) + ": " + st.reason());
}

void check_completion(const weft::Completion& c, const std::string& who) {
    if (c.ok()) return;
    throw std::runtime_error(who + ": " + std::string(weft::to_string(c.opcode)) + " failed: " +
                             std::string(weft::to_string(c.status)) + " (" +
                             std::string(weft::describe(c.status)) + ")");
}

}  // namespace

void encode_slot(const Slot& s, std::byte* out) {
    if (s.value.size() > max_value) throw std::invalid_argument("kv: a value is at most 64 bytes");
    std::byte image[slot_size] = {};
    put_u64(image, s.version);
    put_u64(image + 8, s.key);
    put_u32(image + 16, static_cast<std::uint32_t>(s.value.size()));
    std::memcpy(image + 24, s.value.data(), s.value.size());
    put_u64(image + checksummed, checksum(image));
    // Built aside and copied in at once, so the table's slot changes in one short copy; a NIC reading it
    // meanwhile may still take part of the copy, which the checksum reveals.
    std::memcpy(out, image, slot_size);
}

std::optional<Slot> decode_slot(const std::byte* in) {
    if (checksum(in) != get_u64(in + checksummed)) return std::nullopt;
    const std::uint32_t length = get_u32(in + 16);
    if (length > max_value) return std::nullopt;
    return Slot{get_u64(in), get_u64(in + 8), std::string(reinterpret_cast<const char*>(in + 24), length)};
}

// ---- Server

Server::Server(weft::Domain dom, const ServerOptions& options) : dom_(std::move(dom)), options_(options) {
    const auto& o = options_;
    if (o.slots == 0 || o.bucket_slots == 0 || o.bucket_slots > max_bucket_slots || o.slots % o.bucket_slots != 0 ||
        o.max_clients == 0) {
        throw std::invalid_argument("kv: the table needs a positive number of slots, a multiple of the bucket size, "
                                    "and buckets of 1 to 32 slots");
    }
    table_.resize(std::size_t{o.slots} * slot_size);
    for (std::size_t i = 0; i < o.slots; ++i) encode_slot(Slot{}, table_.data() + i * slot_size);
    table_mr_ = dom_.register_memory(table_, weft::Access::local_write | weft::Access::remote_read);
    messages_.resize(2 * std::size_t{o.max_clients} * message_size);
    messages_mr_ = dom_.register_memory(messages_, weft::Access::local_write);
    log_.resize(std::size_t{o.max_clients} * log_entries * message_size);
    log_mr_ = dom_.register_memory(log_, weft::Access::local_write | weft::Access::remote_write);
    // Each client has at most a receive and a reply outstanding.
    cq_ = dom_.create_cq({.depth = std::max(16u, 2 * o.max_clients)});
    peers_.reserve(o.max_clients);
}

std::optional<std::uint64_t> Server::store(std::uint64_t key, std::string_view value) {
    if (value.size() > max_value) throw std::invalid_argument("kv: a value is at most 64 bytes");
    const std::uint64_t bucket = mix(key) % (options_.slots / options_.bucket_slots);
    std::byte* first = table_.data() + bucket * options_.bucket_slots * slot_size;
    // Keys are never deleted, so a bucket's slots fill from the front: the first empty slot ends the search.
    for (std::uint32_t i = 0; i < options_.bucket_slots; ++i) {
        std::byte* p = first + i * slot_size;
        const std::uint64_t version = get_u64(p);
        if (version != 0 && get_u64(p + 8) != key) continue;
        encode_slot(Slot{version + 1, key, std::string(value)}, p);
        ++puts_;
        return version + 1;
    }
    return std::nullopt;
}

std::size_t Server::add_client() {
    if (peers_.size() == options_.max_clients) {
        throw std::runtime_error("kv server: already " + std::to_string(options_.max_clients) + " clients");
    }
    const std::size_t i = peers_.size();
    peers_.push_back({dom_.create_qp({.send_cq = cq_, .recv_cq = cq_, .max_send = 4, .max_recv = 2})});
    must(peers_[i].qp.post_recv({weft::recv(i, messages_mr_.slice(2 * i * message_size, message_size))}),
         "kv server: post_recv");
    return i;
}

void Server::welcome(std::size_t i) {
    std::byte* m = tx(i);
    write_header(m, Kind::hello, 0);
    put_u32(m + 16, options_.slots);
    put_u32(m + 20, options_.bucket_slots);
    const auto table = table_mr_.remote().encode();
    std::memcpy(m + 24, table.data(), table.size());
    // The client's own ring only: it cannot write another client's requests.
    const std::uint64_t ring = std::uint64_t{log_entries} * message_size;
    const auto log = log_mr_.remote().slice(i * ring, ring).encode();
    std::memcpy(m + log_descriptor_at, log.data(), log.size());
    must(peers_.at(i).qp.post_send({weft::send(i, messages_mr_.slice((2 * i + 1) * message_size, message_size))}),
         "kv server: post_send");
    peers_[i].reply_in_flight = true;
}

std::size_t Server::progress() {
    weft::Completion wc[16];
    auto done = cq_.poll(wc);
    for (const auto& c : done) {
        const std::size_t i = c.id;
        check_completion(c, "kv server, client " + std::to_string(i));
        Peer& p = peers_.at(i);
        if (c.is_recv()) {
            // A request written into the client's ring: the immediate names the entry.
            if (c.opcode != weft::Opcode::recv_rdma_with_imm || !c.has_imm || c.imm >= log_entries ||
                c.byte_len != message_size) {
                throw std::runtime_error("kv server: client " + std::to_string(i) + " sent a " +
                                         std::to_string(c.byte_len) + "-byte " + std::string(weft::to_string(c.opcode)) +
                                         " that is not a log entry (entries 0.." + std::to_string(log_entries - 1) +
                                         " of " + std::to_string(message_size) + " bytes, written with an immediate)");
            }
            p.entry = c.imm;
            // The client sends its next request once it has our reply, which can be before our send
            // completed (the acknowledgement may come late): the reply buffer is not ours yet, so wait.
            if (p.reply_in_flight) p.request_waiting = true;
            else handle(i);
        } else {
            p.reply_in_flight = false;
            if (p.leaving) p.gone = true;
            else if (p.request_waiting) {
                p.request_waiting = false;
                handle(i);
            }
        }
    }
    return done.size();
}

void Server::handle(std::size_t i) {
    const std::byte* m = log_entry(i, peers_[i].entry);
    std::byte* out = tx(i);
    switch (read_kind(message_size, m, "kv server")) {
        case Kind::put: {
            const std::uint32_t length = get_u32(m + 16);
            if (length > max_value) {
                throw std::runtime_error("kv server: a PUT of " + std::to_string(length) + " bytes");
            }
            const auto version = store(get_u64(m + 8), {reinterpret_cast<const char*>(m + 24), length});
            write_header(out, version ? Kind::stored : Kind::full, version.value_or(0));
            // Re-post the receive before replying: the client may send its next request as soon as the reply
            // arrives, and a receive posted after the reply could be late for it.
            must(peers_[i].qp.post_recv({weft::recv(i, messages_mr_.slice(2 * i * message_size, message_size))}),
                 "kv server: post_recv");
            break;
        }
        case Kind::bye:
            write_header(out, Kind::bye, 0);
            peers_[i].leaving = true;
            break;
        default:
            throw std::runtime_error("kv server: client " + std::to_string(i) + " sent a message of kind " +
                                     std::to_string(get_u32(m + 4)));
    }
    must(peers_[i].qp.post_send({weft::send(i, messages_mr_.slice((2 * i + 1) * message_size, message_size))}),
         "kv server: post_send");
    peers_[i].reply_in_flight = true;
}

bool Server::done() const {
    return !peers_.empty() && std::all_of(peers_.begin(), peers_.end(), [](const Peer& p) { return p.gone; });
}

// ---- Client

Client::Client(weft::Domain& dom) : buf_(2 * message_size + max_bucket_slots * slot_size) {
    mr_ = dom.register_memory(buf_, weft::Access::local_write);
    cq_ = dom.create_cq({.depth = 8});
    qp_ = dom.create_qp({.send_cq = cq_, .recv_cq = cq_, .max_send = 4, .max_recv = 2});
    must(qp_.post_recv({weft::recv(recv_id, mr_.slice(0, message_size))}), "kv client: post_recv");
}

void Client::get(std::uint64_t key) {
    if (!ready() || busy()) throw std::logic_error("kv client: get() before the hello or during an operation");
    op_ = Op::get;
    result_ = Result{.key = key};
    attempts_ = 0;
    ++stats_.gets;
    read_bucket();
}

void Client::read_bucket() {
    const std::uint64_t bytes = std::uint64_t{bucket_slots_} * slot_size;
    const std::uint64_t bucket = mix(result_.key) % buckets_;
    must(qp_.post_send({weft::read(read_id, mr_.slice_unchecked(2 * message_size, bytes),
                                   table_.slice_unchecked(bucket * bytes, bytes))}),
         "kv client: post_send");
}

void Client::put(std::uint64_t key, std::string_view value) {
    if (!ready() || busy()) throw std::logic_error("kv client: put() before the hello or during an operation");
    if (value.size() > max_value) throw std::invalid_argument("kv: a value is at most 64 bytes");
    std::byte* m = buf_.data() + message_size;
    write_header(m, Kind::put, key);
    put_u32(m + 16, static_cast<std::uint32_t>(value.size()));
    std::memcpy(m + 24, value.data(), value.size());
    op_ = Op::put;
    result_ = Result{.key = key};
    ++stats_.puts;
    write_request();
}

void Client::write_request() {
    send_done_ = reply_done_ = false;
    const std::uint32_t entry = next_entry_++ % log_entries;
    must(qp_.post_send({weft::write(send_id, mr_.slice(message_size, message_size),
                                    log_.slice(std::uint64_t{entry} * message_size, message_size))
                            .with_imm(entry)}),
         "kv client: post_send");
}

void Client::close() {
    if (!ready() || busy()) throw std::logic_error("kv client: close() before the hello or during an operation");
    write_header(buf_.data() + message_size, Kind::bye, 0);
    op_ = Op::close;
    write_request();
}

bool Client::progress() {
    weft::Completion wc[4];
    bool completed = false;
    for (const auto& c : cq_.poll(wc)) {
        check_completion(c, "kv client");
        if (c.is_recv()) {
            if (!ready()) on_hello(c.byte_len);
            else on_reply(c.byte_len);
        } else if (c.id == send_id) {
            send_done_ = true;
        } else {
            // The bucket arrived. The key is in at most one slot; an intact empty slot ends the search,
            // since slots fill from the front and are never emptied. A torn slot before the key was found
            // may be the key itself, being inserted or rewritten: read the bucket again.
            const std::byte* p = buf_.data() + 2 * message_size;
            bool torn = false, found = false;
            for (std::uint32_t i = 0; i < bucket_slots_ && !found; ++i, p += slot_size) {
                auto slot = decode_slot(p);
                if (!slot) torn = true;
                else if (slot->version == 0) break;
                else if (slot->key == result_.key) {
                    found = true;
                    result_.status = Status::ok;
                    result_.version = slot->version;
                    result_.value = std::move(slot->value);
                }
            }
            if (!found && torn) {
                ++stats_.torn_reads;
                if (++attempts_ == max_attempts) {
                    throw std::runtime_error("kv client: " + std::to_string(max_attempts) + " reads of key " +
                                             std::to_string(result_.key) + "'s bucket were all torn");
                }
                read_bucket();
                continue;
            }
            if (!found) result_.status = Status::not_found;
            op_ = Op::none;
            completed = true;
        }
        if ((op_ == Op::put || op_ == Op::close) && send_done_ && reply_done_) {
            op_ = Op::none;
            completed = true;
        }
    }
    return completed;
}

void Client::on_hello(std::uint32_t length) {
    const std::byte* m = buf_.data();
    if (read_kind(length, m, "kv client") != Kind::hello) {
        throw std::runtime_error("kv client: expected the server's hello");
    }
    const std::uint32_t slots = get_u32(m + 16), bucket_slots = get_u32(m + 20);
    auto table = weft::RemoteRegion::decode(std::span(m + 24, weft::RemoteRegion::encoded_size));
    auto log = weft::RemoteRegion::decode(std::span(m + log_descriptor_at, weft::RemoteRegion::encoded_size));
    if (log.length() != std::uint64_t{log_entries} * message_size) {
        throw std::runtime_error("kv client: the server's hello describes a log ring of " +
                                 std::to_string(log.length()) + " bytes, not " + std::to_string(log_entries) +
                                 " entries of " + std::to_string(message_size));
    }
    if (slots == 0 || bucket_slots == 0 || bucket_slots > max_bucket_slots || slots % bucket_slots != 0 ||
        table.length() != std::uint64_t{slots} * slot_size) {
        throw std::runtime_error("kv client: the server's hello describes a table of " + std::to_string(slots) +
                                 " slots in buckets of " + std::to_string(bucket_slots) + " in " +
                                 std::to_string(table.length()) + " bytes");
    }
    buckets_ = slots / bucket_slots;
    bucket_slots_ = bucket_slots;
    table_ = table;
    log_ = log;
    must(qp_.post_recv({weft::recv(recv_id, mr_.slice(0, message_size))}), "kv client: post_recv");
}

void Client::on_reply(std::uint32_t length) {
    const std::byte* m = buf_.data();
    const Kind kind = read_kind(length, m, "kv client");
    if ((op_ == Op::put) != (kind == Kind::stored || kind == Kind::full) || (op_ == Op::close) != (kind == Kind::bye)) {
        throw std::runtime_error("kv client: an unexpected reply of kind " + std::to_string(get_u32(m + 4)));
    }
    result_.status = kind == Kind::full ? Status::full : Status::ok;
    result_.version = get_u64(m + 8);
    reply_done_ = true;
    if (op_ == Op::put) must(qp_.post_recv({weft::recv(recv_id, mr_.slice(0, message_size))}), "kv client: post_recv");
}

void link(Server& server, Client& client) {
    const std::size_t i = server.add_client();
    const auto server_address = server.qp(i).address(), client_address = client.qp().address();
    server.qp(i).connect(client_address);
    client.qp().connect(server_address);
    server.welcome(i);
}

// ---- Checker

void Checker::put_started(std::size_t client, std::uint64_t key, const std::string& value) {
    written_[key].insert(value);
    pending_[client] = {true, key, acknowledged_[key], value};
}

void Checker::get_started(std::size_t client, std::uint64_t key) {
    pending_[client] = {false, key, acknowledged_[key], {}};
}

void Checker::completed(std::size_t client, const Result& r) {
    const Pending p = pending_.at(client);
    const std::string op = std::string(p.put ? "PUT" : "GET") + " of key " + std::to_string(p.key) + " by client " +
                           std::to_string(client);
    if (r.key != p.key) return violation(op + " came back for key " + std::to_string(r.key));
    if (r.status == Status::full) return;  // nothing was stored, nothing was seen
    const std::uint64_t v = r.version;
    const std::string& value = p.put ? p.value : r.value;
    if (!p.put && r.status == Status::ok && !written_[p.key].contains(value)) {
        violation(op + " returned \"" + value + "\", which no PUT wrote");
    }
    if (p.put ? v <= p.floor : v < p.floor) {
        violation(op + " started after a PUT of version " + std::to_string(p.floor) + " completed but " +
                  (p.put ? "created" : "saw") + " version " + std::to_string(v));
    }
    auto& last = last_[{client, p.key}];
    if (v < last) violation(op + " saw version " + std::to_string(v) + " after version " + std::to_string(last));
    last = std::max(last, v);
    if (v != 0) {
        const auto [it, fresh] = seen_.emplace(std::pair{p.key, v}, value);
        if (!fresh && it->second != value) {
            violation(op + ": version " + std::to_string(v) + " holds \"" + value + "\" here and \"" + it->second +
                      "\" elsewhere");
        }
    }
    if (p.put) acknowledged_[p.key] = std::max(acknowledged_[p.key], v);
}

void Checker::violation(std::string what) { violations_.push_back(std::move(what)); }

// ---- The driver

Report run(const Workload& w, std::span<Client> clients, const weft::Domain& client_dom, Server* server,
           std::chrono::seconds stall_limit) {
    struct State {
        std::uint64_t rng = 0, started = 0;
        bool closing = false;
    };
    std::vector<State> state(clients.size());
    for (std::size_t i = 0; i < clients.size(); ++i) state[i].rng = mix(w.seed * 0x9e3779b97f4a7c15ull + i);
    auto next = [](std::uint64_t& x) { return mix(x += 0x9e3779b97f4a7c15ull); };

    Checker checker;
    Report report;
    std::optional<weft::sim::Fabric> fabric;
    if (client_dom.capabilities().kind == weft::BackendKind::sim) fabric = weft::sim::Fabric::of(client_dom);
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t v0 = fabric ? fabric->now() : 0;
    auto last_progress = t0;
    std::size_t closed = 0;
    bool server_last = false, idle_server = false, idle_clients = false;
    for (; closed < clients.size() || (server && !server->done());) {
        bool any = false;
        // On the simulator, the node whose program is furthest behind goes first (a tie: take turns), so
        // that neither program runs ahead of the other (docs/simulator.md, "Program time").
        bool server_turn = server != nullptr;
        if (server && fabric) {
            const auto ts = fabric->program_time(server->domain()), tc = fabric->program_time(client_dom);
            server_turn = ts != tc ? ts < tc : !server_last;
        }
        // A poll that finds nothing shows a side has nothing left only when the fabric was idle before it:
        // an empty poll may itself run the fabric up to a completion that the next poll returns.
        const bool idle_before = fabric && fabric->idle();
        if (server_turn) any = server->progress() > 0;
        if (!server_turn || !fabric) {
            for (std::size_t i = 0; i < clients.size(); ++i) {
                Client& c = clients[i];
                State& s = state[i];
                if (c.progress()) {
                    any = true;
                    if (s.closing) {
                        ++closed;
                        continue;
                    }
                    const Result& r = c.result();
                    report.not_found += r.status == Status::not_found;
                    report.full += r.status == Status::full;
                    checker.completed(i, r);
                }
                if (!c.ready() || c.busy() || s.closing) continue;
                any = true;
                if (s.started == w.ops) {
                    s.closing = true;
                    c.close();
                    continue;
                }
                const std::uint64_t key = next(s.rng) % w.keys;
                ++s.started;
                if (next(s.rng) % 100 < w.put_percent) {
                    // A value no other PUT writes, of 16 to 64 bytes, so that a GET names the PUT it saw.
                    std::string value = "k" + std::to_string(key) + " c" + std::to_string(i) + " n" +
                                        std::to_string(s.started) + " ";
                    value.resize(std::max<std::size_t>(value.size(), 16 + next(s.rng) % 49), '.');
                    checker.put_started(i, key, value);
                    c.put(key, value);
                    ++report.puts;
                } else {
                    checker.get_started(i, key);
                    c.get(key);
                    ++report.gets;
                }
            }
        }
        server_last = server_turn;
        if (fabric) {
            // Hung: nothing in flight, and both sides polled since without finding anything.
            if (any || !idle_before) {
                idle_server = idle_clients = false;
            } else {
                idle_server = idle_server || server_turn || !server;
                idle_clients = idle_clients || !server_turn;
                if (idle_server && idle_clients) {
                    throw std::runtime_error("kv: the run hung: nothing in flight and nothing to poll");
                }
            }
        } else if (any) {
            last_progress = std::chrono::steady_clock::now();
        } else if (std::chrono::steady_clock::now() - last_progress > stall_limit) {
            throw std::runtime_error("kv: nothing completed for " + std::to_string(stall_limit.count()) + " s");
        }
    }
    report.elapsed = std::chrono::steady_clock::now() - t0;
    if (fabric) report.virtual_ns = fabric->now() - v0;
    for (const auto& c : clients) report.torn_reads += c.stats().torn_reads;
    report.violations = checker.violations();
    return report;
}

}  // namespace kv
