// Shared-receive-queue setup: creation over ibv_create_srq on the domain's PD, the QueueTable entry that
// leads its receives' completions back to it from every CQ it completes into, the limit (ibv_modify_srq),
// and destruction. Posting and completions are in verbs_datapath.cpp.
#include "verbs.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>

namespace weft::verbs {
namespace {

// Takes one of the QueueTable entries kept for shared receive queues, with a generation none of the
// queues that had it before used; returns its index (among the kept ones) and the tag.
std::uint64_t take_entry(Device& dev, std::uint32_t& entry) {
    std::lock_guard lock(dev.srq_mutex);
    if (dev.srq_generations.empty()) {
        dev.srq_generations.assign(QueueTable::srq_entries, 0);
        dev.srq_entries_taken.assign(QueueTable::srq_entries, false);
    }
    const auto it = std::find(dev.srq_entries_taken.begin(), dev.srq_entries_taken.end(), false);
    if (it == dev.srq_entries_taken.end()) {
        errors.fail(Errc::resource_exhausted,
             "a verbs domain holds at most " + std::to_string(QueueTable::srq_entries) +
                 " shared receive queues at once",
             "create_srq");
    }
    entry = static_cast<std::uint32_t>(it - dev.srq_entries_taken.begin());
    *it = true;
    auto generation = static_cast<std::uint16_t>(dev.srq_generations[entry] + 1);
    if (generation == 0) generation = 1;  // 0 never matches (QueueTable::attach)
    dev.srq_generations[entry] = generation;
    return (static_cast<std::uint64_t>(generation) << wr_generation_shift) |
           (static_cast<std::uint64_t>(QueueTable::first_srq_entry + entry) << wr_index_shift);
}

void release_entry(Device& dev, std::uint32_t entry) noexcept {
    std::lock_guard lock(dev.srq_mutex);
    dev.srq_entries_taken[entry] = false;
}

}  // namespace

VerbsSrq::VerbsSrq(std::shared_ptr<Device> device, const SrqOptions& options) : device_(std::move(device)) {
    {
        std::lock_guard lock(device_->srq_mutex);
        srq_num = ++device_->srqs_created;
    }
    ibv_srq_init_attr init{};
    // The async event of the limit names the queue by this (VerbsDomain::next_event).
    init.srq_context = reinterpret_cast<void*>(static_cast<std::uintptr_t>(srq_num));
    init.attr.max_wr = options.max_recv;
    init.attr.max_sge = options.max_sge;
    errno = 0;
    srq_.reset(::ibv_create_srq(device_->pd.get(), &init));
    if (!srq_) {
        const int err = errno != 0 ? errno : ENOMEM;
        errors.fail_errno(err,
                   "ibv_create_srq(max_wr " + std::to_string(options.max_recv) + ", max_sge " +
                       std::to_string(options.max_sge) + ") on " + device_->name + " failed",
                   "create_srq");
    }
    // ibv_create_srq wrote what the provider granted back into init.attr: at least what was asked (a
    // provider that wrote nothing back granted that).
    max_recv = std::max<std::uint32_t>(init.attr.max_wr, options.max_recv);
    max_sge = std::max<std::uint32_t>(init.attr.max_sge, options.max_sge);
    handle_ = srq_.get();
    init_data_path();
    if (options.limit != 0) {
        try {
            arm_limit(options.limit);
        } catch (...) {
            release_entry(*device_, entry_);
            throw;
        }
    }
}

VerbsSrq::VerbsSrq(Adopt, std::shared_ptr<Device> device, ibv_srq* srq, std::uint32_t max_wr, std::uint32_t max_sge_granted)
    : device_(std::move(device)), handle_(srq) {
    {
        std::lock_guard lock(device_->srq_mutex);
        srq_num = ++device_->srqs_created;
    }
    max_recv = max_wr;
    max_sge = max_sge_granted;
    init_data_path();
}

void VerbsSrq::init_data_path() {
    slot_count_ = max_recv;
    ids_ = std::make_unique<std::uint64_t[]>(slot_count_);
    busy_ = std::make_unique<std::atomic<std::uint8_t>[]>(slot_count_);
    next_free_ = std::make_unique<std::uint32_t[]>(slot_count_);
    // Every slot on the poster's stack, slot 0 on top.
    for (std::uint32_t i = 0; i < slot_count_; ++i) next_free_[i] = i + 1 < slot_count_ ? i + 1 : no_slot;
    free_top_ = 0;
    free_count_ = slot_count_;
    wrs_ = chain<ibv_recv_wr>(slot_count_, max_sge, sges_);
    wq_.srq = this;
    wq_.is_recv = true;
    wq_.tag = take_entry(*device_, entry_);
}

VerbsSrq::~VerbsSrq() {
    // The QPs that used it are gone (each held it); completions of its receives still in a CQ are then
    // dropped by poll (the entry is detached), never matched to freed slots.
    srq_.reset();
    {
        std::lock_guard lock(attach_mutex_);
        for (const std::weak_ptr<VerbsCq>& weak : cqs_) {
            if (const std::shared_ptr<VerbsCq> cq = weak.lock()) {
                cq->queues().detach_srq(wq_.tag);
                cq->release(slot_count_);
            }
        }
    }
    release_entry(*device_, entry_);
}

void VerbsSrq::attach(const std::shared_ptr<VerbsCq>& cq) {
    std::lock_guard lock(attach_mutex_);
    // Forget the CQs that were destroyed (their tables with them), and attach once per CQ.
    std::erase_if(cqs_, [](const std::weak_ptr<VerbsCq>& weak) { return weak.expired(); });
    for (const std::weak_ptr<VerbsCq>& weak : cqs_) {
        if (weak.lock() == cq) return;
    }
    cqs_.reserve(cqs_.size() + 1);
    // Its receives may all complete into this CQ: room for each (VerbsCq::reserve), once per CQ.
    cq->reserve(slot_count_, "shared receive queue " + std::to_string(srq_num));
    cq->queues().attach_srq(wq_.tag, &wq_);
    cqs_.push_back(cq);
}

void VerbsSrq::arm_limit(std::uint32_t limit) {
    ibv_srq_attr attr{};
    attr.srq_limit = limit;
    if (const int rc = ::ibv_modify_srq(handle_, &attr, IBV_SRQ_LIMIT); rc != 0) {
        errors.fail_errno(rc,
                   "ibv_modify_srq(IBV_SRQ_LIMIT " + std::to_string(limit) + ") of shared receive queue " +
                       std::to_string(srq_num) + " on " + device_->name + " failed",
                   "SharedReceiveQueue::arm_limit");
    }
}

}  // namespace weft::verbs
