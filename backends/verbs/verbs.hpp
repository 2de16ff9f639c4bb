// Private to the verbs plugin: the classes behind Domain, MemoryRegion, CompletionQueue and QueuePair on
// rdma-core, the RAII owners of its C handles, and the bookkeeping shared by setup and data path.
//
// Setup lives in verbs_domain.cpp (device, port, GID, capabilities, plugin record), verbs_cq.cpp
// (completion queue, channel, wait), verbs_qp.cpp (QP creation, address, connect) and verbs_cm.cpp
// (listen/connect by host:port over rdma_cm); the data path (post_send, post_recv, poll) lives in
// verbs_datapath.cpp.
#pragma once

#include <weft/backend.hpp>
#include <weft/error.hpp>

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace weft::verbs {

inline constexpr std::string_view backend_name = "verbs";

[[noreturn]] void fail_errno(int err, std::string message, std::string_view call);
[[noreturn]] void fail(Errc code, std::string message, std::string_view call);

// ---- RAII owners of rdma-core handles. Destroy failures cannot be reported from a destructor; rdma-core
// only fails them for handles still in use, which the ownership graph below rules out.

struct CloseContext {
    void operator()(ibv_context* c) const noexcept { ::ibv_close_device(c); }
};
struct DeallocPd {
    void operator()(ibv_pd* p) const noexcept { ::ibv_dealloc_pd(p); }
};
struct DeregMr {
    void operator()(ibv_mr* m) const noexcept { ::ibv_dereg_mr(m); }
};
struct DestroyCq {
    void operator()(ibv_cq* c) const noexcept { ::ibv_destroy_cq(c); }
};
struct DestroyChannel {
    void operator()(ibv_comp_channel* c) const noexcept { ::ibv_destroy_comp_channel(c); }
};
struct DestroyQp {
    void operator()(ibv_qp* q) const noexcept { ::ibv_destroy_qp(q); }
};
struct FreeDeviceList {
    void operator()(ibv_device** l) const noexcept { ::ibv_free_device_list(l); }
};

using ContextPtr = std::unique_ptr<ibv_context, CloseContext>;
using PdPtr = std::unique_ptr<ibv_pd, DeallocPd>;
using MrPtr = std::unique_ptr<ibv_mr, DeregMr>;
using CqPtr = std::unique_ptr<ibv_cq, DestroyCq>;
using ChannelPtr = std::unique_ptr<ibv_comp_channel, DestroyChannel>;
using QpPtr = std::unique_ptr<ibv_qp, DestroyQp>;
using DeviceListPtr = std::unique_ptr<ibv_device*[], FreeDeviceList>;

// The opened device and the port, GID and limits chosen at open. Every object made from a domain holds
// a shared_ptr to it, so the context and PD outlive the last MR, CQ and QP.
struct Device {
    // Declared before `pd` so that the PD is released first.
    ContextPtr context;
    PdPtr pd;

    std::string name;
    std::uint8_t port = 1;
    bool ethernet = false;          // RoCE: addressing needs a GID
    bool use_gid = false;           // a GRH goes on every packet (always on Ethernet, on IB if asked)
    int gid_index = -1;
    ibv_gid gid{};
    std::uint16_t lid = 0;
    ibv_mtu mtu = IBV_MTU_1024;
    std::optional<std::uint32_t> fixed_psn;
    std::uint8_t max_rd_atomic = 0;       // reads/atomics this side may have in flight (initiator depth)
    std::uint8_t max_dest_rd_atomic = 0;  // reads/atomics this side serves at once (responder resources)
    std::uint32_t max_sge_rd = 0;         // gather entries of an RDMA read, when the device says
    Capabilities caps;
};

// ---- Work-queue bookkeeping

// weft's view of one work queue of a QP (its send queue or its receive queue): a ring of slots, one
// per posted work request, holding the user's id and opcode. The request in slot i is posted with
// wr_id = tag | i; `tag` names the entry of the CQ's QueueTable that leads back here, so a completion
// finds its slot without a search.
//
// A send completion for slot k also retires every older slot: unsignaled requests before it are done
// (verbs reports send-queue completions in order). Occupancy is counted here, not left to the
// provider, so a batch that does not fit is refused whole before anything is posted.
//
// One thread posts (head), one thread polls the CQ (tail); they may be different threads.
struct WorkQueue {
    struct Slot {
        std::uint64_t id = 0;
        Opcode opcode = Opcode::send;
    };

    std::unique_ptr<Slot[]> slots;
    std::uint32_t capacity = 0;
    std::uint32_t head = 0;  // next slot to fill; poster only
    std::uint32_t tail = 0;  // oldest outstanding slot; poller only
    std::atomic<std::uint32_t> used{0};
    std::uint64_t tag = 0;
    std::uint32_t qp_num = 0;
    bool is_recv = false;
    std::atomic<QpState>* state = nullptr;  // the owning QP's tracked state; the poller sets `error`
    ibv_qp* qp = nullptr;

    std::uint32_t free_slots() const noexcept { return capacity - used.load(std::memory_order_acquire); }
    // Retires slot `k` and every older one; returns false when `k` is not outstanding.
    bool retire_through(std::uint32_t k) noexcept;
};

// wr_id layout: bits 63..48 generation, 47..32 QueueTable index, 31..0 slot.
inline constexpr unsigned wr_index_shift = 32;
inline constexpr unsigned wr_generation_shift = 48;

// Per-CQ table of the work queues that complete into it. Entries are attached and detached at setup
// (QP creation and destruction) under a mutex; poll reads them without locking. Storage comes in
// chunks that never move, so attaching a QP does not disturb a concurrent poll of other QPs. A
// generation in every wr_id makes completions of a destroyed QP (its flushed requests, which the
// provider may leave in the CQ) recognisable, so poll drops them instead of touching freed memory.
class QueueTable {
public:
    QueueTable() = default;
    QueueTable(const QueueTable&) = delete;
    QueueTable& operator=(const QueueTable&) = delete;

    // Returns the tag (index and generation in wr_id position) that leads back to `wq`.
    std::uint64_t attach(WorkQueue* wq);
    void detach(std::uint64_t tag) noexcept;
    // The work queue a wr_id belongs to, or null for one of a detached queue.
    WorkQueue* find(std::uint64_t wr_id) const noexcept;

private:
    static constexpr std::uint32_t chunk_size = 256;
    static constexpr std::uint32_t chunk_count = 256;
    static_assert(chunk_size * chunk_count <= (1u << (wr_generation_shift - wr_index_shift)),
                  "table indices must fit between the slot and the generation bits of wr_id");

    struct Entry {
        std::atomic<WorkQueue*> wq{nullptr};
        std::atomic<std::uint16_t> generation{0};
    };

    std::array<std::atomic<Entry*>, chunk_count> chunks_{};
    std::array<std::unique_ptr<Entry[]>, chunk_count> storage_{};
    std::mutex mutex_;
    std::vector<std::uint32_t> free_;
    std::uint32_t next_ = 0;
};

// ---- The backend objects

class VerbsMr final : public detail::MrImpl {
public:
    VerbsMr(std::shared_ptr<Device> device, MrPtr mr, Access access);

private:
    std::shared_ptr<Device> device_;
    MrPtr mr_;
};

class VerbsCq final : public detail::CqImpl {
public:
    VerbsCq(std::shared_ptr<Device> device, std::uint32_t depth);

    std::size_t poll(std::span<Completion> out) noexcept override;
    bool wait(std::chrono::nanoseconds timeout) override;
    int fd() override;
    std::uint32_t depth() const noexcept override;

    ibv_cq* handle() const noexcept { return cq_.get(); }
    const Device& device() const noexcept { return *device_; }
    QueueTable& queues() noexcept { return queues_; }

private:
    // Polls the provider's CQ into `out`, translating each work completion; returns how many.
    std::size_t drain(std::span<Completion> out) noexcept;
    // Translates one work completion and retires its slots; false for one of a detached queue.
    bool translate(const ibv_wc& wc, Completion& out) noexcept;
    // Completions taken while wait() checked the queue, handed out first by the next poll.
    std::size_t take_held(std::span<Completion> out) noexcept;
    // Reads and acknowledges every pending channel event without blocking.
    void consume_events() noexcept;
    int arm() noexcept;

    std::shared_ptr<Device> device_;
    ChannelPtr channel_;  // declared before cq_: the CQ goes first
    CqPtr cq_;
    QueueTable queues_;
    std::array<Completion, 8> held_{};
    std::uint32_t held_begin_ = 0;
    std::uint32_t held_count_ = 0;
    bool fd_mode_ = false;  // fd() was asked for: an emptied poll re-arms the channel
};

// The transport attributes connect() needs, kept from QpOptions (whose CQ references do not outlive
// create_qp).
struct TransportOptions {
    std::uint8_t timeout = 14;
    std::uint8_t retry_cnt = 7;
    std::uint8_t rnr_retry = 7;
    std::uint8_t min_rnr_timer = 12;
};

class VerbsQp final : public detail::QpImpl {
public:
    VerbsQp(std::shared_ptr<Device> device, const detail::QpSetup& setup);
    ~VerbsQp() override;

    PostStatus post_send(std::span<const SendRequest> batch) noexcept override;
    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept override;
    std::vector<std::byte> address() const override;
    void connect(std::span<const std::byte> peer) override;
    QpState state() const noexcept override;

private:
    void modify(ibv_qp_attr& attr, int mask, const char* transition, const std::string& context,
                std::string_view call);

    std::shared_ptr<Device> device_;
    std::shared_ptr<VerbsCq> send_cq_;  // declared before qp_: the QP goes first
    std::shared_ptr<VerbsCq> recv_cq_;
    QpPtr qp_;
    TransportOptions transport_;
    std::uint32_t psn_ = 0;
    mutable std::atomic<QpState> state_{QpState::reset};

    WorkQueue sq_;
    WorkQueue rq_;
    // Work requests are built here, never on the heap per call: capacity x max_sge entries.
    std::unique_ptr<ibv_send_wr[]> send_wrs_;
    std::unique_ptr<ibv_sge[]> send_sges_;
    std::unique_ptr<ibv_recv_wr[]> recv_wrs_;
    std::unique_ptr<ibv_sge[]> recv_sges_;
    std::uint32_t send_sge_stride_ = 0;
    std::uint32_t recv_sge_stride_ = 0;
};

class VerbsDomain final : public detail::DomainImpl {
public:
    explicit VerbsDomain(std::shared_ptr<Device> device);

    std::unique_ptr<detail::MrImpl> register_memory(void* addr, std::size_t length, Access access) override;
    std::shared_ptr<detail::CqImpl> create_cq(const CqOptions& options) override;
    std::unique_ptr<detail::QpImpl> create_qp(const detail::QpSetup& setup) override;
    // host:port through rdma_cm (verbs_cm.cpp)
    std::unique_ptr<detail::ListenerImpl> listen(const detail::HostPort& where) override;
    void connect_to(detail::QpImpl& qp, const detail::HostPort& where, std::chrono::milliseconds timeout) override;

private:
    std::shared_ptr<Device> device_;
};

// ---- Helpers shared by the setup files

// "fe80::1" style text of a GID, for messages.
std::string gid_text(const ibv_gid& gid);
// 256..4096, or 0 for an unknown enum value.
std::uint32_t mtu_bytes(ibv_mtu mtu) noexcept;
// Whether rdma_cm can be used here (its device node opens): Feature::listener (verbs_cm.cpp).
bool rdma_cm_usable() noexcept;

}  // namespace weft::verbs
