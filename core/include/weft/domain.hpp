// weft/domain.hpp — opening a backend and the objects it creates.
//
//   auto dom = weft::open();                                  // $WEFT_BACKEND, or "sim"
//   auto cq  = dom.create_cq({.depth = 256});
//   auto qp  = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 128, .max_recv = 128});
//   auto mr  = dom.register_memory(buffer, weft::Access::local_write | weft::Access::remote_write);
//   exchange(qp.address(), mr.remote().encode());             // any out-of-band channel
//   qp.connect(peer_address);
//   weft::Completion wc[16];
//   for (auto& c : cq.poll(wc)) handle(c);
//
// Handles are move-only; destroying one releases what it holds. A child keeps what it depends on alive:
// a QueuePair keeps its CQs and its Domain, a MemoryRegion keeps its Domain.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weft/completion.hpp>
#include <weft/config.hpp>
#include <weft/memory.hpp>
#include <weft/request.hpp>
#include <weft/status.hpp>
#include <weft/types.hpp>

namespace weft {

namespace detail {
class DomainImpl;
class CqImpl;
class QpImpl;
}  // namespace detail

/// Optional features a backend may lack. The conformance suite skips, visibly, on missing ones.
enum class Feature : std::uint32_t {
    send_with_imm = 1u << 0,
    write_with_imm = 1u << 1,
    read = 1u << 2,
    atomics = 1u << 3,      ///< fetch_add and compare_swap
    fence = 1u << 4,
    inline_data = 1u << 5,
    solicited = 1u << 6,
    wait = 1u << 7,         ///< CompletionQueue::wait blocks until a completion
    cq_fd = 1u << 8,        ///< CompletionQueue::fd gives a pollable descriptor
    rnr = 1u << 9,          ///< receiver-not-ready retries with rnr_retry (RC transport)
    error_flush = 1u << 10, ///< a QP in error flushes outstanding and later requests
    remote_access_check = 1u << 11,  ///< bad rkey/bounds/rights produce remote_access errors
    zero_length = 1u << 12, ///< zero-length sends, writes and reads
    listener = 1u << 13,    ///< weft::listen / weft::connect by host:port (weft/listener.hpp)
};
constexpr Feature operator|(Feature a, Feature b) noexcept {
    return static_cast<Feature>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
std::string_view to_string(Feature f) noexcept;

/// What a domain can do; fixed when the domain is opened.
struct Capabilities {
    BackendKind kind = BackendKind::sim;
    std::string backend;            ///< "sim", "verbs", "ofi"
    std::string device;             ///< device, provider or fabric name
    /// Which stack's documented deviations from the specification apply ("spec", "rxe", ...); see
    /// docs/semantics.md. The simulator takes it from its `profile` key.
    std::string profile = "spec";
    std::uint32_t features = 0;     ///< Feature bits
    std::uint32_t max_qp_wr = 0;    ///< largest max_send / max_recv
    std::uint32_t max_sge = 0;
    std::uint32_t max_inline = 0;
    std::uint32_t max_cqe = 0;
    std::uint64_t max_msg_size = 0;
    std::uint64_t max_mr_size = 0;

    bool has(Feature f) const noexcept { return (features & static_cast<std::uint32_t>(f)) != 0; }
    /// Whether request opcode `op` is supported at all.
    bool supports(Opcode op) const noexcept;
};

class CompletionQueue;

/// Refers to a CompletionQueue in QpOptions without copying it.
class CqRef {
public:
    CqRef() noexcept = default;
    CqRef(CompletionQueue& cq) noexcept : cq_(&cq) {}  // NOLINT(google-explicit-constructor): reads naturally
    CompletionQueue* get() const noexcept { return cq_; }

private:
    CompletionQueue* cq_ = nullptr;
};

struct CqOptions {
    std::uint32_t depth = 256;  ///< completions the queue holds; the backend may round up
};

/// RC queue-pair options. Transport attributes carry their verbs meanings (IB spec encodings).
struct QpOptions {
    CqRef send_cq;
    CqRef recv_cq;
    std::uint32_t max_send = 128;
    std::uint32_t max_recv = 128;
    std::uint32_t max_sge = 1;          ///< per request, send and receive
    std::uint32_t max_inline = 0;       ///< bytes of inline payload per send request
    std::uint8_t timeout = 14;          ///< local ACK timeout: 4.096 us * 2^timeout (0 = infinite)
    std::uint8_t retry_cnt = 7;         ///< transport retries before transport_retry_exceeded (0..7)
    std::uint8_t rnr_retry = 7;         ///< RNR retries before rnr_retry_exceeded (0..7; 7 = forever)
    std::uint8_t min_rnr_timer = 12;    ///< RNR NAK delay this QP asks of its peer (IB encoding 0..31)
};

/// The limits a created QP really got (backends may grant more than asked).
struct QpCaps {
    std::uint32_t max_send = 0;
    std::uint32_t max_recv = 0;
    std::uint32_t max_sge = 0;
    std::uint32_t max_inline = 0;
};

class CompletionQueue {
public:
    CompletionQueue() noexcept;
    explicit CompletionQueue(std::shared_ptr<detail::CqImpl> impl) noexcept;
    CompletionQueue(CompletionQueue&&) noexcept;
    CompletionQueue& operator=(CompletionQueue&&) noexcept;
    ~CompletionQueue();

    explicit operator bool() const noexcept { return impl_ != nullptr; }

    /// Fills a prefix of `out` with completions and returns it; empty when there are none. Never blocks,
    /// throws or allocates. On the simulator, polling an empty queue advances virtual time.
    std::span<Completion> poll(std::span<Completion> out) noexcept;

    /// Blocks until a completion is ready (true) or `timeout` passes (false). Needs Feature::wait.
    bool wait(std::chrono::nanoseconds timeout);
    /// A descriptor that becomes readable when poll() may return completions (for epoll); -1 without
    /// Feature::cq_fd. After it fires, poll until empty, then wait on it again.
    int fd() const;

    std::uint32_t depth() const noexcept;
    detail::CqImpl* impl() const noexcept { return impl_.get(); }
    const std::shared_ptr<detail::CqImpl>& shared_impl() const noexcept { return impl_; }

private:
    std::shared_ptr<detail::CqImpl> impl_;
};

class QueuePair {
public:
    QueuePair() noexcept;
    explicit QueuePair(std::unique_ptr<detail::QpImpl> impl) noexcept;
    QueuePair(QueuePair&&) noexcept;
    QueuePair& operator=(QueuePair&&) noexcept;
    ~QueuePair();

    explicit operator bool() const noexcept { return impl_ != nullptr; }

    /// Bytes to hand to the peer, which passes them to its connect().
    std::vector<std::byte> address() const;
    /// Connects to the peer QP whose address() is `peer` and makes this QP ready to send (RTS). Throws
    /// weft::Error on malformed bytes, a peer of another backend or fabric, or a QP already connected.
    void connect(std::span<const std::byte> peer);

    /// Posts a batch to the send queue: one call into the backend, no allocation, no exception.
    PostStatus post_send(std::span<const SendRequest> batch) noexcept;
    PostStatus post_send(std::initializer_list<SendRequest> batch) noexcept {
        return post_send(std::span<const SendRequest>(batch.begin(), batch.size()));
    }
    /// Posts a batch to the receive queue. Allowed before connect().
    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept;
    PostStatus post_recv(std::initializer_list<RecvRequest> batch) noexcept {
        return post_recv(std::span<const RecvRequest>(batch.begin(), batch.size()));
    }

    QpState state() const noexcept;
    std::uint32_t qp_num() const noexcept;
    const QpCaps& caps() const noexcept;
    detail::QpImpl* impl() const noexcept { return impl_.get(); }

private:
    std::unique_ptr<detail::QpImpl> impl_;
};

class Domain {
public:
    Domain() noexcept;
    explicit Domain(std::shared_ptr<detail::DomainImpl> impl) noexcept;
    Domain(Domain&&) noexcept;
    Domain& operator=(Domain&&) noexcept;
    ~Domain();

    explicit operator bool() const noexcept { return impl_ != nullptr; }

    /// Registers `memory` with `access`. Throws weft::Error when the backend refuses (size, rights,
    /// resources). The bytes must outlive the region.
    MemoryRegion register_memory(std::span<std::byte> memory, Access access);
    MemoryRegion register_memory(void* addr, std::size_t length, Access access);

    CompletionQueue create_cq(const CqOptions& options = {});
    /// Throws weft::Error when a CQ is missing or a limit exceeds the capabilities (naming the limit).
    QueuePair create_qp(const QpOptions& options);

    const Capabilities& capabilities() const noexcept;
    /// The configuration this domain was opened with.
    const Config& config() const noexcept;
    detail::DomainImpl* impl() const noexcept { return impl_.get(); }
    const std::shared_ptr<detail::DomainImpl>& shared_impl() const noexcept { return impl_; }

private:
    std::shared_ptr<detail::DomainImpl> impl_;
};

/// Opens the backend named by `config` (see weft/config.hpp). Throws weft::Error for an unknown backend
/// or key, a bad value, or a backend unusable here (saying why).
Domain open(std::string_view config);
/// Opens $WEFT_BACKEND, or "sim" when it is unset or empty.
Domain open();
/// The configuration open() would use: $WEFT_BACKEND, or "sim".
std::string default_config();

/// A backend known to this build, and whether it can run here.
struct BackendInfo {
    std::string name;
    std::string summary;
    bool usable = false;
    std::string reason;           ///< why not, when unusable
    std::string module;           ///< the plugin file it comes from; empty for built-ins
    std::vector<KeySpec> keys;    ///< accepted configuration keys (empty when the plugin did not load)
};
std::vector<BackendInfo> backends();

}  // namespace weft
