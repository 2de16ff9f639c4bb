// The user-facing handles: thin, move-only owners that forward to the backend's implementation. Their
// data-path calls (poll, post_send, post_recv) are inline in weft/domain.hpp.
#include <weft/backend.hpp>
#include <weft/detail/options.hpp>
#include <weft/domain.hpp>
#include <weft/error.hpp>
#include <weft/log.hpp>

#include "locked.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

namespace weft {
namespace {

[[noreturn]] void empty_handle(const char* call) {
    throw Error(Errc::invalid_state, "the handle is empty (default-constructed or moved from)", {}, call);
}

// Refuses a range that is not wholly mapped in this process, as a device that pins pages does (EFAULT), so
// no backend accepts memory a peer's write would then land in or crash on. msync checks the mappings that
// cover the range and fails with ENOMEM on a hole; MS_ASYNC writes nothing back.
void require_mapped(void* addr, std::size_t length, std::string_view backend) {
    static const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto start = reinterpret_cast<std::uintptr_t>(addr);
    const std::uintptr_t first = start & ~(page - 1);
    char where[64];
    std::snprintf(where, sizeof where, "%zu bytes at %p", length, addr);
    if (start + length < start) {
        throw_errno(EFAULT, std::string(where) + " wrap around the address space", backend, "register_memory");
    }
    if (::msync(reinterpret_cast<void*>(first), start + length - first, MS_ASYNC) != 0 && errno == ENOMEM) {
        throw_errno(EFAULT,
                    std::string("the ") + where + " are not all mapped in this process; register memory the program owns",
                    backend, "register_memory");
    }
}

}  // namespace

// ---- CompletionQueue

CompletionQueue::CompletionQueue() noexcept = default;
CompletionQueue::CompletionQueue(std::shared_ptr<detail::CqImpl> impl) noexcept : impl_(std::move(impl)) {}
CompletionQueue::CompletionQueue(CompletionQueue&&) noexcept = default;
CompletionQueue& CompletionQueue::operator=(CompletionQueue&&) noexcept = default;
CompletionQueue::~CompletionQueue() = default;

bool CompletionQueue::wait(std::chrono::nanoseconds timeout) {
    if (!impl_) empty_handle("CompletionQueue::wait");
    return impl_->wait(timeout);
}

int CompletionQueue::fd() const {
    if (!impl_) empty_handle("CompletionQueue::fd");
    return impl_->fd();
}

std::uint32_t CompletionQueue::depth() const noexcept { return impl_ ? impl_->depth() : 0; }

std::uint32_t CompletionQueue::cq_num() const noexcept { return impl_ ? impl_->cq_num : 0; }

// ---- QueuePair

QueuePair::QueuePair() noexcept = default;
QueuePair::QueuePair(std::unique_ptr<detail::QpImpl> impl) noexcept : impl_(std::move(impl)) {}
QueuePair::QueuePair(QueuePair&&) noexcept = default;
QueuePair& QueuePair::operator=(QueuePair&&) noexcept = default;
QueuePair::~QueuePair() = default;

std::vector<std::byte> QueuePair::address() const {
    if (!impl_) empty_handle("QueuePair::address");
    return impl_->address();
}

void QueuePair::connect(std::span<const std::byte> peer) {
    if (!impl_) empty_handle("QueuePair::connect");
    impl_->connect(peer);
    WEFT_LOGF(core, debug, "QP %u connected (%zu address bytes from the peer), state %s", impl_->qp_num,
              peer.size(), std::string(to_string(impl_->state())).c_str());
}

void QueuePair::disconnect() {
    if (!impl_) empty_handle("QueuePair::disconnect");
    const std::string& backend = impl_->domain ? impl_->domain->caps.backend : std::string();
    if (const QpState s = impl_->state(); s == QpState::init || s == QpState::reset) {
        throw Error(Errc::invalid_state,
                    "QP " + std::to_string(impl_->qp_num) + " is in state " + std::string(to_string(s)) +
                        "; only a connected QP can be disconnected (destroy it instead)",
                    backend, "QueuePair::disconnect");
    }
    impl_->disconnect();
    WEFT_LOGF(core, debug, "QP %u disconnected", impl_->qp_num);
}

void detail::QpImpl::disconnect() {
    const std::string backend = domain ? domain->caps.backend : std::string("this backend");
    throw Error(Errc::not_supported,
                backend + " cannot tell a peer that the connection closed (no Feature::disconnect); destroy the "
                          "QP, and the peer learns from its requests' transport_retry_exceeded",
                backend, "QueuePair::disconnect");
}

void QueuePair::to_error() {
    if (!impl_) empty_handle("QueuePair::to_error");
    impl_->to_error();
}

QpState QueuePair::state() const noexcept { return impl_ ? impl_->state() : QpState::reset; }
std::uint32_t QueuePair::qp_num() const noexcept { return impl_ ? impl_->qp_num : 0; }

const QpCaps& QueuePair::caps() const noexcept {
    static const QpCaps none{};
    return impl_ ? impl_->caps : none;
}

// ---- SharedReceiveQueue

SharedReceiveQueue::SharedReceiveQueue() noexcept = default;
SharedReceiveQueue::SharedReceiveQueue(std::shared_ptr<detail::SrqImpl> impl) noexcept : impl_(std::move(impl)) {}
SharedReceiveQueue::SharedReceiveQueue(SharedReceiveQueue&&) noexcept = default;
SharedReceiveQueue& SharedReceiveQueue::operator=(SharedReceiveQueue&&) noexcept = default;
SharedReceiveQueue::~SharedReceiveQueue() = default;

void SharedReceiveQueue::arm_limit(std::uint32_t limit) {
    if (!impl_) empty_handle("SharedReceiveQueue::arm_limit");
    if (limit > impl_->max_recv) {
        const std::string backend = impl_->domain ? impl_->domain->caps.backend : std::string();
        throw Error(Errc::invalid_argument,
                    "limit " + std::to_string(limit) + " exceeds the queue's max_recv of " +
                        std::to_string(impl_->max_recv) + "; give 0 (disarm) .. max_recv",
                    backend, "SharedReceiveQueue::arm_limit");
    }
    impl_->arm_limit(limit);
}

std::uint32_t SharedReceiveQueue::max_recv() const noexcept { return impl_ ? impl_->max_recv : 0; }
std::uint32_t SharedReceiveQueue::max_sge() const noexcept { return impl_ ? impl_->max_sge : 0; }
std::uint32_t SharedReceiveQueue::srq_num() const noexcept { return impl_ ? impl_->srq_num : 0; }

// ---- Domain

Domain::Domain() noexcept = default;
Domain::Domain(std::shared_ptr<detail::DomainImpl> impl) noexcept : impl_(std::move(impl)) {}
Domain::Domain(Domain&&) noexcept = default;
Domain& Domain::operator=(Domain&&) noexcept = default;
Domain::~Domain() = default;

MemoryRegion Domain::register_memory(std::span<std::byte> memory, Access access) {
    return register_memory(memory.data(), memory.size(), access);
}

MemoryRegion Domain::register_memory(void* addr, std::size_t length, Access access) {
    if (!impl_) empty_handle("Domain::register_memory");
    if (addr == nullptr || length == 0) {
        throw Error(Errc::invalid_argument,
                    "cannot register " + std::string(addr ? "zero bytes" : "a null address") +
                        "; give a non-empty buffer",
                    impl_->caps.backend, "register_memory");
    }
    if (length > impl_->caps.max_mr_size) {
        throw Error(Errc::invalid_argument,
                    std::to_string(length) + " bytes exceed the largest region of " +
                        std::to_string(impl_->caps.max_mr_size) + " bytes",
                    impl_->caps.backend, "register_memory");
    }
    // Remote write and remote atomic need local write (verbs rejects them otherwise).
    require_mapped(addr, length, impl_->caps.backend);
    if (has(access, Access::remote_write) || has(access, Access::remote_atomic)) access |= Access::local_write;
    MemoryRegion mr(impl_->register_memory(addr, length, access));
    WEFT_LOGF(core, debug, "%s: registered %zu bytes at %p, %s, lkey %#x, rkey %#llx", impl_->caps.backend.c_str(),
              length, addr, to_string(access).c_str(), mr.lkey(), static_cast<unsigned long long>(mr.rkey()));
    return mr;
}

namespace {

// Every size each option struct has had, oldest first (weft/detail/options.hpp): a member is added at a
// struct's end, and its new size appended here. On LP64, the ABI weft is built for.
constexpr std::uint32_t cq_options_sizes[] = {12};
constexpr std::uint32_t qp_options_sizes[] = {56};
constexpr std::uint32_t srq_options_sizes[] = {20};
static_assert(sizeof(void*) != 8 || (sizeof(CqOptions) == std::end(cq_options_sizes)[-1] &&
                                     sizeof(QpOptions) == std::end(qp_options_sizes)[-1] &&
                                     sizeof(SrqOptions) == std::end(srq_options_sizes)[-1]),
              "an option struct grew: append its new size to its list above");

// The options as this libweft reads them, whatever weft the program was built against.
template <class T, std::size_t N>
T read_options(const T& given, const std::uint32_t (&sizes)[N], const char* type, const std::string& backend,
               const char* object) {
    T out;
    if (auto problem = detail::read_sized(given, std::span<const std::uint32_t>(sizes), type, out)) {
        throw Error(Errc::invalid_argument, *problem, backend, object);
    }
    return out;
}

}  // namespace

CompletionQueue Domain::create_cq(const CqOptions& given) {
    if (!impl_) empty_handle("Domain::create_cq");
    const CqOptions options = read_options(given, cq_options_sizes, "CqOptions", impl_->caps.backend, "create_cq");
    if (options.depth == 0 || options.depth > impl_->caps.max_cqe) {
        throw Error(Errc::invalid_argument,
                    "depth " + std::to_string(options.depth) + " is outside 1.." +
                        std::to_string(impl_->caps.max_cqe),
                    impl_->caps.backend, "create_cq");
    }
    std::shared_ptr<detail::CqImpl> impl = impl_->create_cq(options);
    // Numbered in the process, from 1: 2^32 queues before a number comes back.
    static std::atomic<std::uint32_t> cqs_created{0};
    std::uint32_t num = cqs_created.fetch_add(1, std::memory_order_relaxed) + 1;
    if (num == 0) num = cqs_created.fetch_add(1, std::memory_order_relaxed) + 1;
    impl->cq_num = num;
    if (options.thread_safe) {
        impl = std::make_shared<detail::LockedCq>(std::move(impl));
        impl->cq_num = num;
    }
    CompletionQueue cq(std::move(impl));
    WEFT_LOGF(core, debug, "%s: created a CQ of depth %u (asked %u)", impl_->caps.backend.c_str(), cq.depth(),
              options.depth);
    return cq;
}

QueuePair Domain::create_qp(const QpOptions& given) {
    if (!impl_) empty_handle("Domain::create_qp");
    const QpOptions options = read_options(given, qp_options_sizes, "QpOptions", impl_->caps.backend, "create_qp");
    detail::QpSetup setup{options, nullptr, nullptr};
    for (auto [ref, name, out] : {std::tuple{options.send_cq, "send_cq", &setup.send_cq},
                                  std::tuple{options.recv_cq, "recv_cq", &setup.recv_cq}}) {
        if (ref.get() == nullptr || !*ref.get()) {
            throw Error(Errc::invalid_argument, std::string(name) + " is not set; every QP needs both CQs",
                        impl_->caps.backend, "create_qp");
        }
        *out = detail::unwrap(ref.get()->shared_impl());  // the backend's own CQ, whatever the mode
    }
    if (SharedReceiveQueue* srq = options.srq.get()) {
        if (!*srq) {
            throw Error(Errc::invalid_argument, "srq refers to an empty SharedReceiveQueue handle",
                        impl_->caps.backend, "create_qp");
        }
        if (srq->impl()->domain != impl_) {
            throw Error(Errc::invalid_argument,
                        "srq belongs to another domain; a QP takes receives only from a shared receive queue "
                        "of its own domain",
                        impl_->caps.backend, "create_qp");
        }
        setup.srq = detail::unwrap(srq->shared_impl());
        setup.options.max_recv = 0;  // receives come from the shared queue
    }
    detail::validate_qp_options(setup, impl_->caps, impl_->caps.backend);
    std::unique_ptr<detail::QpImpl> qp = impl_->create_qp(setup);
    qp->domain = impl_;
    if (options.thread_safe) {
        qp = std::make_unique<detail::LockedQp>(std::move(qp));
        qp->domain = impl_;
    }
    WEFT_LOGF(core, debug, "%s: created QP %u: max_send %u, max_recv %u, max_sge %u, max_inline %u",
              impl_->caps.backend.c_str(), qp->qp_num, qp->caps.max_send, qp->caps.max_recv, qp->caps.max_sge,
              qp->caps.max_inline);
    return QueuePair(std::move(qp));
}

SharedReceiveQueue Domain::create_srq(const SrqOptions& given) {
    if (!impl_) empty_handle("Domain::create_srq");
    const Capabilities& caps = impl_->caps;
    const SrqOptions options = read_options(given, srq_options_sizes, "SrqOptions", caps.backend, "create_srq");
    if (!caps.has(Feature::srq)) {
        // The backend's own default says what it lacks and what to do instead.
        return SharedReceiveQueue(impl_->create_srq(options));
    }
    auto check = [&](const char* name, std::uint32_t value, std::uint32_t min, std::uint32_t max) {
        if (value < min || value > max) {
            throw Error(Errc::invalid_argument,
                        std::string(name) + " = " + std::to_string(value) + " is outside the accepted range " +
                            std::to_string(min) + ".." + std::to_string(max),
                        caps.backend, "create_srq");
        }
    };
    check("max_recv", options.max_recv, 1, caps.max_srq_wr);
    check("max_sge", options.max_sge, 1, caps.max_srq_sge);
    check("limit", options.limit, 0, options.max_recv);
    std::shared_ptr<detail::SrqImpl> impl = impl_->create_srq(options);
    impl->domain = impl_;
    if (options.thread_safe) impl = std::make_shared<detail::LockedSrq>(std::move(impl));
    WEFT_LOGF(core, debug, "%s: created shared receive queue %u: max_recv %u, max_sge %u", caps.backend.c_str(),
              impl->srq_num, impl->max_recv, impl->max_sge);
    return SharedReceiveQueue(std::move(impl));
}

const Capabilities& Domain::capabilities() const noexcept {
    static const Capabilities none{};
    return impl_ ? impl_->caps : none;
}

const Config& Domain::config() const noexcept {
    static const Config none{};
    return impl_ ? impl_->config : none;
}

int Domain::event_fd() const {
    if (!impl_) empty_handle("Domain::event_fd");
    return impl_->event_fd();
}

std::optional<AsyncEvent> Domain::next_event() {
    if (!impl_) empty_handle("Domain::next_event");
    AsyncEvent e;
    if (!impl_->next_event(e)) return std::nullopt;
    WEFT_LOGF(core, info, "%s: asynchronous event %s (QP %u): %s", impl_->caps.backend.c_str(),
              std::string(to_string(e.type)).c_str(), e.qp_num, e.what);
    return e;
}

namespace detail {

namespace {
[[noreturn]] void no_async_events(const DomainImpl& d, const char* call) {
    throw Error(Errc::not_supported,
                d.caps.backend + " does not report asynchronous events (no Feature::async_events); errors show "
                                 "as completions and QueuePair::state()",
                d.caps.backend, call);
}
}  // namespace

int DomainImpl::event_fd() { no_async_events(*this, "Domain::event_fd"); }

std::shared_ptr<SrqImpl> DomainImpl::create_srq(const SrqOptions&) {
    throw Error(Errc::not_supported,
                caps.backend + " has no shared receive queues (no Feature::srq); post receives to each QP",
                caps.backend, "Domain::create_srq");
}
bool DomainImpl::next_event(AsyncEvent&) { no_async_events(*this, "Domain::next_event"); }

}  // namespace detail

}  // namespace weft
