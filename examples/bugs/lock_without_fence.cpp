// (i) lock_without_fence — a remote lock released by an unfenced write after a read in the critical section.
//
// A client takes a lock word in the server's memory with compare_swap, reads the record the lock protects,
// and releases the lock by writing 0 — the read and the release posted together. The release is a write
// posted after a read on the same QP: without the fence flag it may take effect before the read executes.
// The server's own program takes the lock whenever it sees it free and updates the record, so the client's
// "locked" read can return a record the server changed after the client let go. The fix: fence the release.
#include "bugs.hpp"
#include "node.hpp"

namespace weft::bugs {
namespace {

using namespace detail;

constexpr std::size_t lock_off = 0;
constexpr std::size_t record_off = 64;

bool locked_read(const std::string& config, bool fence) {
    Node a(config), b(config);
    link(a, b);
    auto fabric = sim::Fabric::of(a.dom);
    auto lock_word = b.mr.remote().slice(lock_off, 8);
    auto record = b.mr.remote().slice(record_off, 8);
    // The server's program: each time it looks and finds the lock free it takes it, bumps the record's
    // version and releases it (all CPU stores to its own memory).
    auto server_looks = [&] {
        if (b.word(lock_off) == 0) b.set_word(record_off, b.word(record_off) + 1);
    };
    // The client takes the lock (0 -> 1).
    must(a.qp.post_send({compare_swap(1, a.mr.slice(0, 8), lock_word, 0, 1)}), "client compare_swap");
    auto taken = poll_one(a);
    if (!taken || !taken->ok() || a.word(0) != 0) return false;  // the lock was not free: no critical section
    const std::uint64_t version_when_locked = b.word(record_off);
    // Critical section: read the record, release the lock.
    a.set_word(8, 0);
    auto release = write(3, a.mr.slice(8, 8), lock_word);
    must(a.qp.post_send({read(2, a.mr.slice(16, 8), record), fence ? release.fence() : release}), "client post_send");
    // Both programs run: the server looks at its memory once per event of the fabric; the client waits
    // for its two completions.
    int completions = 0;
    Completion wc[2];
    while (completions < 2) {
        server_looks();
        if (fabric.run_until_idle(1) == 0 && a.cq.poll(wc).empty()) return true;  // hung
        while (a.cq.wait(std::chrono::nanoseconds(0))) completions += static_cast<int>(a.cq.poll(wc).size());
    }
    settle(a, b);
    return a.word(16) != version_when_locked;  // the read saw a version written after the lock was released
}

}  // namespace

bool lock_without_fence(const std::string& config) { return locked_read(config, false); }
bool lock_without_fence_fixed(const std::string& config) { return locked_read(config, true); }

}  // namespace weft::bugs
