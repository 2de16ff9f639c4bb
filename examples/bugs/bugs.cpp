// bugs.cpp — the table of the zoo.
#include "bugs.hpp"

#include <array>

namespace weft::bugs {
namespace {

constexpr std::array<Bug, 5> zoo{{
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
