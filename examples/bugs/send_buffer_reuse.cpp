// (c) send_buffer_reuse — refilling a send buffer before the send completed.
//
// The client builds each 1 KiB request in one registered buffer, sends it, and waits for the server's
// reply; the reply proves the server has the request, so the client refills the buffer with the next one
// at once. But the buffer belongs to the NIC until the send's own completion: the requester may still read
// it (a retransmission after a lost acknowledgement re-reads it; so does a NIC that fetches payload lazily).
// On a fabric where the reply can overtake the acknowledgement, the refill lands inside that window; the
// simulator checks each source buffer at post time and again at its acknowledgement and reports the
// change (weft::sim::Fabric::misuse()). The fix: refill only after the send completion as well.
#include "bugs.hpp"
#include "rpc.hpp"

namespace weft::bugs {
namespace {

using namespace detail;

constexpr std::uint64_t requests = 4;
constexpr std::size_t request_bytes = 1024;

void build(Node& client, std::uint64_t seq) {
    for (std::size_t i = 0; i < request_bytes; ++i) client.buf[i] = static_cast<std::byte>(seq * 31 + i);
}

bool request_reply(const std::string& config, bool wait_for_send_completion) {
    Node a(config), b(config, 64 * 1024, inline_qp());
    // The server checks every request it receives and replies with an inline 8-byte acknowledgement.
    bool corrupted = false;
    auto serve = [&](const Completion& c) {
        if (!c.ok() || !c.is_recv()) return;
        const auto seq = static_cast<std::uint64_t>(c.imm);
        for (std::size_t i = 0; i < request_bytes; ++i) {
            if (b.buf[i] != static_cast<std::byte>(seq * 31 + i)) corrupted = true;
        }
        must(b.qp.post_recv({recv(0, b.mr.slice(0, request_bytes))}), "server post_recv");
        must(b.qp.post_send({send(seq, b.mr.slice(reply_slot, 8)).inline_data()}), "server post_send");
    };
    must(b.qp.post_recv({recv(0, b.mr.slice(0, request_bytes))}), "server post_recv");
    link(a, b);

    std::uint64_t replies = 0, next = 1;
    bool send_done = false, reply_seen = false;
    auto issue = [&] {
        build(a, next);
        post_reply_recv(a);
        must(a.qp.post_send({send(next, a.mr.slice(0, request_bytes)).with_imm(static_cast<std::uint32_t>(next))}),
             "client post_send");
        ++next;
        send_done = reply_seen = false;
    };
    auto on_a = [&](const Completion& c) {
        if (!c.ok()) return;
        if (c.is_recv()) {
            ++replies;
            reply_seen = true;
        } else {
            send_done = true;
        }
        const bool may_refill = wait_for_send_completion ? reply_seen && send_done : reply_seen;
        if (may_refill && next <= requests) issue();
    };
    issue();
    drive(a, b, on_a, serve, [&] { return replies == requests; });
    settle(a, b);  // the last acknowledgements
    return corrupted || replies != requests || misuse_mentions(a.dom, "source buffer");
}

}  // namespace

bool send_buffer_reuse(const std::string& config) { return request_reply(config, false); }
bool send_buffer_reuse_fixed(const std::string& config) { return request_reply(config, true); }

}  // namespace weft::bugs
