// The front end's data path: the ibv_context_ops entries verbs.h's inline functions call (ibv_post_send,
// ibv_post_recv, ibv_post_srq_recv, ibv_poll_cq, ibv_req_notify_cq), translating work requests to weft requests in batches
// and weft completions to ibv_wc. Nothing here allocates or throws.
#include "frontend.hpp"

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <span>

namespace weft::compat {
namespace {

// Work requests go to weft in batches of up to this many (one call into the backend per batch), with up
// to gather_max segments between the requests of a batch that have more than one.
constexpr std::size_t batch_max = 16;
constexpr std::size_t gather_max = 64;
constexpr std::size_t poll_max = 16;

// weft's statuses are ibv_wc_status's, in the same order.
static_assert(static_cast<int>(WcStatus::success) == IBV_WC_SUCCESS);
static_assert(static_cast<int>(WcStatus::flushed) == IBV_WC_WR_FLUSH_ERR);
static_assert(static_cast<int>(WcStatus::remote_access) == IBV_WC_REM_ACCESS_ERR);
static_assert(static_cast<int>(WcStatus::rnr_retry_exceeded) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(static_cast<int>(WcStatus::general) == IBV_WC_GENERAL_ERR && wc_status_count == IBV_WC_GENERAL_ERR + 1);

// A batch being built: weft requests, the verbs requests they came from, and the segments of those with
// more than one.
template <class Request, class Wr>
struct Batch {
    std::array<Request, batch_max> requests;
    std::array<Wr*, batch_max> sources;
    std::array<LocalSegment, gather_max> gather;
    std::size_t size = 0;
    std::size_t gathered = 0;

    // Points `r` at the segments of `wr`; false when they do not fit in this batch.
    bool add_segments(Request& r, const Wr& wr) noexcept {
        r.num_sge = static_cast<std::uint32_t>(wr.num_sge);
        auto copy = [](const ibv_sge& s) { return LocalSegment{s.addr, s.length, s.lkey, nullptr}; };
        if (wr.num_sge <= 1) {
            if (wr.num_sge == 1) r.sge = copy(wr.sg_list[0]);
            return true;
        }
        if (gathered + static_cast<std::size_t>(wr.num_sge) > gather_max) return false;
        r.sg_list = gather.data() + gathered;
        for (int i = 0; i < wr.num_sge; ++i) gather[gathered++] = copy(wr.sg_list[i]);
        return true;
    }
};

// Fills `r` from `wr`; EINVAL for what weft has no request for (memory windows, invalidation, TSO, ...).
int to_request(const ibv_send_wr& wr, const Qp& qp, SendRequest& r) noexcept {
    r.id = wr.wr_id;
    switch (wr.opcode) {
        case IBV_WR_SEND: r.opcode = Opcode::send; break;
        case IBV_WR_SEND_WITH_IMM: r.opcode = Opcode::send_with_imm; break;
        case IBV_WR_RDMA_WRITE: r.opcode = Opcode::write; break;
        case IBV_WR_RDMA_WRITE_WITH_IMM: r.opcode = Opcode::write_with_imm; break;
        case IBV_WR_RDMA_READ: r.opcode = Opcode::read; break;
        case IBV_WR_ATOMIC_CMP_AND_SWP: r.opcode = Opcode::compare_swap; break;
        case IBV_WR_ATOMIC_FETCH_AND_ADD: r.opcode = Opcode::fetch_add; break;
        default: return EINVAL;
    }
    if (r.opcode == Opcode::send_with_imm || r.opcode == Opcode::write_with_imm) r.imm = ntohl(wr.imm_data);
    if (is_atomic(r.opcode)) {
        r.remote_addr = wr.wr.atomic.remote_addr;
        r.rkey = wr.wr.atomic.rkey;
        r.compare_add = wr.wr.atomic.compare_add;
        r.swap = wr.wr.atomic.swap;
    } else if (needs_remote(r.opcode)) {
        r.remote_addr = wr.wr.rdma.remote_addr;
        r.rkey = wr.wr.rdma.rkey;
    }
    check_peer_access(qp, r);
    return to_send_flags(wr.send_flags, qp.sq_sig_all, r.flags);
}

// A receive, for a QP's receive queue or an SRQ.
template <class Owner>
int to_request(const ibv_recv_wr& wr, const Owner&, RecvRequest& r) noexcept {
    r.id = wr.wr_id;
    return 0;
}

PostStatus post(Qp& qp, std::span<const SendRequest> batch) noexcept { return qp.queue.post_send(batch); }
PostStatus post(Qp& qp, std::span<const RecvRequest> batch) noexcept { return qp.queue.post_recv(batch); }
PostStatus post(Srq& srq, std::span<const RecvRequest> batch) noexcept { return srq.queue.post_recv(batch); }

// Posts the chain starting at `wr` batch by batch to `owner` (a QP's send or receive queue, an SRQ). Verbs
// posts a prefix and names the first request not posted; weft posts a batch whole or not at all, so a batch
// refused at request i is posted again up to i.
template <class Request, class Owner, class Wr>
int post_chain(Owner& qp, Wr* wr, Wr** bad) noexcept {
    while (wr) {
        Batch<Request, Wr> b;
        int err = 0;
        for (; wr && b.size < batch_max; wr = wr->next) {
            Request& r = b.requests[b.size];
            r = Request{};
            if (wr->num_sge < 0 || static_cast<std::size_t>(wr->num_sge) > gather_max) {
                err = EINVAL;
                break;
            }
            if ((err = to_request(*wr, qp, r)) != 0) break;
            if (!b.add_segments(r, *wr)) break;  // the next batch takes it
            b.sources[b.size++] = wr;
        }
        std::span<const Request> batch(b.requests.data(), b.size);
        if (PostStatus st = batch.empty() ? PostStatus::ok() : post(qp, batch); !st) {
            const std::uint32_t i = st.code() == PostStatus::Code::invalid ? st.index() : 0;
            *bad = b.sources[0];
            if (i > 0 && post(qp, batch.first(i))) *bad = b.sources[i];
            return errno_of(st);
        }
        if (err) {
            *bad = wr;
            return err;
        }
    }
    return 0;
}

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) {
    Qp& qp = qp_of(ibqp);
    // As rxe: sends are taken from RTS on, and flushed in ERR.
    if (qp.qp_base.state != IBV_QPS_RTS && qp.qp_base.state != IBV_QPS_ERR) {
        *bad = wr;
        return EINVAL;
    }
    return post_chain<SendRequest>(qp, wr, bad);
}

// A QP on an SRQ has no receive queue of its own: EINVAL, as rxe returns.
int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    Qp& qp = qp_of(ibqp);
    if (qp.qp_base.state == IBV_QPS_RESET || qp.srq) {
        *bad = wr;
        return EINVAL;
    }
    return post_chain<RecvRequest>(qp, wr, bad);
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    return post_chain<RecvRequest>(static_cast<Srq&>(*srq), wr, bad);
}

}  // namespace

int errno_of(const PostStatus& st) noexcept { return st.code() == PostStatus::Code::queue_full ? ENOMEM : EINVAL; }

int to_send_flags(unsigned f, bool sig_all, SendFlags& out) noexcept {
    if (f & ~unsigned{IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE}) return EINVAL;
    out = SendFlags::none;
    if (sig_all || (f & IBV_SEND_SIGNALED)) out = out | SendFlags::signaled;
    if (f & IBV_SEND_FENCE) out = out | SendFlags::fence;
    if (f & IBV_SEND_SOLICITED) out = out | SendFlags::solicited;
    if (f & IBV_SEND_INLINE) out = out | SendFlags::inline_data;
    return 0;
}

ibv_wc_opcode to_wc_opcode(Opcode op) noexcept {
    switch (op) {
        case Opcode::send:
        case Opcode::send_with_imm: return IBV_WC_SEND;
        case Opcode::write:
        case Opcode::write_with_imm: return IBV_WC_RDMA_WRITE;
        case Opcode::read: return IBV_WC_RDMA_READ;
        case Opcode::compare_swap: return IBV_WC_COMP_SWAP;
        case Opcode::fetch_add: return IBV_WC_FETCH_ADD;
        case Opcode::recv: return IBV_WC_RECV;
        case Opcode::recv_rdma_with_imm: return IBV_WC_RECV_RDMA_WITH_IMM;
    }
    return IBV_WC_SEND;
}

namespace {

int poll_cq(ibv_cq* ibcq, int num, ibv_wc* wc) {
    Cq& cq = cq_of(ibcq);
    std::array<Completion, poll_max> buf;
    int done = 0;
    while (done < num) {
        const std::size_t want = std::min<std::size_t>(poll_max, static_cast<std::size_t>(num - done));
        auto got = take(cq, std::span(buf.data(), want));
        for (const Completion& c : got) {
            ibv_wc& w = wc[done++];
            w = {};
            w.wr_id = c.id;
            w.status = static_cast<ibv_wc_status>(c.status);
            w.opcode = to_wc_opcode(c.opcode);
            w.vendor_err = c.vendor_err;
            w.byte_len = c.byte_len;
            w.qp_num = c.qp_num;
            if (c.has_imm) {
                w.imm_data = htonl(c.imm);
                w.wc_flags = IBV_WC_WITH_IMM;
            }
        }
        if (got.size() < want) break;
    }
    return done;
}

// Arms the CQ's completion channel (channel.cpp); no effect on a CQ without one.
int req_notify_cq(ibv_cq* cq, int) { return arm(cq_of(cq)); }

// What the front end does not have: memory windows. A type verbs does not define is EINVAL, as providers
// refuse it.
ibv_mw* alloc_mw(ibv_pd*, ibv_mw_type type) {
    return fail(type == IBV_MW_TYPE_1 || type == IBV_MW_TYPE_2 ? EOPNOTSUPP : EINVAL);
}
int bind_mw(ibv_qp*, ibv_mw*, ibv_mw_bind*) { return EOPNOTSUPP; }
int dealloc_mw(ibv_mw*) { return EOPNOTSUPP; }

}  // namespace

void install_ops(ibv_context_ops& ops) noexcept {
    ops.alloc_mw = alloc_mw;
    ops.bind_mw = bind_mw;
    ops.dealloc_mw = dealloc_mw;
    ops.poll_cq = poll_cq;
    ops.req_notify_cq = req_notify_cq;
    ops.post_srq_recv = post_srq_recv;
    ops.post_send = post_send;
    ops.post_recv = post_recv;
}

}  // namespace weft::compat
