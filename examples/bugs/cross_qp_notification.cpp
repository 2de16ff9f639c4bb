// (h) cross_qp_notification — data written on one QP, "ready" sent on another.
//
// The writer keeps two connections to the reader: a bulk QP for data and a control QP for notifications.
// It writes a record on the bulk QP and then sends "ready" on the control QP; the reader reads the record
// when the notification arrives. The InfiniBand specification orders requests within one QP only: the NIC
// may run the two QPs on separate engines and paths, so the notification can overtake the data. The fix:
// send the notification on the QP that carried the data (or use write_with_imm), which orders it after the
// write.
#include "bugs.hpp"
#include "node.hpp"

namespace weft::bugs {
namespace {

using namespace detail;

constexpr std::size_t record_bytes = 4096;
constexpr std::uint64_t rounds = 4;

bool notify(const std::string& config, bool same_qp) {
    Node a(config), b(config);
    link(a, b);
    // The control connection.
    QpOptions o;
    o.send_cq = a.cq;
    o.recv_cq = a.cq;
    QueuePair a_ctl = a.dom.create_qp(o);
    o.send_cq = b.cq;
    o.recv_cq = b.cq;
    QueuePair b_ctl = b.dom.create_qp(o);
    a_ctl.connect(b_ctl.address());
    b_ctl.connect(a_ctl.address());
    QueuePair& notify_qp = same_qp ? a.qp : a_ctl;
    QueuePair& listen_qp = same_qp ? b.qp : b_ctl;

    bool stale = false;
    Completion wc[4];
    for (std::uint64_t round = 1; round <= rounds && !stale; ++round) {
        must(listen_qp.post_recv({recv(round, b.mr.slice(record_bytes, 8))}), "reader post_recv");
        std::memset(a.buf.data(), static_cast<int>(round), record_bytes);
        a.set_word(record_bytes + 64, round);
        must(a.qp.post_send({write(round, a.mr.slice(0, record_bytes), b.mr.remote().slice(0, record_bytes))}),
             "writer post_send");
        must(notify_qp.post_send({send(round, a.mr.slice(record_bytes + 64, 8))}), "writer notify");
        // The reader waits for "ready", then reads the record.
        bool ready = false;
        while (!ready) {
            for (const auto& c : b.cq.poll(wc)) {
                if (c.is_recv()) ready = true;
            }
            if (!ready && sim::Fabric::of(b.dom).idle()) return true;  // hung: the notification never came
        }
        for (std::size_t i = 0; i < record_bytes; ++i) {
            if (b.buf[i] != static_cast<std::byte>(round)) stale = true;
        }
        // The writer reuses its buffer only once the write completed.
        settle(a, b);
    }
    return stale;
}

}  // namespace

bool cross_qp_notification(const std::string& config) { return notify(config, false); }
bool cross_qp_notification_fixed(const std::string& config) { return notify(config, true); }

}  // namespace weft::bugs
