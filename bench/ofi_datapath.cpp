// ofi_datapath — what the ofi backend's data path costs a request, for callgrind.
//
// Two domains of this process on one provider (default ofi:provider=shm,unchecked_rma=on), a QP each; each
// round writes 64 bytes from one to the other, polls the writer's CQ until the write's completion and polls
// the target's CQ once (an empty poll, as a peer waiting for data makes; shm's senders need their peer to
// progress, or its command queue fills up). The measured rounds are dumped on their own
// (CALLGRIND_DUMP_STATS_AT), after 1,000 rounds of warm-up:
//   valgrind --tool=callgrind weft-bench-ofi-datapath [ROUNDS] [CONFIG]
// callgrind_annotate on the dump then splits the instructions between weft, libfabric and libc (the
// provider's part is what a raw libfabric program doing the same would spend, give or take its own loop).
#include <weft/weft.hpp>

#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int warm_up = 1000;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "weft-bench-ofi-datapath: %s\n", what);
    std::exit(1);
}

void run_weft(int rounds, const std::string& config) {
    weft::Domain da = weft::open(config), db = weft::open(config);
    auto ca = da.create_cq({.depth = 64});
    auto cb = db.create_cq({.depth = 64});
    auto qa = da.create_qp({.send_cq = ca, .recv_cq = ca, .max_send = 16, .max_recv = 16});
    auto qb = db.create_qp({.send_cq = cb, .recv_cq = cb, .max_send = 16, .max_recv = 16});
    auto addr_a = qa.address();
    qa.connect(qb.address());
    qb.connect(addr_a);
    std::vector<std::byte> ba(4096), bb(4096);
    auto ma = da.register_memory(ba, weft::Access::local_write | weft::Access::remote_write);
    auto mb = db.register_memory(bb, weft::Access::local_write | weft::Access::remote_write);
    auto src = ma.slice(0, 64);
    auto dst = mb.remote().slice(0, 64);
    weft::Completion wc[16];
    auto round = [&](std::uint64_t id) {
        if (!qa.post_send({weft::write(id, src, dst)})) fail("post_send failed");
        for (;;) {
            auto got = ca.poll(wc);
            if (got.empty()) continue;
            if (!got[0].ok() || got[0].id != id) fail("unexpected completion");
            break;
        }
        if (!cb.poll(wc).empty()) fail("unexpected completion at the target");
    };
    for (int i = 0; i < warm_up; ++i) round(static_cast<std::uint64_t>(i));
    CALLGRIND_ZERO_STATS;
    for (int i = 0; i < rounds; ++i) round(static_cast<std::uint64_t>(i));
    CALLGRIND_DUMP_STATS_AT("weft");
}

}  // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 10000;
    const std::string config = argc > 2 ? argv[2] : "ofi:provider=shm,unchecked_rma=on";
    run_weft(rounds, config);
    std::printf("%d rounds\n", rounds);
    return 0;
}
