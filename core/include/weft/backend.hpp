// weft/backend.hpp — the interface a backend implements (the simulator built in, verbs and ofi as plugins).
//
// Applications do not need this header. A backend provides a Plugin record; for a plugin module it is
// returned by the C symbol `weft_plugin_v1` (see WEFT_DEFINE_PLUGIN). The core validates configuration
// keys against Plugin::keys before calling Plugin::open.
//
// Contract for implementers:
// - Setup calls throw weft::Error with the backend's name; data-path calls (post_send, post_recv, poll)
//   are noexcept and allocate nothing.
// - post_send/post_recv take the whole batch and post all of it or none of it; invalid requests are found
//   before anything is posted (PostStatus::invalid with the request index).
// - Send-queue completions in posting order; unsignaled successes silent; errors always complete; after
//   an error every outstanding and later request completes `flushed`, in order.
// - Immediate data crosses the API in host byte order.
#pragma once

#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <weft/completion.hpp>
#include <weft/error.hpp>
#include <weft/config.hpp>
#include <weft/domain.hpp>
#include <weft/listener.hpp>
#include <weft/memory.hpp>
#include <weft/request.hpp>
#include <weft/status.hpp>

struct sockaddr;  // <sys/socket.h>

namespace weft::detail {

/// A registered region. The core reads the fields; the destructor of the derived class deregisters.
class MrImpl {
public:
    virtual ~MrImpl() = default;

    void* addr = nullptr;
    std::size_t length = 0;
    std::uint32_t lkey = 0;
    std::uint64_t rkey = 0;
    void* desc = nullptr;
    Access access = Access::none;
    BackendKind kind = BackendKind::sim;
};

// CqImpl, SrqImpl and QpImpl, the objects behind the handles that carry the data path, are declared in
// weft/domain.hpp, so that the handles' poll and post calls are inline there.

/// A "host:port" as weft::listen and weft::connect take it, parsed by the core before the backend sees it.
struct HostPort {
    std::string host;         ///< without brackets; never empty
    std::uint16_t port = 0;   ///< 0: any free port (listen only)
    bool bracketed = false;   ///< written "[host]:port" (an IPv6 address)
    /// "host:port", or "[host]:port" when the host holds a ':'.
    std::string text() const;
};

/// Parses "HOST:PORT" or "[HOST]:PORT". Throws weft::Error (Errc::invalid_argument) naming the accepted
/// forms, with `backend` and `call` in it.
HostPort parse_host_port(std::string_view text, std::string_view backend, std::string_view call);

/// "a.b.c.d:port" or "[v6]:port" for an IPv4 or IPv6 socket address (a `const sockaddr*`); names the
/// family otherwise. For listeners' address() and error messages.
std::string sockaddr_text(const ::sockaddr* sa);

/// A listening endpoint of a backend (Feature::listener); see weft/listener.hpp for the contract.
class ListenerImpl {
public:
    virtual ~ListenerImpl() = default;
    /// Connects `qp` (a fresh QP of this listener's domain; the core has checked both) to the next peer
    /// whose private data `decide` accepts, sending the reply it returns (checked against max_private_data
    /// by the core's wrapper: the backend sends what it gets), calling `decide` before touching `qp`. A
    /// `decide` that throws refuses that peer, with the exception's text, and accept() rethrows it, `qp`
    /// still fresh. Peers the backend itself cannot use are refused and the wait goes on. Returns the
    /// accepted peer's private data. Throws
    /// weft::Error with std::errc::timed_out when no peer came within `timeout`.
    virtual std::vector<std::byte> accept(QpImpl& qp, std::chrono::milliseconds timeout,
                                          const AcceptReply& decide) = 0;
    /// The bound address as "host:port".
    virtual std::string address() const = 0;

    /// The domain it listens for; set by the core.
    std::shared_ptr<DomainImpl> domain;
};

/// What create_qp receives: QpOptions with the CQs and the shared receive queue resolved.
struct QpSetup {
    QpOptions options;
    std::shared_ptr<CqImpl> send_cq;
    std::shared_ptr<CqImpl> recv_cq;
    /// The backend's own queue of QpOptions::srq (the core checked it belongs to this domain); null
    /// without one. The QP keeps it alive.
    std::shared_ptr<SrqImpl> srq;
};

class DomainImpl : public std::enable_shared_from_this<DomainImpl> {
public:
    virtual ~DomainImpl() = default;
    virtual std::unique_ptr<MrImpl> register_memory(void* addr, std::size_t length, Access access) = 0;
    virtual std::shared_ptr<CqImpl> create_cq(const CqOptions& options) = 0;
    virtual std::unique_ptr<QpImpl> create_qp(const QpSetup& setup) = 0;

    /// Optional (Feature::listener): binds and listens at `where`. The default throws Errc::not_supported
    /// naming the backend and the alternative (QueuePair::address() exchanged out of band).
    virtual std::unique_ptr<ListenerImpl> listen(const HostPort& where);
    /// Optional (Feature::listener): connects `qp` (fresh, of this domain) to the listener at `where`,
    /// waiting up to `timeout`, carrying `private_data` (the core has checked its size against
    /// caps.max_private_data); returns the listener's reply. The default throws like listen().
    virtual std::vector<std::byte> connect_to(QpImpl& qp, const HostPort& where, std::chrono::milliseconds timeout,
                                              std::span<const std::byte> private_data);

    /// Optional (Feature::async_events): the domain's event descriptor, and its next event (false: none).
    /// The defaults throw Errc::not_supported.
    virtual int event_fd();
    virtual bool next_event(AsyncEvent& out);
    /// Optional (Feature::srq); the core has checked the options against caps.max_srq_wr/max_srq_sge. The
    /// default throws Errc::not_supported.
    virtual std::shared_ptr<SrqImpl> create_srq(const SrqOptions& options);

    Capabilities caps{};
    Config config{};
};

/// Version 2: DomainImpl::listen/connect_to, QpImpl::domain, ListenerImpl.
/// Version 3: private data on ListenerImpl::accept and DomainImpl::connect_to, Capabilities::max_private_data,
/// QpImpl::disconnect, DomainImpl::event_fd/next_event.
/// Version 4: shared receive queues (SrqImpl, DomainImpl::create_srq, QpSetup::srq, QpOptions::srq,
/// Capabilities::max_srq_wr/max_srq_sge), AsyncEvent::srq_num, QpImpl::to_error.
/// Version 6: the layout record (weft_plugin_layout_v1, PluginLayout).
inline constexpr std::uint32_t plugin_abi_version = 6;

/// A backend's registration record.
struct Plugin {
    std::uint32_t abi = plugin_abi_version;
    const char* name = nullptr;      ///< the configuration's backend name
    const char* summary = nullptr;   ///< one line for listings
    std::span<const KeySpec> keys;   ///< every key open() accepts
    /// Empty when the backend can run here; otherwise why not (no device, library too old, ...).
    std::string (*probe)() = nullptr;
    /// Opens a domain; `config` has passed the key check.
    std::shared_ptr<DomainImpl> (*open)(const Config& config) = nullptr;
};

/// Shared checks every backend applies to QP options against its capabilities; throws weft::Error naming
/// the offending option and the accepted range.
void validate_qp_options(const QpSetup& setup, const Capabilities& caps, std::string_view backend);

/// Checks a send batch against a QP's caps and the domain's features, before anything is posted.
/// Returns ok or the first invalid request. Cheap: a few compares per request.
PostStatus validate_send_batch(std::span<const SendRequest> batch, const QpCaps& caps,
                               const Capabilities& domain_caps) noexcept;
PostStatus validate_recv_batch(std::span<const RecvRequest> batch, const QpCaps& caps) noexcept;
/// Checks a batch of receives for a shared receive queue of `max_sge` segments per receive.
PostStatus validate_srq_batch(std::span<const RecvRequest> batch, std::uint32_t max_sge) noexcept;

/// The size and alignment of one type that crosses the plugin boundary, as a build of weft sees it.
struct TypeLayout {
    const char* name;
    std::uint32_t size;
    std::uint32_t align;
};

/// Every type a plugin and libweft exchange by value or share by reference, in a fixed order; a new type
/// goes at the end. The loader compares a plugin's table (weft_plugin_layout_v1) with its own and refuses a
/// plugin that differs, naming the type and both layouts: the ABI number above only catches a change when
/// whoever made it remembered to raise it.
inline constexpr TypeLayout plugin_types[] = {
    {"weft::detail::Plugin", sizeof(Plugin), alignof(Plugin)},
    {"weft::Config", sizeof(Config), alignof(Config)},
    {"weft::KeySpec", sizeof(KeySpec), alignof(KeySpec)},
    {"weft::Capabilities", sizeof(Capabilities), alignof(Capabilities)},
    {"weft::CqOptions", sizeof(CqOptions), alignof(CqOptions)},
    {"weft::QpOptions", sizeof(QpOptions), alignof(QpOptions)},
    {"weft::SrqOptions", sizeof(SrqOptions), alignof(SrqOptions)},
    {"weft::QpCaps", sizeof(QpCaps), alignof(QpCaps)},
    {"weft::detail::QpSetup", sizeof(QpSetup), alignof(QpSetup)},
    {"weft::detail::HostPort", sizeof(HostPort), alignof(HostPort)},
    {"weft::SendRequest", sizeof(SendRequest), alignof(SendRequest)},
    {"weft::RecvRequest", sizeof(RecvRequest), alignof(RecvRequest)},
    {"weft::LocalSegment", sizeof(LocalSegment), alignof(LocalSegment)},
    {"weft::RemoteRegion", sizeof(RemoteRegion), alignof(RemoteRegion)},
    {"weft::Completion", sizeof(Completion), alignof(Completion)},
    {"weft::AsyncEvent", sizeof(AsyncEvent), alignof(AsyncEvent)},
    {"weft::PostStatus", sizeof(PostStatus), alignof(PostStatus)},
    {"weft::Error", sizeof(Error), alignof(Error)},
    {"weft::detail::MrImpl", sizeof(MrImpl), alignof(MrImpl)},
    {"weft::detail::CqImpl", sizeof(CqImpl), alignof(CqImpl)},
    {"weft::detail::SrqImpl", sizeof(SrqImpl), alignof(SrqImpl)},
    {"weft::detail::QpImpl", sizeof(QpImpl), alignof(QpImpl)},
    {"weft::detail::ListenerImpl", sizeof(ListenerImpl), alignof(ListenerImpl)},
    {"weft::detail::DomainImpl", sizeof(DomainImpl), alignof(DomainImpl)},
};

/// What weft_plugin_layout_v1 returns: the plugin build's plugin_types.
struct PluginLayout {
    std::uint32_t count;
    const TypeLayout* types;
};

}  // namespace weft::detail

/// Defines the entry points of a plugin module: weft_plugin_v1, returning `plugin` (a weft::detail::Plugin
/// with static storage duration), and weft_plugin_layout_v1, the layouts of the types it was built with.
#define WEFT_DEFINE_PLUGIN(plugin)                                                                        \
    extern "C" __attribute__((visibility("default"))) const ::weft::detail::Plugin* weft_plugin_v1() {       \
        return &(plugin);                                                                                  \
    }                                                                                                      \
    extern "C" __attribute__((visibility("default"))) ::weft::detail::PluginLayout weft_plugin_layout_v1() { \
        return {static_cast<std::uint32_t>(std::size(::weft::detail::plugin_types)),                        \
                ::weft::detail::plugin_types};                                                               \
    }
