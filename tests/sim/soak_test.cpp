// Fault soak: four nodes, every pair connected, a mixed workload of every opcode (writes and sends, with
// immediate data or not, reads, fetch_adds, compare_swaps; a third of the writes, sends and reads two to four
// packets long, the soak's mtu being 256) under packet loss, duplication and delay and every legal
// reordering, with, seeded per run:
//  - injected setup failures: register_memory and create_qp fail (resource_exhausted); the program retries
//    a registration, and retries a QP once before it gives the connection up;
//  - the same mid-run: a node registers its memory again for its later requests (and its peers' requests
//    to it), and the fabric fails none, one or both of its two attempts (the program does without the new
//    region then); one connection is made mid-run, not at setup, and the fabric fails none, one or two of
//    its QP creations (the program gives it up when a side fails twice);
//  - handles released while in use, which is legal (docs/misuse.md): a node's Domain handle while its MR,
//    CQ and QPs live (the fault API names a node by its Domain, so that node takes no node fault after it),
//    and the receive CQ of its own that one QP was created with, whose later receives then complete unseen;
//  - links cut for a while (shorter or longer than the retry budget), cut and healed later, or cut for good;
//  - a node stalled for a while (its responder takes nothing up), a node crashed (its program stops too);
//  - QPs destroyed mid-run: one in error with completions still to poll, or one with its sends done and
//    receives still posted (both legal; docs/misuse.md);
//  - some QPs driven into error on purpose (a forged key) and posted to afterwards (the requests flush).
// Over many seeds it checks what RC promises whatever the schedule and the faults, for whatever was created:
//  - every request completes at most once, and exactly once unless its node crashed or its QP was destroyed;
//  - every completion is success, flushed, or transport_retry_exceeded (its peer QP went to error or away);
//  - per QP, send and receive completions come in post order, and after the first one that is not success
//    every later one is flushed (per queue when the receives have a CQ of their own: the program polls the
//    two CQs in no order between them); a destroyed QP gives nothing more but flushed sends;
//  - a request posted after its peer was gone for good (crashed, its QP destroyed, the link cut for good)
//    never succeeds;
//  - packet by packet (a cut, a crash or a stall may split a message, torn placement reorders its packets):
//    a write, send or read that completed success placed all its bytes (at its target, in the receive the
//    peer posted for it, in its result buffer); one that failed in flight, or never completed, placed any
//    subset of its packets, each whole; one flushed because it was posted in error, or never posted, placed
//    nothing;
//  - every byte no request targeted is untouched (nothing past a message's end, nothing beside a source or
//    result), and a crashed node's memory never changes after the crash;
//  - the receives of a QP hold, in order, every send and write with immediate that completed success,
//    possibly ones that failed or never completed, never one posted in error, and nothing else; a receive
//    that completed success reports the message's length and holds all of it (a write with immediate's
//    data is in place), nothing past its end;
//  - each node's counter counts every fetch_add that completed success against it, at most those that
//    failed or never completed besides, none posted in error, and the successful ones fetched distinct values;
//  - a compare_swap (from 0 to its tag, on a word of its own) that succeeded fetched 0 and stored its tag,
//    one that failed or never completed may have stored it, one posted in error did not;
//  - a successful read returns the (never written) bytes it read.
// A memory region is never released while in use (a misuse, not a fault);
// the sweep fails a seed on any misuse the simulator reports. At the end it prints the faults injected per
// kind, the seeds and the time.
// $WEFT_SOAK_SEEDS sets the number of seeds (default 2000, CI's figure), $WEFT_SOAK_FIRST the first (default
// 1); $WEFT_SIM_SEED replays one.
#include "node.hpp"

#include <weft/testing.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <span>

using namespace weft;
using namespace std::chrono_literals;

namespace {

constexpr int nodes = 4;
constexpr std::size_t requests_per_qp = 24;
constexpr std::size_t window = 6;  // requests in flight per QP
// The soak's packet payload (its configuration's `mtu` key): a long message is two to four packets.
constexpr std::size_t mtu = 256;
constexpr std::size_t slot = 4 * mtu;  // bytes of a write target, a receive buffer, a source, a read result
constexpr std::size_t slots = static_cast<std::size_t>(nodes) * requests_per_qp;  // one per (peer, request)
constexpr std::size_t pattern_bytes = 8192;
// Node memory, fixed-size slots per (peer, request): write targets (slot bytes each), compare_swap words
// (8 bytes each), receive buffers (slot bytes each), a constant pattern reads fetch, the fetch_add counter,
// then the requester's own sources and results (a source slot then a result slot each).
constexpr std::size_t write_base = 0, cas_base = write_base + slots * slot, recv_base = cas_base + 4096,
                      pattern_base = recv_base + slots * slot, counter_at = pattern_base + pattern_bytes,
                      own_base = counter_at + 4096, buffer = own_base + slots * 2 * slot;
static_assert(slots * 8 <= recv_base - cas_base);
constexpr std::size_t slot_of(int peer, std::size_t k) { return static_cast<std::size_t>(peer) * requests_per_qp + k; }
// Where request k from node `from` lands on its target, and its source and result on node `from`.
constexpr std::size_t write_at(int from, std::size_t k) { return write_base + slot_of(from, k) * slot; }
constexpr std::size_t cas_at(int from, std::size_t k) { return cas_base + slot_of(from, k) * 8; }
constexpr std::size_t recv_at(int from, std::size_t k) { return recv_base + slot_of(from, k) * slot; }
constexpr std::size_t read_at(std::size_t k) { return pattern_base + (k * 64) % (pattern_bytes - slot); }
constexpr std::size_t own_at(int to, std::size_t k) { return own_base + slot_of(to, k) * 2 * slot; }
// QpOptions::timeout 8 is ~1 ms; retry_cnt 7 gives up after ~8.4 ms: cuts and stalls of up to 12 ms end
// on both sides of it.
constexpr std::uint64_t longest_outage_ns = 12'000'000;

// write_imm, send_imm and cas stand in for write, send and add in a third of the cases.
enum class Kind { write, send, read, add, bad, write_imm, send_imm, cas };
constexpr bool consumes_recv(Kind k) { return k == Kind::send || k == Kind::send_imm || k == Kind::write_imm; }
constexpr bool carries_data(Kind k) {
    return k == Kind::write || k == Kind::write_imm || k == Kind::send || k == Kind::send_imm;
}
// The tag of request k from node `from` to node `to`; its low 32 bits (k) are the immediate data.
constexpr std::uint64_t tag_of(int from, int to, std::size_t k) {
    return (std::uint64_t{1} << 63) | (std::uint64_t(from) << 48) | (std::uint64_t(to) << 40) | k;
}
// The bytes a write or send carries: its tag, then bytes of its own (never zero).
std::vector<std::byte> payload(std::uint64_t tag, std::size_t len) {
    std::vector<std::byte> p(len);
    for (std::size_t b = 0; b < len; ++b) {
        p[b] = b < 8 ? static_cast<std::byte>(tag >> (8 * b))
                     : static_cast<std::byte>(((tag >> 40) * 37 + (tag & 0xffff) * 11 + b * 7) | 1);
    }
    return p;
}
// The constant bytes node i's reads fetch (never zero).
std::byte pattern_byte(std::size_t b, int i) { return static_cast<std::byte>((b * 13 + static_cast<std::size_t>(i)) | 1); }
// `got` against the `want` a request meant to place (no zero byte in it), packet by packet: packets holding
// all their bytes, packets holding none (still zero), and packets holding anything else.
struct Placement {
    std::size_t whole = 0, none = 0, wrong = 0;
    std::size_t packets() const { return whole + none + wrong; }
};
Placement compare_packets(const std::byte* got, const std::byte* want, std::size_t len) {
    Placement p;
    for (std::size_t at = 0; at < len; at += mtu) {
        const std::size_t n = std::min(mtu, len - at);
        if (std::memcmp(got + at, want + at, n) == 0) ++p.whole;
        else if (std::all_of(got + at, got + at + n, [](std::byte b) { return b == std::byte{0}; })) ++p.none;
        else ++p.wrong;
    }
    return p;
}

struct Request {
    Kind kind;
    std::uint64_t tag;  // the bytes it carries
    std::size_t len = 8;  // bytes written, sent or read (over mtu: several packets)
    bool posted = false;
    bool posted_in_error = false;  // its QP was already in error when it was posted
    bool posted_to_dead = false;   // its peer was gone for good when it was posted
    bool done = false;
    WcStatus status = WcStatus::success;
};

struct Endpoint {  // one side of one connection
    int self = 0, peer = 0;
    bool active = false;  // the connection exists (its QPs were created)
    QueuePair qp;
    std::uint32_t qpn = 0;  // kept after the QP is destroyed, for its late completions
    CompletionQueue recv_cq;  // a receive CQ of its own, when it has one (else the node's)
    bool recv_cq_released = false;  // the program released it while the QP used it: later receives unseen
    std::vector<Request> plan;
    std::size_t posted = 0, completed = 0, recvs_done = 0;
    std::vector<std::uint64_t> received;  // tags of sends and writes with immediate that arrived here, in order
    bool peer_dead = false;       // the peer node crashed, its QP was destroyed, or the link is cut for good
    bool destroy_wanted = false;  // the program means to destroy the QP once that is legal
    bool destroyed = false;
    bool error_seen = false;  // a completion other than success was polled
    // Likewise per queue: with a receive CQ of its own, the program polls the two queues' completions in
    // no order between them.
    bool send_error_seen = false, recv_error_seen = false;
    bool own_recv_cq = false;
    std::uint64_t next_send = 0, next_recv = 0;  // completions come in post order from these ids on
};

struct Node {
    Domain dom;  // released mid-run by some seeds: its MR and QPs keep the domain alive
    CompletionQueue cq;
    std::span<std::byte> mem;  // `buffer` bytes of `memories`
    std::vector<MemoryRegion> mrs;  // every registration of mem; requests use the latest
    bool crashed = false;
    std::vector<std::byte> at_crash;  // the memory when the node crashed
    const MemoryRegion& mr() const { return mrs.back(); }
};

// Faults injected over the whole sweep, per kind.
struct Totals {
    std::uint64_t dropped = 0, duplicated = 0, delayed = 0, retransmitted = 0;
    std::uint64_t failed_registrations = 0, failed_qp_creations = 0, connections_given_up = 0;
    std::uint64_t reregistrations = 0, failed_reregistrations = 0, reregistrations_done_without = 0;
    std::uint64_t late_connections = 0, failed_late_qp_creations = 0, late_connections_given_up = 0;
    std::uint64_t domains_released = 0, cqs_released = 0, strikes_skipped = 0;
    std::uint64_t cuts_timed = 0, cuts_until_healed = 0, heals = 0, cuts_for_good = 0, stalls = 0, crashes = 0;
    std::uint64_t destroyed_in_error = 0, destroyed_drained = 0, forged_keys = 0;
    std::uint64_t requests = 0, never_completed = 0, posted_to_dead = 0, retry_exceeded = 0, flushed = 0;
    std::uint64_t long_requests = 0, torn = 0;
};
Totals totals;
// The nodes' memories and the map of the bytes requests target, kept from seed to seed: allocated anew,
// they cost more in page faults than the seed's run.
std::array<std::vector<std::byte>, nodes> memories;
std::array<std::vector<std::uint8_t>, nodes> targeted;

// A fault that strikes once the program has polled `at` completions in all.
struct Strike {
    enum What {
        cut_for, cut_then_heal, cut_for_good, heal, stall, crash, destroy,
        reregister, connect, release_cq, release_domain
    } what;
    std::size_t at;
    int a = 0, b = 0;  // nodes (cuts, stall, crash, reregister, connect, release_domain) or the endpoint a->b
    std::uint64_t ns = 0;
    unsigned failures = 0;  // reregister and connect: injected failures
};

void run_soak(const testing::Seed& s) {
    std::mt19937_64 rng(s.value * 0x9e3779b97f4a7c15ull);
    std::mt19937_64 variants(s.value ^ 0x5bd1e995u);  // apart, so that adding opcodes moved no other choice
    // Apart too: message lengths, and the faults of the program's own (late registrations and connections,
    // released handles).
    std::mt19937_64 lengths(s.value ^ 0x27d4eb2f165667c5ull);
    std::mt19937_64 extra(s.value * 0xbf58476d1ce4e5b9ull + 1);
    auto below = [&rng](std::uint64_t n) { return rng() % n; };
    auto other_node = [&](int a) { return static_cast<int>((a + 1 + below(nodes - 1)) % nodes); };
    std::vector<std::unique_ptr<Node>> node;
    for (int i = 0; i < nodes; ++i) {
        node.push_back(std::make_unique<Node>());
        node.back()->dom = open(s.config);
    }
    auto fabric = sim::Fabric::of(node[0]->dom);
    // The program retries a registration that failed for want of resources; mid-run, it tries twice and
    // does without the new one when both fail.
    auto register_mem = [&](Node& n, int attempts, std::uint64_t& failures) {
        for (int attempt = 0; attempt < attempts; ++attempt) {
            try {
                n.mrs.push_back(n.dom.register_memory(n.mem, all_access));
                return true;
            } catch (const Error& e) {
                BOOST_REQUIRE(e.code() == make_error_code(Errc::resource_exhausted));
                ++failures;
            }
        }
        return false;
    };
    for (int i = 0; i < nodes; ++i) {
        auto& n = *node[i];
        n.cq = n.dom.create_cq({.depth = 4096});
        memories[i].assign(buffer, std::byte{0});
        n.mem = memories[i];
        for (std::size_t b = pattern_base; b < counter_at; ++b) n.mem[b] = pattern_byte(b, i);
        if (below(8) == 0) fabric.fail_next_registration(1 + static_cast<unsigned>(below(2)));
        BOOST_REQUIRE(register_mem(n, 3, totals.failed_registrations));
    }
    // ep[i][j]: node i's side of the connection to node j.
    std::vector<std::vector<Endpoint>> ep(nodes);
    for (auto& row : ep) row.resize(nodes);
    for (int i = 0; i < nodes; ++i) {
        for (int j = 0; j < nodes; ++j) {
            ep[i][j].self = i;
            ep[i][j].peer = j;
        }
    }
    // One seed in three: one connection is made mid-run, not at setup; one endpoint takes its receives into
    // a CQ of its own, whose handle the program releases mid-run while the QP still uses it (legal: the QP
    // keeps it alive and receives complete into it unseen; docs/misuse.md).
    int late_a = -1, late_b = -1;
    if (extra() % 3 == 0) {
        late_a = static_cast<int>(extra() % nodes);
        late_b = static_cast<int>((late_a + 1 + extra() % (nodes - 1)) % nodes);
        if (late_a > late_b) std::swap(late_a, late_b);
    }
    int own_cq_a = -1, own_cq_b = -1;
    if (extra() % 3 == 0) {
        own_cq_a = static_cast<int>(extra() % nodes);
        own_cq_b = static_cast<int>((own_cq_a + 1 + extra() % (nodes - 1)) % nodes);
        ep[own_cq_a][own_cq_b].recv_cq = node[own_cq_a]->dom.create_cq({.depth = 64});
        ep[own_cq_a][own_cq_b].own_recv_cq = true;
    }
    QpOptions o;
    o.max_send = 64;
    o.max_recv = 64;
    o.timeout = 8;  // ~1 ms: losses recover quickly in virtual time
    // The program tries a QP twice; when both fail, it does without that connection.
    auto create = [&](int i, int j, std::uint64_t& failures) {
        o.send_cq = node[i]->cq;
        o.recv_cq = ep[i][j].recv_cq ? ep[i][j].recv_cq : node[i]->cq;
        for (int attempt = 0; attempt < 2; ++attempt) {
            try {
                return node[i]->dom.create_qp(o);
            } catch (const Error& e) {
                BOOST_TEST((e.code() == make_error_code(Errc::resource_exhausted)), e.what());
                ++failures;
            }
        }
        return QueuePair();
    };
    // Connects the QPs created for i and j, or gives the connection up when one of them is missing.
    auto connect_pair = [&](int i, int j) {
        if (!ep[i][j].qp || !ep[j][i].qp) {
            ep[i][j].qp = QueuePair();
            ep[j][i].qp = QueuePair();
            return false;
        }
        for (Endpoint* e : {&ep[i][j], &ep[j][i]}) {
            e->active = true;
            e->qpn = e->qp.qp_num();
        }
        ep[i][j].qp.connect(ep[j][i].qp.address());
        ep[j][i].qp.connect(ep[i][j].qp.address());
        return true;
    };
    for (int i = 0; i < nodes; ++i) {
        for (int j = i + 1; j < nodes; ++j) {
            const unsigned failures = below(12) == 0 ? 1 + static_cast<unsigned>(below(2)) : 0;
            if (i == late_a && j == late_b) continue;  // made mid-run
            if (failures) fabric.fail_next_qp_creation(failures);
            ep[i][j].qp = create(i, j, totals.failed_qp_creations);
            if (ep[i][j].qp) ep[j][i].qp = create(j, i, totals.failed_qp_creations);
            if (!connect_pair(i, j)) ++totals.connections_given_up;
        }
    }
    // A plan: about one QP in four meets a bad key in the middle and is posted to after it went to error;
    // a third of the writes, sends and reads are two to four packets long. The peer posts a receive for
    // every send and write with immediate of the plan, each in its own buffer.
    auto draw_plan = [&](int i, int j, std::mt19937_64& kinds, std::mt19937_64& kind_variants) {
        auto& e = ep[i][j];
        const bool breaks = kinds() % 4 == 0;
        const std::size_t bad_at = breaks ? 4 + kinds() % (requests_per_qp - 8) : requests_per_qp;
        totals.forged_keys += breaks;
        totals.requests += requests_per_qp;
        for (std::size_t k = 0; k < requests_per_qp; ++k) {
            Kind kind = k == bad_at ? Kind::bad : static_cast<Kind>(kinds() % 4);
            if (kind_variants() % 3 == 0) {
                if (kind == Kind::write) kind = Kind::write_imm;
                else if (kind == Kind::send) kind = Kind::send_imm;
                else if (kind == Kind::add) kind = Kind::cas;
            }
            Request r{kind, tag_of(i, j, k)};
            if (kind == Kind::read) r.len = 16;
            if ((carries_data(kind) || kind == Kind::read) && lengths() % 3 == 0) {
                r.len = mtu + 1 + lengths() % (slot - mtu);
                ++totals.long_requests;
            }
            e.plan.push_back(r);
        }
        for (std::size_t k = 0; k < requests_per_qp; ++k) {
            if (!consumes_recv(e.plan[k].kind)) continue;
            BOOST_REQUIRE(ep[j][i].qp.post_recv({recv(k, node[j]->mr().slice(recv_at(i, k), slot))}));
        }
    };
    for (int i = 0; i < nodes; ++i) {
        for (int j = 0; j < nodes; ++j) {
            if (i != j && ep[i][j].active) draw_plan(i, j, rng, variants);
        }
    }
    // The faults of this seed, each striking after a seeded number of completions.
    std::vector<Strike> strikes;
    if (below(3) == 0) {
        for (std::uint64_t n = 1 + below(2); n > 0; --n) {
            Strike c{Strike::cut_for, below(200)};
            // Each cut on a link of its own: a heal would end a cut for good of the same link too.
            do {
                c.a = static_cast<int>(below(nodes));
                c.b = other_node(c.a);
            } while (std::any_of(strikes.begin(), strikes.end(), [&c](const Strike& x) {
                return (x.a == c.a && x.b == c.b) || (x.a == c.b && x.b == c.a);
            }));
            switch (below(4)) {
                case 0:
                case 1: c.ns = 100'000 + below(longest_outage_ns); break;
                case 2: {
                    c.what = Strike::cut_then_heal;
                    Strike h = c;
                    h.what = Strike::heal;
                    h.at = c.at + 1 + below(60);
                    strikes.push_back(h);
                    break;
                }
                default: c.what = Strike::cut_for_good; break;
            }
            strikes.push_back(c);
        }
    }
    if (below(3) == 0) {
        Strike st{Strike::stall, below(200)};
        st.a = static_cast<int>(below(nodes));
        st.ns = 10'000 + below(longest_outage_ns);
        strikes.push_back(st);
    }
    if (below(8) == 0) {
        Strike c{Strike::crash, below(250)};
        c.a = static_cast<int>(below(nodes));
        strikes.push_back(c);
    }
    if (below(3) == 0) {
        for (std::uint64_t n = 1 + below(2); n > 0; --n) {
            Strike d{Strike::destroy, below(250)};
            d.a = static_cast<int>(below(nodes));
            d.b = other_node(d.a);
            strikes.push_back(d);
        }
    }
    // The program's own: a node registers its memory again for its later requests (one seed in three, once
    // or twice; the fabric fails none, one or both attempts), the late connection (the fabric fails none,
    // one or two of its QP creations), the release of the receive CQ of its own, and a node releasing its
    // Domain handle while its MR, CQ and QPs live (one seed in four).
    if (extra() % 3 == 0) {
        for (std::uint64_t n = 1 + extra() % 2; n > 0; --n) {
            Strike r{Strike::reregister, extra() % 250};
            r.a = static_cast<int>(extra() % nodes);
            r.failures = static_cast<unsigned>(extra() % 3);
            strikes.push_back(r);
        }
    }
    if (late_a >= 0) {
        Strike c{Strike::connect, extra() % 200};
        c.a = late_a;
        c.b = late_b;
        c.failures = static_cast<unsigned>(extra() % 3);
        strikes.push_back(c);
    }
    if (own_cq_a >= 0) {
        Strike r{Strike::release_cq, extra() % 250};
        r.a = own_cq_a;
        r.b = own_cq_b;
        strikes.push_back(r);
    }
    if (extra() % 4 == 0) {
        Strike r{Strike::release_domain, extra() % 250};
        r.a = static_cast<int>(extra() % nodes);
        strikes.push_back(r);
    }
    // By time, ties in draw order: an insertion sort, stable without the temporary buffer of std::stable_sort
    // (whose allocation AddressSanitizer flags as a new/free mismatch with libstdc++ 12). A handful of entries.
    for (std::size_t i = 1; i < strikes.size(); ++i) {
        for (std::size_t j = i; j > 0 && strikes[j].at < strikes[j - 1].at; --j) std::swap(strikes[j], strikes[j - 1]);
    }
    std::size_t next_strike = 0, polled = 0;
    auto connection_gone = [&](int a, int b) {
        ep[a][b].peer_dead = true;
        ep[b][a].peer_dead = true;
    };
    // The fault API names a node by its Domain: a node whose program released that handle takes no more
    // node faults, and its program creates nothing more.
    auto held = [&](int a) { return static_cast<bool>(node[a]->dom); };
    auto strike = [&](const Strike& f) {
        auto& a = *node[f.a];
        switch (f.what) {
            case Strike::cut_for:
            case Strike::cut_then_heal:
            case Strike::heal:
            case Strike::cut_for_good:
            case Strike::stall:
            case Strike::crash:
                if (!held(f.a) || (f.what != Strike::stall && f.what != Strike::crash && !held(f.b))) {
                    ++totals.strikes_skipped;
                    return;
                }
                break;
            default: break;
        }
        switch (f.what) {
            case Strike::cut_for:
                fabric.cut(a.dom, node[f.b]->dom, std::chrono::nanoseconds(f.ns));
                ++totals.cuts_timed;
                break;
            case Strike::cut_then_heal:
                fabric.cut(a.dom, node[f.b]->dom);
                ++totals.cuts_until_healed;
                break;
            case Strike::heal:
                fabric.heal(a.dom, node[f.b]->dom);
                ++totals.heals;
                break;
            case Strike::cut_for_good:
                fabric.cut(a.dom, node[f.b]->dom);
                connection_gone(f.a, f.b);
                ++totals.cuts_for_good;
                break;
            case Strike::stall:
                fabric.stall(a.dom, std::chrono::nanoseconds(f.ns));
                ++totals.stalls;
                break;
            case Strike::crash:
                if (a.crashed) break;
                fabric.crash(a.dom);
                a.crashed = true;
                a.at_crash.assign(a.mem.begin(), a.mem.end());
                for (int j = 0; j < nodes; ++j) {
                    if (j != f.a) connection_gone(f.a, j);
                }
                ++totals.crashes;
                break;
            case Strike::destroy: ep[f.a][f.b].destroy_wanted = true; break;
            case Strike::reregister:
                // Requests posted from now on use the new registration (peers' too, as its target); the old
                // one stays, for the requests still using it.
                if (a.crashed || !held(f.a)) {
                    ++totals.strikes_skipped;
                    break;
                }
                if (f.failures) fabric.fail_next_registration(f.failures);
                if (register_mem(a, 2, totals.failed_reregistrations)) ++totals.reregistrations;
                else ++totals.reregistrations_done_without;
                break;
            case Strike::connect: {
                if (a.crashed || node[f.b]->crashed || !held(f.a) || !held(f.b)) {
                    ++totals.strikes_skipped;
                    break;
                }
                // Failures strike either side's creation: `failures` of them from the first attempt on.
                if (f.failures) fabric.fail_next_qp_creation(f.failures);
                ep[f.a][f.b].qp = create(f.a, f.b, totals.failed_late_qp_creations);
                if (ep[f.a][f.b].qp) ep[f.b][f.a].qp = create(f.b, f.a, totals.failed_late_qp_creations);
                if (!connect_pair(f.a, f.b)) {
                    ++totals.late_connections_given_up;
                    break;
                }
                ++totals.late_connections;
                draw_plan(f.a, f.b, extra, extra);
                draw_plan(f.b, f.a, extra, extra);
                break;
            }
            case Strike::release_cq: {
                Endpoint& e = ep[f.a][f.b];
                if (a.crashed || !e.recv_cq) break;  // a crashed node's program does nothing more
                e.recv_cq = CompletionQueue();
                if (e.active) {
                    e.recv_cq_released = true;
                    ++totals.cqs_released;
                }
                break;
            }
            case Strike::release_domain:
                if (a.crashed || !held(f.a)) break;
                a.dom = Domain();
                ++totals.domains_released;
                break;
        }
    };
    // Destroys a QP the program wants gone once that is legal: in error (every later completion is
    // flushed), or with every send it posted completed and polled (receives may stay posted).
    auto destroy_when_legal = [&](Endpoint& e) {
        if (!e.destroy_wanted || e.destroyed || !e.active || node[e.self]->crashed) return;
        const bool in_error = e.error_seen;
        if (!in_error && e.completed != e.posted) return;
        e.qp = QueuePair();
        e.destroyed = true;
        ep[e.peer][e.self].peer_dead = true;
        ++(in_error ? totals.destroyed_in_error : totals.destroyed_drained);
    };
    auto post_next = [&](Endpoint& e) {
        if (!e.active || e.destroyed || e.destroy_wanted || node[e.self]->crashed) return;
        auto& me = *node[e.self];
        auto& them = *node[e.peer];
        while (e.posted < e.plan.size() && e.posted - e.completed < window) {
            const std::size_t k = e.posted;
            Request& r = e.plan[k];
            const std::size_t own = own_at(e.peer, k);
            if (carries_data(r.kind) || r.kind == Kind::bad) {
                const auto bytes = payload(r.tag, r.len);
                std::memcpy(&me.mem[own], bytes.data(), r.len);
            }
            r.posted = true;
            r.posted_in_error = e.qp.state() == QpState::error;
            r.posted_to_dead = e.peer_dead;
            const auto remote = them.mr().remote();
            const auto source = me.mr().slice(own, r.len), result = me.mr().slice(own + slot, r.len);
            PostStatus st;
            switch (r.kind) {
                case Kind::write:
                    st = e.qp.post_send({write(k, source, remote.slice(write_at(e.self, k), r.len))});
                    break;
                case Kind::write_imm:
                    st = e.qp.post_send({write(k, source, remote.slice(write_at(e.self, k), r.len))
                                             .with_imm(static_cast<std::uint32_t>(r.tag))});
                    break;
                case Kind::send: st = e.qp.post_send({send(k, source)}); break;
                case Kind::send_imm:
                    st = e.qp.post_send({send(k, source).with_imm(static_cast<std::uint32_t>(r.tag))});
                    break;
                case Kind::read: st = e.qp.post_send({read(k, result, remote.slice(read_at(k), r.len))}); break;
                case Kind::add:
                    st = e.qp.post_send({fetch_add(k, result, remote.slice(counter_at, 8), 1)});
                    break;
                case Kind::cas:  // each in a slot of its own: from 0 to its tag, once
                    st = e.qp.post_send({compare_swap(k, result, remote.slice(cas_at(e.self, k), 8), 0, r.tag)});
                    break;
                case Kind::bad: {
                    const RemoteRegion forged(remote.addr(), 8, remote.rkey() ^ 0x5a5a00, remote.backend());
                    st = e.qp.post_send({write(k, source, forged)});
                    break;
                }
            }
            BOOST_REQUIRE_MESSAGE(st, "post: " << st.reason());
            ++e.posted;
        }
    };
    auto take = [&](int i, const Completion& c) {
        int peer = -1;
        for (int j = 0; j < nodes; ++j) {
            if (j != i && ep[i][j].active && ep[i][j].qpn == c.qp_num) peer = j;
        }
        BOOST_REQUIRE(peer >= 0);
        auto& e = ep[i][peer];
        // Errors are followed by flushes only, on both queues when they share a CQ; each queue completes in
        // post order.
        bool& queue_error_seen = c.is_recv() ? e.recv_error_seen : e.send_error_seen;
        BOOST_TEST(((e.own_recv_cq ? !queue_error_seen : !e.error_seen) || c.status == WcStatus::flushed),
                   i << "->" << peer << ": " << c << " after an error completion");
        if (!c.ok()) e.error_seen = queue_error_seen = true;
        std::uint64_t& next_id = c.is_recv() ? e.next_recv : e.next_send;
        BOOST_TEST(c.id >= next_id, i << "->" << peer << ": " << c << " out of post order");
        next_id = c.id + 1;
        if (c.is_recv()) {
            ++e.recvs_done;
            if (c.ok()) {
                const bool with_imm_write = c.opcode == Opcode::recv_rdma_with_imm;
                std::uint64_t tag = 0;
                if (with_imm_write) {
                    BOOST_TEST(c.has_imm);
                    tag = tag_of(peer, i, c.imm);
                } else if (c.id < requests_per_qp) {
                    std::memcpy(&tag, &node[i]->mem[recv_at(peer, c.id)], 8);
                    if (c.has_imm) BOOST_TEST(c.imm == static_cast<std::uint32_t>(tag), i << "<-" << peer << ": " << c);
                }
                // The message whole when its receive completes: a send in its receive buffer (nothing past
                // its end), a write with immediate's data at its target.
                const std::size_t k = tag & 0xffffffffu;
                const auto& plan = ep[peer][i].plan;
                if (k < plan.size() && tag == tag_of(peer, i, k)) {
                    const Request& r = plan[k];
                    BOOST_TEST(c.byte_len == r.len, i << "<-" << peer << ": " << c << ", request " << k << " of " << r.len << " bytes");
                    const std::byte* at = &node[i]->mem[with_imm_write ? write_at(peer, k) : recv_at(peer, c.id)];
                    const auto p = compare_packets(at, payload(tag, r.len).data(), r.len);
                    BOOST_TEST(p.whole == p.packets(), i << "<-" << peer << ": " << c << " completed with " << p.whole
                                                        << " of its " << p.packets() << " packets in place");
                    if (!with_imm_write) {
                        BOOST_TEST(std::all_of(at + r.len, at + slot, [](std::byte b) { return b == std::byte{0}; }),
                                   i << "<-" << peer << ": " << c << " wrote past its end");
                    }
                } else {
                    BOOST_TEST(false, i << "<-" << peer << ": " << c << " holds no request of its peer");
                }
                e.received.push_back(tag);
            }
            return;
        }
        BOOST_TEST((!e.destroyed || c.status == WcStatus::flushed), i << "->" << peer << ": " << c << " after destroy");
        BOOST_REQUIRE(c.id < e.posted);
        Request& r = e.plan[c.id];
        BOOST_TEST(!r.done, "request " << c.id << " of " << i << "->" << peer << " completed twice");
        r.done = true;
        r.status = c.status;
        ++e.completed;
    };
    Completion wc[16];
    // Polls the node's CQ and the receive CQs of its own that the program holds.
    auto poll_node = [&](int i) {
        bool any = false;
        for (const auto& c : node[i]->cq.poll(wc)) {
            any = true;
            ++polled;
            take(i, c);
        }
        for (int j = 0; j < nodes; ++j) {
            if (!ep[i][j].recv_cq) continue;
            for (const auto& c : ep[i][j].recv_cq.poll(wc)) {
                any = true;
                ++polled;
                take(i, c);
            }
        }
        return any;
    };
    for (int idle_rounds = 0; idle_rounds < 3;) {
        while (next_strike < strikes.size() && strikes[next_strike].at <= polled) strike(strikes[next_strike++]);
        bool any = false;
        for (int i = 0; i < nodes; ++i) {
            if (node[i]->crashed) continue;  // its program stopped with it
            for (int j = 0; j < nodes; ++j) {
                if (i == j) continue;
                destroy_when_legal(ep[i][j]);
                post_next(ep[i][j]);
            }
            any = poll_node(i) || any;
        }
        idle_rounds = any || !fabric.idle() ? 0 : idle_rounds + 1;
    }
    // A crashed node's CQs hold what completed before the crash: read them, to know what succeeded.
    for (int i = 0; i < nodes; ++i) {
        if (!node[i]->crashed) continue;
        while (poll_node(i)) {
        }
    }
    const auto st = fabric.stats();
    totals.dropped += st.dropped;
    totals.duplicated += st.duplicated;
    totals.delayed += st.delayed;
    totals.retransmitted += st.retransmitted;
    // Check what each request did.
    std::vector<std::uint64_t> adds(nodes, 0), maybe_adds(nodes, 0);
    std::vector<std::set<std::uint64_t>> fetched(nodes);
    for (auto& t : targeted) t.assign(buffer, 0);
    auto mark = [&](int n, std::size_t at, std::size_t len) {
        std::fill_n(targeted[n].begin() + static_cast<long>(at), len, std::uint8_t{1});
    };
    for (int i = 0; i < nodes; ++i) {
        for (int j = 0; j < nodes; ++j) {
            if (i == j || !ep[i][j].active) continue;
            auto& e = ep[i][j];
            const bool may_stay_open = node[i]->crashed || e.destroyed;  // its completions may never come
            BOOST_TEST((may_stay_open || e.posted == e.plan.size()), i << "->" << j << " posted " << e.posted);
            std::size_t send_index = 0;
            const auto& received = ep[j][i].received;
            // Receives completed into a CQ the program released were not seen: the receive buffers and
            // write targets below still show what arrived.
            const bool receives_unseen = ep[j][i].recv_cq_released;
            for (std::size_t k = 0; k < e.plan.size(); ++k) {
                const Request& r = e.plan[k];
                const std::size_t own = own_at(j, k);
                const bool ok = r.done && r.status == WcStatus::success;
                totals.posted_to_dead += r.posted_to_dead;
                totals.retry_exceeded += r.done && r.status == WcStatus::transport_retry_exceeded;
                totals.flushed += r.done && r.status == WcStatus::flushed;
                if (r.posted && !r.done) {
                    BOOST_TEST(may_stay_open, "request " << k << " of " << i << "->" << j << " never completed");
                    ++totals.never_completed;
                }
                // Failed while in flight (flushed, or retries exhausted) or never completed: it may have
                // executed before its acknowledgement was lost, and a message of several packets may have
                // placed any of them (a cut, crash or stall splits it; torn placement reorders them).
                // Flushed because it was posted in error, or never posted: it did not.
                const bool maybe = r.posted && !ok && !r.posted_in_error;
                BOOST_TEST((!r.done || ok || r.status == WcStatus::flushed ||
                            r.status == WcStatus::transport_retry_exceeded || r.kind == Kind::bad),
                           i << "->" << j << " request " << k << ": " << to_string(r.status));
                BOOST_TEST((!ok || !r.posted_to_dead),
                           i << "->" << j << " request " << k << " succeeded though posted after its peer was gone");
                if (consumes_recv(r.kind)) {
                    const bool arrived = send_index < received.size() && received[send_index] == r.tag;
                    if (arrived) ++send_index;
                    if (ok && !receives_unseen) BOOST_TEST(arrived, i << "->" << j << " request " << k << " succeeded but its receive is missing");
                    else if (!ok && !maybe) BOOST_TEST(!arrived, i << "->" << j << " request " << k << " posted in error (or never) arrived");
                }
                // The bytes a request placed, packet by packet: all when it succeeded, any of them when it
                // may have executed, none otherwise; nothing outside its range (the stray check below).
                auto check_placed = [&](const char* what, const std::byte* got, const std::byte* want) {
                    const auto p = compare_packets(got, want, r.len);
                    if (ok) {
                        BOOST_TEST(p.whole == p.packets(), i << "->" << j << " " << what << " " << k << " succeeded with "
                                                             << p.whole << " of its " << p.packets() << " packets in place");
                    } else if (maybe) {
                        BOOST_TEST(p.wrong == 0u, i << "->" << j << " " << what << " " << k << ": " << p.wrong
                                                    << " of its " << p.packets() << " packets hold other bytes");
                        totals.torn += p.whole > 0 && p.none > 0;
                    } else {
                        BOOST_TEST(p.none == p.packets(), i << "->" << j << " " << what << " " << k << " completed "
                                                            << to_string(r.status) << " (posted: " << r.posted
                                                            << ", in error: " << r.posted_in_error << ") but placed "
                                                            << p.whole + p.wrong << " of its " << p.packets() << " packets");
                    }
                };
                if (carries_data(r.kind) || r.kind == Kind::bad) mark(i, own, r.len);
                switch (r.kind) {
                    case Kind::write:
                    case Kind::write_imm: {
                        const std::size_t at = write_at(i, k);
                        mark(j, at, r.len);
                        check_placed("write", &node[j]->mem[at], payload(r.tag, r.len).data());
                        break;
                    }
                    case Kind::send:
                    case Kind::send_imm: {
                        // Receives are posted and consumed in plan order, and nothing arrives after a message
                        // that failed: a send lands in the receive the peer posted for it.
                        const std::size_t at = recv_at(i, k);
                        mark(j, at, r.len);
                        check_placed("send", &node[j]->mem[at], payload(r.tag, r.len).data());
                        break;
                    }
                    case Kind::read:
                        mark(i, own + slot, r.len);
                        check_placed("read", &node[i]->mem[own + slot], &node[j]->mem[read_at(k)]);
                        break;
                    case Kind::add:
                        mark(i, own + slot, 8);
                        if (ok) {
                            ++adds[j];
                            std::uint64_t old = 0;
                            std::memcpy(&old, &node[i]->mem[own + slot], 8);
                            BOOST_TEST(fetched[j].insert(old).second, "two fetch_adds fetched " << old);
                        } else if (maybe) {
                            ++maybe_adds[j];
                        }
                        break;
                    case Kind::cas: {
                        const std::size_t at = cas_at(i, k);
                        mark(j, at, 8);
                        mark(i, own + slot, 8);
                        std::uint64_t v = 0, old = 0;
                        std::memcpy(&v, &node[j]->mem[at], 8);
                        std::memcpy(&old, &node[i]->mem[own + slot], 8);
                        // Applied once when it succeeded (a second execution would have fetched the tag).
                        if (ok) BOOST_TEST((v == r.tag && old == 0u), i << "->" << j << " compare_swap " << k << ": " << v << ", fetched " << old);
                        else if (maybe) BOOST_TEST((v == 0u || v == r.tag), i << "->" << j << " compare_swap " << k << " wrong");
                        else BOOST_TEST(v == 0u, i << "->" << j << " compare_swap " << k << " took effect though posted in error (or never)");
                        break;
                    }
                    case Kind::bad:
                        BOOST_TEST(!ok, "a write with a forged key succeeded");
                        break;
                }
            }
            BOOST_TEST(send_index == received.size(), i << "->" << j << ": receives that match no request");
        }
    }
    for (int j = 0; j < nodes; ++j) {
        std::uint64_t counter = 0;
        std::memcpy(&counter, &node[j]->mem[counter_at], 8);
        BOOST_TEST((counter >= adds[j] && counter <= adds[j] + maybe_adds[j]),
                   "node " << j << ": counter " << counter << ", successful adds " << adds[j]
                           << ", failed in flight or never completed " << maybe_adds[j]);
        if (!fetched[j].empty()) BOOST_TEST(*fetched[j].rbegin() < counter);
        mark(j, pattern_base, counter_at + 8 - pattern_base);
        std::size_t stray = 0, first_stray = buffer;
        for (std::size_t b = 0; b < buffer; ++b) {
            if (!targeted[j][b] && node[j]->mem[b] != std::byte{0}) {
                if (!stray++) first_stray = b;
            }
        }
        BOOST_TEST(stray == 0u, "node " << j << ": " << stray << " bytes no request targeted changed, the first at " << first_stray);
        for (std::size_t b = pattern_base; b < counter_at; ++b) {
            if (node[j]->mem[b] != pattern_byte(b, j)) {
                BOOST_TEST(false, "node " << j << ": the read-only pattern changed at " << b);
                break;
            }
        }
        if (node[j]->crashed) BOOST_TEST(std::equal(node[j]->mem.begin(), node[j]->mem.end(), node[j]->at_crash.begin(), node[j]->at_crash.end()), "node " << j << " changed after its crash");
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(soak)

// Packets of `mtu` bytes (the constant above), so that long messages take several.
const std::string soak_config = "sim:fabric=soak,mtu=" + std::to_string(mtu) +
                                ",drop=0.02,duplicate=0.02,delay=0.05,delay_ns=5000";

BOOST_AUTO_TEST_CASE(four_nodes_under_faults_keep_every_rc_promise) {
    testing::SweepOptions o;
    o.base = soak_config;
    o.seeds = 2000;
    if (const char* n = std::getenv("WEFT_SOAK_SEEDS")) o.seeds = std::strtoull(n, nullptr, 10);
    // ctest runs the soak in parts, each its own range of seeds, so that a slow build (the sanitizers') can
    // run them side by side.
    if (const char* f = std::getenv("WEFT_SOAK_FIRST")) o.first = std::strtoull(f, nullptr, 10);
    totals = {};
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = testing::sweep(run_soak, o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& t = totals;
    std::printf("soak: %llu seed(s) from %llu of 4 nodes, 12 QPs, %zu requests each, %s, in %.1f s (%.2f ms per seed)\n"
                "soak: faults: packets dropped %llu, duplicated %llu, delayed %llu (retransmissions %llu); "
                "registrations failed %llu, QP creations failed %llu (connections given up %llu); registrations "
                "mid-run %llu, failed %llu (done without %llu); connections made mid-run %llu, QP creations failed "
                "%llu (given up %llu); receive CQs released in use %llu, domains released %llu (faults skipped for "
                "a released domain or a crashed node %llu); links cut for a while %llu, until healed %llu (healed "
                "%llu), for good %llu; nodes stalled %llu, crashed %llu; QPs destroyed in error %llu, with sends "
                "done %llu; forged keys %llu; requests %llu, of several packets %llu: never completed %llu, "
                "transport_retry_exceeded %llu, flushed %llu, posted after the peer was gone %llu, placed in "
                "part %llu\n",
                static_cast<unsigned long long>(r.runs),
                static_cast<unsigned long long>(testing::detail::seed_range(o).first), requests_per_qp, r.ok() ? "no violation" : "FAILED",
                seconds, r.runs ? seconds * 1000 / static_cast<double>(r.runs) : 0.0,
                static_cast<unsigned long long>(t.dropped), static_cast<unsigned long long>(t.duplicated),
                static_cast<unsigned long long>(t.delayed), static_cast<unsigned long long>(t.retransmitted),
                static_cast<unsigned long long>(t.failed_registrations),
                static_cast<unsigned long long>(t.failed_qp_creations),
                static_cast<unsigned long long>(t.connections_given_up),
                static_cast<unsigned long long>(t.reregistrations),
                static_cast<unsigned long long>(t.failed_reregistrations),
                static_cast<unsigned long long>(t.reregistrations_done_without),
                static_cast<unsigned long long>(t.late_connections),
                static_cast<unsigned long long>(t.failed_late_qp_creations),
                static_cast<unsigned long long>(t.late_connections_given_up),
                static_cast<unsigned long long>(t.cqs_released), static_cast<unsigned long long>(t.domains_released),
                static_cast<unsigned long long>(t.strikes_skipped), static_cast<unsigned long long>(t.cuts_timed),
                static_cast<unsigned long long>(t.cuts_until_healed), static_cast<unsigned long long>(t.heals),
                static_cast<unsigned long long>(t.cuts_for_good), static_cast<unsigned long long>(t.stalls),
                static_cast<unsigned long long>(t.crashes), static_cast<unsigned long long>(t.destroyed_in_error),
                static_cast<unsigned long long>(t.destroyed_drained), static_cast<unsigned long long>(t.forged_keys),
                static_cast<unsigned long long>(t.requests), static_cast<unsigned long long>(t.long_requests),
                static_cast<unsigned long long>(t.never_completed), static_cast<unsigned long long>(t.retry_exceeded),
                static_cast<unsigned long long>(t.flushed), static_cast<unsigned long long>(t.posted_to_dead),
                static_cast<unsigned long long>(t.torn));
}

// Regressions, the seeds that found simulator bugs: seed 2 crashes node 1 with sends in flight, and tearing
// its QPs down was reported as a misuse; seed 1783 crashes node 3 while a fetch_add or read it asked for is
// deferred at its peer, and the result still landed in the crashed node's memory (tests/sim/fault_test.cpp
// has a case for each, with its exact schedule). The soak has grown since; both seeds still crash a node with
// requests in flight.
BOOST_AUTO_TEST_CASE(seeds_2_and_1783_crash_a_node_with_requests_in_flight) {
    for (const std::uint64_t seed : {2, 1783}) {
        testing::SweepOptions o;
        o.base = soak_config;
        o.first = seed;
        o.seeds = 1;
        o.honour_environment = false;
        BOOST_TEST(testing::sweep(run_soak, o).ok());
    }
}

BOOST_AUTO_TEST_SUITE_END()
