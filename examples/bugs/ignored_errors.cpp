// (e) ignored_errors — a client that only looks for successful completions.
//
// The client sends numbered requests and waits for each reply, skipping completions that are not ok. Its
// server is sometimes late with its receive (bug (d)) and the client does not retry RNR (rnr_retry=0), so
// now and then a request fails. The client never notices: its QP is in error, the reply receive is flushed,
// it waits for a reply that cannot come, then keeps posting the remaining requests, which are flushed too.
// The server never gets them: data is lost, silently.
//
// The fix checks every completion's status. An error means the QP is dead (it flushes everything after):
// stop posting on it, reconnect, and resend every request whose reply has not arrived (the server ignores
// a number it has already seen, so a resend is harmless).
#include "bugs.hpp"
#include "rpc.hpp"

namespace weft::bugs {
namespace {

using namespace detail;

constexpr std::uint64_t requests = 6;

bool all_arrived_in_order(const Server& server) {
    if (server.got.size() != requests) return false;
    for (std::uint64_t i = 0; i < requests; ++i) {
        if (server.got[i] != i + 1) return false;
    }
    return true;
}

}  // namespace

bool ignored_errors(const std::string& config) {
    Node a(config, 64 * 1024, inline_qp(0)), b(config, 64 * 1024, inline_qp());
    Server server{b, Repost::after_reply_completed, {}};
    server.start();
    link(a, b);
    std::uint64_t replies = 0, next = 1;
    post_reply_recv(a);
    post_request(a, next++);
    auto on_a = [&](const Completion& c) {
        if (!c.ok() || !c.is_recv()) return;  // the bug: an error completion is skipped like a send completion
        ++replies;
        if (next > requests) return;
        post_reply_recv(a);
        post_request(a, next++);
    };
    auto on_b = [&](const Completion& c) { server.on(c); };
    if (!drive(a, b, on_a, on_b, [&] { return replies == requests; })) {
        // No reply is coming; the client carries on with the rest of its requests regardless.
        while (next <= requests) {
            post_reply_recv(a);
            post_request(a, next++);
            drive(a, b, on_a, on_b, [&] { return replies == requests; });
        }
    }
    settle(a, b);
    return !all_arrived_in_order(server);
}

bool ignored_errors_fixed(const std::string& config) {
    Node a(config, 64 * 1024, inline_qp(0)), b(config, 64 * 1024, inline_qp());
    Server server{b, Repost::after_reply_completed, {}};
    server.start();
    link(a, b);
    std::uint64_t replies = 0, next = 1;
    bool broken = false;
    post_reply_recv(a);
    post_request(a, next++);
    auto on_a = [&](const Completion& c) {
        if (!c.ok()) {
            broken = true;  // the QP is in error: nothing more will succeed on it
            return;
        }
        if (!c.is_recv() || broken) return;
        ++replies;
        if (next > requests) return;
        post_reply_recv(a);
        post_request(a, next++);
    };
    auto on_b = [&](const Completion& c) { server.on(c); };
    for (std::uint64_t attempt = 0; attempt <= 2 * requests; ++attempt) {
        if (!drive(a, b, on_a, on_b, [&] { return broken || replies == requests; })) return true;  // a hang
        if (!broken) {
            settle(a, b);
            return !all_arrived_in_order(server);
        }
        // Let what is in flight finish (the flushes, the server's last reply), then reconnect.
        settle(a, b);
        a.new_qp(inline_qp(0));
        server.reset();
        server.start();
        link(a, b);
        broken = false;
        next = replies + 1;  // resend from the first request without a reply
        post_reply_recv(a);
        post_request(a, next++);
    }
    return true;  // gave up: reported as a failure
}

}  // namespace weft::bugs
