// The verbs plugin record, probe() and open(): device, port and GID selection, capabilities, and the
// domain's factory methods (memory registration, CQ and QP creation).
#include "verbs.hpp"
#include "verbs_wire.hpp"

#include <weft/config.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

namespace weft::verbs {

// ---- Errors

std::string gid_text(const ibv_gid& gid) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (::inet_ntop(AF_INET6, gid.raw, buf, sizeof buf) == nullptr) return "?";
    return buf;
}

std::uint32_t mtu_bytes(ibv_mtu mtu) noexcept {
    switch (mtu) {
        case IBV_MTU_256: return 256;
        case IBV_MTU_512: return 512;
        case IBV_MTU_1024: return 1024;
        case IBV_MTU_2048: return 2048;
        case IBV_MTU_4096: return 4096;
    }
    return 0;
}

namespace {

constexpr std::string_view open_call = "open";

std::string errno_text(int err) { return std::system_category().message(err); }

// Appends `item` to a "; "-separated list of findings.
void append(std::string& list, const std::string& item) {
    if (!list.empty()) list += "; ";
    list += item;
}

bool path_exists(const char* path) {
    struct stat st {};
    return ::stat(path, &st) == 0;
}

// ---- Device enumeration

struct DeviceScan {
    DeviceListPtr list;
    int count = 0;
    int error = 0;  // errno of a failed ibv_get_device_list
};

DeviceScan scan_devices() noexcept {
    DeviceScan scan;
    int n = 0;
    errno = 0;
    scan.list.reset(::ibv_get_device_list(&n));
    if (!scan.list) {
        scan.error = errno != 0 ? errno : ENODEV;
    } else {
        scan.count = n;
    }
    return scan;
}

// Why there is no device at all, with what the machine shows about RDMA support.
std::string no_device_reason(const DeviceScan& scan) {
    std::string why = "no RDMA devices found: ibv_get_device_list ";
    why += scan.error != 0 ? "failed: " + errno_text(scan.error) : std::string("returned none");
    why += " (is an RDMA driver loaded? ";
    if (!path_exists("/sys/class/infiniband_verbs")) {
        why += "/sys/class/infiniband_verbs is missing: this kernel has no RDMA support or ib_uverbs is not "
               "loaded; ";
    }
    if (!path_exists("/dev/infiniband")) {
        why += "/dev/infiniband does not exist";
    } else {
        why += "/dev/infiniband exists: check that ibverbs-providers has a provider for the device";
    }
    why += ")";
    return why;
}

std::string device_names(const DeviceScan& scan) {
    std::string names;
    for (std::size_t i = 0; i < static_cast<std::size_t>(scan.count); ++i) {
        if (!names.empty()) names += ", ";
        names += ::ibv_get_device_name(scan.list[i]);
    }
    return names.empty() ? std::string("none") : names;
}

// Opens `dev`; on failure returns null with the reason in `err`. rdma-core reports a device node it may
// not open as ENOENT (it goes on to look for another node), so permission is checked here to say what
// is really wrong.
ContextPtr open_context(ibv_device* dev, int& err) {
    errno = 0;
    ContextPtr ctx(::ibv_open_device(dev));
    err = 0;
    if (!ctx) {
        err = errno != 0 ? errno : ENODEV;
        const std::string node = std::string("/dev/infiniband/") + dev->dev_name;
        if (::access(node.c_str(), R_OK | W_OK) != 0 && (errno == EACCES || errno == EPERM)) err = EACCES;
    }
    return ctx;
}

std::string open_failure(ibv_device* dev, int err) {
    std::string msg = "ibv_open_device(" + std::string(::ibv_get_device_name(dev)) + ") failed";
    if (err == EACCES) {
        msg += ": no read-write access to /dev/infiniband/" + std::string(dev->dev_name) +
               " (give the user access, e.g. through the rdma group or a udev rule)";
    }
    return msg;
}

const char* port_state_text(ibv_port_state s) noexcept { return ::ibv_port_state_str(s); }

// The first active port of an opened device, or 0; `report` collects each port's state for messages.
std::uint8_t first_active_port(ibv_context* ctx, std::uint8_t port_count, std::string& report) {
    for (unsigned p = 1; p <= port_count; ++p) {
        ibv_port_attr attr{};
        if (int rc = ::ibv_query_port(ctx, static_cast<std::uint8_t>(p), &attr); rc != 0) {
            append(report, "port " + std::to_string(p) + ": ibv_query_port failed: " + errno_text(rc));
            continue;
        }
        if (attr.state == IBV_PORT_ACTIVE) return static_cast<std::uint8_t>(p);
        append(report, "port " + std::to_string(p) + " is " + port_state_text(attr.state));
    }
    return 0;
}

// ---- GID selection

const char* gid_type_text(std::uint32_t type) noexcept {
    switch (type) {
        case IBV_GID_TYPE_IB: return "IB";
        case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
        case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
    }
    return "unknown type";
}

bool is_ipv4_mapped(const ibv_gid& gid) noexcept {
    static constexpr std::uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(gid.raw, prefix, sizeof prefix) == 0;
}

bool is_link_local(const ibv_gid& gid) noexcept { return gid.raw[0] == 0xfe && (gid.raw[1] & 0xc0) == 0x80; }

// Lower is better: RoCE v2 over IPv4 is what routes everywhere and what rxe makes from an IPv4 address;
// then RoCE v2 over a global IPv6 address, then link-local RoCE v2, then RoCE v1.
int gid_rank(const ibv_gid_entry& e) noexcept {
    if (e.gid_type == IBV_GID_TYPE_ROCE_V2) {
        if (is_ipv4_mapped(e.gid)) return 0;
        return is_link_local(e.gid) ? 2 : 1;
    }
    if (e.gid_type == IBV_GID_TYPE_ROCE_V1) return 3;
    return 4;
}

// "0 fe80::1 (RoCE v2), 1 ::ffff:192.0.2.1 (RoCE v2)" — the valid entries, for messages.
std::string gid_table_text(ibv_context* ctx, std::uint8_t port, int table_len) {
    std::string out;
    for (int i = 0; i < table_len; ++i) {
        ibv_gid_entry e{};
        if (::ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(i), &e, 0) != 0) continue;
        if (!out.empty()) out += ", ";
        out += std::to_string(i) + " " + gid_text(e.gid) + " (" + gid_type_text(e.gid_type) + ")";
    }
    return out.empty() ? std::string("none") : out;
}

void choose_gid(Device& dev, const Config& cfg, const ibv_port_attr& port_attr) {
    ibv_context* ctx = dev.context.get();
    const std::string where = dev.name + " port " + std::to_string(dev.port);
    if (cfg.has("gid_index")) {
        auto index = cfg.get_uint("gid_index", 0, 0, static_cast<std::uint64_t>(std::max(port_attr.gid_tbl_len, 1)) - 1);
        ibv_gid_entry e{};
        if (int rc = ::ibv_query_gid_ex(ctx, dev.port, static_cast<std::uint32_t>(index), &e, 0); rc != 0) {
            errors.fail_errno(rc,
                       "gid_index " + std::to_string(index) + " of " + where +
                           " is not valid: ibv_query_gid_ex found no usable GID there (valid entries: " +
                           gid_table_text(ctx, dev.port, port_attr.gid_tbl_len) + ")",
                       open_call);
        }
        dev.gid_index = static_cast<int>(index);
        dev.gid = e.gid;
        dev.use_gid = true;
        return;
    }
    if (!dev.ethernet) return;  // InfiniBand: LID routing unless a GID is asked for

    int best_rank = 1 << 20;
    for (int i = 0; i < port_attr.gid_tbl_len; ++i) {
        ibv_gid_entry e{};
        if (::ibv_query_gid_ex(ctx, dev.port, static_cast<std::uint32_t>(i), &e, 0) != 0) continue;
        if (int r = gid_rank(e); r < best_rank) {
            best_rank = r;
            dev.gid_index = i;
            dev.gid = e.gid;
            if (r == 0) break;
        }
    }
    if (dev.gid_index < 0) {
        errors.fail(Errc::backend_unavailable,
             "no usable GID on " + where + " (an Ethernet port, so RoCE needs one): the GID table of " +
                 std::to_string(port_attr.gid_tbl_len) +
                 " entries is empty; give the network interface under it an IP address",
             open_call);
    }
    dev.use_gid = true;
}

// ---- Capabilities

// The largest max_inline_data an RC QP is granted: found by creating throw-away QPs, since devices state
// no limit (mlx5 computes it from its WQE size, rxe from its own).
std::uint32_t probe_max_inline(const Device& dev) {
    CqPtr cq(::ibv_create_cq(dev.context.get(), 1, nullptr, nullptr, 0));
    if (!cq) return 0;
    auto accepts = [&](std::uint32_t bytes) {
        ibv_qp_init_attr init{};
        init.send_cq = cq.get();
        init.recv_cq = cq.get();
        init.qp_type = IBV_QPT_RC;
        init.cap.max_send_wr = 1;
        init.cap.max_recv_wr = 1;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        init.cap.max_inline_data = bytes;
        QpPtr qp(::ibv_create_qp(dev.pd.get(), &init));
        return qp != nullptr;
    };
    std::uint32_t lo = 0, hi = 1024;  // more inline than this buys nothing over a registered buffer
    if (accepts(hi)) return hi;
    if (!accepts(lo)) return 0;
    while (hi - lo > 1) {
        std::uint32_t mid = lo + (hi - lo) / 2;
        (accepts(mid) ? lo : hi) = mid;
    }
    return lo;
}

std::uint8_t clamp_u8(int v) noexcept { return static_cast<std::uint8_t>(std::clamp(v, 0, 255)); }

void fill_capabilities(Device& dev, const ibv_device_attr& da, const ibv_port_attr& pa) {
    Capabilities& c = dev.caps;
    c.kind = BackendKind::verbs;
    c.backend = std::string(backend_name);
    c.device = dev.name;
    // Soft-RoCE reports some errors with other statuses than the specification (docs/backends/verbs.md);
    // it identifies itself with vendor id 0xffffff.
    if (da.vendor_id == 0xffffff || dev.name.rfind("rxe", 0) == 0) {
        c.profile = "rxe";
        dev.rxe = true;
    }
    c.max_qp_wr = static_cast<std::uint32_t>(std::max(da.max_qp_wr, 0));
    c.max_sge = static_cast<std::uint32_t>(std::max(da.max_sge, 0));
    c.max_cqe = static_cast<std::uint32_t>(std::max(da.max_cqe, 0));
    c.max_mr_size = da.max_mr_size;
    c.max_msg_size = pa.max_msg_sz;
    c.max_inline = probe_max_inline(dev);
    dev.max_sge_rd = static_cast<std::uint32_t>(std::max(da.max_sge_rd, 0));
    dev.max_rd_atomic = clamp_u8(da.max_qp_init_rd_atom);
    dev.max_dest_rd_atomic = clamp_u8(da.max_qp_rd_atom);

    Feature f = Feature::send_with_imm | Feature::write_with_imm | Feature::read | Feature::fence |
                Feature::solicited | Feature::wait | Feature::cq_fd | Feature::rnr | Feature::error_flush |
                Feature::remote_access_check | Feature::zero_length | Feature::async_events;
    if (c.max_inline > 0) f = f | Feature::inline_data;
    if (da.atomic_cap != IBV_ATOMIC_NONE) f = f | Feature::atomics;
    if (da.max_srq > 0 && da.max_srq_wr > 0 && da.max_srq_sge > 0) {
        f = f | Feature::srq;
        c.max_srq_wr = static_cast<std::uint32_t>(da.max_srq_wr);
        c.max_srq_sge = static_cast<std::uint32_t>(da.max_srq_sge);
    }
    if (rdma_cm_usable()) {
        // disconnect: for QPs connected through rdma_cm (verbs_conn.cpp)
        f = f | Feature::listener | Feature::disconnect;
        c.max_private_data = static_cast<std::uint32_t>(wire::max_private_data);
    }
    c.features = static_cast<std::uint32_t>(f);
}

// ---- open()

constexpr std::array<std::string_view, 5> mtu_choices{"256", "512", "1024", "2048", "4096"};

ibv_mtu mtu_from_bytes(std::string_view text) noexcept {
    if (text == "256") return IBV_MTU_256;
    if (text == "512") return IBV_MTU_512;
    if (text == "1024") return IBV_MTU_1024;
    if (text == "2048") return IBV_MTU_2048;
    return IBV_MTU_4096;
}

// Opens the device the configuration names (or the first with an active port) and picks the port.
void open_device(Device& dev, const Config& cfg, const DeviceScan& scan) {
    const std::string wanted = cfg.get_string("device", "");
    const auto wanted_port = static_cast<std::uint8_t>(cfg.get_uint("port", 0, 1, 255));

    if (!wanted.empty()) {
        ibv_device* found = nullptr;
        for (std::size_t i = 0; i < static_cast<std::size_t>(scan.count); ++i) {
            if (wanted == ::ibv_get_device_name(scan.list[i])) found = scan.list[i];
        }
        if (!found) {
            errors.fail_errno(ENODEV, "no RDMA device named '" + wanted + "' (found: " + device_names(scan) + ")",
                       open_call);
        }
        int err = 0;
        dev.context = open_context(found, err);
        if (!dev.context) errors.fail_errno(err, open_failure(found, err), open_call);
        dev.name = wanted;
        return;
    }

    // No device named: the first one with an active port (the one asked for, when a port is given).
    std::string report;
    int first_error = 0;
    bool any_opened = false;
    for (std::size_t i = 0; i < static_cast<std::size_t>(scan.count); ++i) {
        ibv_device* d = scan.list[i];
        std::string name = ::ibv_get_device_name(d);
        int err = 0;
        ContextPtr ctx = open_context(d, err);
        if (!ctx) {
            if (first_error == 0) first_error = err;
            append(report, open_failure(d, err) + ": " + errno_text(err));
            continue;
        }
        any_opened = true;
        ibv_device_attr da{};
        if (int rc = ::ibv_query_device(ctx.get(), &da); rc != 0) {
            append(report, name + ": ibv_query_device failed: " + errno_text(rc));
            continue;
        }
        std::string ports;
        bool usable = false;
        if (wanted_port != 0) {
            ibv_port_attr pa{};
            usable = wanted_port <= da.phys_port_cnt && ::ibv_query_port(ctx.get(), wanted_port, &pa) == 0 &&
                     pa.state == IBV_PORT_ACTIVE;
            if (!usable) ports = "port " + std::to_string(wanted_port) + " is not an active port";
        } else {
            usable = first_active_port(ctx.get(), da.phys_port_cnt, ports) != 0;
        }
        if (usable) {
            dev.context = std::move(ctx);
            dev.name = std::move(name);
            return;
        }
        append(report, name + ": " + ports);
    }
    if (!any_opened) errors.fail_errno(first_error, "no RDMA device could be opened: " + report, open_call);
    errors.fail(Errc::backend_unavailable, "no RDMA device has an active port: " + report, open_call);
}

void choose_port(Device& dev, const Config& cfg, const ibv_device_attr& da, ibv_port_attr& pa) {
    const auto wanted_port = static_cast<std::uint8_t>(cfg.get_uint("port", 0, 1, 255));
    ibv_context* ctx = dev.context.get();
    if (wanted_port != 0) {
        if (wanted_port > da.phys_port_cnt) {
            errors.fail_errno(EINVAL,
                       "port " + std::to_string(wanted_port) + " is out of range: " + dev.name + " has ports 1.." +
                           std::to_string(da.phys_port_cnt),
                       open_call);
        }
        dev.port = wanted_port;
    } else {
        std::string report;
        dev.port = first_active_port(ctx, da.phys_port_cnt, report);
        if (dev.port == 0) {
            errors.fail(Errc::backend_unavailable, dev.name + " has no active port: " + report, open_call);
        }
    }
    if (int rc = ::ibv_query_port(ctx, dev.port, &pa); rc != 0) {
        errors.fail_errno(rc, "ibv_query_port(" + dev.name + ", " + std::to_string(dev.port) + ") failed", open_call);
    }
    if (pa.state != IBV_PORT_ACTIVE) {
        errors.fail(Errc::backend_unavailable,
             "port " + std::to_string(dev.port) + " of " + dev.name + " is " + port_state_text(pa.state) +
                 ", not ACTIVE (check the link, and on InfiniBand that a subnet manager runs)",
             open_call);
    }
}

std::shared_ptr<detail::DomainImpl> open_domain(const Config& cfg) {
    DeviceScan scan = scan_devices();
    if (scan.count == 0) errors.fail(Errc::backend_unavailable, no_device_reason(scan), open_call);

    auto dev = std::make_shared<Device>();
    open_device(*dev, cfg, scan);

    ibv_device_attr da{};
    if (int rc = ::ibv_query_device(dev->context.get(), &da); rc != 0) {
        errors.fail_errno(rc, "ibv_query_device(" + dev->name + ") failed", open_call);
    }
    ibv_port_attr pa{};
    choose_port(*dev, cfg, da, pa);
    dev->ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    dev->lid = pa.lid;
    choose_gid(*dev, cfg, pa);

    dev->mtu = pa.active_mtu;
    if (cfg.has("mtu")) {
        ibv_mtu asked = mtu_from_bytes(cfg.get_choice("mtu", "", mtu_choices));
        if (asked > pa.active_mtu) {
            errors.fail_errno(EINVAL,
                       "mtu " + std::to_string(mtu_bytes(asked)) + " exceeds the active MTU of " + dev->name +
                           " port " + std::to_string(dev->port) + " (" + std::to_string(mtu_bytes(pa.active_mtu)) +
                           ")",
                       open_call);
        }
        dev->mtu = asked;
    }
    if (cfg.has("psn")) dev->fixed_psn = static_cast<std::uint32_t>(cfg.get_uint("psn", 0, 0, 0xffffff));

    errno = 0;
    dev->pd.reset(::ibv_alloc_pd(dev->context.get()));
    if (!dev->pd) {
        const int err = errno != 0 ? errno : ENOMEM;
        errors.fail_errno(err, "ibv_alloc_pd(" + dev->name + ") failed", open_call);
    }

    fill_capabilities(*dev, da, pa);
    index_opcodes(*dev);
    return std::make_shared<VerbsDomain>(std::move(dev));
}

// ---- probe()

std::string probe() {
    DeviceScan scan = scan_devices();
    if (scan.count == 0) return no_device_reason(scan);
    std::string report;
    bool any_opened = false;
    for (std::size_t i = 0; i < static_cast<std::size_t>(scan.count); ++i) {
        ibv_device* d = scan.list[i];
        int err = 0;
        ContextPtr ctx = open_context(d, err);
        if (!ctx) {
            append(report, open_failure(d, err) + ": " + errno_text(err));
            continue;
        }
        any_opened = true;
        ibv_device_attr da{};
        if (int rc = ::ibv_query_device(ctx.get(), &da); rc != 0) {
            append(report, std::string(::ibv_get_device_name(d)) + ": ibv_query_device failed: " + errno_text(rc));
            continue;
        }
        std::string ports;
        if (first_active_port(ctx.get(), da.phys_port_cnt, ports) != 0) return {};
        append(report, std::string(::ibv_get_device_name(d)) + ": " + ports);
    }
    return (any_opened ? "no RDMA device has an active port: " : "no RDMA device could be opened: ") + report;
}

// ---- The plugin record

constexpr std::array<KeySpec, 5> config_keys{{
    {"device", "RDMA device name as ibv_devices lists it (default: the first device with an active port)"},
    {"port", "port number, 1-based (default: the device's first active port)"},
    {"gid_index", "GID table index (default on Ethernet: the first RoCE v2 IPv4-mapped GID, then other RoCE "
                  "v2, then RoCE v1; on InfiniBand: none, LID routing)"},
    {"mtu", "path MTU in bytes: 256, 512, 1024, 2048 or 4096 (default: the port's active MTU; the smaller of "
            "the two sides' is used)"},
    {"psn", "fixed starting packet sequence number 0..16777215 for every QP (default: random per QP)"},
}};

const detail::Plugin verbs_plugin{
    .abi = detail::plugin_abi_version,
    .name = "verbs",
    .summary = "native ibverbs on rdma-core (InfiniBand, RoCE, Soft-RoCE)",
    .keys = config_keys,
    .probe = &probe,
    .open = &open_domain,
};

}  // namespace

// ---- Domain

VerbsDomain::VerbsDomain(std::shared_ptr<Device> device) : device_(std::move(device)) { caps = device_->caps; }

VerbsDomain::~VerbsDomain() {
    if (events_fd_ >= 0) ::close(events_fd_);
}

void VerbsDomain::nonblocking_events() {
    std::call_once(events_nonblocking_, [this] {
        const int fd = device_->context->async_fd;
        const int flags = ::fcntl(fd, F_GETFL);
        if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
            errors.fail_errno(errno, "making the device's asynchronous event descriptor non-blocking failed",
                       "Domain::event_fd");
        }
    });
}

int VerbsDomain::event_fd() {
    nonblocking_events();
    // Readable while either source has an event: the device's async_fd, the connections' eventfd.
    std::call_once(events_fd_made_, [this] {
        const int set = ::epoll_create1(EPOLL_CLOEXEC);
        if (set < 0) errors.fail_errno(errno, "epoll_create1 for the domain's event descriptor failed", "Domain::event_fd");
        for (const int fd : {device_->context->async_fd, device_->connections().event_fd()}) {
            epoll_event e{};
            e.events = EPOLLIN;
            e.data.fd = fd;
            if (::epoll_ctl(set, EPOLL_CTL_ADD, fd, &e) != 0) {
                const int err = errno;
                ::close(set);
                errors.fail_errno(err, "epoll_ctl adding an event source to the domain's event descriptor failed",
                           "Domain::event_fd");
            }
        }
        events_fd_ = set;
    });
    return events_fd_;
}

bool VerbsDomain::next_event(AsyncEvent& out) {
    nonblocking_events();
    if (Connections* c = device_->connections_if_any(); c != nullptr && c->next_event(out)) return true;
    for (;;) {
        ibv_async_event ev{};
        if (::ibv_get_async_event(device_->context.get(), &ev) != 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
            errors.fail_errno(errno, "ibv_get_async_event failed", "Domain::next_event");
        }
        out = AsyncEvent{};
        out.what = ::ibv_event_type_str(ev.event_type);
        bool mine = true;
        switch (ev.event_type) {
            case IBV_EVENT_QP_FATAL:
            case IBV_EVENT_QP_REQ_ERR:
            case IBV_EVENT_QP_ACCESS_ERR:
                out.type = EventType::qp_fatal;
                out.qp_num = ev.element.qp->qp_num;
                break;
            case IBV_EVENT_QP_LAST_WQE_REACHED:
                out.type = EventType::qp_last_wqe_reached;
                out.qp_num = ev.element.qp->qp_num;
                break;
            case IBV_EVENT_COMM_EST:
            case IBV_EVENT_SQ_DRAINED:
            case IBV_EVENT_PATH_MIG:
            case IBV_EVENT_PATH_MIG_ERR:
                out.qp_num = ev.element.qp->qp_num;
                break;
            case IBV_EVENT_SRQ_LIMIT_REACHED:
                out.type = EventType::srq_limit_reached;
                // VerbsSrq keeps its srq_num in the context (every SRQ of the context is one of ours).
                out.srq_num = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(ev.element.srq->srq_context));
                break;
            case IBV_EVENT_SRQ_ERR: break;  // other
            case IBV_EVENT_CQ_ERR:
                out.type = EventType::cq_error;
                // VerbsCq keeps itself in the context (the CQs this domain creates are ours; an adopted one,
                // of the data-path tests' fake provider, has none).
                if (const void* cq = ev.element.cq->cq_context) out.cq_num = static_cast<const VerbsCq*>(cq)->cq_num;
                break;
            case IBV_EVENT_DEVICE_FATAL: out.type = EventType::device_fatal; break;
            case IBV_EVENT_PORT_ACTIVE:
            case IBV_EVENT_PORT_ERR:
            case IBV_EVENT_LID_CHANGE:
            case IBV_EVENT_PKEY_CHANGE:
            case IBV_EVENT_SM_CHANGE:
            case IBV_EVENT_CLIENT_REREGISTER:
            case IBV_EVENT_GID_CHANGE:
                // Events of the device's other ports concern other domains.
                mine = ev.element.port_num == device_->port;
                if (ev.event_type == IBV_EVENT_PORT_ACTIVE) out.type = EventType::port_active;
                if (ev.event_type == IBV_EVENT_PORT_ERR) out.type = EventType::port_error;
                break;
            default: break;
        }
        ::ibv_ack_async_event(&ev);
        if (mine) return true;
    }
}

std::unique_ptr<detail::MrImpl> VerbsDomain::register_memory(void* addr, std::size_t length, Access access) {
    int flags = 0;
    if (has(access, Access::local_write)) flags |= IBV_ACCESS_LOCAL_WRITE;
    if (has(access, Access::remote_write)) flags |= IBV_ACCESS_REMOTE_WRITE;
    if (has(access, Access::remote_read)) flags |= IBV_ACCESS_REMOTE_READ;
    if (has(access, Access::remote_atomic)) flags |= IBV_ACCESS_REMOTE_ATOMIC;
    errno = 0;
    MrPtr mr(::ibv_reg_mr(device_->pd.get(), addr, length, static_cast<unsigned>(flags)));
    if (!mr) {
        int err = errno != 0 ? errno : EINVAL;
        std::string msg = "ibv_reg_mr(" + std::to_string(length) + " bytes, " + to_string(access) + ") on " +
                          device_->name + " failed";
        if (err == ENOMEM || err == EAGAIN) {
            rlimit lim{};
            if (::getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
                msg += " (the locked-memory limit is " + std::to_string(lim.rlim_cur) +
                       " bytes; raise it with ulimit -l or limits.conf)";
            }
        }
        errors.fail_errno(err, std::move(msg), "register_memory");
    }
    return std::make_unique<VerbsMr>(device_, std::move(mr), access);
}

std::shared_ptr<detail::CqImpl> VerbsDomain::create_cq(const CqOptions& options) {
    return std::make_shared<VerbsCq>(device_, options.depth);
}

std::unique_ptr<detail::QpImpl> VerbsDomain::create_qp(const detail::QpSetup& setup) {
    return std::make_unique<VerbsQp>(device_, setup);
}

std::shared_ptr<detail::SrqImpl> VerbsDomain::create_srq(const SrqOptions& options) {
    return std::make_shared<VerbsSrq>(device_, options);
}

VerbsMr::VerbsMr(std::shared_ptr<Device> device, MrPtr mr, Access rights)
    : device_(std::move(device)), mr_(std::move(mr)) {
    addr = mr_->addr;
    length = mr_->length;
    lkey = mr_->lkey;
    rkey = mr_->rkey;
    access = rights;
    kind = BackendKind::verbs;
}

}  // namespace weft::verbs

WEFT_DEFINE_PLUGIN(weft::verbs::verbs_plugin)
