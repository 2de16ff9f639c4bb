// The front end's device and context: the one device ($WEFT_BACKEND's backend), opening it as a weft
// Domain, the device, port, GID and P_Key queries, the enum-to-string helpers, and the one place where
// exceptions become errno values.
#include "frontend.hpp"

#include <weft/error.hpp>
#include <weft/log.hpp>
#include <weft/version.hpp>

#include <endian.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#undef ibv_query_port  // verbs.h's inline wrapper; the exported symbol is defined below

namespace weft::compat {
namespace {

// No IEEE OUI of its own: the value software devices report (Soft-RoCE's RXE_VENDOR_ID).
constexpr std::uint32_t vendor_id = 0xffffff;
// Counts weft does not limit; reported so that programs sizing their pools from them get sane values.
constexpr int max_objects = 1 << 16;
constexpr int max_rd_atomic = 16;

// The device the front end offers: named after $WEFT_BACKEND's backend (weft_sim0), read once.
struct Device {
    ibv_device dev{};
    std::string backend;  // empty when $WEFT_BACKEND does not parse
    std::string config;   // $WEFT_BACKEND's text
    std::string opened;   // what a context opens (domain_config below)
    std::string error;    // why it does not parse
};

// The configuration a context opens: $WEFT_BACKEND's, and on ofi progress=thread unless it says otherwise.
// A verbs program expects one-sided requests to complete while the target process does not call verbs
// (perftest's ib_write_bw server waits on a socket), and libfabric's tcp and shm move data only inside calls.
std::string domain_config(const std::string& config, const Config& parsed) {
    if (parsed.backend() != "ofi" || parsed.has("progress")) return config;
    return config + (config.find(':') == std::string::npos ? ":" : ",") + "progress=thread";
}

const Device& device() {
    static const Device d = [] {
        Device out;
        out.config = default_config();
        try {
            const Config parsed = Config::parse(out.config);
            out.backend = parsed.backend();
            out.opened = domain_config(out.config, parsed);
        } catch (const std::exception& e) {
            out.error = e.what();
        }
        std::string name = "weft_" + out.backend + "0";
        out.dev.node_type = IBV_NODE_CA;
        out.dev.transport_type = IBV_TRANSPORT_IB;
        std::snprintf(out.dev.name, sizeof out.dev.name, "%s", name.c_str());
        std::snprintf(out.dev.dev_name, sizeof out.dev.dev_name, "%s", name.c_str());
        return out;
    }();
    return d;
}

ibv_port_attr port_attributes(Context& ctx) {
    const Capabilities& caps = ctx.domain.capabilities();
    ibv_port_attr a{};
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = IBV_MTU_4096;
    // The simulator's packet size is its `mtu` key; 256..4096 map onto IBV_MTU_256..IBV_MTU_4096.
    auto mtu = ctx.domain.config().get_uint("mtu", 4096, 256, 4096);
    a.active_mtu = IBV_MTU_256;
    while (a.active_mtu < IBV_MTU_4096 && (256u << (a.active_mtu - IBV_MTU_256)) < mtu) {
        a.active_mtu = static_cast<ibv_mtu>(a.active_mtu + 1);
    }
    a.gid_tbl_len = gid_table_len;
    a.max_msg_sz = static_cast<std::uint32_t>(std::min<std::uint64_t>(caps.max_msg_size, UINT32_MAX));
    a.pkey_tbl_len = 1;
    a.lid = port_lid();  // programs check for a LID on an InfiniBand port; on ofi, the process's (rendezvous.cpp)
    a.max_vl_num = 1;
    a.active_width = 2;   // 4x
    a.active_speed = 32;  // EDR: 4x EDR is the simulator's default 100 Gbit/s
    a.phys_state = 5;     // LinkUp
    a.link_layer = IBV_LINK_LAYER_INFINIBAND;
    return a;
}

// verbs_context::query_port, which verbs.h's ibv_query_port calls: fills the first `len` bytes.
int query_port(ibv_context* c, std::uint8_t port, ibv_port_attr* out, size_t len) {
    if (port != 1) return EINVAL;
    return guarded("ibv_query_port", [&] {
        ibv_port_attr a = port_attributes(context_of(c));
        std::memcpy(out, &a, std::min(len, sizeof a));
        return 0;
    });
}

// text[value], or "unknown" for a value outside the table (the enum-to-string helpers).
template <std::size_t N, class Enum>
const char* text_of(const std::array<const char*, N>& text, Enum value) noexcept {
    const auto i = static_cast<long long>(value);
    return i >= 0 && static_cast<std::size_t>(i) < N ? text[static_cast<std::size_t>(i)] : "unknown";
}

int errno_of(const Error& e) noexcept {
    if (e.code().category() != error_category()) return e.code().value();  // errno or libfabric's FI_E*
    switch (static_cast<Errc>(e.code().value())) {
        case Errc::not_supported: return EOPNOTSUPP;
        case Errc::resource_exhausted: return ENOMEM;
        case Errc::unknown_backend:
        case Errc::backend_unavailable: return ENODEV;
        case Errc::internal: return EIO;
        default: return EINVAL;
    }
}

}  // namespace

int current_errno(const char* call) noexcept {
    try {
        throw;
    } catch (const Error& e) {
        WEFT_LOGF(compat, error, "%s: %s", call, e.what());
        return errno_of(e);
    } catch (const std::bad_alloc&) {
        return ENOMEM;
    } catch (const std::exception& e) {
        WEFT_LOGF(compat, error, "%s: %s", call, e.what());
        return EIO;
    } catch (...) {
        return EIO;
    }
}

// ibv_query_device's attributes; the extended ones are those of a device without any of the optional
// features (no ODP, TSO, RSS, timestamps, device memory...), and one port.
int query_device_ex(ibv_context* c, const ibv_query_device_ex_input* input, ibv_device_attr_ex* out,
                    size_t attr_size) {
    if ((input && input->comp_mask) || attr_size < sizeof(ibv_device_attr)) return EINVAL;
    ibv_device_attr_ex a{};
    if (int err = ibv_query_device(c, &a.orig_attr)) return err;
    a.device_cap_flags_ex = a.orig_attr.device_cap_flags;
    a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
    std::memcpy(out, &a, std::min(attr_size, sizeof a));
    return 0;
}

}  // namespace weft::compat

using namespace weft::compat;

namespace {

// Depth of ibv_open_device calls on this thread that are inside weft::open. On ofi, weft::open calls
// libfabric, whose verbs provider (and librdmacm under it) lists the devices of the libibverbs it was linked
// with: this library. It is shown none, so that libfabric never opens the front end's own device under it
// (which would open the ofi backend again, inside libfabric's initialisation, and wait for itself).
thread_local int opening = 0;

struct Opening {
    Opening() noexcept { ++opening; }
    ~Opening() { --opening; }
    Opening(const Opening&) = delete;
    Opening& operator=(const Opening&) = delete;
};

}  // namespace

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
    if (opening > 0) {
        if (num_devices) *num_devices = 0;
        auto* none = new (std::nothrow) ibv_device*[1]{nullptr};
        return none ? none : fail(ENOMEM);
    }
    const Device& d = device();
    if (!d.error.empty()) {
        std::fprintf(stderr, "libibverbs (weft): %s\n", d.error.c_str());
        if (num_devices) *num_devices = 0;
        return fail(EINVAL);
    }
    auto* list = new (std::nothrow) ibv_device*[2]{const_cast<ibv_device*>(&d.dev), nullptr};
    if (!list) return fail(ENOMEM);
    if (num_devices) *num_devices = 1;
    return list;
}

void ibv_free_device_list(ibv_device** list) { delete[] list; }

const char* ibv_get_device_name(ibv_device* dev) { return dev->name; }

__be64 ibv_get_device_guid(ibv_device*) { return htobe64(node_guid()); }

int ibv_get_device_index(ibv_device* dev) { return dev == &device().dev ? 0 : -1; }

ibv_context* ibv_open_device(ibv_device* dev) {
    const Device& d = device();
    if (dev != &d.dev) return fail(ENODEV);
    if (d.backend != "sim" && d.backend != "ofi") {
        std::fprintf(stderr,
                     "libibverbs (weft): WEFT_BACKEND=\"%s\" names the %s backend; this front end runs on the "
                     "sim and ofi backends, in one process (docs/verbs-frontend.md)\n",
                     d.config.c_str(), d.backend.c_str());
        return fail(EOPNOTSUPP);
    }
    try {
        auto ctx = std::make_unique<Context>();
        {
            Opening nested;
            ctx->domain = weft::open(d.opened);
        }
        ctx->refusing = ctx->domain.register_memory(ctx->refused_bytes.data(), ctx->refused_bytes.size(),
                                                    weft::Access::none);
        ctx->sz = sizeof(verbs_context);
        ctx->query_port = query_port;
        ctx->query_device_ex = query_device_ex;
        ctx->create_cq_ex = create_cq_ex;
        ctx->create_qp_ex = create_qp_ex;
        ctx->create_srq_ex = create_srq_ex;
        ibv_context& c = ctx->context;
        c.device = dev;
        install_ops(c.ops);
        // A descriptor of its own, for programs that poll or dup it, although no kernel command goes
        // through it (ibv_import_device refuses a dup of it): an eventfd never written. async_fd carries
        // the domain's asynchronous events (events.cpp).
        c.cmd_fd = ::eventfd(0, EFD_CLOEXEC);
        c.async_fd = c.cmd_fd < 0 ? -1 : open_async_fd(*ctx);
        if (c.cmd_fd < 0 || c.async_fd < 0) {
            const int err = errno;
            if (c.cmd_fd >= 0) ::close(c.cmd_fd);
            return fail(err);
        }
        c.num_comp_vectors = 1;
        pthread_mutex_init(&c.mutex, nullptr);
        c.abi_compat = __VERBS_ABI_IS_EXTENDED;
        return &ctx.release()->context;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "libibverbs (weft): ibv_open_device: %s\n", e.what());
        return fail(current_errno("ibv_open_device"));
    }
}

int ibv_close_device(ibv_context* c) {
    ::close(c->cmd_fd);
    close_async_fd(context_of(c));
    pthread_mutex_destroy(&c->mutex);
    delete &context_of(c);
    return 0;
}

int ibv_query_device(ibv_context* c, ibv_device_attr* out) {
    return guarded("ibv_query_device", [&] {
        const weft::Capabilities& caps = context_of(c).domain.capabilities();
        ibv_device_attr a{};
        std::snprintf(a.fw_ver, sizeof a.fw_ver, "weft %s (%s)", std::string(weft::version()).c_str(),
                      caps.device.c_str());
        a.node_guid = htobe64(node_guid());
        a.sys_image_guid = a.node_guid;
        a.vendor_id = vendor_id;
        a.max_mr_size = caps.max_mr_size;
        a.page_size_cap = 4096;
        a.max_qp = max_objects;
        a.max_qp_wr = static_cast<int>(caps.max_qp_wr);
        a.device_cap_flags = caps.has(weft::Feature::rnr) ? IBV_DEVICE_RC_RNR_NAK_GEN : 0;
        a.max_sge = static_cast<int>(caps.max_sge);
        a.max_sge_rd = a.max_sge;
        a.max_cq = max_objects;
        a.max_cqe = static_cast<int>(std::min<std::uint32_t>(caps.max_cqe, INT32_MAX));
        a.max_mr = max_objects;
        a.max_pd = max_objects;
        a.max_qp_rd_atom = max_rd_atomic;
        a.max_qp_init_rd_atom = max_rd_atomic;
        a.max_res_rd_atom = max_rd_atomic * max_objects;
        a.atomic_cap = caps.has(weft::Feature::atomics) ? IBV_ATOMIC_HCA : IBV_ATOMIC_NONE;
        if (caps.has(weft::Feature::srq)) {
            a.max_srq = max_objects;
            a.max_srq_wr = static_cast<int>(std::min<std::uint32_t>(caps.max_srq_wr, INT32_MAX));
            a.max_srq_sge = static_cast<int>(std::min<std::uint32_t>(caps.max_srq_sge, INT32_MAX));
        }
        a.max_pkeys = 1;
        a.phys_port_cnt = 1;
        *out = a;
        return 0;
    });
}

// The symbol that programs built before struct ibv_port_attr grew call; verbs.h's inline wrapper uses
// verbs_context::query_port instead. The old struct ends where port_cap_flags2 begins.
int ibv_query_port(ibv_context* c, std::uint8_t port, _compat_ibv_port_attr* out) {
    return query_port(c, port, reinterpret_cast<ibv_port_attr*>(out), offsetof(ibv_port_attr, port_cap_flags2));
}

// The port's GID table has gid_table_len slots, as a real port's: GID 0, the link-local GID of the node
// GUID, is the only one populated. As rdma-core, ibv_query_gid reads an empty slot as the zero GID and
// ibv_query_gid_ex fails there with ENODATA. The only P_Key is the default one.
int ibv_query_gid(ibv_context*, std::uint8_t port, int index, ibv_gid* gid) {
    if (port != 1 || index < 0 || index >= gid_table_len) {
        errno = EINVAL;
        return -1;
    }
    *gid = {};
    if (index == 0) {
        gid->global.subnet_prefix = htobe64(0xfe80000000000000ull);
        gid->global.interface_id = htobe64(node_guid());
    }
    return 0;
}

// One entry of the GID table. `entry_size` is the program's sizeof(struct ibv_gid_entry), which may be
// smaller or larger than ours.
int _ibv_query_gid_ex(ibv_context* c, std::uint32_t port, std::uint32_t index, ibv_gid_entry* entry,
                      std::uint32_t flags, size_t entry_size) {
    if (flags || port != 1 || index >= static_cast<std::uint32_t>(gid_table_len)) return EINVAL;
    if (index != 0) return ENODATA;  // an empty slot
    ibv_gid_entry e{};
    if (ibv_query_gid(c, 1, 0, &e.gid)) return errno;
    e.gid_index = 0;
    e.port_num = 1;
    e.gid_type = IBV_GID_TYPE_IB;
    std::memset(entry, 0, entry_size);
    std::memcpy(entry, &e, std::min(entry_size, sizeof e));
    return 0;
}

// The populated entries of the GID table: GID 0 only.
ssize_t _ibv_query_gid_table(ibv_context* c, ibv_gid_entry* entries, size_t max_entries, std::uint32_t flags,
                             size_t entry_size) {
    if (flags || max_entries < 1) return -EINVAL;
    if (int err = _ibv_query_gid_ex(c, 1, 0, entries, 0, entry_size)) return -err;
    return 1;
}

int ibv_query_pkey(ibv_context*, std::uint8_t port, int index, __be16* pkey) {
    if (port != 1 || index != 0) {
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(0xffff);
    return 0;
}

int ibv_get_pkey_index(ibv_context*, std::uint8_t port, __be16 pkey) {
    if (port != 1 || pkey != htobe16(0xffff)) {
        errno = ENOENT;
        return -1;
    }
    return 0;
}

// The texts are rdma-core's, which programs print and tests compare.
const char* ibv_wc_status_str(ibv_wc_status status) {
    static constexpr std::array<const char*, IBV_WC_GENERAL_ERR + 1> text{
        "success", "local length error", "local QP operation error", "local EE context operation error",
        "local protection error", "Work Request Flushed Error", "memory management operation error",
        "bad response error", "local access error", "remote invalid request error", "remote access error",
        "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
        "local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
        "invalid EE context state", "fatal error", "response timeout error", "general error"};
    return text_of(text, status);
}

const char* ibv_node_type_str(ibv_node_type type) {
    static constexpr std::array<const char*, IBV_NODE_USNIC_UDP + 1> text{
        "unknown", "InfiniBand channel adapter", "InfiniBand switch", "InfiniBand router", "iWARP NIC",
        "usNIC", "usNIC UDP"};
    return text_of(text, type);
}

const char* ibv_port_state_str(ibv_port_state state) {
    static constexpr std::array<const char*, IBV_PORT_ACTIVE_DEFER + 1> text{
        "no state change (NOP)", "down", "init", "armed", "active", "active defer"};
    return text_of(text, state);
}

const char* ibv_event_type_str(ibv_event_type event) {
    static constexpr std::array<const char*, IBV_EVENT_GID_CHANGE + 1> text{
        "CQ error", "local work queue catastrophic error", "invalid request local work queue error",
        "local access violation work queue error", "communication established", "send queue drained",
        "path migrated", "path migration request error", "local catastrophic error", "port active",
        "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error", "SRQ limit reached",
        "last WQE reached", "client reregistration", "GID table change"};
    return text_of(text, event);
}

}  // extern "C"
