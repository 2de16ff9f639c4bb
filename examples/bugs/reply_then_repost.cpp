// (f) reply_then_repost — a receive re-posted right after the reply, instead of before it.
//
// The server keeps one receive posted. On a request it posts its reply and then, in the very next call,
// re-posts the receive. Two back-to-back calls look atomic in the source, but between them the program may
// pause (a preemption, a page fault) while the NIC goes on: the reply reaches the client, the client
// (rnr_retry=0) sends its next request at once, and that request can arrive before the receive is back.
// The client's request fails with rnr_retry_exceeded. The fix: re-post the receive before replying.
#include "bugs.hpp"
#include "rpc.hpp"

namespace weft::bugs {
namespace {

using namespace detail;

constexpr std::uint64_t requests = 8;

bool request_reply(const std::string& config, bool repost_first) {
    Node a(config, 64 * 1024, inline_qp(0)), b(config, 64 * 1024, inline_qp());
    must(b.qp.post_recv({recv(0, b.mr.slice(request_slot, 8))}), "server post_recv");
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
    auto on_b = [&](const Completion& c) {
        if (!c.ok() || !c.is_recv()) return;
        const std::uint64_t seq = b.word(request_slot);
        b.set_word(reply_slot, seq);
        const auto repost = recv(0, b.mr.slice(request_slot, 8));
        const auto reply = send(seq, b.mr.slice(reply_slot, 8)).inline_data();
        if (repost_first) must(b.qp.post_recv({repost}), "server post_recv");
        must(b.qp.post_send({reply}), "server post_send");
        if (!repost_first) must(b.qp.post_recv({repost}), "server post_recv");
    };
    const bool finished = drive(a, b, on_a, on_b, [&] { return failed || replies == requests; });
    settle(a, b);
    return failed || !finished;
}

}  // namespace

bool reply_then_repost(const std::string& config) { return request_reply(config, false); }
bool reply_then_repost_fixed(const std::string& config) { return request_reply(config, true); }

}  // namespace weft::bugs
