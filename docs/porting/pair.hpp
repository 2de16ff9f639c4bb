// docs/porting/pair.hpp — what the porting examples share: two connected QPs `a` and `b` on one simulated
// domain, each with its own completion queue, and a bounded wait for the next completion.
#pragma once

#include <weft/weft.hpp>

#include <cstdio>
#include <cstdlib>

#define PORTING_CHECK(cond)                                                                 \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);  \
            std::exit(1);                                                                   \
        }                                                                                   \
    } while (0)

struct Pair {
    explicit Pair(const weft::QpOptions& extra = {}) {
        weft::QpOptions o = extra;
        o.send_cq = cq_a;
        o.recv_cq = cq_a;
        a = dom.create_qp(o);
        o.send_cq = cq_b;
        o.recv_cq = cq_b;
        b = dom.create_qp(o);
        a.connect(b.address());
        b.connect(a.address());
    }
    weft::Domain dom = weft::open("sim");
    weft::CompletionQueue cq_a = dom.create_cq();
    weft::CompletionQueue cq_b = dom.create_cq();
    weft::QueuePair a, b;
};

/// The next completion of `cq`; fails the example when none comes (on the simulator an empty poll
/// advances virtual time, so a bounded number of polls is a bounded wait).
inline weft::Completion next(weft::CompletionQueue& cq) {
    weft::Completion wc[1];
    for (int i = 0; i < 100000; ++i) {
        if (!cq.poll(wc).empty()) return wc[0];
    }
    std::fprintf(stderr, "no completion came\n");
    std::exit(1);
}

/// True when `cq` stays empty over many polls.
inline bool stays_empty(weft::CompletionQueue& cq) {
    weft::Completion wc[1];
    for (int i = 0; i < 1000; ++i) {
        if (!cq.poll(wc).empty()) return false;
    }
    return true;
}
