// The ofi plugin's entry point: configuration keys, probe, open, the fi_* error helper, and the
// process-wide bookkeeping that lets QPs and CQs of one process drive each other's progress.
#include "ofi.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>

namespace weft::ofi {

namespace {

constexpr std::array<KeySpec, 12> ofi_keys{{
    {"provider",
     "libfabric provider (fi_info -l): tcp, shm, sockets, verbs, tcp;ofi_rxm, verbs;ofi_rxm ...; default tcp"},
    {"ep_type", "msg or rdm; default msg where the provider offers FI_EP_MSG (tcp, verbs, sockets), rdm otherwise"},
    {"domain", "provider domain (NIC or interface), e.g. rxe0 or lo; default the first one fi_getinfo returns; one "
               "the provider does not have is refused"},
    {"node", "local address to bind; default 127.0.0.1 for tcp and sockets, none otherwise"},
    {"atomics",
     "auto (default): FI_ATOMIC when the provider keeps its message ordering with it; on; off"},
    {"delivery_complete",
     "sends and writes complete once placed at the target (FI_DELIVERY_COMPLETE): auto (default: on, off "
     "for shm, which loses truncated receives with it), on, off"},
    {"unchecked_rma",
     "off (default): writes, reads and atomics only where the provider checks the target's key, bounds and "
     "rights (tcp, sockets, verbs, rxm over them), refused at post elsewhere (shm); on: allow them anyway"},
    {"queue_size",
     "the work requests a QP's send or receive queue may hold at most (Capabilities::max_qp_wr), asked of the "
     "provider as its tx and rx context size: 1 to 1048576; default: the provider's default (256 on tcp and "
     "sockets)"},
    {"progress",
     "manual (default): the provider moves data inside weft calls on the CQs (and the service thread's, where "
     "needed), so a peer that never calls weft may stall one-sided requests; thread: the service thread also "
     "progresses every CQ, at least every millisecond and when the provider's descriptor reports data, as a "
     "NIC answers writes, reads and atomics without the target's CPU"},
    {"srq_bounce_size",
     "where shared receive queues are emulated (shm, rxm, verbs): the bytes of each bounce buffer a QP on a "
     "shared queue receives into, so the longest message it takes: 1 to 1073741824; default 65536"},
    {"srq_bounces",
     "where shared receive queues are emulated (shm, rxm, verbs): the bounce buffers each QP on a shared queue "
     "keeps posted, so the messages it holds while the queue is empty: 1 to 4096, at most the provider's "
     "receive queue size; default 4"},
    {"shm_cleanup",
     "shm: on (default): at open, remove the /dev/shm regions this user's shm endpoints left when their process "
     "ended without closing them (SIGKILL), named <pid>:<uid>:<n> with no process <pid>; off: leave them"},
}};

std::string probe_ofi() {
    prepare_libfabric();
    fi_info* info = nullptr;
    int ret = fi_getinfo(fi_api_version, nullptr, nullptr, 0, nullptr, &info);
    InfoPtr hold(info);
    if (ret != 0) return std::string("fi_getinfo found no provider: ") + fi_strerror(-ret);
    if (info == nullptr) return "fi_getinfo returned no provider";
    return {};
}

std::shared_ptr<detail::DomainImpl> open_ofi(const Config& config) {
    prepare_libfabric();
    return std::make_shared<OfiDomain>(config);
}

const detail::Plugin ofi_plugin{
    detail::plugin_abi_version,
    "ofi",
    "libfabric: verbs, tcp, shm and other providers",
    std::span<const KeySpec>(ofi_keys),
    &probe_ofi,
    &open_ofi,
};

}  // namespace

void prepare_libfabric() {
    static constexpr const char* default_universe_size = "16";
    static std::once_flag once;
    std::call_once(once, [] {
        // libfabric's MR cache (verbs, and rxm over it) registers every cached region with all remote rights
        // and keeps it registered after fi_close: a region's rights and its deregistration would not hold.
        // It is read once, at libfabric's first call in the process; the user's own setting wins.
        ::setenv("FI_MR_CACHE_MAX_COUNT", "0", 0);
        // A weft QP talks to exactly one peer, yet rxm sizes each endpoint's core CQ for the whole universe:
        // (msg rx size + msg tx size) x FI_UNIVERSE_SIZE entries, 65536 with the default 256, which is more
        // than small devices give (rxe: 32767) and megabytes per QP elsewhere. Same rule: the user's wins.
        ::setenv("FI_UNIVERSE_SIZE", default_universe_size, 0);
        // rxm over verbs without a shared receive context faults in fi_close of an endpoint (libfabric 1.17
        // to at least 1.22): rxm_close_conn closes the connection's verbs endpoint, then reads the core CQ and
        // handles what was still queued through the connection, whose msg_ep still names the closed endpoint.
        // A received message or flow-control credit there reposts its buffer to it (SIGSEGV in fi_recv), and
        // a credit is written into it first. Any message that arrived since the last poll (a peer's credits
        // come unbidden, after it consumed our sends) makes the next close crash. With a shared receive
        // context (tcp's default already) buffers go back to it, which rxm closes last, and verbs gives no
        // flow control, so no credits travel. Costs more receive buffers per endpoint (docs/backends/ofi.md).
        ::setenv("FI_OFI_RXM_USE_SRX", "1", 0);
    });
}

namespace registry {
namespace {

std::mutex live_mu;
std::vector<OfiQp*> live;

std::mutex attention_mu;
std::vector<OfiQp*> attention;

template <class T>
void erase_value(std::vector<T*>& v, const T* p) {
    v.erase(std::remove(v.begin(), v.end(), p), v.end());
}

}  // namespace

std::atomic<std::size_t> attention_size{0};

void add_live(OfiQp* qp) {
    std::lock_guard lock(live_mu);
    live.push_back(qp);
}

void remove_live(OfiQp* qp) {
    std::lock_guard lock(live_mu);
    erase_value(live, qp);
}

bool peer_connecting(std::uint64_t nonce) {
    std::lock_guard lock(live_mu);
    for (const OfiQp* q : live) {
        if (q->nonce() == nonce) return q->connect_called();
    }
    return false;
}

void tell_peer_gone(std::uint64_t nonce) {
    std::lock_guard lock(live_mu);
    for (OfiQp* q : live) {
        if (q->nonce() == nonce) q->peer_gone();
    }
}

void tell_peer_goodbye(std::uint64_t nonce) {
    std::lock_guard lock(live_mu);
    for (OfiQp* q : live) {
        if (q->nonce() == nonce) q->peer_said_goodbye();
    }
}

bool peer_settled(std::uint64_t nonce) {
    std::lock_guard lock(live_mu);
    for (const OfiQp* q : live) {
        if (q->nonce() == nonce) return q->state() != QpState::rtr;
    }
    return true;
}

void want_attention(OfiQp* qp) {
    std::lock_guard lock(attention_mu);
    if (std::find(attention.begin(), attention.end(), qp) == attention.end()) attention.push_back(qp);
    attention_size.store(attention.size(), std::memory_order_release);
    service::attention_wanted();
}

void drop_attention(OfiQp* qp) {
    std::lock_guard lock(attention_mu);
    erase_value(attention, qp);
    attention_size.store(attention.size(), std::memory_order_release);
}


// QP locks are only ever tried here: a poster holds its QP's lock while it asks for attention.
void drive_all(bool try_only) noexcept {
    std::unique_lock lock(attention_mu, std::defer_lock);
    if (try_only) {
        if (!lock.try_lock()) return;
    } else {
        lock.lock();
    }
    for (std::size_t i = 0; i < attention.size();) {
        if (attention[i]->drive(true)) {
            ++i;
        } else {
            attention.erase(attention.begin() + static_cast<std::ptrdiff_t>(i));
        }
    }
    attention_size.store(attention.size(), std::memory_order_release);
}

std::array<std::shared_ptr<OfiCq>, 2> local_cqs(std::uint64_t nonce) {
    std::lock_guard lock(live_mu);
    for (OfiQp* q : live) {
        if (q->nonce() == nonce) return q->cqs();
    }
    return {};
}

}  // namespace registry
}  // namespace weft::ofi

WEFT_DEFINE_PLUGIN(weft::ofi::ofi_plugin)
