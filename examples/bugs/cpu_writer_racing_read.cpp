// (j) cpu_writer_racing_read — trusting one RDMA read of a record the owner's CPU keeps rewriting.
//
// The server's program updates a 16 KiB record in its own memory with plain CPU stores, each update writing
// one version number into every byte. A client fetches the record with one RDMA read and uses it. A read
// of several packets is not atomic: the responder's NIC reads memory as each response packet leaves, so a
// CPU store that lands meanwhile splits the read between two versions. The fix: check the record is whole
// (here every byte carries the version, as FaRM-style per-line versions do) and read it again if not.
#include "bugs.hpp"
#include "node.hpp"

#include <algorithm>

namespace weft::bugs {
namespace {

using namespace detail;

constexpr std::size_t record_bytes = 16384;  // four packets at the default mtu
constexpr int reads = 4;

bool fetch_records(const std::string& config, bool check_and_retry) {
    Node a(config), b(config);
    link(a, b);
    std::uint8_t version = 1;
    auto server_updates = [&] { std::fill_n(b.buf.begin(), record_bytes, std::byte{++version}); };
    server_updates();
    auto whole = [&] {
        return std::all_of(a.buf.begin(), a.buf.begin() + record_bytes, [&](std::byte x) { return x == a.buf[0]; });
    };
    Completion wc[2];
    for (int r = 0; r < reads; ++r) {
        for (int attempt = 0;; ++attempt) {
            must(a.qp.post_send({read(1, a.mr.slice(0, record_bytes), b.mr.remote().slice(0, record_bytes))}),
                 "client read");
            // The client waits for its read; the server's program keeps updating between the client's polls
            // (and makes calls of its own).
            bool done = false;
            while (!done) {
                for (const auto& c : a.cq.poll(wc)) {
                    if (!c.ok()) return true;
                    done = true;
                }
                if (!done && sim::Fabric::of(a.dom).idle()) return true;  // hung
                if (version < 200) server_updates();
                (void)b.cq.poll(wc);
            }
            if (whole()) break;
            if (!check_and_retry) return true;  // the client uses a record that mixes two versions
            if (attempt == 1000) return true;   // never got a whole record
        }
    }
    return false;
}

}  // namespace

bool cpu_writer_racing_read(const std::string& config) { return fetch_records(config, false); }
bool cpu_writer_racing_read_fixed(const std::string& config) { return fetch_records(config, true); }

}  // namespace weft::bugs
