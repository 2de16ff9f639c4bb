// Simulated queue pairs, setup side: creation, addresses, connection and state.
//
// Address (24 bytes, little-endian): magic "wfSQ", version 1, backend kind 1 (sim), 2 reserved bytes,
// fabric instance id (u64), node (u32), QP number (u32).
#include "sim.hpp"

#include <weft/detail/bytes.hpp>
#include <weft/detail/wire.hpp>
#include <weft/error.hpp>

#include <algorithm>
#include <bit>
#include <cstring>

namespace weft::sim::detail {
namespace {

constexpr std::size_t address_size = 24;
constexpr std::byte address_magic[4] = {std::byte{'w'}, std::byte{'f'}, std::byte{'S'}, std::byte{'Q'}};

constexpr weft::detail::WireContext address_context{"malformed sim QP address", "sim", "QueuePair::connect"};

[[noreturn]] void bad_address(const std::string& why) { weft::detail::throw_bad_wire(address_context, why); }

}  // namespace

SimQp::SimQp(std::shared_ptr<SimDomain> domain, const weft::detail::QpSetup& setup)
    : domain_(std::move(domain)),
      fabric_(*domain_->fabric()),
      sq_(std::bit_ceil(std::max<std::size_t>(setup.options.max_send, 1))),
      sq_sge_(sq_.size() * setup.options.max_sge),
      sq_mask_(static_cast<std::uint32_t>(sq_.size() - 1)),
      max_sge_(setup.options.max_sge),
      send_cq_(std::static_pointer_cast<SimCq>(setup.send_cq)),
      recv_cq_(std::static_pointer_cast<SimCq>(setup.recv_cq)),
      srq_(std::static_pointer_cast<SimSrq>(setup.srq)),
      rq_stride_(srq_ ? srq_->max_sge : setup.options.max_sge),
      // With a shared receive queue a QP holds only the receives of the message landing (one at a time).
      rq_(srq_ ? 4 : std::bit_ceil(std::max<std::size_t>(setup.options.max_recv, 1))),
      rq_sge_(rq_.size() * rq_stride_),
      options_(setup.options),
      max_inline_(setup.options.max_inline),
      sq_inline_(sq_.size() * setup.options.max_inline),
      sq_operands_(sq_.size()) {
    ack_timeout_ = ack_timeout_ns(options_.timeout);
    min_rnr_timer_ = options_.min_rnr_timer;
    caps.max_send = setup.options.max_send;
    caps.max_recv = srq_ ? 0 : setup.options.max_recv;
    caps.max_sge = max_sge_;
    caps.max_inline = max_inline_;
    std::lock_guard lock(fabric_.mu);
    qp_num = fabric_.add_qp(this, {sq_.data(), sq_sge_.data(), static_cast<std::uint32_t>(sq_.size() - 1), max_sge_});
}

SimQp::~SimQp() {
    std::lock_guard lock(fabric_.mu);
    // A crashed node completes nothing: its program can only tear its QPs down with their sends in flight.
    if (state_ == QpState::rts && sq_ring_.completed < sq_ring_.posted && !fabric_.node_crashed(domain_->node())) {
        fabric_.report_misuse("QP " + std::to_string(qp_num) + " was destroyed with " +
                              std::to_string(sq_ring_.posted - sq_ring_.completed) +
                              " send request(s) still in flight; their completions are lost (poll until the "
                              "last signaled request completes, or move the QP to error first)");
    }
    fabric_.remove_qp(qp_num);
}

std::string SimQp::references(std::uint32_t lkey) const {
    std::string out;
    auto uses = [&](std::span<const LocalSegment> segs) {
        return std::any_of(segs.begin(), segs.end(), [&](const LocalSegment& s) { return s.length && s.lkey == lkey; });
    };
    for (std::uint64_t i = sq_ring_.completed; i < sq_ring_.posted; ++i) {
        const SqEntry& e = sq_at(i);
        if (has(e.flags, SendFlags::inline_data) || !uses(sq_sges(i))) continue;
        out += " send request id=" + std::to_string(e.id) + " (" + std::string(to_string(e.opcode)) + ") on QP " +
               std::to_string(qp_num) + ";";
    }
    // Posted receives are reported when a message arrives into one (a program may tear down a region
    // before the QP that has receives posted on it, and nothing goes wrong unless a message comes).
    if (inbound_.active && inbound_.consumes_recv && uses(rq_sges(inbound_.rq))) {
        out += " receive id=" + std::to_string(rq_at(inbound_.rq).id) + " (a message is landing in it) on QP " +
               std::to_string(qp_num) + ";";
    }
    return out;
}

std::vector<std::byte> SimQp::address() const {
    std::vector<std::byte> out(address_size);
    std::memcpy(out.data(), address_magic, 4);
    out[4] = std::byte{1};
    out[5] = static_cast<std::byte>(BackendKind::sim);
    weft::detail::put_le<std::uint64_t>(out.data() + 8, fabric_.id);
    weft::detail::put_le<std::uint32_t>(out.data() + 16, domain_->node());
    weft::detail::put_le<std::uint32_t>(out.data() + 20, qp_num);
    return out;
}

void SimQp::connect(std::span<const std::byte> peer) {
    const weft::detail::WireReader r(peer, address_context);
    r.expect_size(address_size);
    r.expect_magic(address_magic, "not a sim QP address (bad magic); addresses of other backends do not mix");
    r.expect_version(4, 1);
    if (r.at<std::uint8_t>(5, "backend kind") != static_cast<std::uint8_t>(BackendKind::sim)) {
        r.fail("backend kind " + std::to_string(r.at<std::uint8_t>(5, "backend kind")) + " is not the simulator's");
    }
    r.expect_zero(6, 2);
    const auto fabric_id = r.at<std::uint64_t>(8, "fabric id");
    const auto peer_node = r.at<std::uint32_t>(16, "node");
    const auto peer_qpn = r.at<std::uint32_t>(20, "QP number");

    std::lock_guard lock(fabric_.mu);
    if (fabric_id != fabric_.id) {
        bad_address("the peer QP lives on another simulated fabric; open both domains with the same fabric=" +
                    fabric_.params.name);
    }
    const SimQp* target = fabric_.find_qp(peer_qpn);
    if (!target) {
        bad_address("no QP " + std::to_string(peer_qpn) + " on fabric '" + fabric_.params.name +
                    "' (destroyed?)");
    }
    if (target->domain_->node() != peer_node) {
        bad_address("QP " + std::to_string(peer_qpn) + " of fabric '" + fabric_.params.name + "' is on node " +
                    std::to_string(target->domain_->node()) + ", the address says node " +
                    std::to_string(peer_node) + " (a corrupted or forged address)");
    }
    if (state_ != QpState::init) {
        errors.fail(Errc::invalid_state,
                    "QP " + std::to_string(qp_num) + " is in state " + std::string(to_string(state_)) +
                        "; connect needs a fresh QP (init)",
                    "QueuePair::connect");
    }
    remote_qpn_ = peer_qpn;
    if (fabric_.reorders(reorder_qp_paths)) {
        // A hash of the seed and the QP number, not a draw from the fabric's generator: the choices the
        // seed makes elsewhere stay as they were.
        std::uint64_t h = (fabric_.params.seed + 0x9e3779b97f4a7c15ull) ^ (std::uint64_t{qp_num} * 0xbf58476d1ce4e5b9ull);
        h = (h ^ (h >> 31)) * 0x94d049bb133111ebull;
        path_ns_ = (h ^ (h >> 29)) % (fabric_.params.latency_ns + 1);
    }
    tx_delay_ = fabric_.params.latency_ns + (fabric_.reorders(reorder_qp_paths) ? path_ns_ : 0);
    // The two programs exchanged addresses to get here: what either did before is done before the
    // other's first message can arrive.
    fabric_.join_programs(domain_->node(), peer_node);
    state_ = QpState::rts;
}

QpState SimQp::state() const noexcept {
    std::lock_guard lock(fabric_.mu);
    return state_;
}

}  // namespace weft::sim::detail
