// A fake rdma-core provider, for running the verbs backend's data path without a device: the data-path
// benchmark (bench/verbs_datapath.cpp) and the data-path tests (tests/verbs/datapath_test.cpp).
//
// A fake ibv_context whose ops table (the one ibv_post_send, ibv_post_recv, ibv_poll_cq and
// ibv_req_notify_cq call through) puts a work completion for every signaled request into a ring and hands
// them out from it, in order. Receives complete when deliver() says that sends arrived; those of the shared
// receive queue (ibv_post_srq_recv) when deliver_shared() says which QP's messages took them. Nothing else of the
// context is usable: a path that calls ibv_modify_qp or ibv_query_qp (the error paths) must not run on it.
#pragma once

#include "verbs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace weft::verbs::fake {

inline constexpr std::uint32_t ring_size = 4096;  // a power of two; more than any user keeps in flight

struct FakeCq {
    ibv_cq cq{};
    std::array<ibv_wc, ring_size> ring{};
    std::uint32_t head = 0;  // next to fill
    std::uint32_t tail = 0;  // next to hand out
    std::uint64_t arms = 0;

    void push(const ibv_wc& wc) noexcept { ring[head++ % ring_size] = wc; }
};

struct FakeQp {
    ibv_qp qp{};
    // When >= 0, the next post_send refuses the request at this position of its chain (EINVAL, *bad set),
    // having queued the ones before it, as providers do; then it is -1 again.
    int refuse_send_at = -1;
    std::array<std::uint64_t, ring_size> recv_ids{};  // posted receives, delivered in order by deliver()
    std::uint32_t recv_head = 0;
    std::uint32_t recv_tail = 0;
};

struct FakeSrq {
    ibv_srq srq{};
    // When >= 0, the next post refuses the receive at this position of its chain, as refuse_send_at does.
    int refuse_at = -1;
    std::array<std::uint64_t, ring_size> ids{};  // posted receives, taken in order by deliver_shared()
    std::uint32_t head = 0;
    std::uint32_t tail = 0;
};

inline FakeCq* fake(ibv_cq* cq) noexcept { return reinterpret_cast<FakeCq*>(cq); }
inline FakeQp* fake(ibv_qp* qp) noexcept { return reinterpret_cast<FakeQp*>(qp); }

inline ibv_wc_opcode wc_opcode(ibv_wr_opcode op) noexcept {
    switch (op) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
        case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
        case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
        case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
        default: return IBV_WC_SEND;
    }
}

// Queues the work completion of `wr` when it is signaled.
inline void queue_send(ibv_qp* qp, const ibv_send_wr& wr) noexcept {
    std::uint32_t len = 0;
    for (int i = 0; i < wr.num_sge; ++i) len += wr.sg_list[i].length;
    if ((wr.send_flags & IBV_SEND_SIGNALED) == 0) return;
    ibv_wc wc{};
    wc.wr_id = wr.wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = wc_opcode(wr.opcode);
    wc.byte_len = len;
    wc.qp_num = qp->qp_num;
    fake(qp->send_cq)->push(wc);
}

// post_send while refuse_send_at is set.
[[gnu::noinline]] inline int post_send_refusing(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    int at = fake(qp)->refuse_send_at;
    fake(qp)->refuse_send_at = -1;
    ibv_send_wr* refused = wr;
    for (; at > 0 && refused != nullptr; --at) refused = refused->next;
    for (; wr != refused; wr = wr->next) queue_send(qp, *wr);
    if (refused == nullptr) return 0;
    *bad = refused;
    return EINVAL;
}

inline int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    if (fake(qp)->refuse_send_at >= 0) [[unlikely]] return post_send_refusing(qp, wr, bad);
    for (; wr != nullptr; wr = wr->next) queue_send(qp, *wr);
    return 0;
}

inline int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** /*bad*/) {
    FakeQp* f = fake(qp);
    for (; wr != nullptr; wr = wr->next) f->recv_ids[f->recv_head++ % ring_size] = wr->wr_id;
    return 0;
}

inline int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    auto* f = reinterpret_cast<FakeSrq*>(srq);
    int at = f->refuse_at;
    f->refuse_at = -1;
    for (; wr != nullptr; wr = wr->next, --at) {
        if (at == 0) {
            *bad = wr;
            return EINVAL;
        }
        f->ids[f->head++ % ring_size] = wr->wr_id;
    }
    return 0;
}

inline int poll_cq(ibv_cq* cq, int n, ibv_wc* wc) {
    FakeCq* f = fake(cq);
    int got = 0;
    while (got < n && f->tail != f->head) wc[got++] = f->ring[f->tail++ % ring_size];
    return got;
}

inline int req_notify_cq(ibv_cq* cq, int /*solicited_only*/) {
    ++fake(cq)->arms;
    return 0;
}

// `n` sends of `bytes` arrive at `qp`: its oldest posted receives complete (with `imm` in network byte order
// and the opcode of a write_with_imm when `with_imm`).
inline void deliver(FakeQp& qp, std::uint32_t n, std::uint32_t bytes, bool with_imm = false,
                    std::uint32_t imm = 0) noexcept {
    FakeCq* cq = fake(qp.qp.recv_cq);
    for (std::uint32_t i = 0; i < n && qp.recv_tail != qp.recv_head; ++i) {
        ibv_wc wc{};
        wc.wr_id = qp.recv_ids[qp.recv_tail++ % ring_size];
        wc.status = IBV_WC_SUCCESS;
        wc.opcode = with_imm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
        wc.byte_len = bytes;
        wc.qp_num = qp.qp.qp_num;
        if (with_imm) {
            wc.wc_flags = IBV_WC_WITH_IMM;
            wc.imm_data = imm;
        }
        cq->push(wc);
    }
}

// `n` messages of `bytes` arrive at the QP `qp_num` completing into `cq`: they take the oldest receives of
// `srq`, which complete there with `status`.
inline void deliver_shared(FakeSrq& srq, FakeCq& cq, std::uint32_t qp_num, std::uint32_t n, std::uint32_t bytes,
                           ibv_wc_status status = IBV_WC_SUCCESS) noexcept {
    for (std::uint32_t i = 0; i < n && srq.tail != srq.head; ++i) {
        ibv_wc wc{};
        wc.wr_id = srq.ids[srq.tail++ % ring_size];
        wc.status = status;
        wc.opcode = IBV_WC_RECV;
        wc.byte_len = bytes;
        wc.qp_num = qp_num;
        cq.push(wc);
    }
}

struct FakeProvider {
    ibv_context context{};
    FakeCq cq;
    FakeQp qp;
    FakeSrq srq;
    ibv_comp_channel channel{};
    int pipe_fds[2] = {-1, -1};

    FakeProvider() {
        context.ops.post_send = &fake::post_send;
        context.ops.post_recv = &fake::post_recv;
        context.ops.post_srq_recv = &fake::post_srq_recv;
        context.ops.poll_cq = &fake::poll_cq;
        context.ops.req_notify_cq = &fake::req_notify_cq;
        // The completion channel is an empty non-blocking pipe: reading an event from it is a real read(2)
        // that finds nothing, as on a device with no event pending.
        if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) std::abort();
        channel.context = &context;
        channel.fd = pipe_fds[0];
        cq.cq.context = &context;
        cq.cq.channel = &channel;
        cq.cq.cqe = static_cast<int>(ring_size);
        srq.srq.context = &context;
        qp.qp.context = &context;
        qp.qp.send_cq = &cq.cq;
        qp.qp.recv_cq = &cq.cq;
        qp.qp.qp_num = 0x11;
        qp.qp.qp_type = IBV_QPT_RC;
        qp.qp.state = IBV_QPS_RTS;
    }
    ~FakeProvider() {
        ::close(pipe_fds[0]);
        ::close(pipe_fds[1]);
    }
    FakeProvider(const FakeProvider&) = delete;
    FakeProvider& operator=(const FakeProvider&) = delete;
};

// A device like rxe's limits (without rxe's flush workaround, which needs ibv_modify_qp), for the fake.
inline std::shared_ptr<Device> make_device(std::uint32_t queue_depth) {
    auto dev = std::make_shared<Device>();
    dev->name = "fake";
    dev->max_sge_rd = 4;
    Capabilities& c = dev->caps;
    c.kind = BackendKind::verbs;
    c.backend = "verbs";
    c.device = "fake";
    c.max_qp_wr = queue_depth;
    c.max_sge = 4;
    c.max_inline = 64;
    c.max_cqe = ring_size;
    c.max_msg_size = 1u << 31;  // rxe's
    c.max_mr_size = ~0ull;
    using F = Feature;
    c.features = static_cast<std::uint32_t>(F::send_with_imm | F::write_with_imm | F::read | F::atomics | F::fence |
                                            F::inline_data | F::solicited | F::wait | F::cq_fd | F::rnr |
                                            F::error_flush | F::remote_access_check | F::zero_length);
    index_opcodes(*dev);
    return dev;
}

// weft's CQ and QP over `p`, the QP connected (rts), `queue_depth` deep on both queues.
struct FakeSide {
    CompletionQueue cq;
    QueuePair qp;
};

inline FakeSide make_side(FakeProvider& p, std::uint32_t queue_depth) {
    auto dev = make_device(queue_depth);
    auto cq = std::make_shared<VerbsCq>(Adopt{}, dev, &p.cq.cq, &p.channel);
    ibv_qp_cap granted{};
    granted.max_send_wr = queue_depth;
    granted.max_recv_wr = queue_depth;
    granted.max_send_sge = 4;
    granted.max_recv_sge = 4;
    granted.max_inline_data = 64;
    FakeSide s;
    s.qp = QueuePair(std::make_unique<VerbsQp>(Adopt{}, dev, cq, cq, &p.qp.qp, granted));
    s.cq = CompletionQueue(cq);
    return s;
}

}  // namespace weft::verbs::fake
