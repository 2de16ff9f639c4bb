// node.hpp — what the bug scenarios share: a node (domain, CQ, QP, registered buffer), connecting two
// nodes, and bounded polling that notices a hang (nothing in flight, nothing to poll).
#pragma once

#include <weft/sim/fabric.hpp>
#include <weft/weft.hpp>

#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace weft::bugs::detail {

struct Node {
    Domain dom;
    CompletionQueue cq;
    QueuePair qp;
    std::vector<std::byte> buf;
    MemoryRegion mr;

    explicit Node(const std::string& config, std::size_t bytes = 64 * 1024, QpOptions o = {})
        : dom(open(config)), cq(dom.create_cq({.depth = 256})), buf(bytes) {
        mr = dom.register_memory(buf, all_access);
        new_qp(o);
    }
    /// Replaces the QP (the old one, and what it had outstanding, is destroyed).
    void new_qp(QpOptions o = {}) {
        qp = QueuePair();
        o.send_cq = cq;
        o.recv_cq = cq;
        o.max_send = 16;
        o.max_recv = 16;
        qp = dom.create_qp(o);
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

inline void must(PostStatus st, const char* what) {
    if (!st) throw std::runtime_error(std::string(what) + ": " + st.reason());
}

/// Polls `n`'s CQ for one completion; nothing when the fabric has nothing in flight (a hang) or, on a
/// non-simulated backend, after many empty polls.
inline std::optional<Completion> poll_one(Node& n) {
    Completion wc[1];
    const bool sim = n.dom.capabilities().kind == BackendKind::sim;
    for (int spins = 0; spins < 1'000'000; ++spins) {
        if (!n.cq.poll(wc).empty()) return wc[0];
        if (sim && sim::Fabric::of(n.dom).idle()) return std::nullopt;
    }
    return std::nullopt;
}

/// Lets everything in flight finish and empties both CQs, so the scenario ends with no request
/// outstanding (destroying a QP with sends in flight is itself a misuse the simulator reports).
inline void settle(Node& a, Node& b) {
    sim::Fabric::of(a.dom).run_until_idle();
    Completion wc[16];
    while (!a.cq.poll(wc).empty() || !b.cq.poll(wc).empty()) {
    }
}

/// True when the simulator recorded a misuse whose text contains `what`.
inline bool misuse_mentions(const Domain& dom, const std::string& what) {
    if (dom.capabilities().kind != BackendKind::sim) return false;
    for (const auto& m : sim::Fabric::of(dom).misuse()) {
        if (m.find(what) != std::string::npos) return true;
    }
    return false;
}

}  // namespace weft::bugs::detail
