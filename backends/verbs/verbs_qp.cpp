// Queue-pair setup: creation (RESET -> INIT at once, so receives can be posted before connecting), the
// address a peer needs (its layout and checks are in verbs_wire.cpp), connect (INIT -> RTR -> RTS), and state
// queries. Posting is in verbs_datapath.cpp.
#include "verbs.hpp"
#include "verbs_wire.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <tuple>

namespace weft::verbs {
namespace {

constexpr std::uint32_t max_24bit = 0xffffff;
constexpr const char* connect_call = "QueuePair::connect";

QpState from_ibv(ibv_qp_state s, QpState fallback) noexcept {
    switch (s) {
        case IBV_QPS_RESET: return QpState::reset;
        case IBV_QPS_INIT: return QpState::init;
        case IBV_QPS_RTR: return QpState::rtr;
        case IBV_QPS_RTS: return QpState::rts;
        case IBV_QPS_SQD: return QpState::sqd;
        case IBV_QPS_SQE: return QpState::sqe;
        case IBV_QPS_ERR: return QpState::error;
        default: return fallback;
    }
}

std::shared_ptr<VerbsCq> as_verbs_cq(const std::shared_ptr<detail::CqImpl>& cq, const char* which,
                                     const Device& dev) {
    auto v = std::dynamic_pointer_cast<VerbsCq>(cq);
    if (!v) {
        errors.fail(Errc::invalid_argument, std::string(which) + " was not created by a verbs domain", "create_qp");
    }
    if (v->device().context.get() != dev.context.get()) {
        errors.fail(Errc::invalid_argument,
             std::string(which) + " belongs to another verbs domain; a QP and its CQs come from one Domain",
             "create_qp");
    }
    return v;
}

std::uint32_t start_psn(const Device& dev) {
    if (dev.fixed_psn) return *dev.fixed_psn;
    // Random, as the IB spec advises: stale packets of an earlier QP with the same number then miss.
    std::random_device rd;
    return rd() & max_24bit;
}

// `capacity` is what the provider granted; the queue takes requests once wq.capacity is set to it.
void init_queue(WorkQueue& wq, std::uint32_t capacity, ibv_qp* qp, bool is_recv, std::atomic<QpState>* state) {
    const std::uint32_t ring = WorkQueue::storage_for(capacity);
    wq.ids = std::make_unique<std::uint64_t[]>(ring);
    if (!is_recv) wq.tails = std::make_unique<std::uint32_t[]>(ring);
    wq.ring_mask = ring - 1;
    wq.qp = qp;
    wq.qp_num = qp->qp_num;
    wq.is_recv = is_recv;
    wq.state = state;
}

}  // namespace

void index_opcodes(Device& dev) noexcept {
    struct Known {
        Opcode op;
        ibv_wr_opcode wr;
    };
    constexpr Known known[] = {
        {Opcode::send, IBV_WR_SEND},
        {Opcode::send_with_imm, IBV_WR_SEND_WITH_IMM},
        {Opcode::write, IBV_WR_RDMA_WRITE},
        {Opcode::write_with_imm, IBV_WR_RDMA_WRITE_WITH_IMM},
        {Opcode::read, IBV_WR_RDMA_READ},
        {Opcode::fetch_add, IBV_WR_ATOMIC_FETCH_AND_ADD},
        {Opcode::compare_swap, IBV_WR_ATOMIC_CMP_AND_SWP},
    };
    dev.ops = {};  // everything else cannot be posted: check_send says why
    for (const Known& k : known) {
        OpInfo& info = dev.ops[static_cast<std::size_t>(k.op)];
        info.wr_opcode = static_cast<std::uint8_t>(k.wr);
        info.completion = completion_opcode(k.op);
        info.atomic = is_atomic(k.op);
        info.plain = dev.caps.supports(k.op) && !info.atomic;
    }
}

VerbsQp::VerbsQp(std::shared_ptr<Device> device, const detail::QpSetup& setup) : device_(std::move(device)) {
    const QpOptions& o = setup.options;
    send_cq_ = as_verbs_cq(setup.send_cq, "send_cq", *device_);
    recv_cq_ = as_verbs_cq(setup.recv_cq, "recv_cq", *device_);
    if (setup.srq) {
        srq_ = std::dynamic_pointer_cast<VerbsSrq>(setup.srq);
        if (!srq_ || srq_->device().context.get() != device_->context.get()) {
            errors.fail(Errc::invalid_argument, "srq was not created by this verbs domain", "create_qp");
        }
    }
    transport_ = {o.timeout, o.retry_cnt, o.rnr_retry, o.min_rnr_timer};

    ibv_qp_init_attr init{};
    init.send_cq = send_cq_->handle();
    init.recv_cq = recv_cq_->handle();
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;
    init.cap.max_send_wr = o.max_send;
    init.cap.max_recv_wr = srq_ ? 0 : o.max_recv;  // with an SRQ the receive queue's caps are ignored
    init.cap.max_send_sge = o.max_sge;
    init.cap.max_recv_sge = srq_ ? 0 : o.max_sge;
    init.cap.max_inline_data = o.max_inline;
    if (srq_) init.srq = srq_->handle();
    errno = 0;
    qp_.reset(::ibv_create_qp(device_->pd.get(), &init));
    if (!qp_) {
        const int err = errno != 0 ? errno : ENOMEM;
        errors.fail_errno(err,
                   "ibv_create_qp(RC, max_send " + std::to_string(o.max_send) +
                       (srq_ ? std::string(", shared receive queue ") + std::to_string(srq_->srq_num)
                             : ", max_recv " + std::to_string(o.max_recv)) +
                       ", max_sge " + std::to_string(o.max_sge) + ", max_inline " +
                       std::to_string(o.max_inline) + ") on " + device_->name + " failed",
                   "create_qp");
    }
    handle_ = qp_.get();
    qp_num = handle_->qp_num;
    psn_ = start_psn(*device_);

    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = device_->port;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (device_->caps.has(Feature::atomics)) attr.qp_access_flags |= IBV_ACCESS_REMOTE_ATOMIC;
    modify(attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "RESET->INIT",
           "port " + std::to_string(device_->port), "create_qp");
    state_.store(QpState::init, std::memory_order_relaxed);
    // ibv_create_qp wrote what the provider really granted back into init.cap.
    init_data_path(init.cap);
}

VerbsQp::VerbsQp(Adopt, std::shared_ptr<Device> device, std::shared_ptr<VerbsCq> send_cq,
                 std::shared_ptr<VerbsCq> recv_cq, ibv_qp* qp, const ibv_qp_cap& granted)
    : device_(std::move(device)), send_cq_(std::move(send_cq)), recv_cq_(std::move(recv_cq)), handle_(qp) {
    state_.store(QpState::rts, std::memory_order_relaxed);
    init_data_path(granted);
    sq_.capacity.store(caps.max_send, std::memory_order_relaxed);
}

void VerbsQp::init_data_path(const ibv_qp_cap& granted) {
    qp_num = handle_->qp_num;
    provider_post_send_ = handle_->context->ops.post_send;
    provider_post_recv_ = handle_->context->ops.post_recv;
    caps.max_send = granted.max_send_wr;
    // With a shared receive queue the QP has no receive queue of its own (providers may report what they
    // ignored), and its receives have the queue's max_sge.
    caps.max_recv = srq_ ? 0 : granted.max_recv_wr;
    caps.max_sge = srq_ ? granted.max_send_sge : std::min(granted.max_send_sge, granted.max_recv_sge);
    caps.max_inline = granted.max_inline_data;
    init_queue(sq_, caps.max_send, handle_, false, &state_);
    init_queue(rq_, caps.max_recv, handle_, true, &state_);
    send_sge_stride_ = std::max(granted.max_send_sge, 1u);
    recv_sge_stride_ = std::max(granted.max_recv_sge, 1u);
    send_wrs_ = chain_slots<ibv_send_wr>(caps.max_send, send_sge_stride_, send_sges_);
    recv_wrs_ = chain_slots<ibv_recv_wr>(caps.max_recv, recv_sge_stride_, recv_sges_);
    one_wr_.next = nullptr;
    one_wr_.sg_list = &one_sge_;
    one_wr_.num_sge = 1;

    const Capabilities& dc = device_->caps;
    max_single_length_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(dc.max_msg_size, 0xffffffffu));
    // Flags that need a closer look: inline data (its length against max_inline), those the device lacks and
    // the bits that mean nothing (the general path drops them); and a remote region that is neither verbs'
    // nor unset (0), in bits 15..8 (then shifted above the opcode's byte, as FastOp tests them).
    auto checked = static_cast<std::uint32_t>(SendFlags::inline_data) | 0xf0u;
    if (!dc.has(Feature::fence)) checked |= static_cast<std::uint32_t>(SendFlags::fence);
    if (!dc.has(Feature::solicited)) checked |= static_cast<std::uint32_t>(SendFlags::solicited);
    checked |= (0xffu & ~static_cast<std::uint32_t>(BackendKind::verbs)) << 8;
    if (!device_->ops[0].plain) errors.fail(Errc::internal, "send (opcode 0) not plain: FastOp needs it", "create_qp");
    for (std::size_t op = 0; op < send_ops_.with_imm.size(); ++op) {
        const OpInfo& info = device_->ops[op];
        const bool imm = info.wr_opcode == IBV_WR_SEND_WITH_IMM || info.wr_opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
        const auto tail = static_cast<std::uint16_t>(static_cast<unsigned>(info.completion) << 8);
        const std::uint32_t reject = info.plain ? checked << 8 : 0xffffffffu;
        send_ops_.with_imm[op] = FastOp{static_cast<std::uint16_t>(info.plain && imm), tail, reject};
        send_ops_.without_imm[op] = FastOp{0, tail, imm ? 0xffffffffu : reject};
    }
    recv_flush_help_ = device_->rxe;
    rq_.capacity.store(caps.max_recv, std::memory_order_relaxed);  // the QP is in init: receives may come

    // Room in the CQs for every completion the queues can leave there (the shared queue reserves its own).
    send_cq_->reserve(caps.max_send, "send queue of QP " + std::to_string(qp_num));
    reserved_send_ = caps.max_send;
    try {
        recv_cq_->reserve(caps.max_recv, "receive queue of QP " + std::to_string(qp_num));
        reserved_recv_ = caps.max_recv;
        sq_.tag = send_cq_->queues().attach(&sq_);
        try {
            // A QP of a shared receive queue takes no receives of its own (rq_ stays empty, unattached):
            // their completions lead to the shared queue.
            if (srq_) {
                srq_->attach(recv_cq_);
            } else {
                rq_.tag = recv_cq_->queues().attach(&rq_);
            }
        } catch (...) {
            send_cq_->queues().detach(sq_.tag);
            throw;
        }
    } catch (...) {
        send_cq_->release(reserved_send_);
        recv_cq_->release(reserved_recv_);
        throw;
    }
}

VerbsQp::~VerbsQp() {
    // Its rdma_cm connection goes before it (telling a peer not yet told, as rdma_destroy_id does).
    if (Connections* c = device_->connections_if_any()) c->forget(*this);
    // The QP goes first; completions it leaves in the CQs are then dropped by poll (their table entries
    // are detached), never matched to freed slots.
    qp_.reset();
    send_cq_->queues().detach(sq_.tag);
    if (rq_.tag != 0) recv_cq_->queues().detach(rq_.tag);
    send_cq_->release(reserved_send_);
    recv_cq_->release(reserved_recv_);
}

void VerbsQp::modify(ibv_qp_attr& attr, int mask, const char* transition, const std::string& context,
                     std::string_view call) {
    if (int rc = ::ibv_modify_qp(handle_, &attr, mask); rc != 0) {
        errors.fail_errno(rc,
                   std::string("ibv_modify_qp(") + transition + ") of QP " + std::to_string(qp_num) + " on " +
                       device_->name + " failed (" + context + ")",
                   call);
    }
}

std::vector<std::byte> VerbsQp::address() const {
    wire::QpAddress a;
    a.has_gid = device_->use_gid;
    a.port = device_->port;
    a.mtu = device_->mtu;
    a.gid = device_->gid;
    a.lid = device_->lid;
    a.qp_num = qp_num;
    a.psn = psn_;
    const auto bytes = wire::encode_address(a);
    return {bytes.begin(), bytes.end()};
}

void VerbsQp::connect(std::span<const std::byte> peer) {
    if (const QpState s = state_.load(std::memory_order_relaxed); s != QpState::init) {
        errors.fail(Errc::invalid_state,
             "QP " + std::to_string(qp_num) + " is in state " + std::string(to_string(s)) +
                 "; connect() brings a new QP (state init) to rts once",
             connect_call);
    }
    const wire::QpAddress a = wire::decode_address(peer);
    if (device_->use_gid && !a.has_gid) {
        errors.fail(Errc::bad_descriptor,
             "the peer's address has no GID, but this side routes by GID (" +
                 std::string(device_->ethernet ? "an Ethernet port needs one" : "gid_index was given") +
                 "); open both sides alike",
             connect_call);
    }
    if (!device_->use_gid && a.has_gid) {
        errors.fail(Errc::bad_descriptor,
             "the peer's address carries a GID, but this InfiniBand side uses LID routing; give gid_index here "
             "too",
             connect_call);
    }

    const ibv_mtu path_mtu = std::min(device_->mtu, a.mtu);
    const std::string context = "peer QP " + std::to_string(a.qp_num) + " at " +
                                (a.has_gid ? "GID " + gid_text(a.gid) : "LID " + std::to_string(a.lid)) +
                                ", path MTU " + std::to_string(mtu_bytes(path_mtu));

    ibv_qp_attr rtr{};
    rtr.qp_state = IBV_QPS_RTR;
    rtr.path_mtu = path_mtu;
    rtr.dest_qp_num = a.qp_num;
    rtr.rq_psn = a.psn;
    rtr.max_dest_rd_atomic = device_->max_dest_rd_atomic;
    rtr.min_rnr_timer = transport_.min_rnr_timer;
    rtr.ah_attr.dlid = a.lid;
    rtr.ah_attr.sl = 0;
    rtr.ah_attr.src_path_bits = 0;
    rtr.ah_attr.port_num = device_->port;
    if (a.has_gid) {
        rtr.ah_attr.is_global = 1;
        rtr.ah_attr.grh.dgid = a.gid;
        rtr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(device_->gid_index);
        rtr.ah_attr.grh.hop_limit = 64;  // RoCE v2 is routable; a hop limit of 1 would stop at the first router
        rtr.ah_attr.grh.traffic_class = 0;
        rtr.ah_attr.grh.flow_label = 0;
    }
    modify(rtr,
           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
           "INIT->RTR", context, connect_call);
    state_.store(QpState::rtr, std::memory_order_relaxed);

    ibv_qp_attr rts{};
    rts.qp_state = IBV_QPS_RTS;
    rts.timeout = transport_.timeout;
    rts.retry_cnt = transport_.retry_cnt;
    // rxe's completer never counts down a retry_cnt of 7: it treats transport retries as the IB specification
    // treats RNR retries only (7 = retry forever), so a peer that is gone would never be reported. 6 is the
    // nearest finite count: one retry fewer than asked (docs/backends/verbs.md).
    if (device_->rxe && rts.retry_cnt == 7) rts.retry_cnt = 6;
    rts.rnr_retry = transport_.rnr_retry;
    rts.sq_psn = psn_;
    rts.max_rd_atomic = device_->max_rd_atomic;
    modify(rts,
           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
               IBV_QP_MAX_QP_RD_ATOMIC,
           "RTR->RTS", context, connect_call);
    state_.store(QpState::rts, std::memory_order_relaxed);
    // From here on the QP takes send requests: it never leaves the states that do (rts, sqd, sqe, error).
    sq_.capacity.store(caps.max_send, std::memory_order_release);
}

void VerbsQp::to_error() { note_error(state_, handle_); }

void VerbsQp::disconnect() {
    Connections* c = device_->connections_if_any();
    if (c != nullptr && c->disconnect(*this)) return;
    errors.fail(Errc::not_supported,
         "QP " + std::to_string(qp_num) +
             " was connected by address exchange (QueuePair::connect): on verbs only a QP connected by "
             "weft::connect or Listener::accept has an rdma_cm connection that can tell the peer, as "
             "rdma_disconnect; destroy the QP instead, and the peer learns from its requests' "
             "transport_retry_exceeded",
         "QueuePair::disconnect");
}

QpState VerbsQp::state() const noexcept {
    const QpState tracked = state_.load(std::memory_order_relaxed);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (::ibv_query_qp(handle_, &attr, IBV_QP_STATE, &init) != 0) return tracked;
    const QpState now = from_ibv(attr.qp_state, tracked);
    // The device can move a QP to error before poll sees the completion that says so, or without one (the
    // responder of a request with a bad rkey on rxe); follow it, so that posting keeps flushing instead of
    // being refused. Whoever learns of the error first re-runs the flush for the receives posted since the
    // failure (rerun_error_flush): after this, poll will not.
    if (now == QpState::error) {
        note_error(state_, handle_);
    } else if (now == QpState::sqe) {
        QpState expected = tracked;
        state_.compare_exchange_strong(expected, now, std::memory_order_relaxed);
    }
    return now;
}

}  // namespace weft::verbs
