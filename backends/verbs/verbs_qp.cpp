// Queue-pair setup: creation (RESET -> INIT at once, so receives can be posted before connecting), the
// address a peer needs, connect (INIT -> RTR -> RTS), and state queries. Posting is in verbs_datapath.cpp.
//
// Address encoding (40 bytes, little-endian), versioned and checksummed like RemoteRegion's:
//   0  magic "wfVQ"     4  version (1)      5  flags (bit 0: GID present)   6  port   7  MTU (ibv_mtu, 1..5)
//   8  GID (16 bytes, network order as in the GID table)                    24 LID (u16)   26 reserved (0)
//   28 QP number (u32, < 2^24)              32 start PSN (u32, < 2^24)      36 FNV-1a of bytes 0..35 (u32)
#include "verbs.hpp"

#include <weft/detail/bytes.hpp>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

namespace weft::verbs {
namespace {

constexpr std::size_t address_size = 40;
constexpr std::byte address_magic[4] = {std::byte{'w'}, std::byte{'f'}, std::byte{'V'}, std::byte{'Q'}};
constexpr std::uint8_t address_version = 1;
constexpr std::uint8_t flag_has_gid = 1;
constexpr std::uint32_t max_24bit = 0xffffff;
constexpr const char* connect_call = "QueuePair::connect";

struct PeerAddress {
    bool has_gid = false;
    std::uint8_t port = 0;
    ibv_mtu mtu = IBV_MTU_1024;
    ibv_gid gid{};
    std::uint16_t lid = 0;
    std::uint32_t qp_num = 0;
    std::uint32_t psn = 0;
};

[[noreturn]] void bad_address(const std::string& why) {
    fail(Errc::bad_descriptor, "malformed peer QP address: " + why, connect_call);
}

PeerAddress decode_address(std::span<const std::byte> b) {
    if (b.size() != address_size) {
        bad_address("expected " + std::to_string(address_size) + " bytes, got " + std::to_string(b.size()) +
                    (b.size() >= 4 && std::memcmp(b.data(), address_magic, 4) != 0
                         ? " (not a verbs QP address: is it from another backend?)"
                         : ""));
    }
    if (std::memcmp(b.data(), address_magic, 4) != 0) {
        bad_address("bad magic: not a verbs QP address (is it from another backend?)");
    }
    if (auto v = static_cast<std::uint8_t>(b[4]); v != address_version) {
        bad_address("version " + std::to_string(v) + " is not supported (accepted: " +
                    std::to_string(address_version) + ")");
    }
    if (detail::get_le<std::uint32_t>(b.data() + 36) != detail::fnv1a(b.data(), 36)) {
        bad_address("checksum mismatch: the address was corrupted or truncated in transit");
    }
    PeerAddress a;
    const auto flags = static_cast<std::uint8_t>(b[5]);
    if ((flags & ~flag_has_gid) != 0) bad_address("unknown flag bits " + std::to_string(flags));
    if (detail::get_le<std::uint16_t>(b.data() + 26) != 0) bad_address("reserved bytes are not zero");
    a.has_gid = (flags & flag_has_gid) != 0;
    a.port = static_cast<std::uint8_t>(b[6]);
    if (a.port == 0) bad_address("port 0 (ports are numbered from 1)");
    const auto mtu = static_cast<std::uint8_t>(b[7]);
    if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) {
        bad_address("MTU code " + std::to_string(mtu) + " is not one of 1..5 (256..4096 bytes)");
    }
    a.mtu = static_cast<ibv_mtu>(mtu);
    std::memcpy(a.gid.raw, b.data() + 8, 16);
    a.lid = detail::get_le<std::uint16_t>(b.data() + 24);
    a.qp_num = detail::get_le<std::uint32_t>(b.data() + 28);
    a.psn = detail::get_le<std::uint32_t>(b.data() + 32);
    if (a.qp_num > max_24bit || a.qp_num < 2) {
        bad_address("QP number " + std::to_string(a.qp_num) + " is outside 2..16777215");
    }
    if (a.psn > max_24bit) bad_address("PSN " + std::to_string(a.psn) + " does not fit in 24 bits");
    if (!a.has_gid && a.lid == 0) bad_address("neither a GID nor a LID: the peer cannot be addressed");
    return a;
}

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
        fail(Errc::invalid_argument, std::string(which) + " was not created by a verbs domain", "create_qp");
    }
    if (v->device().context.get() != dev.context.get()) {
        fail(Errc::invalid_argument,
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

void init_queue(WorkQueue& wq, std::uint32_t capacity, ibv_qp* qp, bool is_recv, std::atomic<QpState>* state) {
    wq.slots = std::make_unique<WorkQueue::Slot[]>(capacity);
    wq.capacity = capacity;
    wq.qp_num = qp->qp_num;
    wq.qp = qp;
    wq.is_recv = is_recv;
    wq.state = state;
}

}  // namespace

VerbsQp::VerbsQp(std::shared_ptr<Device> device, const detail::QpSetup& setup) : device_(std::move(device)) {
    const QpOptions& o = setup.options;
    send_cq_ = as_verbs_cq(setup.send_cq, "send_cq", *device_);
    recv_cq_ = as_verbs_cq(setup.recv_cq, "recv_cq", *device_);
    transport_ = {o.timeout, o.retry_cnt, o.rnr_retry, o.min_rnr_timer};

    ibv_qp_init_attr init{};
    init.send_cq = send_cq_->handle();
    init.recv_cq = recv_cq_->handle();
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 0;
    init.cap.max_send_wr = o.max_send;
    init.cap.max_recv_wr = o.max_recv;
    init.cap.max_send_sge = o.max_sge;
    init.cap.max_recv_sge = o.max_sge;
    init.cap.max_inline_data = o.max_inline;
    errno = 0;
    qp_.reset(::ibv_create_qp(device_->pd.get(), &init));
    if (!qp_) {
        const int err = errno != 0 ? errno : ENOMEM;
        fail_errno(err,
                   "ibv_create_qp(RC, max_send " + std::to_string(o.max_send) + ", max_recv " +
                       std::to_string(o.max_recv) + ", max_sge " + std::to_string(o.max_sge) + ", max_inline " +
                       std::to_string(o.max_inline) + ") on " + device_->name + " failed",
                   "create_qp");
    }
    // ibv_create_qp wrote what the provider really granted back into init.cap.
    qp_num = qp_->qp_num;
    caps.max_send = init.cap.max_send_wr;
    caps.max_recv = init.cap.max_recv_wr;
    caps.max_sge = std::min(init.cap.max_send_sge, init.cap.max_recv_sge);
    caps.max_inline = init.cap.max_inline_data;
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

    init_queue(sq_, caps.max_send, qp_.get(), false, &state_);
    init_queue(rq_, caps.max_recv, qp_.get(), true, &state_);
    send_sge_stride_ = init.cap.max_send_sge;
    recv_sge_stride_ = init.cap.max_recv_sge;
    send_wrs_ = std::make_unique<ibv_send_wr[]>(caps.max_send);
    send_sges_ = std::make_unique<ibv_sge[]>(static_cast<std::size_t>(caps.max_send) * send_sge_stride_);
    recv_wrs_ = std::make_unique<ibv_recv_wr[]>(caps.max_recv);
    recv_sges_ = std::make_unique<ibv_sge[]>(static_cast<std::size_t>(caps.max_recv) * recv_sge_stride_);

    sq_.tag = send_cq_->queues().attach(&sq_);
    try {
        rq_.tag = recv_cq_->queues().attach(&rq_);
    } catch (...) {
        send_cq_->queues().detach(sq_.tag);
        throw;
    }
}

VerbsQp::~VerbsQp() {
    // The QP goes first; completions it leaves in the CQs are then dropped by poll (their table entries
    // are detached), never matched to freed slots.
    qp_.reset();
    send_cq_->queues().detach(sq_.tag);
    recv_cq_->queues().detach(rq_.tag);
}

void VerbsQp::modify(ibv_qp_attr& attr, int mask, const char* transition, const std::string& context,
                     std::string_view call) {
    if (int rc = ::ibv_modify_qp(qp_.get(), &attr, mask); rc != 0) {
        fail_errno(rc,
                   std::string("ibv_modify_qp(") + transition + ") of QP " + std::to_string(qp_num) + " on " +
                       device_->name + " failed (" + context + ")",
                   call);
    }
}

std::vector<std::byte> VerbsQp::address() const {
    std::vector<std::byte> out(address_size);
    std::byte* p = out.data();
    std::memcpy(p, address_magic, 4);
    p[4] = std::byte{address_version};
    p[5] = std::byte{device_->use_gid ? flag_has_gid : std::uint8_t{0}};
    p[6] = std::byte{device_->port};
    p[7] = static_cast<std::byte>(device_->mtu);
    std::memcpy(p + 8, device_->gid.raw, 16);
    detail::put_le<std::uint16_t>(p + 24, device_->lid);
    detail::put_le<std::uint32_t>(p + 28, qp_num);
    detail::put_le<std::uint32_t>(p + 32, psn_);
    detail::put_le<std::uint32_t>(p + 36, detail::fnv1a(p, 36));
    return out;
}

void VerbsQp::connect(std::span<const std::byte> peer) {
    if (const QpState s = state_.load(std::memory_order_relaxed); s != QpState::init) {
        fail(Errc::invalid_state,
             "QP " + std::to_string(qp_num) + " is in state " + std::string(to_string(s)) +
                 "; connect() brings a new QP (state init) to rts once",
             connect_call);
    }
    const PeerAddress a = decode_address(peer);
    if (device_->use_gid && !a.has_gid) {
        fail(Errc::bad_descriptor,
             "the peer's address has no GID, but this side routes by GID (" +
                 std::string(device_->ethernet ? "an Ethernet port needs one" : "gid_index was given") +
                 "); open both sides alike",
             connect_call);
    }
    if (!device_->use_gid && a.has_gid) {
        fail(Errc::bad_descriptor,
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
    rts.rnr_retry = transport_.rnr_retry;
    rts.sq_psn = psn_;
    rts.max_rd_atomic = device_->max_rd_atomic;
    modify(rts,
           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
               IBV_QP_MAX_QP_RD_ATOMIC,
           "RTR->RTS", context, connect_call);
    state_.store(QpState::rts, std::memory_order_relaxed);
}

QpState VerbsQp::state() const noexcept {
    const QpState tracked = state_.load(std::memory_order_relaxed);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    if (::ibv_query_qp(qp_.get(), &attr, IBV_QP_STATE, &init) != 0) return tracked;
    const QpState now = from_ibv(attr.qp_state, tracked);
    // The device can move a QP to error without a completion saying so (an async event); follow it, so
    // that posting keeps flushing instead of being refused.
    if (now == QpState::error || now == QpState::sqe) state_.store(now, std::memory_order_relaxed);
    return now;
}

}  // namespace weft::verbs
