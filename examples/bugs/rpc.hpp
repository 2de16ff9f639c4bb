// rpc.hpp — a request/reply pair for the bug scenarios: requests and replies are 8-byte sequence numbers
// sent inline (so no send buffer is ever reused early), one receive posted at a time on the server, and a
// loop that drives both nodes from this thread.
#pragma once

#include "node.hpp"

#include <string>
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

/// When the server re-posts its one receive.
enum class Repost {
    before_reply,           ///< the fix: the receive is back before the reply can reach the client
    after_reply,            ///< bug (f): in the call right after posting the reply
    after_reply_completed,  ///< bug (d): only once the reply's acknowledgement came back
};

/// Records each new sequence number once and replies to every request with its number.
struct Server {
    Node& node;
    Repost repost;
    std::vector<std::uint64_t> got;
    bool repost_pending = false;

    void start() { must(node.qp.post_recv({recv(0, node.mr.slice(request_slot, 8))}), "server post_recv"); }
    void on(const Completion& c) {
        if (!c.ok()) return;  // its client went away; a new connection restarts it
        if (c.is_recv()) {
            const std::uint64_t seq = node.word(request_slot);
            if (got.empty() || seq > got.back()) got.push_back(seq);
            if (repost == Repost::before_reply) start();
            else if (repost == Repost::after_reply_completed) repost_pending = true;
            node.set_word(reply_slot, seq);
            must(node.qp.post_send({send(seq, node.mr.slice(reply_slot, 8)).inline_data()}), "server post_send");
            if (repost == Repost::after_reply) start();
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

/// Sends `requests` numbered requests, each once the reply to the previous one has arrived, and gives up at
/// the first error (with rnr_retry=0, rnr_retry_exceeded: the server had no receive posted).
struct Client {
    Node& node;
    std::uint64_t requests;
    bool failed = false;
    std::uint64_t replies = 0, next = 1;

    void start() {
        post_reply_recv(node);
        post_request(node, next++);
    }
    void on(const Completion& c) {
        if (!c.ok()) {
            failed = true;
            return;
        }
        if (!c.is_recv()) return;
        ++replies;
        if (next > requests) return;
        post_reply_recv(node);
        post_request(node, next++);
    }
    bool done() const { return failed || replies == requests; }
};

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

/// One server re-posting its receive as `repost` says, one client that does not retry RNR sending `requests`
/// requests: true when a request failed or the two hung (the bug showed).
inline bool request_reply(const std::string& config, Repost repost, std::uint64_t requests) {
    Node a(config, 64 * 1024, inline_qp(0)), b(config, 64 * 1024, inline_qp());
    Server server{b, repost, {}};
    server.start();
    link(a, b);
    Client client{a, requests};
    client.start();
    const bool finished = drive(
        a, b, [&](const Completion& c) { client.on(c); }, [&](const Completion& c) { server.on(c); },
        [&] { return client.done(); });
    settle(a, b);
    return client.failed || !finished;
}

}  // namespace weft::bugs::detail
