// The front end's setup verbs: protection domains, memory regions (and their re-registration with new
// rights), address handles, completion queues and RC queue pairs (on an SRQ or not) with the verbs state
// machine (RESET -> INIT -> RTR -> RTS), its attribute-mask checks, and the mapping of dest_qp_num to a
// weft QP of this process.
#include "frontend.hpp"

#include <weft/error.hpp>

#include <endian.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

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

// A weft region for a verbs MR. Verbs keys are 32 bits: the lkey is weft's, the rkey is weft's when it fits
// (the simulator's do; see verbs_rkey for the others). A weft rkey that an alias of the context uses as a
// verbs rkey is not given out again: the region is registered anew, holding the one with that key
// meanwhile.
MemoryRegion new_region(Context& ctx, void* addr, std::size_t length, Access access) {
    MemoryRegion region = ctx.domain.register_memory(addr, length, access);
    std::vector<MemoryRegion> held;
    while (ctx.aliases->kept(region.rkey())) {
        held.push_back(std::move(region));
        region = ctx.domain.register_memory(addr, length, access);
    }
    return region;
}

// The verbs rkey of a new region: its weft rkey when that fits in 32 bits; otherwise (ofi's keys are 64
// bits) a key of the context's own, from the top half of the 32-bit range, aliased to the weft rkey
// (RkeyAliases), so that a peer's request with it reaches the region.
std::uint32_t verbs_rkey(Context& ctx, const MemoryRegion& region) {
    if (region.rkey() <= UINT32_MAX) return static_cast<std::uint32_t>(region.rkey());
    // One counter for the process, so that a key is the process's only one: peers in other processes
    // name a region by LID and key (rendezvous.cpp).
    static std::atomic<std::uint32_t> next_own{0};
    RkeyAliases& aliases = *ctx.aliases;
    std::uint32_t key = 0;
    {
        std::lock_guard lock(aliases.mu);
        do {
            key = 0x80000000u | (next_own.fetch_add(1, std::memory_order_relaxed) & 0x7fffffffu);
        } while (aliases.weft_rkey.count(key) != 0);
        aliases.weft_rkey[key] = region.rkey();
        aliases.size.store(aliases.weft_rkey.size(), std::memory_order_release);
    }
    publish_rkey(key, region.rkey());
    return key;
}

ibv_mr* register_memory(ibv_pd* ibpd, void* addr, std::size_t length, unsigned flags) {
    Access access{};
    if (int err = to_access(flags, access)) return fail(err);
    return guarded_ptr("ibv_reg_mr", [&]() -> ibv_mr* {
        auto& pd = static_cast<Pd&>(*ibpd);
        auto mr = std::make_unique<Mr>();
        mr->region = new_region(context_of(pd.context), addr, length, access);
        mr->context = pd.context;
        mr->pd = &pd;
        mr->addr = addr;
        mr->length = length;
        mr->lkey = mr->region.lkey();
        mr->rkey = verbs_rkey(context_of(pd.context), mr->region);
        mr->handle = mr->lkey;
        ++pd.users;
        return mr.release();
    });
}

// Aims verbs rkey `rkey` at weft rkey `weft`; drops its alias when they are the same.
void alias_rkey(Context& ctx, std::uint32_t rkey, std::uint64_t weft) {
    RkeyAliases& aliases = *ctx.aliases;
    {
        std::lock_guard lock(aliases.mu);
        if (weft == rkey) {
            aliases.weft_rkey.erase(rkey);
        } else {
            aliases.weft_rkey[rkey] = weft;
        }
        aliases.size.store(aliases.weft_rkey.size(), std::memory_order_release);
    }
    if (weft == rkey) {
        withdraw_rkey(rkey);
    } else {
        publish_rkey(rkey, weft);
    }
}

// The provider's part of ibv_rereg_mr: an errno value. Only new access rights: the memory is registered
// again with them and the old registration released, so that a request the new rights forbid fails at the
// responder with IBV_WC_REM_ACCESS_ERR. The lkey is the new region's (work posted with the old one fails);
// the rkey stays the one the program's peers were given. A new PD or new memory are not there (EOPNOTSUPP):
// weft regions have no protection domain, and a QP cannot go back to RESET to take new receives.
int rereg(Mr& mr, int flags, int access) {
    if (!flags) return EINVAL;  // as the kernel refuses a re-registration that changes nothing
    if (flags & (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD)) return EOPNOTSUPP;
    Access rights{};
    if (int err = to_access(static_cast<unsigned>(access), rights)) return err;
    return guarded("ibv_rereg_mr", [&] {
        Context& ctx = context_of(mr.context);
        MemoryRegion region = new_region(ctx, mr.addr, mr.length, rights);
        alias_rkey(ctx, mr.rkey, region.rkey());  // requests go to the new region from here on
        MemoryRegion old = std::exchange(mr.region, std::move(region));
        mr.lkey = mr.region.lkey();
        return 0;  // `old` is released here
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
        default:  // SQD and SQE are never entered (modify_qp refuses them); from ERR only RESET and ERR
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

// The LID of the process whose QP RTR's address vector names: the GID's (a global route to a GID of the
// front end's, fe80:: + node GUID) or the destination LID. 0 names this process, as the address vector
// does not matter within one.
std::uint16_t dest_lid(const ibv_ah_attr& av) {
    if (!av.is_global) return av.dlid;
    const std::uint64_t guid = be64toh(av.grh.dgid.global.interface_id);
    auto lid = lid_of_guid(guid);
    if (!lid) {
        char text[40];
        std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(guid));
        throw Error(Errc::invalid_argument, std::string("the destination GID's interface ID ") + text +
                                                " is not a weft port's (7765667400000000 + LID)");
    }
    return *lid;
}

// RTR to a QP of another process on this host (rendezvous.cpp): the address it published. Its access flags
// are not known here; the backend checks the rights of its regions.
void connect_remote(Qp& qp, std::uint16_t lid, std::uint32_t dest) {
    qp.queue.connect(peer_address(lid, dest));
    auto aliases = std::make_shared<RkeyAliases>();
    aliases->remote_lid = lid;
    qp.peer_aliases = std::move(aliases);
    qp.peer_access.reset();
}

// RTR: connects the weft QP to the one numbered `dest`: a QP of this process, or on ofi one of another
// process that the address vector names.
void connect(Qp& qp, std::uint32_t dest, const ibv_ah_attr& av) {
    if (host_wide()) {
        const std::uint16_t lid = dest_lid(av);
        if (lid != 0 && lid != port_lid()) return connect_remote(qp, lid, dest);
    }
    QpTable& table = qp_table();
    std::lock_guard lock(table.mu);
    auto it = table.by_num.find(dest);
    if (it == table.by_num.end()) {
        throw Error(Errc::invalid_argument, "dest_qp_num " + std::to_string(dest) + " names no QP of this process" +
                                                (host_wide() ? " (LID " + std::to_string(port_lid()) + ")"
                                                             : std::string(" (the simulator connects QPs of one process only)")));
    }
    Qp& peer = *it->second;
    qp.queue.connect(peer.queue.address());
    qp.peer_access = peer.access;
    qp.peer_refusing = context_of(peer.qp_base.context).refusing.remote();
    qp.peer_aliases = context_of(peer.qp_base.context).aliases;
}

int modify(Qp& qp, const ibv_qp_attr& a, int mask) {
    const ibv_qp_state cur = qp.qp_base.state;
    if ((mask & IBV_QP_CUR_STATE) && a.cur_qp_state != cur) return EINVAL;
    const ibv_qp_state next = (mask & IBV_QP_STATE) ? a.qp_state : cur;
    auto t = rc_transition(cur, next);
    if (!t || (mask & t->required) != t->required || (mask & ~(t->required | t->optional | IBV_QP_STATE))) {
        return EINVAL;
    }
    if (int err = check_values(a, mask)) return err;
    // weft has no reset of a used QP and no send-queue drain.
    if (next == IBV_QPS_SQD || (next == IBV_QPS_RESET && cur != IBV_QPS_RESET)) return EOPNOTSUPP;
    if (next == IBV_QPS_RTR) connect(qp, a.dest_qp_num, a.ah_attr);
    if (next == IBV_QPS_ERR) qp.queue.to_error();  // everything outstanding and later completes flushed
    record(qp.attr, a, mask);
    if (mask & IBV_QP_ACCESS_FLAGS) qp.access->store(a.qp_access_flags, std::memory_order_relaxed);
    qp.qp_base.state = next;
    return 0;
}

// A CQ of at least `cqe` entries, with the extended polling functions when `extended`. The callers have
// checked the arguments verbs defines.
Cq* new_cq(ibv_context* c, std::uint32_t cqe, void* cq_context, ibv_comp_channel* channel, bool extended) {
    auto cq = std::make_unique<Cq>();
    cq->queue = context_of(c).domain.create_cq({.depth = cqe, .thread_safe = true});
    cq->context = c;
    cq->cq_context = cq_context;
    cq->cqe = static_cast<int>(std::min<std::uint32_t>(cq->queue.depth(), INT32_MAX));
    if (extended) install_cq_ex_ops(*cq);
    pthread_mutex_init(&cq->mutex, nullptr);  // (nothing to destroy on Linux if what follows throws)
    pthread_cond_init(&cq->cond, nullptr);
    // Known to the context's event reader by its number, then on its channel: nothing throws after that.
    Context& ctx = context_of(c);
    const std::uint32_t num = cq->queue.cq_num();
    {
        std::lock_guard lock(ctx.cq_mu);
        ctx.cqs[num] = cq.get();
    }
    try {
        if (channel) join_channel(*cq, static_cast<Channel&>(*channel));
    } catch (...) {
        std::lock_guard lock(ctx.cq_mu);
        ctx.cqs.erase(num);
        throw;
    }
    return cq.release();
}

// An RC QP from the ibv_qp_init_attr part of the arguments (ibv_qp_init_attr_ex begins with it), with
// the work-request builders when `extended`. `init.cap` is set to what the QP got.
ibv_qp* new_qp(ibv_pd* ibpd, ibv_qp_init_attr& init, bool extended) {
    if (init.qp_type != IBV_QPT_RC) return fail(EOPNOTSUPP);
    if (!init.send_cq || !init.recv_cq || init.send_cq->context != ibpd->context ||
        init.recv_cq->context != ibpd->context || (init.srq && init.srq->context != ibpd->context)) {
        return fail(EINVAL);
    }
    return guarded_ptr("ibv_create_qp", [&]() -> ibv_qp* {
        auto& pd = static_cast<Pd&>(*ibpd);
        Cq& send_cq = cq_of(init.send_cq);
        Cq& recv_cq = cq_of(init.recv_cq);
        const ibv_qp_cap& want = init.cap;
        auto qp = std::make_unique<Qp>();
        // On an SRQ, the receive capabilities are the SRQ's: the QP has no receive queue (0, as verbs reports).
        Srq* srq = init.srq ? static_cast<Srq*>(init.srq) : nullptr;
        QpOptions options{
            .send_cq = send_cq.queue,
            .recv_cq = recv_cq.queue,
            .max_send = want.max_send_wr,
            .max_recv = want.max_recv_wr,
            .max_sge = std::max({want.max_send_sge, srq ? 0u : want.max_recv_sge, 1u}),
            .max_inline = want.max_inline_data,
            .thread_safe = true,  // verbs QPs take posts from any number of threads
        };
        if (srq) options.srq = srq->queue;
        qp->queue = context_of(pd.context).domain.create_qp(options);
        const weft::QpCaps& got = qp->queue.caps();
        qp->cap = {got.max_send, srq ? 0 : got.max_recv, got.max_sge, srq ? 0 : got.max_sge, got.max_inline};
        qp->srq = srq;
        if (extended) install_qp_ex_ops(*qp);
        qp->extended = extended;
        init.cap = qp->cap;
        ibv_qp& q = qp->qp_base;
        q.context = pd.context;
        q.qp_context = init.qp_context;
        q.pd = &pd;
        q.send_cq = init.send_cq;
        q.recv_cq = init.recv_cq;
        q.srq = init.srq;
        q.qp_num = qp->queue.qp_num();
        q.handle = q.qp_num;
        q.state = IBV_QPS_RESET;
        q.qp_type = IBV_QPT_RC;
        qp->sq_sig_all = init.sq_sig_all != 0;
        publish_qp(q.qp_num, qp->queue.address());
        {
            QpTable& table = qp_table();
            std::lock_guard lock(table.mu);
            table.by_num[q.qp_num] = qp.get();
        }
        pthread_mutex_init(&q.mutex, nullptr);
        pthread_cond_init(&q.cond, nullptr);
        ++pd.users;
        ++send_cq.users;
        ++recv_cq.users;
        if (srq) ++srq->users;
        return &qp.release()->qp_base;
    });
}

}  // namespace

ibv_qp* qp_for_event(Context& ctx, std::uint32_t qp_num) noexcept {
    QpTable& table = qp_table();
    std::lock_guard lock(table.mu);  // ibv_destroy_qp takes the QP out first, then waits for its acks
    auto it = table.by_num.find(qp_num);
    if (it == table.by_num.end() || it->second->qp_base.context != &ctx.context) return nullptr;
    ibv_qp& q = it->second->qp_base;
    pthread_mutex_lock(&q.mutex);
    ++it->second->events_reported;
    pthread_mutex_unlock(&q.mutex);
    return &q;
}

// Extended CQs take the standard completion fields only: no timestamps, VLAN, flow tag or tag matching
// (EOPNOTSUPP), and no parent domain.
ibv_cq_ex* create_cq_ex(ibv_context* c, ibv_cq_init_attr_ex* attr) {
    constexpr std::uint32_t known_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
    if (attr->comp_mask & ~known_mask) return fail(EINVAL);
    if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) return fail(EOPNOTSUPP);
    // Single-threaded use is a hint; ignoring overruns is not there.
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~std::uint32_t{IBV_CREATE_CQ_ATTR_SINGLE_THREADED})) {
        return fail(EOPNOTSUPP);
    }
    if (attr->wc_flags & ~std::uint64_t{IBV_WC_STANDARD_FLAGS}) return fail(EOPNOTSUPP);
    if (attr->cqe < 1 || attr->comp_vector >= static_cast<std::uint32_t>(c->num_comp_vectors)) return fail(EINVAL);
    return guarded_ptr("ibv_create_cq_ex", [&]() -> ibv_cq_ex* {
        return new_cq(c, attr->cqe, attr->cq_context, attr->channel, true);
    });
}

// The send_ops_flags an extended QP may ask for: the opcodes weft has that the backend offers (a device
// without atomics refuses IBV_QP_EX_WITH_ATOMIC_* with EOPNOTSUPP, as rdma-core's providers do).
std::uint64_t send_ops_of(const Capabilities& caps) noexcept {
    std::uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND;
    if (caps.has(Feature::send_with_imm)) ops |= IBV_QP_EX_WITH_SEND_WITH_IMM;
    if (caps.has(Feature::write_with_imm)) ops |= IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    if (caps.has(Feature::read)) ops |= IBV_QP_EX_WITH_RDMA_READ;
    if (caps.has(Feature::atomics)) ops |= IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    return ops;
}

// Extended QPs: RC with a PD, no creation flags and no TSO; with send_ops_flags, the work-request
// builders for the opcodes weft has and the backend offers.
ibv_qp* create_qp_ex(ibv_context* c, ibv_qp_init_attr_ex* attr) {
    constexpr std::uint32_t known_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                                         IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE |
                                         IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    const std::uint64_t send_ops = send_ops_of(context_of(c).domain.capabilities());
    const std::uint32_t mask = attr->comp_mask;
    if (mask & ~known_mask) return fail(EINVAL);
    if (!(mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) return fail(EOPNOTSUPP);  // XRC
    if (attr->pd->context != c) return fail(EINVAL);
    if ((mask & (IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH)) ||
        ((mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) ||
        ((mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) && attr->max_tso_header) ||
        ((mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (attr->send_ops_flags & ~send_ops))) {
        return fail(EOPNOTSUPP);
    }
    return new_qp(attr->pd, *reinterpret_cast<ibv_qp_init_attr*>(attr), (mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0);
}

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

// rdma-core's checks of the arguments come first (IBV_REREG_MR_ERR_INPUT, errno EINVAL); a failure of the
// re-registration itself is IBV_REREG_MR_ERR_CMD with its errno, and leaves the MR as it was.
// `pd` counts only with IBV_REREG_MR_CHANGE_PD, which is refused.
int ibv_rereg_mr(ibv_mr* ibmr, int flags, ibv_pd*, void* addr, size_t length, int access) {
    constexpr int known = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
    if ((flags & ~known) || ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
        (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
        errno = EINVAL;
        return IBV_REREG_MR_ERR_INPUT;
    }
    if (int err = rereg(*static_cast<Mr*>(ibmr), flags, access)) {
        errno = err;
        return IBV_REREG_MR_ERR_CMD;
    }
    return 0;
}

int ibv_dereg_mr(ibv_mr* ibmr) {
    auto* mr = static_cast<Mr*>(ibmr);
    if (mr->region.rkey() != mr->rkey) alias_rkey(context_of(mr->context), mr->rkey, mr->rkey);  // given back
    --static_cast<Pd*>(mr->pd)->users;
    delete mr;
    return 0;
}

// An address handle on the one port. As the kernel checks it: the port exists, and a global route names a
// populated source GID (GID 0, the only one).
ibv_ah* ibv_create_ah(ibv_pd* ibpd, ibv_ah_attr* attr) {
    if (attr->port_num != 1 || (attr->is_global && attr->grh.sgid_index != 0)) return fail(EINVAL);
    return guarded_ptr("ibv_create_ah", [&]() -> ibv_ah* {
        static std::atomic<std::uint32_t> handles{0};
        auto& pd = static_cast<Pd&>(*ibpd);
        auto* ah = new Ah;
        ah->context = pd.context;
        ah->pd = &pd;
        ah->handle = handles.fetch_add(1, std::memory_order_relaxed);
        ah->attr = *attr;
        ++pd.users;
        return ah;
    });
}

int ibv_destroy_ah(ibv_ah* ibah) {
    auto* ah = static_cast<Ah*>(ibah);
    --static_cast<Pd*>(ah->pd)->users;
    delete ah;
    return 0;
}

ibv_cq* ibv_create_cq(ibv_context* c, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
    if (cqe < 1 || comp_vector < 0 || comp_vector >= c->num_comp_vectors) return fail(EINVAL);
    return guarded_ptr("ibv_create_cq", [&]() -> ibv_cq* {
        return base_of(*new_cq(c, static_cast<std::uint32_t>(cqe), cq_context, channel, false));
    });
}

int ibv_destroy_cq(ibv_cq* ibcq) {
    Cq* cq = &cq_of(ibcq);
    if (cq->users > 0) return EBUSY;
    {
        Context& ctx = context_of(cq->context);
        std::lock_guard lock(ctx.cq_mu);  // ibv_get_async_event finds it no more
        ctx.cqs.erase(cq->queue.cq_num());
    }
    // As rdma-core's destroy: the events ibv_get_async_event returned for the CQ must be acknowledged.
    wait_for_acks(cq->mutex, cq->cond, cq->async_events_completed, cq->events_reported);
    leave_channel(*cq);
    pthread_cond_destroy(&cq->cond);
    pthread_mutex_destroy(&cq->mutex);
    delete cq;
    return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) { return new_qp(pd, *init, false); }

// The work-request builders of a QP created with send_ops_flags; null for others, as in rdma-core.
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* ibqp) {
    Qp& qp = qp_of(ibqp);
    if (!qp.extended) return fail(EOPNOTSUPP);
    return &qp;
}

int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
    return guarded("ibv_modify_qp", [&] { return modify(qp_of(qp), *attr, mask); });
}

int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int, ibv_qp_init_attr* init) {
    const Qp& qp = qp_of(ibqp);
    const ibv_qp& q = qp.qp_base;
    *attr = qp.attr;
    attr->qp_state = attr->cur_qp_state = q.state;
    attr->cap = qp.cap;
    *init = {};
    init->qp_context = q.qp_context;
    init->send_cq = q.send_cq;
    init->recv_cq = q.recv_cq;
    init->srq = q.srq;
    init->cap = qp.cap;
    init->qp_type = q.qp_type;
    init->sq_sig_all = qp.sq_sig_all;
    return 0;
}

int ibv_destroy_qp(ibv_qp* ibqp) {
    Qp* qp = &qp_of(ibqp);
    {
        QpTable& table = qp_table();
        std::lock_guard lock(table.mu);
        table.by_num.erase(ibqp->qp_num);
    }
    withdraw_qp(ibqp->qp_num);
    // As rdma-core's destroy: the events ibv_get_async_event returned for the QP must be acknowledged.
    wait_for_acks(ibqp->mutex, ibqp->cond, ibqp->events_completed, qp->events_reported);
    --static_cast<Pd*>(ibqp->pd)->users;
    --cq_of(ibqp->send_cq).users;
    --cq_of(ibqp->recv_cq).users;
    if (qp->srq) --qp->srq->users;
    pthread_cond_destroy(&ibqp->cond);
    pthread_mutex_destroy(&ibqp->mutex);
    delete qp;
    return 0;
}

}  // extern "C"
