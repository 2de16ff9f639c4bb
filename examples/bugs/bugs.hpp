// bugs.hpp — the bug zoo: classic RDMA application bugs, each next to its fix, each a function that runs
// one scenario on a backend config and says whether the bug showed.
//
//   for (const auto& bug : weft::bugs::all()) {
//       bool seen = bug.buggy("sim:seed=3");   // true: this seed exposed the bug
//       bool ok   = !bug.fixed("sim:seed=3");  // the fixed version never shows it
//   }
//
// Every scenario opens its two nodes with the given config (so `config` names the fabric, seed and
// fidelity options) and drives both of them from this one thread. On a naive in-order loopback
// (`sim:reorder=none`) none of the bugs shows; the simulator's default config finds each within a few
// seeds (docs/testing.md lists how many). tests/bugs asserts both.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace weft::bugs {

struct Bug {
    std::string_view name;     ///< e.g. "torn_flag"
    std::string_view summary;  ///< the bug, in one sentence
    std::string_view fix;      ///< what the fixed version does instead
    /// A `sim` configuration key the simulator must accept for the bug to be visible (a fidelity feature);
    /// empty when none is needed.
    std::string_view needs;
    bool (*buggy)(const std::string& config);  ///< runs the buggy scenario; true when the bug showed
    bool (*fixed)(const std::string& config);  ///< runs the fixed scenario; true when a bug showed
};

/// Every bug of the zoo, in the order of docs/testing.md.
std::span<const Bug> all();
/// The bug called `name`, or null.
const Bug* find(std::string_view name);

// (a) A reader polls the last byte of a multi-packet RDMA write to learn that it arrived, then reads the
// whole buffer: packets of one message may be placed in any order. Fix: write_with_imm and wait for the
// receive completion.
bool torn_flag(const std::string& config);
bool torn_flag_fixed(const std::string& config);

// (b) A read of a remote record followed, in the same batch, by an unfenced write of its new version,
// expecting the read to return the old version: the read may observe the later write. Fix: fence the write.
bool read_after_write(const std::string& config);
bool read_after_write_fixed(const std::string& config);

// (c) A client reuses its send buffer once the server's reply arrived, before its own send completed.
// Fix: wait for the send completion as well.
bool send_buffer_reuse(const std::string& config);
bool send_buffer_reuse_fixed(const std::string& config);

// (d) A server re-posts its receive only after its reply has completed; the client (rnr_retry=0) sends
// its next request as soon as it sees the reply. Fix: re-post the receive before replying.
bool late_receive(const std::string& config);
bool late_receive_fixed(const std::string& config);

// (e) A client that counts only successful completions: after an error it keeps posting, its requests are
// flushed, and it waits for replies that never come. Fix: check every status; on an error reconnect and
// resend what did not complete.
bool ignored_errors(const std::string& config);
bool ignored_errors_fixed(const std::string& config);

// (f) A server posts its reply and, in the next call, re-posts its receive: the program may pause between
// the two while the reply reaches a client (rnr_retry=0) that sends at once. Fix: re-post first.
bool reply_then_repost(const std::string& config);
bool reply_then_repost_fixed(const std::string& config);

// (g) A client takes a credit back when its request completes, before the server's program re-posted the
// receive. Fix: the credit comes back with the reply.
bool credit_off_by_one(const std::string& config);
bool credit_off_by_one_fixed(const std::string& config);

// (h) Data written on one QP, "ready" sent on another: QPs are not ordered with each other. Fix: notify on
// the QP that carried the data.
bool cross_qp_notification(const std::string& config);
bool cross_qp_notification_fixed(const std::string& config);

// (i) A lock released by an unfenced write posted after a read in the critical section: the release may
// take effect before the read. Fix: fence the release.
bool lock_without_fence(const std::string& config);
bool lock_without_fence_fixed(const std::string& config);

// (j) One RDMA read of a record the owner's CPU keeps rewriting, trusted as a snapshot: the NIC reads the
// record packet by packet, so a store in between splits it. Fix: check the record is whole, read again if not.
bool cpu_writer_racing_read(const std::string& config);
bool cpu_writer_racing_read_fixed(const std::string& config);

}  // namespace weft::bugs
