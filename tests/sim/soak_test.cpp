// Fault soak: four nodes, every pair connected, a mixed workload of every opcode (writes and sends, with
// immediate data or not, reads, fetch_adds, compare_swaps) under packet loss, duplication and delay and
// every legal reordering, with, seeded per run:
//  - injected setup failures: register_memory and create_qp fail (resource_exhausted); the program retries
//    a registration, and retries a QP once before it gives the connection up;
//  - links cut for a while (shorter or longer than the retry budget), cut and healed later, or cut for good;
//  - a node stalled for a while (its responder takes nothing up), a node crashed (its program stops too);
//  - QPs destroyed mid-run: one in error with completions still to poll, or one with its sends done and
//    receives still posted (both legal; docs/misuse.md);
//  - some QPs driven into error on purpose (a forged key) and posted to afterwards (the requests flush).
// Over many seeds it checks what RC promises whatever the schedule and the faults:
//  - every request completes at most once, and exactly once unless its node crashed or its QP was destroyed;
//  - every completion is success, flushed, or transport_retry_exceeded (its peer QP went to error or away);
//  - per QP, send and receive completions come in post order, and after the first one that is not success
//    every later one is flushed; a destroyed QP gives nothing more but flushed sends;
//  - a request posted after its peer was gone for good (crashed, its QP destroyed, the link cut for good)
//    never succeeds;
//  - a write that completed success is at its target; one flushed because it was posted in error, or never
//    posted, never took effect (one that failed in flight, or never completed, may or may not have);
//  - every byte no request targeted is untouched, and a crashed node's memory never changes after the crash;
//  - the receives of a QP hold, in order, every send and write with immediate that completed success,
//    possibly ones that failed or never completed, never one posted in error, and nothing else; a write
//    with immediate's data is in place when its receive completes;
//  - each node's counter counts every fetch_add that completed success against it, at most those that
//    failed or never completed besides, none posted in error, and the successful ones fetched distinct values;
//  - a compare_swap (from 0 to its tag, on a word of its own) that succeeded fetched 0 and stored its tag,
//    one that failed or never completed may have stored it, one posted in error did not;
//  - a successful read returns the (never written) bytes it read.
// A memory region is never released while in use (a misuse, not a fault); the sweep fails a seed on any
// misuse the simulator reports. At the end it prints the faults injected per kind, the seeds and the time.
// $WEFT_SOAK_SEEDS sets the number of seeds (default 2000, CI's figure); $WEFT_SIM_SEED replays one.
#include "node.hpp"

#include <weft/testing.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>

using namespace weft;
using namespace std::chrono_literals;

namespace {

constexpr int nodes = 4;
constexpr std::size_t requests_per_qp = 24;
constexpr std::size_t window = 6;  // requests in flight per QP
// Node memory (64 KiB): [0, 8K) write slots, 8 bytes per (peer, request); [8K, 16K) compare_swap slots,
// likewise; [16K, 32K) receive buffers,
// 64 bytes per (peer, request); [32K, 40K) a constant pattern reads fetch; 40K the fetch_add counter;
// [48K, 64K) the requester's own sources and results.
constexpr std::size_t write_base = 0, cas_base = 8192, recv_base = 16384, pattern_base = 32768, counter_at = 40960,
                      own_base = 49152, buffer = 65536;
constexpr std::size_t slot_of(int peer, std::size_t k) { return static_cast<std::size_t>(peer) * requests_per_qp + k; }
// QpOptions::timeout 8 is ~1 ms; retry_cnt 7 gives up after ~8.4 ms: cuts and stalls of up to 12 ms end
// on both sides of it.
constexpr std::uint64_t longest_outage_ns = 12'000'000;

// write_imm, send_imm and cas stand in for write, send and add in a third of the cases.
enum class Kind { write, send, read, add, bad, write_imm, send_imm, cas };
constexpr bool consumes_recv(Kind k) { return k == Kind::send || k == Kind::send_imm || k == Kind::write_imm; }
// The tag of request k from node `from` to node `to`; its low 32 bits (k) are the immediate data.
constexpr std::uint64_t tag_of(int from, int to, std::size_t k) {
    return (std::uint64_t{1} << 63) | (std::uint64_t(from) << 48) | (std::uint64_t(to) << 40) | k;
}

struct Request {
    Kind kind;
    std::uint64_t tag;  // the bytes it carries
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
    std::vector<Request> plan;
    std::size_t posted = 0, completed = 0, recvs_done = 0;
    std::vector<std::uint64_t> received;  // tags of sends and writes with immediate that arrived here, in order
    bool peer_dead = false;       // the peer node crashed, its QP was destroyed, or the link is cut for good
    bool destroy_wanted = false;  // the program means to destroy the QP once that is legal
    bool destroyed = false;
    bool error_seen = false;  // a completion other than success was polled
    std::uint64_t next_send = 0, next_recv = 0;  // completions come in post order from these ids on
};

struct Node {
    Domain dom;
    CompletionQueue cq;
    std::vector<std::byte> mem;
    MemoryRegion mr;
    bool crashed = false;
    std::vector<std::byte> at_crash;  // the memory when the node crashed
};

// Faults injected over the whole sweep, per kind.
struct Totals {
    std::uint64_t dropped = 0, duplicated = 0, delayed = 0, retransmitted = 0;
    std::uint64_t failed_registrations = 0, failed_qp_creations = 0, connections_given_up = 0;
    std::uint64_t cuts_timed = 0, cuts_until_healed = 0, heals = 0, cuts_for_good = 0, stalls = 0, crashes = 0;
    std::uint64_t destroyed_in_error = 0, destroyed_drained = 0, forged_keys = 0;
    std::uint64_t requests = 0, never_completed = 0, posted_to_dead = 0, retry_exceeded = 0, flushed = 0;
};
Totals totals;

// A fault that strikes once the program has polled `at` completions in all.
struct Strike {
    enum What { cut_for, cut_then_heal, cut_for_good, heal, stall, crash, destroy } what;
    std::size_t at;
    int a = 0, b = 0;  // nodes (cuts, stall, crash) or the endpoint a->b (destroy)
    std::uint64_t ns = 0;
};

void run_soak(const testing::Seed& s) {
    std::mt19937_64 rng(s.value * 0x9e3779b97f4a7c15ull);
    std::mt19937_64 variants(s.value ^ 0x5bd1e995u);  // apart, so that adding opcodes moved no other choice
    auto below = [&rng](std::uint64_t n) { return rng() % n; };
    auto other_node = [&](int a) { return static_cast<int>((a + 1 + below(nodes - 1)) % nodes); };
    std::vector<std::unique_ptr<Node>> node;
    for (int i = 0; i < nodes; ++i) {
        node.push_back(std::make_unique<Node>());
        node.back()->dom = open(s.config);
    }
    auto fabric = sim::Fabric::of(node[0]->dom);
    for (int i = 0; i < nodes; ++i) {
        auto& n = *node[i];
        n.cq = n.dom.create_cq({.depth = 4096});
        n.mem.assign(buffer, std::byte{0});
        for (std::size_t b = pattern_base; b < counter_at; ++b) n.mem[b] = static_cast<std::byte>(b * 13 + i);
        if (below(8) == 0) fabric.fail_next_registration(1 + static_cast<unsigned>(below(2)));
        // The program retries a registration that failed for want of resources.
        for (int attempt = 0; !n.mr; ++attempt) {
            BOOST_REQUIRE(attempt < 3);
            try {
                n.mr = n.dom.register_memory(n.mem, all_access);
            } catch (const Error& e) {
                BOOST_REQUIRE(e.code() == make_error_code(Errc::resource_exhausted));
                ++totals.failed_registrations;
            }
        }
    }
    // ep[i][j]: node i's side of the connection to node j.
    std::vector<std::vector<Endpoint>> ep(nodes);
    for (auto& row : ep) row.resize(nodes);
    QpOptions o;
    o.max_send = 64;
    o.max_recv = 64;
    o.timeout = 8;  // ~1 ms: losses recover quickly in virtual time
    // The program tries a QP twice; when both fail, it does without that connection.
    auto create = [&](int i) {
        o.send_cq = node[i]->cq;
        o.recv_cq = node[i]->cq;
        for (int attempt = 0; attempt < 2; ++attempt) {
            try {
                return node[i]->dom.create_qp(o);
            } catch (const Error& e) {
                BOOST_TEST((e.code() == make_error_code(Errc::resource_exhausted)), e.what());
                ++totals.failed_qp_creations;
            }
        }
        return QueuePair();
    };
    for (int i = 0; i < nodes; ++i) {
        for (int j = i + 1; j < nodes; ++j) {
            if (below(12) == 0) fabric.fail_next_qp_creation(1 + static_cast<unsigned>(below(2)));
            ep[i][j].self = ep[j][i].peer = i;
            ep[i][j].peer = ep[j][i].self = j;
            ep[i][j].qp = create(i);
            if (ep[i][j].qp) ep[j][i].qp = create(j);
            if (!ep[i][j].qp || !ep[j][i].qp) {
                ep[i][j].qp = QueuePair();
                ++totals.connections_given_up;
                continue;
            }
            for (Endpoint* e : {&ep[i][j], &ep[j][i]}) {
                e->active = true;
                e->qpn = e->qp.qp_num();
            }
            ep[i][j].qp.connect(ep[j][i].qp.address());
            ep[j][i].qp.connect(ep[i][j].qp.address());
        }
    }
    // Plans; about one QP in four meets a bad key in the middle and is posted to after it went to error.
    for (int i = 0; i < nodes; ++i) {
        for (int j = 0; j < nodes; ++j) {
            if (i == j || !ep[i][j].active) continue;
            auto& e = ep[i][j];
            const bool breaks = below(4) == 0;
            const std::size_t bad_at = breaks ? 4 + below(requests_per_qp - 8) : requests_per_qp;
            totals.forged_keys += breaks;
            totals.requests += requests_per_qp;
            for (std::size_t k = 0; k < requests_per_qp; ++k) {
                Kind kind = k == bad_at ? Kind::bad : static_cast<Kind>(below(4));
                if (variants() % 3 == 0) {
                    if (kind == Kind::write) kind = Kind::write_imm;
                    else if (kind == Kind::send) kind = Kind::send_imm;
                    else if (kind == Kind::add) kind = Kind::cas;
                }
                e.plan.push_back({kind, tag_of(i, j, k)});
            }
            // The peer posts a receive for every send and write with immediate of the plan, each in its
            // own buffer.
            for (std::size_t k = 0; k < requests_per_qp; ++k) {
                if (!consumes_recv(e.plan[k].kind)) continue;
                auto& r = ep[j][i];
                const std::size_t at = recv_base + slot_of(i, k) * 64 / 2;  // 32 bytes each
                BOOST_REQUIRE(r.qp.post_recv({recv(k, node[j]->mr.slice(at, 32))}));
            }
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
    auto strike = [&](const Strike& f) {
        auto& a = *node[f.a];
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
                a.at_crash = a.mem;
                for (int j = 0; j < nodes; ++j) {
                    if (j != f.a) connection_gone(f.a, j);
                }
                ++totals.crashes;
                break;
            case Strike::destroy: ep[f.a][f.b].destroy_wanted = true; break;
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
            const std::size_t own = own_base + (static_cast<std::size_t>(e.peer) * requests_per_qp + k) * 32;
            std::memcpy(&me.mem[own], &r.tag, 8);
            r.posted = true;
            r.posted_in_error = e.qp.state() == QpState::error;
            r.posted_to_dead = e.peer_dead;
            const auto remote = them.mr.remote();
            PostStatus st;
            switch (r.kind) {
                case Kind::write:
                    st = e.qp.post_send({write(k, me.mr.slice(own, 8), remote.slice(write_base + slot_of(e.self, k) * 8, 8))});
                    break;
                case Kind::write_imm:
                    st = e.qp.post_send({write(k, me.mr.slice(own, 8), remote.slice(write_base + slot_of(e.self, k) * 8, 8))
                                             .with_imm(static_cast<std::uint32_t>(r.tag))});
                    break;
                case Kind::send: st = e.qp.post_send({send(k, me.mr.slice(own, 8))}); break;
                case Kind::send_imm:
                    st = e.qp.post_send({send(k, me.mr.slice(own, 8)).with_imm(static_cast<std::uint32_t>(r.tag))});
                    break;
                case Kind::read:
                    st = e.qp.post_send({read(k, me.mr.slice(own + 8, 16),
                                              remote.slice(pattern_base + (k * 64) % 8000, 16))});
                    break;
                case Kind::add:
                    st = e.qp.post_send({fetch_add(k, me.mr.slice(own + 8, 8), remote.slice(counter_at, 8), 1)});
                    break;
                case Kind::cas:  // each in a slot of its own: from 0 to its tag, once
                    st = e.qp.post_send({compare_swap(k, me.mr.slice(own + 8, 8),
                                                      remote.slice(cas_base + slot_of(e.self, k) * 8, 8), 0, r.tag)});
                    break;
                case Kind::bad: {
                    const RemoteRegion forged(remote.addr(), 8, remote.rkey() ^ 0x5a5a00, remote.backend());
                    st = e.qp.post_send({write(k, me.mr.slice(own, 8), forged)});
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
        // Errors are followed by flushes only; each queue completes in post order.
        BOOST_TEST((!e.error_seen || c.status == WcStatus::flushed),
                   i << "->" << peer << ": " << c << " after an error completion");
        if (!c.ok()) e.error_seen = true;
        std::uint64_t& next_id = c.is_recv() ? e.next_recv : e.next_send;
        BOOST_TEST(c.id >= next_id, i << "->" << peer << ": " << c << " out of post order");
        next_id = c.id + 1;
        if (c.is_recv()) {
            ++e.recvs_done;
            if (c.ok()) {
                std::uint64_t tag = 0;
                BOOST_TEST(c.byte_len == 8u);
                if (c.opcode == Opcode::recv_rdma_with_imm) {
                    // A write with immediate: its data is in place when its receive completes.
                    BOOST_TEST(c.has_imm);
                    tag = tag_of(peer, i, c.imm);
                    std::uint64_t v = 0;
                    if (c.imm < requests_per_qp) std::memcpy(&v, &node[i]->mem[write_base + slot_of(peer, c.imm) * 8], 8);
                    BOOST_TEST(v == tag, i << "<-" << peer << ": write with immediate " << c.imm << " completed before its data");
                } else {
                    std::memcpy(&tag, &node[i]->mem[recv_base + slot_of(peer, c.id) * 64 / 2], 8);
                    if (c.has_imm) BOOST_TEST(c.imm == static_cast<std::uint32_t>(tag), i << "<-" << peer << ": " << c);
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
            for (const auto& c : node[i]->cq.poll(wc)) {
                any = true;
                ++polled;
                take(i, c);
            }
        }
        idle_rounds = any || !fabric.idle() ? 0 : idle_rounds + 1;
    }
    // A crashed node's CQ holds what completed before the crash: read it, to know what succeeded.
    for (int i = 0; i < nodes; ++i) {
        if (!node[i]->crashed) continue;
        for (auto got = node[i]->cq.poll(wc); !got.empty(); got = node[i]->cq.poll(wc)) {
            for (const auto& c : got) take(i, c);
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
    std::vector<std::vector<bool>> targeted(nodes, std::vector<bool>(buffer, false));
    for (int i = 0; i < nodes; ++i) {
        for (int j = 0; j < nodes; ++j) {
            if (i == j || !ep[i][j].active) continue;
            auto& e = ep[i][j];
            const bool may_stay_open = node[i]->crashed || e.destroyed;  // its completions may never come
            BOOST_TEST((may_stay_open || e.posted == e.plan.size()), i << "->" << j << " posted " << e.posted);
            std::size_t send_index = 0;
            const auto& received = ep[j][i].received;
            for (std::size_t k = 0; k < e.plan.size(); ++k) {
                const Request& r = e.plan[k];
                const std::size_t own = own_base + (static_cast<std::size_t>(j) * requests_per_qp + k) * 32;
                const bool ok = r.done && r.status == WcStatus::success;
                totals.posted_to_dead += r.posted_to_dead;
                totals.retry_exceeded += r.done && r.status == WcStatus::transport_retry_exceeded;
                totals.flushed += r.done && r.status == WcStatus::flushed;
                if (r.posted && !r.done) {
                    BOOST_TEST(may_stay_open, "request " << k << " of " << i << "->" << j << " never completed");
                    ++totals.never_completed;
                }
                // Failed while in flight (flushed, or retries exhausted) or never completed: it may have
                // executed before its acknowledgement was lost. Flushed because it was posted in error, or
                // never posted: it did not.
                const bool maybe = r.posted && !ok && !r.posted_in_error;
                BOOST_TEST((!r.done || ok || r.status == WcStatus::flushed ||
                            r.status == WcStatus::transport_retry_exceeded || r.kind == Kind::bad),
                           i << "->" << j << " request " << k << ": " << to_string(r.status));
                BOOST_TEST((!ok || !r.posted_to_dead),
                           i << "->" << j << " request " << k << " succeeded though posted after its peer was gone");
                if (consumes_recv(r.kind)) {
                    const bool arrived = send_index < received.size() && received[send_index] == r.tag;
                    if (arrived) ++send_index;
                    if (ok) BOOST_TEST(arrived, i << "->" << j << " request " << k << " succeeded but its receive is missing");
                    else if (!maybe) BOOST_TEST(!arrived, i << "->" << j << " request " << k << " posted in error (or never) arrived");
                }
                switch (r.kind) {
                    case Kind::write:
                    case Kind::write_imm: {
                        const std::size_t at = write_base + slot_of(i, k) * 8;
                        std::fill_n(targeted[j].begin() + static_cast<long>(at), 8, true);
                        std::uint64_t v = 0;
                        std::memcpy(&v, &node[j]->mem[at], 8);
                        if (ok) BOOST_TEST(v == r.tag, i << "->" << j << " write " << k << " missing");
                        else if (maybe) BOOST_TEST((v == 0u || v == r.tag), i << "->" << j << " write " << k << " wrong");
                        else BOOST_TEST(v == 0u, i << "->" << j << " write " << k << " completed "
                                                   << to_string(r.status) << " (posted: " << r.posted
                                                   << ", in error: " << r.posted_in_error << ") but took effect");
                        break;
                    }
                    case Kind::send:
                    case Kind::send_imm:
                        std::fill_n(targeted[j].begin() + static_cast<long>(recv_base + slot_of(i, k) * 64 / 2), 32, true);
                        break;
                    case Kind::read:
                        if (ok) {
                            BOOST_TEST(std::memcmp(&node[i]->mem[own + 8],
                                                   &node[j]->mem[pattern_base + (k * 64) % 8000], 16) == 0);
                        }
                        break;
                    case Kind::add:
                        if (ok) {
                            ++adds[j];
                            std::uint64_t old = 0;
                            std::memcpy(&old, &node[i]->mem[own + 8], 8);
                            BOOST_TEST(fetched[j].insert(old).second, "two fetch_adds fetched " << old);
                        } else if (maybe) {
                            ++maybe_adds[j];
                        }
                        break;
                    case Kind::cas: {
                        const std::size_t at = cas_base + slot_of(i, k) * 8;
                        std::fill_n(targeted[j].begin() + static_cast<long>(at), 8, true);
                        std::uint64_t v = 0, old = 0;
                        std::memcpy(&v, &node[j]->mem[at], 8);
                        std::memcpy(&old, &node[i]->mem[own + 8], 8);
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
        std::fill_n(targeted[j].begin() + static_cast<long>(pattern_base), counter_at + 8 - pattern_base, true);
        std::fill_n(targeted[j].begin() + static_cast<long>(own_base), buffer - own_base, true);
        std::size_t stray = 0;
        for (std::size_t b = 0; b < buffer; ++b) {
            if (!targeted[j][b] && node[j]->mem[b] != std::byte{0}) ++stray;
        }
        BOOST_TEST(stray == 0u, "node " << j << ": " << stray << " bytes no request targeted changed");
        for (std::size_t b = pattern_base; b < counter_at; ++b) {
            if (node[j]->mem[b] != static_cast<std::byte>(b * 13 + j)) {
                BOOST_TEST(false, "node " << j << ": the read-only pattern changed at " << b);
                break;
            }
        }
        if (node[j]->crashed) BOOST_TEST((node[j]->mem == node[j]->at_crash), "node " << j << " changed after its crash");
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(soak)

BOOST_AUTO_TEST_CASE(four_nodes_under_faults_keep_every_rc_promise) {
    testing::SweepOptions o;
    o.base = "sim:fabric=soak,drop=0.02,duplicate=0.02,delay=0.05,delay_ns=5000";
    o.seeds = 2000;
    if (const char* n = std::getenv("WEFT_SOAK_SEEDS")) o.seeds = std::strtoull(n, nullptr, 10);
    totals = {};
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = testing::sweep(run_soak, o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& t = totals;
    std::printf("soak: %llu seed(s) of 4 nodes, 12 QPs, %zu requests each, %s, in %.1f s (%.2f ms per seed)\n"
                "soak: faults: packets dropped %llu, duplicated %llu, delayed %llu (retransmissions %llu); "
                "registrations failed %llu, QP creations failed %llu (connections given up %llu); links cut for a "
                "while %llu, until healed %llu (healed %llu), for good %llu; nodes stalled %llu, crashed %llu; QPs destroyed in "
                "error %llu, with sends done %llu; forged keys %llu; requests %llu: never completed %llu, "
                "transport_retry_exceeded %llu, flushed %llu, posted after the peer was gone %llu\n",
                static_cast<unsigned long long>(r.runs), requests_per_qp, r.ok() ? "no violation" : "FAILED",
                seconds, r.runs ? seconds * 1000 / static_cast<double>(r.runs) : 0.0,
                static_cast<unsigned long long>(t.dropped), static_cast<unsigned long long>(t.duplicated),
                static_cast<unsigned long long>(t.delayed), static_cast<unsigned long long>(t.retransmitted),
                static_cast<unsigned long long>(t.failed_registrations),
                static_cast<unsigned long long>(t.failed_qp_creations),
                static_cast<unsigned long long>(t.connections_given_up), static_cast<unsigned long long>(t.cuts_timed),
                static_cast<unsigned long long>(t.cuts_until_healed), static_cast<unsigned long long>(t.heals), static_cast<unsigned long long>(t.cuts_for_good),
                static_cast<unsigned long long>(t.stalls), static_cast<unsigned long long>(t.crashes),
                static_cast<unsigned long long>(t.destroyed_in_error),
                static_cast<unsigned long long>(t.destroyed_drained), static_cast<unsigned long long>(t.forged_keys),
                static_cast<unsigned long long>(t.requests), static_cast<unsigned long long>(t.never_completed),
                static_cast<unsigned long long>(t.retry_exceeded), static_cast<unsigned long long>(t.flushed),
                static_cast<unsigned long long>(t.posted_to_dead));
}

// Regressions, the seeds that found simulator bugs: seed 2 crashes node 1 with sends in flight, and tearing
// its QPs down was reported as a misuse; seed 1783 crashes node 3 while a fetch_add or read it asked for is
// deferred at its peer, and the result still landed in the crashed node's memory (tests/sim/fault_test.cpp
// has a case for each).
BOOST_AUTO_TEST_CASE(seeds_2_and_1783_crash_a_node_with_requests_in_flight) {
    for (const std::uint64_t seed : {2, 1783}) {
        testing::SweepOptions o;
        o.base = "sim:fabric=soak,drop=0.02,duplicate=0.02,delay=0.05,delay_ns=5000";
        o.first = seed;
        o.seeds = 1;
        o.honour_environment = false;
        BOOST_TEST(testing::sweep(run_soak, o).ok());
    }
}

BOOST_AUTO_TEST_SUITE_END()
