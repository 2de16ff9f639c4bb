// Simulator tests: a node (domain, CQ, QP, registered buffer: 1 MiB unless asked) and helpers to connect and
// drain them.
#pragma once

#include <weft/sim/fabric.hpp>
#include <weft/weft.hpp>

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace weft::sim::test {

struct Node {
    Domain dom;
    CompletionQueue cq;
    QueuePair qp;
    std::vector<std::byte> buf;
    MemoryRegion mr;

    explicit Node(const std::string& config, QpOptions o = {}, std::uint32_t cq_depth = 4096,
                  std::size_t buffer_bytes = std::size_t{1} << 20)
        : dom(open(config)), cq(dom.create_cq({.depth = cq_depth})) {
        o.send_cq = cq;
        o.recv_cq = cq;
        if (o.max_send == QpOptions{}.max_send) o.max_send = 1024;
        if (o.max_recv == QpOptions{}.max_recv) o.max_recv = 1024;
        qp = dom.create_qp(o);
        buf.assign(buffer_bytes, std::byte{0});
        mr = dom.register_memory(buf, all_access);
    }

    std::uint64_t word(std::size_t off) const {
        std::uint64_t v = 0;
        std::memcpy(&v, &buf[off], 8);
        return v;
    }
    void set_word(std::size_t off, std::uint64_t v) { std::memcpy(&buf[off], &v, 8); }
};

inline void link(Node& a, Node& b) {
    a.qp.connect(b.qp.address());
    b.qp.connect(a.qp.address());
}

/// Polls until one completion arrives on `cq` (the simulator always makes progress while work is in flight).
inline Completion next(CompletionQueue& cq) {
    Completion wc[1];
    for (int spins = 0; spins < 1'000'000; ++spins) {
        if (!cq.poll(wc).empty()) return wc[0];
    }
    BOOST_FAIL("no completion");
    return {};
}

inline std::string text(const Completion& c) {
    std::ostringstream os;
    os << c;
    return os.str();
}

}  // namespace weft::sim::test
