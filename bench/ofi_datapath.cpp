#include <weft/weft.hpp>
#include <valgrind/callgrind.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <string>
int main(int argc, char** argv) {
    int iters = argc > 1 ? std::atoi(argv[1]) : 10000;
    std::string cfg = argc > 2 ? argv[2] : "ofi:provider=shm,unchecked_rma=on";
    weft::Domain da = weft::open(cfg), db = weft::open(cfg);
    auto ca = da.create_cq({.depth = 64});
    auto cb = db.create_cq({.depth = 64});
    auto qa = da.create_qp({.send_cq = ca, .recv_cq = ca, .max_send = 16, .max_recv = 16});
    auto qb = db.create_qp({.send_cq = cb, .recv_cq = cb, .max_send = 16, .max_recv = 16});
    auto aa = qa.address();
    qa.connect(qb.address());
    qb.connect(aa);
    std::vector<std::byte> ba(4096), bb(4096);
    auto ma = da.register_memory(ba, weft::Access::local_write | weft::Access::remote_write);
    auto mb = db.register_memory(bb, weft::Access::local_write | weft::Access::remote_write);
    auto src = ma.slice(0, 64);
    auto dst = mb.remote().slice(0, 64);
    weft::Completion wc[16];
    unsigned long polls = 0;
    auto one = [&](std::uint64_t id) {
        auto st = qa.post_send({weft::write(id, src, dst)});
        if (!st) { std::fprintf(stderr, "post failed\n"); std::exit(1); }
        for (;;) {
            ++polls;
            auto got = ca.poll(wc);
            if (!got.empty()) {
                if (!got[0].ok() || got[0].id != id) { std::fprintf(stderr, "bad completion\n"); std::exit(1); }
                break;
            }
        }
        // The target polls as a peer waiting for data does (shm's senders need their peer to progress, or
        // the command queue fills up).
        if (!cb.poll(wc).empty()) { std::fprintf(stderr, "unexpected completion at the target\n"); std::exit(1); }
    };
    for (int i = 0; i < 1000; ++i) one(i);
    polls = 0;
    CALLGRIND_ZERO_STATS;
    for (int i = 0; i < iters; ++i) one(i);
    CALLGRIND_DUMP_STATS_AT("loop");
    std::fprintf(stderr, "iters %d polls %lu (%.2f per req)\n", iters, polls, double(polls) / iters);
}
