// (d) late_receive — a receive posted too late for a peer that does not retry.
//
// The server keeps one receive posted and re-posts it only once its reply has completed (the reply's
// acknowledgement came back). The client, with rnr_retry=0 (fail fast instead of retrying), sends its next
// request as soon as it sees the reply. Whether that request or the acknowledgement of the reply arrives
// first is timing: when the request wins, the server has no receive posted and the client's request fails
// with rnr_retry_exceeded. The fix: re-post the receive before replying (or pre-post several, or let the
// client retry with rnr_retry=7).
#include "bugs.hpp"
#include "rpc.hpp"

namespace weft::bugs {
namespace {

using namespace detail;

constexpr std::uint64_t requests = 4;

bool request_reply(const std::string& config, bool repost_before_reply) {
    Node a(config, 64 * 1024, inline_qp(0)), b(config, 64 * 1024, inline_qp());
    Server server{b, repost_before_reply, {}};
    server.start();
    link(a, b);
    bool failed = false;
    std::uint64_t replies = 0, next = 1;
    post_reply_recv(a);
    post_request(a, next++);
    auto on_a = [&](const Completion& c) {
        if (!c.ok()) {
            failed = true;  // rnr_retry_exceeded: the server had no receive posted
            return;
        }
        if (!c.is_recv()) return;
        ++replies;
        if (next > requests) return;
        post_reply_recv(a);
        post_request(a, next++);
    };
    const bool finished = drive(a, b, on_a, [&](const Completion& c) { server.on(c); },
                                [&] { return failed || replies == requests; });
    settle(a, b);
    return failed || !finished;
}

}  // namespace

bool late_receive(const std::string& config) { return request_reply(config, false); }
bool late_receive_fixed(const std::string& config) { return request_reply(config, true); }

}  // namespace weft::bugs
