// The front end's setup verbs: protection domains, memory regions, completion queues and RC queue pairs
// with the verbs state machine (RESET -> INIT -> RTR -> RTS), its attribute-mask checks, and the mapping
// of dest_qp_num to a weft QP of this process.
#include "frontend.hpp"

#include <weft/error.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#undef ibv_reg_mr  // verbs.h's inline wrappers; the exported symbols are defined below
#undef ibv_reg_mr_iova

namespace weft::compat {
namespace {

constexpr unsigned max_rd_atomic = 16;  // as ibv_query_device reports

// The QPs of this process by number: RTR's dest_qp_num names one of them. Never destroyed, so a program
// may destroy QPs from an atexit handler.
struct QpTable {
    std::mutex mu;
    std::unordered_map<std::uint32_t, Qp*> by_num;
};
QpTable& qp_table() {
    static QpTable& table = *new QpTable;
    return table;
}

// The access rights of ibv_reg_mr as weft's. Verbs requires local write with remote write or atomic
// (EINVAL); optional flags (IBV_ACCESS_OPTIONAL_RANGE) are hints rdma-core drops where unsupported, and
// IBV_ACCESS_HUGETLB only says how the memory was allocated.
int to_access(unsigned flags, Access& out) {
    constexpr unsigned mapped =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    flags &= ~(static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE) | IBV_ACCESS_HUGETLB);
    if (flags & ~mapped) return EOPNOTSUPP;  // memory windows, zero-based, on-demand paging, flush
    if ((flags & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(flags & IBV_ACCESS_LOCAL_WRITE)) {
        return EINVAL;
    }
    out = Access::none;
    if (flags & IBV_ACCESS_LOCAL_WRITE) out |= Access::local_write;
    if (flags & IBV_ACCESS_REMOTE_WRITE) out |= Access::remote_write;
    if (flags & IBV_ACCESS_REMOTE_READ) out |= Access::remote_read;
    if (flags & IBV_ACCESS_REMOTE_ATOMIC) out |= Access::remote_atomic;
    return 0;
}

ibv_mr* register_memory(ibv_pd* ibpd, void* addr, std::size_t length, unsigned flags) {
    Access access{};
    if (int err = to_access(flags, access)) return fail(err);
    return guarded_ptr("ibv_reg_mr", [&]() -> ibv_mr* {
        auto& pd = static_cast<Pd&>(*ibpd);
        auto mr = std::make_unique<Mr>();
        mr->region = context_of(pd.context).domain.register_memory(addr, length, access);
        // Verbs keys are 32 bits. The lkey is weft's; the rkey is weft's when it fits (the simulator's do).
        if (mr->region.rkey() > UINT32_MAX) {
            throw Error(Errc::not_supported, "the backend's rkey " + std::to_string(mr->region.rkey()) +
                                                 " does not fit the 32 bits of a verbs rkey");
        }
        mr->context = pd.context;
        mr->pd = &pd;
        mr->addr = addr;
        mr->length = length;
        mr->lkey = mr->region.lkey();
        mr->rkey = static_cast<std::uint32_t>(mr->region.rkey());
        mr->handle = mr->lkey;
        ++pd.users;
        return mr.release();
    });
}

// A legal RC transition: the attributes it requires and those it may take besides IBV_QP_STATE.
struct Transition {
    int required = 0;
    int optional = 0;
};

// The RC rows of the InfiniBand state table, as the kernel checks them (ib_modify_qp_is_ok).
std::optional<Transition> rc_transition(ibv_qp_state from, ibv_qp_state to) {
    constexpr int path = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return Transition{};
    switch (from) {
        case IBV_QPS_RESET:
            if (to == IBV_QPS_INIT) return Transition{IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0};
            break;
        case IBV_QPS_INIT:
            if (to == IBV_QPS_INIT) return Transition{0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS};
            if (to == IBV_QPS_RTR) {
                return Transition{IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                                  IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX};
            }
            break;
        case IBV_QPS_RTR:
            if (to == IBV_QPS_RTS) {
                return Transition{IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                      IBV_QP_MAX_QP_RD_ATOMIC,
                                  IBV_QP_CUR_STATE | path};
            }
            break;
        case IBV_QPS_RTS:
            if (to == IBV_QPS_RTS) return Transition{0, IBV_QP_CUR_STATE | path};
            if (to == IBV_QPS_SQD) return Transition{0, IBV_QP_EN_SQD_ASYNC_NOTIFY};
            break;
        default:  // SQD, SQE and ERR are never entered (modify_qp refuses them)
            break;
    }
    return std::nullopt;
}

// Range checks of the attributes in `mask`, as the kernel and providers make them.
int check_values(const ibv_qp_attr& a, int mask) {
    constexpr unsigned qp_access =
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (mask & IBV_QP_ALT_PATH) return EOPNOTSUPP;  // no alternate path (automatic path migration)
    bool ok = (!(mask & IBV_QP_PORT) || a.port_num == 1) && (!(mask & IBV_QP_PKEY_INDEX) || a.pkey_index == 0) &&
              (!(mask & IBV_QP_ACCESS_FLAGS) || (a.qp_access_flags & ~qp_access) == 0) &&
              (!(mask & IBV_QP_AV) || a.ah_attr.port_num == 1) &&
              (!(mask & IBV_QP_PATH_MTU) || (a.path_mtu >= IBV_MTU_256 && a.path_mtu <= IBV_MTU_4096)) &&
              (!(mask & IBV_QP_TIMEOUT) || a.timeout <= 31) && (!(mask & IBV_QP_RETRY_CNT) || a.retry_cnt <= 7) &&
              (!(mask & IBV_QP_RNR_RETRY) || a.rnr_retry <= 7) &&
              (!(mask & IBV_QP_MIN_RNR_TIMER) || a.min_rnr_timer <= 31) &&
              (!(mask & IBV_QP_MAX_QP_RD_ATOMIC) || a.max_rd_atomic <= max_rd_atomic) &&
              (!(mask & IBV_QP_MAX_DEST_RD_ATOMIC) || a.max_dest_rd_atomic <= max_rd_atomic);
    return ok ? 0 : EINVAL;
}

// Keeps the attributes in `mask`, for ibv_query_qp.
void record(ibv_qp_attr& to, const ibv_qp_attr& a, int mask) {
    if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) to.en_sqd_async_notify = a.en_sqd_async_notify;
    if (mask & IBV_QP_ACCESS_FLAGS) to.qp_access_flags = a.qp_access_flags;
    if (mask & IBV_QP_PKEY_INDEX) to.pkey_index = a.pkey_index;
    if (mask & IBV_QP_PORT) to.port_num = a.port_num;
    if (mask & IBV_QP_AV) to.ah_attr = a.ah_attr;
    if (mask & IBV_QP_PATH_MTU) to.path_mtu = a.path_mtu;
    if (mask & IBV_QP_TIMEOUT) to.timeout = a.timeout;
    if (mask & IBV_QP_RETRY_CNT) to.retry_cnt = a.retry_cnt;
    if (mask & IBV_QP_RNR_RETRY) to.rnr_retry = a.rnr_retry;
    if (mask & IBV_QP_RQ_PSN) to.rq_psn = a.rq_psn;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) to.max_rd_atomic = a.max_rd_atomic;
    if (mask & IBV_QP_MIN_RNR_TIMER) to.min_rnr_timer = a.min_rnr_timer;
    if (mask & IBV_QP_SQ_PSN) to.sq_psn = a.sq_psn;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) to.max_dest_rd_atomic = a.max_dest_rd_atomic;
    if (mask & IBV_QP_PATH_MIG_STATE) to.path_mig_state = a.path_mig_state;
    if (mask & IBV_QP_DEST_QPN) to.dest_qp_num = a.dest_qp_num;
}

// RTR: connects the weft QP to the one numbered `dest`, which must be a QP of this process.
void connect(Qp& qp, std::uint32_t dest) {
    QpTable& table = qp_table();
    std::lock_guard lock(table.mu);
    auto it = table.by_num.find(dest);
    if (it == table.by_num.end()) {
        throw Error(Errc::invalid_argument, "dest_qp_num " + std::to_string(dest) +
                                                " names no QP of this process (the front end connects QPs of one "
                                                "process only)");
    }
    qp.queue.connect(it->second->queue.address());
}

int modify(Qp& qp, const ibv_qp_attr& a, int mask) {
    const ibv_qp_state cur = qp.state;
    if ((mask & IBV_QP_CUR_STATE) && a.cur_qp_state != cur) return EINVAL;
    const ibv_qp_state next = (mask & IBV_QP_STATE) ? a.qp_state : cur;
    auto t = rc_transition(cur, next);
    if (!t || (mask & t->required) != t->required || (mask & ~(t->required | t->optional | IBV_QP_STATE))) {
        return EINVAL;
    }
    if (int err = check_values(a, mask)) return err;
    // weft has no reset of a used QP, no send-queue drain and no way to move a QP to error yet.
    if (next == IBV_QPS_SQD || next == IBV_QPS_ERR || (next == IBV_QPS_RESET && cur != IBV_QPS_RESET)) {
        return EOPNOTSUPP;
    }
    if (next == IBV_QPS_RTR) connect(qp, a.dest_qp_num);
    record(qp.attr, a, mask);
    qp.state = next;
    return 0;
}

}  // namespace
}  // namespace weft::compat

using namespace weft::compat;

extern "C" {

ibv_pd* ibv_alloc_pd(ibv_context* c) {
    return guarded_ptr("ibv_alloc_pd", [&]() -> ibv_pd* {
        auto* pd = new Pd;
        pd->context = c;
        return pd;
    });
}

int ibv_dealloc_pd(ibv_pd* ibpd) {
    auto* pd = static_cast<Pd*>(ibpd);
    if (pd->users > 0) return EBUSY;
    delete pd;
    return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
    return register_memory(pd, addr, length, static_cast<unsigned>(access));
}

// The front end addresses regions by virtual address only: an iova other than the address is refused.
ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova, unsigned access) {
    if (iova != reinterpret_cast<std::uintptr_t>(addr)) return fail(EOPNOTSUPP);
    return register_memory(pd, addr, length, access);
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, std::uint64_t iova, int access) {
    return ibv_reg_mr_iova2(pd, addr, length, iova, static_cast<unsigned>(access));
}

int ibv_dereg_mr(ibv_mr* ibmr) {
    auto* mr = static_cast<Mr*>(ibmr);
    --static_cast<Pd*>(mr->pd)->users;
    delete mr;
    return 0;
}

// Completion channels are not there yet (ibv_create_comp_channel fails), so `channel` is always null.
ibv_cq* ibv_create_cq(ibv_context* c, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
    if (channel) return fail(EOPNOTSUPP);
    if (cqe < 1 || comp_vector < 0 || comp_vector >= c->num_comp_vectors) return fail(EINVAL);
    return guarded_ptr("ibv_create_cq", [&]() -> ibv_cq* {
        auto cq = std::make_unique<Cq>();
        cq->queue = context_of(c).domain.create_cq({.depth = static_cast<std::uint32_t>(cqe), .thread_safe = true});
        cq->context = c;
        cq->cq_context = cq_context;
        cq->cqe = static_cast<int>(std::min<std::uint32_t>(cq->queue.depth(), INT32_MAX));
        pthread_mutex_init(&cq->mutex, nullptr);
        pthread_cond_init(&cq->cond, nullptr);
        return cq.release();
    });
}

int ibv_destroy_cq(ibv_cq* ibcq) {
    auto* cq = static_cast<Cq*>(ibcq);
    if (cq->users > 0) return EBUSY;
    pthread_cond_destroy(&cq->cond);
    pthread_mutex_destroy(&cq->mutex);
    delete cq;
    return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* ibpd, ibv_qp_init_attr* init) {
    if (init->qp_type != IBV_QPT_RC || init->srq) return fail(EOPNOTSUPP);
    if (!init->send_cq || !init->recv_cq || init->send_cq->context != ibpd->context ||
        init->recv_cq->context != ibpd->context) {
        return fail(EINVAL);
    }
    return guarded_ptr("ibv_create_qp", [&]() -> ibv_qp* {
        auto& pd = static_cast<Pd&>(*ibpd);
        auto& send_cq = static_cast<Cq&>(*init->send_cq);
        auto& recv_cq = static_cast<Cq&>(*init->recv_cq);
        const ibv_qp_cap& want = init->cap;
        auto qp = std::make_unique<Qp>();
        qp->queue = context_of(pd.context).domain.create_qp({
            .send_cq = send_cq.queue,
            .recv_cq = recv_cq.queue,
            .max_send = want.max_send_wr,
            .max_recv = want.max_recv_wr,
            .max_sge = std::max({want.max_send_sge, want.max_recv_sge, 1u}),
            .max_inline = want.max_inline_data,
            .thread_safe = true,  // verbs QPs take posts from any number of threads
        });
        const weft::QpCaps& got = qp->queue.caps();
        qp->cap = {got.max_send, got.max_recv, got.max_sge, got.max_sge, got.max_inline};
        init->cap = qp->cap;
        qp->context = pd.context;
        qp->qp_context = init->qp_context;
        qp->pd = &pd;
        qp->send_cq = &send_cq;
        qp->recv_cq = &recv_cq;
        qp->qp_num = qp->queue.qp_num();
        qp->handle = qp->qp_num;
        qp->state = IBV_QPS_RESET;
        qp->qp_type = IBV_QPT_RC;
        qp->sq_sig_all = init->sq_sig_all != 0;
        pthread_mutex_init(&qp->mutex, nullptr);
        pthread_cond_init(&qp->cond, nullptr);
        {
            QpTable& table = qp_table();
            std::lock_guard lock(table.mu);
            table.by_num[qp->qp_num] = qp.get();
        }
        ++pd.users;
        ++send_cq.users;
        ++recv_cq.users;
        return qp.release();
    });
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
    return guarded("ibv_modify_qp", [&] { return modify(static_cast<Qp&>(*qp), *attr, mask); });
}

int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
    const auto& qp = static_cast<const Qp&>(*ibqp);
    *attr = qp.attr;
    attr->qp_state = attr->cur_qp_state = qp.state;
    attr->cap = qp.cap;
    *init = {};
    init->qp_context = qp.qp_context;
    init->send_cq = qp.send_cq;
    init->recv_cq = qp.recv_cq;
    init->cap = qp.cap;
    init->qp_type = qp.qp_type;
    init->sq_sig_all = qp.sq_sig_all;
    return 0;
}

int ibv_destroy_qp(ibv_qp* ibqp) {
    auto* qp = static_cast<Qp*>(ibqp);
    {
        QpTable& table = qp_table();
        std::lock_guard lock(table.mu);
        table.by_num.erase(qp->qp_num);
    }
    --static_cast<Pd*>(qp->pd)->users;
    --static_cast<Cq*>(qp->send_cq)->users;
    --static_cast<Cq*>(qp->recv_cq)->users;
    pthread_cond_destroy(&qp->cond);
    pthread_mutex_destroy(&qp->mutex);
    delete qp;
    return 0;
}

}  // extern "C"
