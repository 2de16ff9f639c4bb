// The extended QP's work-request builders (ibv_wr_start, ibv_wr_send, ibv_wr_rdma_write, ...,
// ibv_wr_set_sge, ibv_wr_complete): the function pointers of struct ibv_qp_ex, which verbs.h inlines.
//
// ibv_wr_start locks the QP's batch; each ibv_wr_<opcode> starts a request with the wr_id and wr_flags the
// program set in the ibv_qp_ex; the setters fill its segments (inline payloads are copied at once, as
// verbs requires); ibv_wr_complete posts the whole batch with one call into weft, which takes all of it or
// none. A builder error (a full batch, bad flags, an opcode the front end does not have) is kept and
// returned by ibv_wr_complete, which then posts nothing, as providers do.
#include "frontend.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace weft::compat {
namespace {

void set_error(WrBatch& b, int err) noexcept {
    if (!b.error) b.error = err;
    b.current = &b.scratch;
}

// Starts the next request of the batch.
SendRequest& begin(ibv_qp_ex* ibqp, Opcode op) noexcept {
    Qp& qp = qp_of(ibqp);
    WrBatch& b = qp.batch;
    SendFlags flags{};
    if (int err = to_send_flags(ibqp->wr_flags, qp.sq_sig_all, flags)) {
        set_error(b, err);
    } else if (b.requests.size() == b.requests.capacity()) {
        set_error(b, ENOMEM);  // more requests than the send queue holds
    } else {
        b.current = &b.requests.emplace_back();
    }
    SendRequest& r = *b.current;
    r = SendRequest{};
    r.id = ibqp->wr_id;
    r.opcode = op;
    r.flags = flags;
    return r;
}

SendRequest& begin_remote(ibv_qp_ex* qp, Opcode op, std::uint32_t rkey, std::uint64_t remote_addr) noexcept {
    SendRequest& r = begin(qp, op);
    r.rkey = rkey;
    r.remote_addr = remote_addr;
    check_peer_access(qp_of(qp), r);
    return r;
}

void wr_send(ibv_qp_ex* qp) { begin(qp, Opcode::send); }
void wr_send_imm(ibv_qp_ex* qp, __be32 imm) { begin(qp, Opcode::send_with_imm).imm = ntohl(imm); }
void wr_rdma_write(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr) {
    begin_remote(qp, Opcode::write, rkey, addr);
}
void wr_rdma_write_imm(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr, __be32 imm) {
    begin_remote(qp, Opcode::write_with_imm, rkey, addr).imm = ntohl(imm);
}
void wr_rdma_read(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr) {
    begin_remote(qp, Opcode::read, rkey, addr);
}
void wr_atomic_cmp_swp(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr, std::uint64_t compare,
                       std::uint64_t swap) {
    SendRequest& r = begin_remote(qp, Opcode::compare_swap, rkey, addr);
    r.compare_add = compare;
    r.swap = swap;
}
void wr_atomic_fetch_add(ibv_qp_ex* qp, std::uint32_t rkey, std::uint64_t addr, std::uint64_t add) {
    begin_remote(qp, Opcode::fetch_add, rkey, addr).compare_add = add;
}

// What weft has no request for (ibv_create_qp_ex refuses these send_ops_flags): memory windows,
// invalidation, TSO, atomic write; and the datagram/XRC address setters, which have no place on RC.
void refuse(ibv_qp_ex* qp) noexcept { set_error(qp_of(qp).batch, EOPNOTSUPP); }
void wr_bind_mw(ibv_qp_ex* qp, ibv_mw*, std::uint32_t, const ibv_mw_bind_info*) { refuse(qp); }
void wr_local_inv(ibv_qp_ex* qp, std::uint32_t) { refuse(qp); }
void wr_send_inv(ibv_qp_ex* qp, std::uint32_t) { refuse(qp); }
void wr_send_tso(ibv_qp_ex* qp, void*, std::uint16_t, std::uint16_t) { refuse(qp); }
void wr_atomic_write(ibv_qp_ex* qp, std::uint32_t, std::uint64_t, const void*) { refuse(qp); }
void wr_set_ud_addr(ibv_qp_ex* qp, ibv_ah*, std::uint32_t, std::uint32_t) { refuse(qp); }
void wr_set_xrc_srqn(ibv_qp_ex* qp, std::uint32_t) { refuse(qp); }

// Points the current request at `n` segments made by `segment(i)`, in the batch's gather storage when
// there is more than one.
template <class F>
void set_segments(WrBatch& b, std::size_t n, F&& segment) noexcept {
    SendRequest& r = *b.current;
    r.sg_list = nullptr;
    r.num_sge = static_cast<std::uint32_t>(n);
    if (n == 1) {
        r.sge = segment(0);
        return;
    }
    if (n == 0 || b.current == &b.scratch) return;
    if (b.gather.capacity() - b.gather.size() < n) {
        set_error(b, ENOMEM);
        return;
    }
    r.sg_list = b.gather.data() + b.gather.size();
    for (std::size_t i = 0; i < n; ++i) b.gather.push_back(segment(i));
}

void wr_set_sge(ibv_qp_ex* qp, std::uint32_t lkey, std::uint64_t addr, std::uint32_t length) {
    set_segments(qp_of(qp).batch, 1, [&](std::size_t) { return LocalSegment{addr, length, lkey, nullptr}; });
}

void wr_set_sge_list(ibv_qp_ex* ibqp, size_t num_sge, const ibv_sge* sg_list) {
    Qp& qp = qp_of(ibqp);
    if (num_sge > qp.cap.max_send_sge) return set_error(qp.batch, EINVAL);
    set_segments(qp.batch, num_sge, [&](std::size_t i) {
        return LocalSegment{sg_list[i].addr, sg_list[i].length, sg_list[i].lkey, nullptr};
    });
}

// Copies the payload into the batch's inline storage, which the posted request then points at.
void wr_set_inline_data_list(ibv_qp_ex* ibqp, size_t num_buf, const ibv_data_buf* buf_list) {
    Qp& qp = qp_of(ibqp);
    WrBatch& b = qp.batch;
    std::size_t total = 0;
    for (std::size_t i = 0; i < num_buf; ++i) total += buf_list[i].length;
    if (total > qp.cap.max_inline_data || num_buf > qp.cap.max_send_sge) return set_error(b, EINVAL);
    if (b.current == &b.scratch) return;
    std::byte* at = b.inline_bytes.data() + b.inline_used;
    if (b.inline_bytes.size() - b.inline_used < total) return set_error(b, ENOMEM);
    b.inline_used += total;
    b.current->flags = b.current->flags | SendFlags::inline_data;
    set_segments(b, num_buf, [&](std::size_t i) {
        std::byte* copy = at;
        if (buf_list[i].length) std::memcpy(copy, buf_list[i].addr, buf_list[i].length);
        at += buf_list[i].length;
        return LocalSegment{reinterpret_cast<std::uintptr_t>(copy), static_cast<std::uint32_t>(buf_list[i].length),
                            0, nullptr};
    });
}

void wr_set_inline_data(ibv_qp_ex* qp, void* addr, size_t length) {
    const ibv_data_buf buf{addr, length};
    wr_set_inline_data_list(qp, 1, &buf);
}

void reset(WrBatch& b) noexcept {
    b.requests.clear();
    b.gather.clear();
    b.inline_used = 0;
    b.error = 0;
    b.current = &b.scratch;
}

void wr_start(ibv_qp_ex* qp) {
    WrBatch& b = qp_of(qp).batch;
    b.mu.lock();
    reset(b);
}

int wr_complete(ibv_qp_ex* ibqp) {
    Qp& qp = qp_of(ibqp);
    WrBatch& b = qp.batch;
    int err = b.error;
    if (!err && qp.qp_base.state != IBV_QPS_RTS) err = EINVAL;
    if (!err && !b.requests.empty()) {
        if (PostStatus st = qp.queue.post_send(b.requests); !st) err = errno_of(st);
    }
    reset(b);
    b.mu.unlock();
    return err;
}

void wr_abort(ibv_qp_ex* qp) {
    WrBatch& b = qp_of(qp).batch;
    reset(b);
    b.mu.unlock();
}

}  // namespace

void install_qp_ex_ops(Qp& qp) {
    const ibv_qp_cap& cap = qp.cap;
    qp.batch.requests.reserve(cap.max_send_wr);
    qp.batch.gather.reserve(std::size_t{cap.max_send_wr} * cap.max_send_sge);
    qp.batch.inline_bytes.resize(std::size_t{cap.max_send_wr} * cap.max_inline_data);
    qp.batch.current = &qp.batch.scratch;
    qp.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    qp.wr_atomic_fetch_add = wr_atomic_fetch_add;
    qp.wr_bind_mw = wr_bind_mw;
    qp.wr_local_inv = wr_local_inv;
    qp.wr_rdma_read = wr_rdma_read;
    qp.wr_rdma_write = wr_rdma_write;
    qp.wr_rdma_write_imm = wr_rdma_write_imm;
    qp.wr_send = wr_send;
    qp.wr_send_imm = wr_send_imm;
    qp.wr_send_inv = wr_send_inv;
    qp.wr_send_tso = wr_send_tso;
    qp.wr_set_ud_addr = wr_set_ud_addr;
    qp.wr_set_xrc_srqn = wr_set_xrc_srqn;
    qp.wr_set_inline_data = wr_set_inline_data;
    qp.wr_set_inline_data_list = wr_set_inline_data_list;
    qp.wr_set_sge = wr_set_sge;
    qp.wr_set_sge_list = wr_set_sge_list;
    qp.wr_start = wr_start;
    qp.wr_complete = wr_complete;
    qp.wr_abort = wr_abort;
    qp.wr_atomic_write = wr_atomic_write;
}

}  // namespace weft::compat
