// (g) credit_off_by_one — a credit taken back one step too early.
//
// Flow control by credits: the server posts `credits` receives; the client may have that many requests
// unanswered and must not send without a credit, because its QP has rnr_retry=0. The bug: the client takes
// a credit back when its request *completes* — the server's NIC consumed the receive — one step before the
// server's program has read the request and re-posted the receive. With a fast server program that step is
// never visible; when the server's program pauses between seeing the request and re-posting, the next
// request finds no receive and fails with rnr_retry_exceeded. The fix: the credit comes back with the
// reply, which the server sends after re-posting.
#include "bugs.hpp"
#include "rpc.hpp"

namespace weft::bugs {
namespace {

using namespace detail;

constexpr std::uint64_t requests = 12;
constexpr std::uint64_t credits_at_start = 2;

bool with_credits(const std::string& config, bool credit_on_reply) {
    Node a(config, 64 * 1024, inline_qp(0)), b(config, 64 * 1024, inline_qp());
    // Each request lands in its own slot, so a request is read before its receive comes back.
    auto request_recv = [&](std::uint64_t slot) { return recv(slot, b.mr.slice(request_slot + 8 * slot, 8)); };
    for (std::uint64_t s = 0; s < credits_at_start; ++s) must(b.qp.post_recv({request_recv(s)}), "server post_recv");
    link(a, b);
    std::uint64_t credits = credits_at_start, next = 1, replies = 0;
    bool failed = false;
    auto send_what_credits_allow = [&] {
        while (credits > 0 && next <= requests) {
            --credits;
            post_reply_recv(a);
            post_request(a, next++);
        }
    };
    send_what_credits_allow();
    auto on_a = [&](const Completion& c) {
        if (!c.ok()) {
            failed = true;  // rnr_retry_exceeded: the request found no receive posted
            return;
        }
        if (c.is_recv()) ++replies;
        if (c.is_recv() == credit_on_reply) {
            ++credits;
            send_what_credits_allow();
        }
    };
    auto on_b = [&](const Completion& c) {
        if (!c.ok() || !c.is_recv()) return;
        const std::uint64_t seq = b.word(request_slot + 8 * c.id);
        must(b.qp.post_recv({request_recv(c.id)}), "server post_recv");
        b.set_word(reply_slot, seq);
        must(b.qp.post_send({send(seq, b.mr.slice(reply_slot, 8)).inline_data()}), "server post_send");
    };
    const bool finished = drive(a, b, on_a, on_b, [&] { return failed || replies == requests; });
    settle(a, b);
    return failed || !finished;
}

}  // namespace

bool credit_off_by_one(const std::string& config) { return with_credits(config, false); }
bool credit_off_by_one_fixed(const std::string& config) { return with_credits(config, true); }

}  // namespace weft::bugs
