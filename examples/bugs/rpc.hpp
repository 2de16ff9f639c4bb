// rpc.hpp — a request/reply pair for the bug scenarios: requests and replies are 8-byte sequence numbers
// sent inline (so no send buffer is ever reused early), one receive posted at a time on the server, and a
// loop that drives both nodes from this thread.
#pragma once

#include "node.hpp"

#include <vector>

namespace weft::bugs::detail {

constexpr std::size_t request_slot = 0;   // where a request lands on the server / is built on the client
constexpr std::size_t reply_slot = 4096;  // where a reply lands on the client / is built on the server

inline QpOptions inline_qp(std::uint8_t rnr_retry = 7) {
    QpOptions o;
    o.max_inline = 64;
    o.rnr_retry = rnr_retry;
    return o;
}

/// Records each new sequence number once and replies to every request with its number.
struct Server {
    Node& node;
    bool repost_before_reply;  ///< false is bug (d): the receive comes back only after the reply completed
    std::vector<std::uint64_t> got;
    bool repost_pending = false;

    void start() { must(node.qp.post_recv({recv(0, node.mr.slice(request_slot, 8))}), "server post_recv"); }
    void on(const Completion& c) {
        if (!c.ok()) return;  // its client went away; a new connection restarts it
        if (c.is_recv()) {
            const std::uint64_t seq = node.word(request_slot);
            if (got.empty() || seq > got.back()) got.push_back(seq);
            if (repost_before_reply) start();
            else repost_pending = true;
            node.set_word(reply_slot, seq);
            must(node.qp.post_send({send(seq, node.mr.slice(reply_slot, 8)).inline_data()}), "server post_send");
        } else if (repost_pending) {
            repost_pending = false;
            start();
        }
    }
    /// A fresh QP, as after accepting a new connection.
    void reset() {
        node.new_qp(inline_qp());
        repost_pending = false;
    }
};

inline void post_request(Node& client, std::uint64_t seq) {
    client.set_word(request_slot, seq);
    must(client.qp.post_send({send(seq, client.mr.slice(request_slot, 8)).inline_data()}), "client post_send");
}
inline void post_reply_recv(Node& client) {
    must(client.qp.post_recv({recv(0, client.mr.slice(reply_slot, 8))}), "client post_recv");
}

/// Polls both nodes and hands completions to the handlers until `done()`; false when nothing is in flight
/// and nothing is left to poll first (the programs hang). Each step polls the node whose program is
/// furthest behind in program time, as two programs running side by side would, so that neither runs
/// ahead of the other (docs/simulator.md, "Program time").
template <class OnA, class OnB, class Done>
bool drive(Node& a, Node& b, OnA&& on_a, OnB&& on_b, Done&& done) {
    Completion wc[4];
    const auto fabric = sim::Fabric::of(a.dom);
    bool a_last = false;
    bool a_quiet = false, b_quiet = false;  // polled empty with nothing in flight before the poll
    while (!done()) {
        const auto ta = fabric.program_time(a.dom), tb = fabric.program_time(b.dom);
        const bool a_first = ta != tb ? ta < tb : !a_last;  // a tie: take turns
        a_last = a_first;
        Node& n = a_first ? a : b;
        const bool idle_before = fabric.idle();
        bool any = false;
        for (const auto& c : n.cq.poll(wc)) {
            any = true;
            if (a_first) on_a(c);
            else on_b(c);
        }
        // Hung: each node polled empty while nothing was in flight. (A poll that ran the fabric may have
        // put a completion on the other node's queue, so only a poll of an idle fabric counts.)
        if (any || !idle_before) a_quiet = b_quiet = false;
        else (a_first ? a_quiet : b_quiet) = true;
        if (a_quiet && b_quiet) return false;
    }
    return true;
}

}  // namespace weft::bugs::detail
