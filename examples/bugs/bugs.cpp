// bugs.cpp — the table of the zoo.
#include "bugs.hpp"

#include <array>

namespace weft::bugs {
namespace {

constexpr std::array<Bug, 10> zoo{{
    {"torn_flag", "polling the last byte of a multi-packet write to learn it arrived, then reading the buffer",
     "write_with_imm; read the buffer when the receive completion arrives", "reorder", torn_flag, torn_flag_fixed},
    {"read_after_write", "a read expected to return the value an unfenced later write on the same QP replaces",
     "fence the write", "reorder", read_after_write, read_after_write_fixed},
    {"send_buffer_reuse", "refilling a send buffer when the peer's reply arrives, before the send completed",
     "refill only after the send completion too", "check_sources", send_buffer_reuse, send_buffer_reuse_fixed},
    {"late_receive", "re-posting a receive only after the reply completed, to a client with rnr_retry=0",
     "re-post the receive before replying", "reorder", late_receive, late_receive_fixed},
    {"ignored_errors", "counting only successful completions: after an error the QP flushes and data is lost",
     "check every status; reconnect and resend what has no reply", "reorder", ignored_errors, ignored_errors_fixed},
    {"reply_then_repost", "posting the reply, then re-posting the receive, to a client with rnr_retry=0",
     "re-post the receive before replying", "program_ns", reply_then_repost, reply_then_repost_fixed},
    {"credit_off_by_one", "taking a credit back when the request completes, before the server re-posted its receive",
     "take the credit back with the reply", "program_ns", credit_off_by_one, credit_off_by_one_fixed},
    {"cross_qp_notification", "writing data on one QP and sending \"ready\" on another",
     "notify on the QP that carried the data", "reorder", cross_qp_notification, cross_qp_notification_fixed},
    {"lock_without_fence", "releasing a remote lock with an unfenced write posted after a read in the critical section",
     "fence the release", "reorder", lock_without_fence, lock_without_fence_fixed},
    {"cpu_writer_racing_read", "trusting one RDMA read of a record the owner's CPU keeps rewriting",
     "check the record is whole (per-line versions) and read again if not", "program_ns", cpu_writer_racing_read,
     cpu_writer_racing_read_fixed},
}};

}  // namespace

std::span<const Bug> all() { return zoo; }

const Bug* find(std::string_view name) {
    for (const auto& b : zoo) {
        if (b.name == name) return &b;
    }
    return nullptr;
}

}  // namespace weft::bugs
