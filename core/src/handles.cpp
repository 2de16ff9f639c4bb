// The user-facing handles: thin, move-only owners that forward to the backend's implementation.
#include <weft/backend.hpp>
#include <weft/domain.hpp>
#include <weft/error.hpp>

#include <string>
#include <tuple>
#include <utility>

namespace weft {
namespace {

[[noreturn]] void empty_handle(const char* call) {
    throw Error(Errc::invalid_state, "the handle is empty (default-constructed or moved from)", {}, call);
}

}  // namespace

// ---- CompletionQueue

CompletionQueue::CompletionQueue() noexcept = default;
CompletionQueue::CompletionQueue(std::shared_ptr<detail::CqImpl> impl) noexcept : impl_(std::move(impl)) {}
CompletionQueue::CompletionQueue(CompletionQueue&&) noexcept = default;
CompletionQueue& CompletionQueue::operator=(CompletionQueue&&) noexcept = default;
CompletionQueue::~CompletionQueue() = default;

std::span<Completion> CompletionQueue::poll(std::span<Completion> out) noexcept {
    if (!impl_ || out.empty()) return out.first(0);
    return out.first(impl_->poll(out));
}

bool CompletionQueue::wait(std::chrono::nanoseconds timeout) {
    if (!impl_) empty_handle("CompletionQueue::wait");
    return impl_->wait(timeout);
}

int CompletionQueue::fd() const {
    if (!impl_) empty_handle("CompletionQueue::fd");
    return impl_->fd();
}

std::uint32_t CompletionQueue::depth() const noexcept { return impl_ ? impl_->depth() : 0; }

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
}

PostStatus QueuePair::post_send(std::span<const SendRequest> batch) noexcept {
    if (!impl_) return PostStatus::not_connected("the queue pair handle is empty");
    return impl_->post_send(batch);
}

PostStatus QueuePair::post_recv(std::span<const RecvRequest> batch) noexcept {
    if (!impl_) return PostStatus::not_connected("the queue pair handle is empty");
    return impl_->post_recv(batch);
}

QpState QueuePair::state() const noexcept { return impl_ ? impl_->state() : QpState::reset; }
std::uint32_t QueuePair::qp_num() const noexcept { return impl_ ? impl_->qp_num : 0; }

const QpCaps& QueuePair::caps() const noexcept {
    static const QpCaps none{};
    return impl_ ? impl_->caps : none;
}

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
    if (has(access, Access::remote_write) || has(access, Access::remote_atomic)) access |= Access::local_write;
    return MemoryRegion(impl_->register_memory(addr, length, access));
}

CompletionQueue Domain::create_cq(const CqOptions& options) {
    if (!impl_) empty_handle("Domain::create_cq");
    if (options.depth == 0 || options.depth > impl_->caps.max_cqe) {
        throw Error(Errc::invalid_argument,
                    "depth " + std::to_string(options.depth) + " is outside 1.." +
                        std::to_string(impl_->caps.max_cqe),
                    impl_->caps.backend, "create_cq");
    }
    return CompletionQueue(impl_->create_cq(options));
}

QueuePair Domain::create_qp(const QpOptions& options) {
    if (!impl_) empty_handle("Domain::create_qp");
    detail::QpSetup setup{options, nullptr, nullptr};
    for (auto [ref, name, out] : {std::tuple{options.send_cq, "send_cq", &setup.send_cq},
                                  std::tuple{options.recv_cq, "recv_cq", &setup.recv_cq}}) {
        if (ref.get() == nullptr || !*ref.get()) {
            throw Error(Errc::invalid_argument, std::string(name) + " is not set; every QP needs both CQs",
                        impl_->caps.backend, "create_qp");
        }
        *out = ref.get()->shared_impl();
    }
    detail::validate_qp_options(setup, impl_->caps, impl_->caps.backend);
    auto qp = impl_->create_qp(setup);
    qp->domain = impl_;
    return QueuePair(std::move(qp));
}

const Capabilities& Domain::capabilities() const noexcept {
    static const Capabilities none{};
    return impl_ ? impl_->caps : none;
}

const Config& Domain::config() const noexcept {
    static const Config none{};
    return impl_ ? impl_->config : none;
}

}  // namespace weft
