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

bool late_receive(const std::string& config) {
    return detail::request_reply(config, detail::Repost::after_reply_completed, 4);
}
bool late_receive_fixed(const std::string& config) { return detail::request_reply(config, detail::Repost::before_reply, 4); }

}  // namespace weft::bugs
