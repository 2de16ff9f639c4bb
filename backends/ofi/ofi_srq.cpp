// Shared-receive-queue setup of the ofi backend: the queue over a shared receive context (fi_srx_context),
// its limit, and the registration of a QP's private receive CQ with the weft CQ that reads it. Posting and
// completions are in ofi_datapath.cpp.
//
// A receive posted to the context is taken, in posting order, by whichever endpoint's message arrives
// first; the provider reports it on that endpoint's receive CQ with the receive's context and nothing that
// names the endpoint. A QP on the queue therefore binds its receives to a provider CQ of its own (opened
// with the QP), and the weft CQ it was given as recv_cq reads those after its own: the CQ an entry comes
// from names the QP that took the receive (docs/backends/ofi.md, "Shared receive queues").
//
// Emulated, where the provider has no usable context (shm, rxm, verbs; see OfiDomain's constructor): the
// queue is weft's own list of posted receives. Each QP on it keeps a few bounce buffers of its own posted
// at its endpoint, all completing on one provider CQ of the queue, so that its entries come in arrival
// order whichever QP a message came to. The receive CQs of the QPs read it (OfiSrq::pump, in
// ofi_datapath.cpp): each message that arrived takes the oldest posted receive, is copied into it, and its
// bounce goes back to the endpoint; with no receive posted the message waits in its bounce, and further
// messages wait at the provider once a QP's bounces are all full.
#include "ofi.hpp"

#include <algorithm>
#include <string>

namespace weft::ofi {

OfiSrq::OfiSrq(std::shared_ptr<OfiDomain> dom, const SrqOptions& options) : dom_(std::move(dom)) {
    static std::atomic<std::uint32_t> next_srq_num{1};
    srq_num = next_srq_num.fetch_add(1, std::memory_order_relaxed);
    max_recv = options.max_recv;
    max_sge = options.max_sge;
    emulated_ = dom_->profile().srq_emulated;
    if (emulated_) {
        // Sized for the bounces of many QPs; the providers' CQs keep what overflows.
        fi_cq_attr attr{};
        attr.size = 1024;
        attr.format = FI_CQ_FORMAT_DATA;
        attr.wait_obj = FI_WAIT_NONE;
        fid_cq* cq = nullptr;
        check(fi_cq_open(dom_->domain(), &attr, &cq, nullptr), "fi_cq_open", "create_srq", "the queue's bounce CQ");
        bounce_cq_.reset(cq);
        // Matched completions wait here until their CQ's consumer takes them; matching pauses while it is full.
        done_.reserve(std::max<std::size_t>(64, static_cast<std::size_t>(max_recv) * 2));
    } else {
        fi_rx_attr attr = *dom_->info()->rx_attr;
        attr.size = std::max<std::size_t>(attr.size, options.max_recv);
        attr.iov_limit = std::max<std::size_t>(1, options.max_sge);
        fid_ep* srx = nullptr;
        check(fi_srx_context(dom_->domain(), &attr, &srx, this), "fi_srx_context", "create_srq",
              "max_recv " + std::to_string(options.max_recv) + ", max_sge " + std::to_string(options.max_sge));
        srx_.reset(srx);
    }
    entries_ = std::make_unique<SrqEntry[]>(max_recv);
    iovs_ = std::make_unique<iovec[]>(static_cast<std::size_t>(max_recv) * max_sge);
    descs_ = std::make_unique<void*[]>(static_cast<std::size_t>(max_recv) * max_sge);
    for (std::uint32_t i = 0; i < max_recv; ++i) {
        SrqEntry& e = entries_[i];
        e.iov = &iovs_[static_cast<std::size_t>(i) * max_sge];
        e.desc = &descs_[static_cast<std::size_t>(i) * max_sge];
        e.next_free = i + 1 < max_recv ? i + 1 : no_entry;
    }
    free_top_ = 0;
    if (options.limit != 0) arm_limit(options.limit);
}

OfiSrq::~OfiSrq() {
    // Every QP on the queue is gone (each held it) and its private CQ was read to the end: the receives
    // still posted are dropped with the context, as ibv_destroy_srq drops them. Emulated: each QP's
    // endpoint closed and its CQ took the completions it had (OfiCq::remove_srq_reader).
    srx_.reset();
    bounce_cq_.reset();
}

// The core has checked limit <= max_recv. The count is taken when a receive comes back from the provider.
void OfiSrq::arm_limit(std::uint32_t limit) {
    std::lock_guard lock(mu_);
    limit_ = limit;
}

std::shared_ptr<detail::SrqImpl> OfiDomain::create_srq(const SrqOptions& options) {
    if (!caps.has(Feature::srq)) {
        throw Error(Errc::not_supported,
                    "provider '" + profile_.provider + "' has no shared receive queues (no Feature::srq) "
                    "(docs/backends/ofi.md, \"Shared receive queues\"); post receives to each QP",
                    backend_name, "Domain::create_srq");
    }
    return std::make_shared<OfiSrq>(std::static_pointer_cast<OfiDomain>(shared_from_this()), options);
}

// Whether this CQ's descriptor becomes readable when `qp`'s private CQ gets an entry. tcp adds the
// endpoint's socket to the wait objects of both CQs it is bound to, so a QP that sends on this CQ wakes it.
// sockets signals only the CQ that gets the entry. Otherwise wait() looks in slices, and in fd() mode the
// service thread reads the private CQs in its rounds (OfiCq::service_round).
bool OfiCq::srq_wakes(const OfiQp& qp) const noexcept {
    return wait_fd_ >= 0 && profile_->provider == "tcp" && qp.cqs()[0].get() == this;
}

void OfiCq::add_srq_reader(OfiQp* qp) {
    std::lock_guard lock(srq_mu_);
    // Room for a full CQ's worth of receive completions read ahead of the application's polls.
    const std::size_t want = std::max<std::size_t>(64, static_cast<std::size_t>(depth_) * 2);
    if (srq_done_.capacity() < want) srq_done_.reserve(want);
    srq_readers_.reserve(srq_readers_.size() + 1);
    srq_readers_.push_back(qp);
    detours_.fetch_or(detour_srq, std::memory_order_release);
    srq_readers_n_.fetch_add(1, std::memory_order_acq_rel);
    if (!srq_wakes(*qp)) srq_unwoken_.fetch_add(1, std::memory_order_acq_rel);
}

void OfiCq::remove_srq_reader(OfiQp* qp) noexcept {
    std::lock_guard lock(srq_mu_);
    const auto it = std::find(srq_readers_.begin(), srq_readers_.end(), qp);
    if (it == srq_readers_.end()) return;
    read_srq_cq(*qp, true);
    srq_readers_.erase(it);
    srq_readers_n_.fetch_sub(1, std::memory_order_acq_rel);
    if (!srq_wakes(*qp)) srq_unwoken_.fetch_sub(1, std::memory_order_acq_rel);
    srq_pending_.store(srq_head_ != srq_done_.size(), std::memory_order_release);
}

}  // namespace weft::ofi
