// (a) torn_flag — detecting the arrival of an RDMA write by polling its last byte.
//
// The writer fills a 16 KiB message whose last byte is a non-zero "ready" flag; the reader spins on that
// byte and, once it is set, reads the whole buffer. RC hardware places the packets of one message in any
// order (only messages are ordered), so the flag can land before earlier packets: the reader sees a torn
// message. The fix: write_with_imm, and read the buffer when the receive completion arrives.
#include "bugs.hpp"
#include "node.hpp"

#include <algorithm>

namespace weft::bugs {
namespace {

using detail::Node;

constexpr std::size_t message = 16 * 1024;  // 4 packets at the default MTU of 4096

void fill(Node& writer) {
    for (std::size_t i = 0; i < message; ++i) writer.buf[i] = static_cast<std::byte>(1 + i % 251);
}

bool arrived_whole(const Node& writer, const Node& reader) {
    return std::equal(writer.buf.begin(), writer.buf.begin() + message, reader.buf.begin());
}

}  // namespace

bool torn_flag(const std::string& config) {
    Node a(config), b(config);
    detail::link(a, b);
    fill(a);
    detail::must(a.qp.post_send({write(1, a.mr.slice(0, message), b.mr.remote().slice(0, message))}), "post_send");
    // The reader's CPU spins on the flag; each look at memory lets the simulated fabric take one step.
    auto fab = sim::Fabric::of(b.dom);
    while (b.buf[message - 1] == std::byte{0} && !fab.idle()) fab.run_until_idle(1);
    const bool torn = !arrived_whole(a, b);  // the reader consumes the buffer now
    detail::settle(a, b);
    return torn;
}

bool torn_flag_fixed(const std::string& config) {
    Node a(config), b(config);
    detail::link(a, b);
    fill(a);
    detail::must(b.qp.post_recv({recv(1, b.mr.slice(message, 8))}), "post_recv");
    detail::must(a.qp.post_send({write(1, a.mr.slice(0, message), b.mr.remote().slice(0, message)).with_imm(1)}),
                 "post_send");
    auto c = detail::poll_one(b);  // the receive completion: every byte of the write has been placed
    const bool torn = !c || !c->ok() || !arrived_whole(a, b);
    detail::settle(a, b);
    return torn;
}

}  // namespace weft::bugs
