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

bool reply_then_repost(const std::string& config) { return detail::request_reply(config, detail::Repost::after_reply, 8); }
bool reply_then_repost_fixed(const std::string& config) {
    return detail::request_reply(config, detail::Repost::before_reply, 8);
}

}  // namespace weft::bugs
