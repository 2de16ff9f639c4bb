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
/// and nothing is left to poll first (the programs hang).
template <class OnA, class OnB, class Done>
bool drive(Node& a, Node& b, OnA&& on_a, OnB&& on_b, Done&& done) {
    Completion wc[4];
    while (!done()) {
        bool any = false;
        for (const auto& c : a.cq.poll(wc)) any = true, on_a(c);
        if (done()) break;
        for (const auto& c : b.cq.poll(wc)) any = true, on_b(c);
        if (!any && sim::Fabric::of(a.dom).idle()) return false;
    }
    return true;
}

}  // namespace weft::bugs::detail
