// (b) read_after_write — a read expected to return the value a later write overwrites.
//
// The client keeps a versioned record in the server's memory. To replace it and keep the previous version
// it posts, in one batch, a read of the record into a local "previous" slot and a write of the new version.
// Requests execute in order at the responder, except that a read (or atomic) may observe a later write on
// the same QP unless that write carries the fence flag: the "previous" version can come back as the new one.
// The fix: fence the write (it then waits for the read to complete).
#include "bugs.hpp"
#include "node.hpp"

namespace weft::bugs {
namespace {

using detail::Node;

constexpr std::uint64_t old_version = 0x01d;
constexpr std::uint64_t new_version = 0x2e3;

bool snapshot_then_replace(const std::string& config, bool fence) {
    Node a(config), b(config);
    detail::link(a, b);
    b.set_word(0, old_version);  // the record, in the server's memory
    a.set_word(64, new_version);
    auto record = b.mr.remote().slice(0, 8);
    auto w = write(2, a.mr.slice(64, 8), record);
    detail::must(a.qp.post_send({read(1, a.mr.slice(0, 8), record), fence ? w.fence() : w}), "post_send");
    detail::poll_one(a);
    detail::poll_one(a);
    detail::settle(a, b);
    return a.word(0) != old_version;  // the "previous" version the client kept is not the previous one
}

}  // namespace

bool read_after_write(const std::string& config) { return snapshot_then_replace(config, false); }
bool read_after_write_fixed(const std::string& config) { return snapshot_then_replace(config, true); }

}  // namespace weft::bugs
