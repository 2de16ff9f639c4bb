// The ofi backend's domain: choosing an fi_info for the configured provider, deriving the Profile and
// the Capabilities from it, and registering memory in whatever MR mode the provider returned.
#include "ofi.hpp"
#include "ofi_shm.hpp"

#include <weft/log.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include <sys/eventfd.h>
#include <unistd.h>

namespace weft::ofi {
namespace {

constexpr std::uint64_t offered_mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
constexpr std::uint64_t offered_mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
// What the semantics contract needs of message ordering: sends, writes and writes-with-imm in posting
// order at the responder.
constexpr std::uint64_t contract_order = FI_ORDER_SAS | FI_ORDER_SAW | FI_ORDER_WAS | FI_ORDER_WAW;

char* dup_string(std::string_view s) {
    auto* p = static_cast<char*>(std::malloc(s.size() + 1));  // fi_freeinfo releases it with free()
    if (p == nullptr) throw std::bad_alloc();
    std::memcpy(p, s.data(), s.size());
    p[s.size()] = '\0';
    return p;
}

struct Query {
    std::string provider;
    std::string domain;
    std::string node;
    fi_ep_type ep_type = FI_EP_MSG;
    bool atomics = false;
    bool delivery_complete = true;
    std::size_t queue_size = 0;  // tx and rx context size to ask for; 0: the provider's default
};

// Returns the first fi_info matching `q`, or null with `ret` holding fi_getinfo's result.
InfoPtr query(const Query& q, int& ret) {
    InfoPtr hints(fi_allocinfo());
    if (!hints) throw std::bad_alloc();
    hints->caps = FI_MSG | FI_RMA | (q.atomics ? FI_ATOMIC : 0);
    hints->mode = offered_mode;
    hints->ep_attr->type = q.ep_type;
    hints->domain_attr->mr_mode = static_cast<int>(offered_mr_mode);
    hints->domain_attr->threading = FI_THREAD_SAFE;
    // RC completes a send or write once the responder has it; FI_DELIVERY_COMPLETE is libfabric's match.
    if (q.delivery_complete) hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    hints->tx_attr->size = q.queue_size;
    hints->rx_attr->size = q.queue_size;
    hints->fabric_attr->prov_name = dup_string(q.provider);
    if (!q.domain.empty()) hints->domain_attr->name = dup_string(q.domain);
    fi_info* out = nullptr;
    const char* node = q.node.empty() ? nullptr : q.node.c_str();
    ret = fi_getinfo(fi_api_version, node, nullptr, node ? FI_SOURCE : 0, hints.get(), &out);
    if (ret != 0) return nullptr;
    InfoPtr all(out);
    // Keep the first entry of exactly the provider asked for: fi_getinfo lists the best first, and a core
    // provider's name also matches the layered providers over it ("verbs" matches "verbs;ofi_rxm"). Some
    // providers ignore the domain name of the hints (tcp, shm return their own): it is checked here.
    for (fi_info* i = out; i; i = i->next) {
        if (i->fabric_attr == nullptr || i->fabric_attr->prov_name == nullptr || q.provider != i->fabric_attr->prov_name) {
            continue;
        }
        if (!q.domain.empty() &&
            (i->domain_attr == nullptr || i->domain_attr->name == nullptr || q.domain != i->domain_attr->name)) {
            continue;
        }
        InfoPtr first(fi_dupinfo(i));
        if (!first) throw std::bad_alloc();
        return first;
    }
    ret = -FI_ENODATA;
    return nullptr;
}

std::string available_providers() {
    fi_info* all = nullptr;
    if (fi_getinfo(fi_api_version, nullptr, nullptr, 0, nullptr, &all) != 0 || all == nullptr) return "none";
    InfoPtr hold(all);
    std::set<std::string> names;
    for (fi_info* i = all; i; i = i->next) {
        if (i->fabric_attr && i->fabric_attr->prov_name) {
            names.insert(std::string(i->fabric_attr->prov_name) + "(" +
                         (i->ep_attr && i->ep_attr->type == FI_EP_MSG ? "msg" : "rdm") + ")");
        }
    }
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
}

// The domains fi_getinfo offers for `provider` (any endpoint type, no other hints), or an empty list.
std::set<std::string> provider_domains(const std::string& provider) {
    InfoPtr hints(fi_allocinfo());
    if (!hints) throw std::bad_alloc();
    hints->fabric_attr->prov_name = dup_string(provider);
    fi_info* all = nullptr;
    std::set<std::string> names;
    if (fi_getinfo(fi_api_version, nullptr, nullptr, 0, hints.get(), &all) != 0 || all == nullptr) return names;
    InfoPtr hold(all);
    for (fi_info* i = all; i; i = i->next) {
        if (i->fabric_attr && i->fabric_attr->prov_name && provider == i->fabric_attr->prov_name && i->domain_attr &&
            i->domain_attr->name) {
            names.insert(i->domain_attr->name);
        }
    }
    return names;
}

// Providers whose shared receive context reports each receive on the receive CQ bound to the endpoint that
// took it, so that a CQ per endpoint tells which QP took it (tcp 1.17: its progress engine completes a
// receive on the taking endpoint's rx_cq).
bool srx_per_endpoint(const Profile& p) {
    return p.ep_type == FI_EP_MSG && (p.provider == "tcp" || p.provider == "sockets");
}

bool uses_sockets(std::string_view provider) {
    return provider.rfind("tcp", 0) == 0 || provider.rfind("sockets", 0) == 0 || provider.rfind("udp", 0) == 0;
}

}  // namespace

// ---- MrTable

MrTable::~MrTable() {
    for (auto& c : chunks_) delete[] c.load(std::memory_order_relaxed);
}

std::uint32_t MrTable::insert(std::uint64_t addr, std::uint64_t length, void* desc, bool local_write) {
    std::lock_guard lock(mu_);
    std::uint32_t index;
    if (!free_.empty()) {
        index = free_.back();
        free_.pop_back();
    } else {
        if (next_ >= (1u << index_bits)) {
            throw Error(Errc::resource_exhausted, "the domain holds the most memory regions it supports (1M)",
                        backend_name, "register_memory");
        }
        index = next_++;
        generation_.resize(next_, 0);
    }
    auto& slot = chunks_[index >> chunk_bits];
    MrEntry* chunk = slot.load(std::memory_order_relaxed);
    if (chunk == nullptr) {
        chunk = new MrEntry[chunk_size];
        slot.store(chunk, std::memory_order_release);
    }
    // The generation makes a stale lkey miss a region that reuses its index.
    std::uint8_t gen = ++generation_[index];
    if (gen == 0) gen = ++generation_[index];
    std::uint32_t lkey = index | (static_cast<std::uint32_t>(gen) << index_bits);
    MrEntry& e = chunk[index & (chunk_size - 1)];
    e.addr = addr;
    e.length = length;
    e.desc = desc;
    e.local_write = local_write;
    e.lkey.store(lkey, std::memory_order_release);
    return lkey;
}

void MrTable::erase(std::uint32_t lkey) noexcept {
    std::lock_guard lock(mu_);
    std::uint32_t index = lkey & ((1u << index_bits) - 1);
    if (index == 0) return;
    MrEntry* chunk = chunks_[index >> chunk_bits].load(std::memory_order_relaxed);
    if (chunk == nullptr) return;
    MrEntry& e = chunk[index & (chunk_size - 1)];
    if (e.lkey.load(std::memory_order_relaxed) != lkey) return;
    e.lkey.store(0, std::memory_order_release);
    try {
        free_.push_back(index);
    } catch (...) {
        // The index is lost; the table only gets smaller.
    }
}

// ---- MR keys

KeyMixer::KeyMixer() {
    std::random_device rd;
    for (auto& k : round_keys_) k = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::uint64_t KeyMixer::key(std::uint64_t seq) const noexcept { return permute(seq, 31); }

std::uint64_t KeyMixer::tag(std::uint64_t seq) const noexcept {
    // A permutation of 2^16 walked until it lands below 2^15 is a permutation of 2^15.
    std::uint64_t x = seq & offset_key_tag_mask;
    do {
        x = permute(x, 8);
    } while (x > offset_key_tag_mask);
    return x;
}

std::uint64_t KeyMixer::permute(std::uint64_t in, unsigned half_bits) const noexcept {
    // A balanced Feistel network on 2 x half_bits bits: a bijection whatever the round function, so
    // distinct inputs give distinct outputs. The round function is a keyed 64-bit mixer.
    const std::uint64_t half = (1ull << half_bits) - 1;
    std::uint64_t l = (in >> half_bits) & half;
    std::uint64_t r = in & half;
    for (std::uint64_t k : round_keys_) {
        std::uint64_t x = r ^ k;
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 31;
        std::uint64_t next = l ^ (x & half);
        l = r;
        r = next;
    }
    return (l << half_bits) | r;
}

// ---- Domain

OfiDomain::OfiDomain(const Config& cfg) {
    choose_info(cfg);
    static constexpr std::string_view onoff[] = {"on", "off"};
    const bool shm_cleanup = cfg.get_choice("shm_cleanup", "on", onoff) == "on";
    if (profile_.provider == "shm" && shm_cleanup) {
        // Regions of shm endpoints whose process was killed stay in /dev/shm for good (ofi_shm.hpp); each
        // process that opens an shm domain removes those of this user's ended processes.
        if (std::size_t n = remove_dead_shm_regions(); n != 0) {
            WEFT_LOGF(ofi, info, "removed %zu shm region(s) of ended processes from /dev/shm", n);
        }
    }
    fid_fabric* fabric = nullptr;
    check(fi_fabric(info_->fabric_attr, &fabric, nullptr), "fi_fabric", "open", profile_.provider);
    fabric_.reset(fabric);
    fid_domain* domain = nullptr;
    check(fi_domain(fabric_.get(), info_.get(), &domain, nullptr), "fi_domain", "open", profile_.provider);
    domain_.reset(domain);

    if (profile_.atomics) {
        // The caps bit is not a promise for every type and op: ask for the two weft needs.
        fi_atomic_attr attr{};
        bool fadd = fi_query_atomic(domain_.get(), FI_UINT64, FI_SUM, &attr, FI_FETCH_ATOMIC) == 0;
        bool cswap = fi_query_atomic(domain_.get(), FI_UINT64, FI_CSWAP, &attr, FI_COMPARE_ATOMIC) == 0;
        profile_.atomics = fadd && cswap;
    }

    if (profile_.prov_key) {
        // The MR cache shows as one key for two registrations of the same buffer with different rights.
        static std::uint64_t probe_buf[2];
        fid_mr* a = nullptr;
        fid_mr* b = nullptr;
        if (fi_mr_reg(domain_.get(), probe_buf, sizeof probe_buf, FI_SEND | FI_RECV | FI_REMOTE_WRITE, 0, 1, 0, &a,
                      nullptr) == 0) {
            Fid<fid_mr> hold_a(a);
            if (fi_mr_reg(domain_.get(), probe_buf, sizeof probe_buf, FI_SEND | FI_RECV | FI_REMOTE_READ, 0, 2, 0, &b,
                          nullptr) == 0) {
                Fid<fid_mr> hold_b(b);
                profile_.mr_cache = fi_mr_key(a) == fi_mr_key(b);
            }
        }
    }

    // A CQ wait object gives Feature::cq_fd; probe it once with a throwaway CQ.
    fi_cq_attr cq_attr{};
    cq_attr.size = 1;
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.wait_obj = FI_WAIT_FD;
    fid_cq* probe_cq = nullptr;
    if (fi_cq_open(domain_.get(), &cq_attr, &probe_cq, nullptr) == 0) {
        Fid<fid_cq> hold(probe_cq);
        int fd = -1;
        profile_.wait_fd = fi_control(&probe_cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0;
    }
    // Shared receive contexts: where the provider offers them to MSG endpoints and reports a receive on the
    // receive CQ of the endpoint that took it (see ofi_srq.cpp; what each provider does is in
    // docs/backends/ofi.md). The probe opens one and closes it.
    if (srx_per_endpoint(profile_)) {
        fid_ep* srx = nullptr;
        if (fi_srx_context(domain_.get(), info_->rx_attr, &srx, nullptr) == 0) {
            fi_close(&srx->fid);
            profile_.srx = true;
        }
    }
    // Elsewhere weft queues the receives itself and feeds them from bounce buffers (ofi_srq.cpp): ofi_rxm
    // has no shared context (fi_srx_context returns -FI_ENOSYS); shm reports a context's receives on the
    // context's CQ, naming no endpoint; the verbs provider of libfabric 1.17 reports a write with immediate
    // taken from a context as a plain receive (vrb_poll_cq rewrites the opcode of every VRB_OP_SRQ entry).
    profile_.srq_emulated = !profile_.srx;
    profile_.srq_bounce_size = static_cast<std::size_t>(
        cfg.get_uint("srq_bounce_size", srq_bounce_size_default, 1, std::uint64_t{1} << 30));
    profile_.srq_bounces =
        static_cast<std::uint32_t>(cfg.get_uint("srq_bounces", srq_bounces_default, 1, srq_bounces_max));
    // shm's senders only raise a flag in the receiver's shared memory: its descriptor never wakes by itself.
    profile_.native_wait = profile_.wait_fd && profile_.provider != "shm";
    fill_capabilities();
    // Each bounce is a receive posted at the QP's endpoint: the provider's receive queue must hold them all.
    // The default follows a small queue_size; a value the user gave is refused.
    if (!cfg.has("srq_bounces")) profile_.srq_bounces = std::max(1u, std::min(profile_.srq_bounces, caps.max_qp_wr));
    if (profile_.srq_emulated && profile_.srq_bounces > caps.max_qp_wr) {
        throw Error(Errc::invalid_config,
                    "srq_bounces=" + std::to_string(profile_.srq_bounces) + " is more receives than " +
                        profile_.provider + "'s receive queue holds here (" + std::to_string(caps.max_qp_wr) +
                        "; raise queue_size or lower srq_bounces)",
                    backend_name, "open");
    }
}

OfiDomain::~OfiDomain() {
    if (event_fd_ >= 0) ::close(event_fd_);
}

int OfiDomain::event_fd() {
    std::lock_guard lock(events_mu_);
    if (event_fd_ < 0) {
        event_fd_ = ::eventfd(events_.empty() ? 0 : 1, EFD_NONBLOCK | EFD_CLOEXEC);
        if (event_fd_ < 0) throw_errno(errno, "eventfd for the domain's events", backend_name, "Domain::event_fd");
    }
    return event_fd_;
}

bool OfiDomain::next_event(AsyncEvent& out) {
    std::lock_guard lock(events_mu_);
    if (events_.empty()) return false;
    out = events_.front();
    events_.pop_front();
    if (events_.empty() && event_fd_ >= 0) {
        std::uint64_t count = 0;
        [[maybe_unused]] const ssize_t r = ::read(event_fd_, &count, sizeof count);
    }
    return true;
}

void OfiDomain::push_event(const AsyncEvent& e) noexcept {
    std::lock_guard lock(events_mu_);
    try {
        events_.push_back(e);
    } catch (...) {
        return;  // out of memory: the event is lost; the QP's state and completions still say what happened
    }
    if (events_.size() == 1 && event_fd_ >= 0) {
        const std::uint64_t one = 1;
        [[maybe_unused]] const ssize_t w = ::write(event_fd_, &one, sizeof one);
    }
}

void OfiDomain::choose_info(const Config& cfg) {
    Query q;
    q.provider = cfg.get_string("provider", "tcp");
    if (q.provider.empty()) {
        throw Error(Errc::invalid_config, "provider must not be empty (e.g. provider=tcp)", backend_name, "open");
    }
    q.domain = cfg.get_string("domain", "");
    q.node = cfg.get_string("node", uses_sockets(q.provider) ? "127.0.0.1" : "");
    q.queue_size = cfg.has("queue_size") ? cfg.get_uint("queue_size", 0, 1, 1u << 20) : 0;
    static constexpr std::string_view ep_choices[] = {"msg", "rdm"};
    static constexpr std::string_view atomic_choices[] = {"auto", "on", "off"};
    std::string_view atomics_mode = cfg.get_choice("atomics", "auto", atomic_choices);

    std::vector<fi_ep_type> types;
    if (cfg.has("ep_type")) {
        types.push_back(cfg.get_choice("ep_type", "msg", ep_choices) == "msg" ? FI_EP_MSG : FI_EP_RDM);
    } else {
        types = {FI_EP_MSG, FI_EP_RDM};
    }

    static constexpr std::string_view onoff_choices[] = {"off", "on"};
    const bool unchecked_rma = cfg.get_choice("unchecked_rma", "off", onoff_choices) == "on";
    static constexpr std::string_view dc_choices[] = {"auto", "on", "off"};
    std::string_view dc_mode = cfg.get_choice("delivery_complete", "auto", dc_choices);
    // shm 1.17 under FI_DELIVERY_COMPLETE never completes a truncated receive nor a write it refuses.
    bool want_dc = dc_mode == "on" || (dc_mode == "auto" && q.provider != "shm");

    int ret = -FI_ENODATA;
    for (bool delivery : {want_dc, false}) {
    q.delivery_complete = delivery;
    for (fi_ep_type t : types) {
        q.ep_type = t;
        q.atomics = false;
        int plain_ret = 0;
        InfoPtr plain = query(q, plain_ret);
        InfoPtr with_atomics;
        // The verbs provider of libfabric 1.17 posts fetch-add and compare-swap with the operands' addresses
        // (or the fi_addr_t) as the values, so the target adds FI_ADDR_UNSPEC (-1) and compares with a
        // pointer; fi_query_atomic still answers yes. Its atomics stay off (docs/backends/ofi.md).
        const bool atomics_broken = q.provider == "verbs" && fi_version() <= FI_VERSION(1, 17);
        if (atomics_mode != "off" && !atomics_broken) {
            q.atomics = true;
            int atomic_ret = 0;
            with_atomics = query(q, atomic_ret);
        }
        if (with_atomics) {
            // Some providers give up message ordering to offer atomics (ofi_rxm drops SAW, WAW, ...): in
            // auto mode keep the ordering the contract needs and go without atomics.
            std::uint64_t kept = plain ? plain->tx_attr->msg_order & contract_order : 0;
            bool keeps_order = (with_atomics->tx_attr->msg_order & kept) == kept;
            if (atomics_mode == "on" || keeps_order || !plain) {
                info_ = std::move(with_atomics);
                profile_.atomics = true;
                break;
            }
        }
        if (plain) {
            info_ = std::move(plain);
            break;
        }
        ret = plain_ret;
    }
    if (info_) {
        profile_.delivery_complete = delivery;
        break;
    }
    }
    if (!info_ && !q.domain.empty()) {
        // A provider that exists without that domain: say which domains it has.
        std::set<std::string> domains = provider_domains(q.provider);
        if (!domains.empty() && domains.count(q.domain) == 0) {
            std::string what = "provider '" + q.provider + "' has no domain '" + q.domain + "'; its domains here: ";
            bool first = true;
            for (const auto& d : domains) {
                what += (first ? "" : ", ") + d;
                first = false;
            }
            throw Error(Errc::invalid_config, std::move(what), backend_name, "open");
        }
    }
    if (!info_) {
        std::string what = "no fi_info for provider '" + q.provider + "'";
        if (!q.domain.empty()) what += " domain '" + q.domain + "'";
        if (!q.node.empty()) what += " node " + q.node;
        what += " with FI_MSG|FI_RMA";
        if (cfg.has("ep_type")) what += " and ep_type " + std::string(cfg.get_string("ep_type", ""));
        if (q.queue_size != 0) what += " and queues of " + std::to_string(q.queue_size) + " (queue_size)";
        what += std::string(" (") + fi_strerror(-ret) + "); providers here: " + available_providers();
        throw Error(Errc::backend_unavailable, std::move(what), backend_name, "open");
    }

    fi_info& i = *info_;
    Profile& p = profile_;
    p.provider = i.fabric_attr->prov_name ? i.fabric_attr->prov_name : q.provider;
    p.ep_type = i.ep_attr->type;
    std::uint64_t mr_mode = static_cast<std::uint64_t>(i.domain_attr->mr_mode);
    if (mr_mode == FI_MR_BASIC) mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_LOCAL;
    if (mr_mode == FI_MR_SCALABLE) mr_mode = 0;
    p.mr_local = (mr_mode & FI_MR_LOCAL) != 0 || (i.mode & FI_LOCAL_MR) != 0;
    p.virt_addr = (mr_mode & FI_MR_VIRT_ADDR) != 0;
    p.prov_key = (mr_mode & FI_MR_PROV_KEY) != 0;
    p.our_keys = !p.prov_key && i.domain_attr->mr_key_size >= 8;
    if (!p.virt_addr && p.our_keys && (p.provider == "tcp" || p.provider == "sockets")) {
        // tcp and sockets need neither mode bit and return none, which makes a target address an offset
        // into the region. Asking for FI_MR_VIRT_ADDR at fi_domain is accepted (a mode the application
        // offers beyond what the provider needs) and makes it a virtual address, which weft's RemoteRegion
        // carries: the key then carries nothing but itself (KeyMixer). Not rxm over tcp: it opens its tcp
        // domain from a fresh fi_getinfo, which returns tcp's own mode (offsets) whatever rxm was given.
        i.domain_attr->mr_mode |= FI_MR_VIRT_ADDR;
        p.virt_addr = true;
    }
    if (!p.virt_addr && !p.our_keys) {
        // weft's RemoteRegion carries the region's virtual address; an offset-addressed provider that
        // also picks the keys leaves no way to find the region's base at the requester.
        throw Error(Errc::not_supported,
                    "provider '" + p.provider +
                        "' addresses regions by offset (no FI_MR_VIRT_ADDR) and picks its own keys; the ofi "
                        "backend needs one of the two",
                    backend_name, "open");
    }
    if ((mr_mode & (FI_MR_RAW | FI_MR_ENDPOINT | FI_MR_RMA_EVENT | FI_MR_MMU_NOTIFY | FI_MR_HMEM)) != 0) {
        throw Error(Errc::not_supported,
                    "provider '" + p.provider + "' asks for MR mode bits weft does not offer: " +
                        fi_tostr(&i.domain_attr->mr_mode, FI_TYPE_MR_MODE),
                    backend_name, "open");
    }
    p.cq_data_size = i.domain_attr->cq_data_size;
    p.native_imm = (i.mode & FI_RX_CQ_DATA) != 0 && p.cq_data_size >= 4;
    p.emulated_imm = !p.native_imm && p.cq_data_size >= 8;
    p.fence = (i.caps & FI_FENCE) != 0;
    p.needs_kicks = i.domain_attr->data_progress == FI_PROGRESS_MANUAL || p.provider != "verbs";
    static constexpr std::string_view progress_choices[] = {"manual", "thread"};
    p.progress_thread = cfg.get_choice("progress", "manual", progress_choices) == "thread";
    // Only the verbs provider itself: rxm over it reports errors of its own protocol too.
    p.verbs_status = p.provider == "verbs";
    p.inject_size = i.tx_attr->inject_size;
    p.iov_limit = static_cast<std::uint32_t>(std::max<std::size_t>(
        1, std::min({i.tx_attr->iov_limit, i.rx_attr->iov_limit, std::size_t{64}})));
    p.msg_order = i.tx_attr->msg_order;
    // Providers whose target checks every remote access against its registrations (ofi_mr_map_verify in
    // tcp and sockets, the HCA for verbs; rxm passes RMA through to them) and fails it without touching
    // memory. shm 1.17 copies writes and reads from the requester (process_vm_writev/readv) without
    // looking the key up; its checked path (FI_DELIVERY_COMPLETE) drops a refused request without
    // completing it. Any other provider is not known to check.
    static constexpr std::string_view checked[] = {"tcp", "tcp;ofi_rxm", "sockets", "verbs", "verbs;ofi_rxm"};
    p.rma_checked = std::find(std::begin(checked), std::end(checked), p.provider) != std::end(checked);
    p.rma = p.rma_checked || unchecked_rma;
}

void OfiDomain::fill_capabilities() {
    const fi_info& i = *info_;
    const Profile& p = profile_;
    caps.kind = BackendKind::ofi;
    caps.backend = std::string(backend_name);
    caps.device = p.provider + "/" + (i.domain_attr->name ? i.domain_attr->name : "?") +
                  (p.ep_type == FI_EP_MSG ? " (msg)" : " (rdm)");
    // Named deviations from the specification (docs/semantics.md) are per provider: "ofi-tcp",
    // "ofi-shm", "ofi-tcp-rxm", "ofi-sockets", "ofi-verbs".
    std::string name = p.provider;
    for (std::string::size_type at; (at = name.find(";ofi_")) != std::string::npos;) name.replace(at, 5, "-");
    caps.profile = "ofi-" + name;
    std::uint32_t f = static_cast<std::uint32_t>(Feature::wait) | static_cast<std::uint32_t>(Feature::error_flush) |
                      static_cast<std::uint32_t>(Feature::zero_length);
    auto add = [&f](Feature x) { f |= static_cast<std::uint32_t>(x); };
    // Only where the requester is told: sockets answers with -FI_EACCES, verbs hardware NAKs. tcp and
    // rxm close the connection (the requester sees transport_retry_exceeded); shm either skips the check
    // (transmit-complete writes go through) or never completes the request (delivery-complete).
    // Under libfabric's MR cache (FI_MR_CACHE_MAX_COUNT not 0) verbs regions carry every remote right.
    if (p.provider == "sockets" || (p.provider == "verbs" && !p.mr_cache)) add(Feature::remote_access_check);
    if (p.cq_data_size >= 4) add(Feature::send_with_imm);
    // Without checked RMA (shm unless unchecked_rma=on) no remote operation is claimed; writes, which the
    // core always allows, are refused at post (OfiQp::post_send).
    if (p.rma && (p.native_imm || p.emulated_imm)) add(Feature::write_with_imm);
    if (p.rma && (i.caps & FI_RMA) != 0 && (i.tx_attr->caps & (FI_READ | FI_RMA)) != 0) add(Feature::read);
    if (p.rma && p.atomics) add(Feature::atomics);
    add(Feature::disconnect);  // the liveness goodbye (ofi_liveness.cpp)
    add(Feature::async_events);  // peer_disconnected, from that goodbye
    add(Feature::fence);  // FI_FENCE where the provider has it, emulated otherwise (ofi_datapath.cpp)
    if (p.inject_size > 0) add(Feature::inline_data);
    // The provider's wait fd where its peers wake it (verbs, tcp, rxm, sockets); an eventfd set by the
    // service thread otherwise (shm; OfiCq::fd()).
    add(Feature::cq_fd);
    add(Feature::listener);  // a TCP rendezvous for the QP addresses (ofi_cm.cpp)
    if (p.srx || p.srq_emulated) add(Feature::srq);  // over fi_srx_context, or emulated (ofi_srq.cpp)
    caps.features = f;
    caps.max_qp_wr = static_cast<std::uint32_t>(
        std::min<std::size_t>({i.tx_attr->size, i.rx_attr->size, std::numeric_limits<std::uint32_t>::max()}));
    caps.max_sge = p.iov_limit;
    if (p.srx || p.srq_emulated) {
        caps.max_srq_wr = srq_max_wr;
        caps.max_srq_sge = p.iov_limit;
    }
    caps.max_inline = static_cast<std::uint32_t>(std::min<std::size_t>(p.inject_size, 1u << 16));
    caps.max_cqe = 1u << 20;
    caps.max_msg_size = std::min<std::uint64_t>(i.ep_attr->max_msg_size, std::numeric_limits<std::uint32_t>::max());
    // Keys of offset-addressed providers carry the region base in 48 bits.
    caps.max_mr_size = p.our_keys && !p.virt_addr ? (1ull << 47) : std::numeric_limits<std::uint64_t>::max();
    caps.max_private_data = wire::max_private_data;
}

std::unique_ptr<detail::MrImpl> OfiDomain::register_memory(void* addr, std::size_t length, Access access) {
    const Profile& p = profile_;
    bool local_write = has(access, Access::local_write);
    std::uint64_t fi_access = FI_SEND | FI_WRITE;
    if (local_write) fi_access |= FI_RECV | FI_READ;
    if (has(access, Access::remote_read)) fi_access |= FI_REMOTE_READ;
    if (has(access, Access::remote_write)) fi_access |= FI_REMOTE_WRITE;
    // libfabric has no separate atomic right: atomics need remote read and write. Keys we choose carry
    // the atomic right so the requester can refuse atomics on regions without it.
    bool atomic_right = has(access, Access::remote_atomic);
    if (atomic_right) fi_access |= FI_REMOTE_READ | FI_REMOTE_WRITE;
    // ofi_rxm registers its core provider's region with a remote right for every local one, for its
    // rendezvous protocol: FI_SEND adds FI_REMOTE_READ (FI_WRITE with FI_OFI_RXM_USE_WRITE_RNDV), FI_RECV adds
    // FI_REMOTE_WRITE under write rendezvous. A region without those rights is registered without the local
    // flag that would grant them, and its descriptor is not handed to rxm: a large send or receive through
    // it then takes rxm's own registration of the buffer (it needs none from the application here).
    bool withhold_desc = false;
    if (p.provider.find(";ofi_rxm") != std::string::npos && !p.mr_local) {
        if ((fi_access & FI_REMOTE_READ) == 0 && (fi_access & FI_SEND) != 0) {
            fi_access &= ~FI_SEND;
            withhold_desc = true;
        }
        if ((fi_access & FI_REMOTE_WRITE) == 0 && (fi_access & FI_RECV) != 0) {
            fi_access &= ~FI_RECV;
            withhold_desc = true;
        }
    }

    auto base = reinterpret_cast<std::uint64_t>(addr);
    if (p.our_keys && !p.virt_addr && base >= (1ull << (64 - key_base_shift))) {
        throw Error(Errc::invalid_argument, "address above 2^48 cannot be carried in an MR key", backend_name,
                    "register_memory");
    }
    fid_mr* mr = nullptr;
    std::uint64_t key = 0;
    for (int attempt = 0;; ++attempt) {
        if (!p.prov_key) {
            std::lock_guard lock(key_mu_);
            std::uint64_t seq = key_seq_++;
            if (!p.our_keys) {
                key = seq;
            } else if (p.virt_addr) {
                key = keys_.key(seq) | (atomic_right ? key_atomic_bit : 0);
            } else {
                key = (base << key_base_shift) | (atomic_right ? offset_key_atomic_bit : 0) | keys_.tag(seq);
            }
        }
        int ret = fi_mr_reg(domain_.get(), addr, length, fi_access, 0, key, 0, &mr, nullptr);
        if (ret == 0) break;
        // Only offset keys can meet a live one (same base, same 15-bit tag): take the next.
        if (ret == -FI_ENOKEY && p.our_keys && !p.virt_addr && attempt < 64) continue;
        errors.fail_fabric(ret, "fi_mr_reg", "register_memory",
             std::to_string(length) + " bytes at " + std::to_string(base) + " with " + to_string(access));
    }
    Fid<fid_mr> hold(mr);
    auto out = std::make_unique<OfiMr>(std::static_pointer_cast<OfiDomain>(shared_from_this()), std::move(hold));
    out->addr = addr;
    out->length = length;
    out->desc = fi_mr_desc(mr);
    out->rkey = p.prov_key ? fi_mr_key(mr) : key;
    out->access = access;
    out->kind = BackendKind::ofi;
    out->lkey = mrs_.insert(base, length, withhold_desc ? nullptr : out->desc, local_write);
    return out;
}

OfiMr::~OfiMr() {
    if (dom_) dom_->mrs().erase(lkey);
}

std::shared_ptr<detail::CqImpl> OfiDomain::create_cq(const CqOptions& options) {
    return std::make_shared<OfiCq>(std::static_pointer_cast<OfiDomain>(shared_from_this()), options);
}

std::unique_ptr<detail::QpImpl> OfiDomain::create_qp(const detail::QpSetup& setup) {
    return std::make_unique<OfiQp>(std::static_pointer_cast<OfiDomain>(shared_from_this()), setup);
}

}  // namespace weft::ofi
