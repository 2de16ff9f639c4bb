// The ofi backend's queue pairs, setup side: endpoints, the QP address, and the connection handshake.
//
// Connecting is symmetric in weft (each side calls connect(peer_address)) but a libfabric MSG endpoint
// is connected by one side's fi_connect and the other side's fi_accept. Every MSG QP therefore listens
// on a passive endpoint of its own from creation; its address carries that endpoint's name and a random
// nonce. On connect(), the side whose (name, nonce) is smaller connects actively, the other accepts the
// FI_CONNREQ whose connection data names both nonces. connect() never waits for a peer that has not
// called connect() yet: it starts its half and returns in state rtr; the handshake then finishes inside
// later calls (the peer's connect() in the same process, any post or poll, CompletionQueue::wait).
// Sends posted in rtr are queued in the ring and go out when the connection is established.
//
// RDM endpoints need no handshake: connect() inserts the peer's name into the QP's address vector.
#include "ofi.hpp"

#include <weft/detail/bytes.hpp>
#include <weft/detail/wire.hpp>
#include <weft/log.hpp>

#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

namespace weft::ofi {
namespace {

constexpr std::chrono::seconds local_handshake_limit{10};

std::uint8_t address_flags(const Profile& p) noexcept {
    return static_cast<std::uint8_t>((p.emulated_imm ? 1u : 0u) | (p.native_imm ? 2u : 0u));
}

std::vector<std::byte> get_name(fid_t fid, std::string_view object) {
    std::vector<std::byte> name(256);
    std::size_t len = name.size();
    int ret = fi_getname(fid, name.data(), &len);
    if (ret == -FI_ETOOSMALL) {
        name.resize(len);
        ret = fi_getname(fid, name.data(), &len);
    }
    check(ret, "fi_getname", object);
    name.resize(len);
    return name;
}

void init_ring(Ring& r, OfiQp* qp, OfiCq* cq, bool send_side, std::uint32_t limit, std::uint32_t sge) {
    r.qp = qp;
    r.cq = cq;
    r.send_side = send_side;
    r.limit = limit;
    std::uint32_t n = std::bit_ceil(std::max(limit, 1u));
    r.mask = n - 1;
    r.slots = std::make_unique<Slot[]>(n);
    r.iovs = std::make_unique<iovec[]>(static_cast<std::size_t>(n) * sge);
    r.descs = std::make_unique<void*[]>(static_cast<std::size_t>(n) * sge);
    for (std::uint32_t i = 0; i < n; ++i) {
        Slot& s = r.slots[i];
        s.ring = &r;
        s.iov = &r.iovs[static_cast<std::size_t>(i) * sge];
        s.desc = &r.descs[static_cast<std::size_t>(i) * sge];
        for (auto& op : s.ops) op.slot = &s;
    }
}

std::uint64_t fresh_nonce() {
    static std::atomic<std::uint64_t> counter{0};
    std::random_device rd;
    std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
    return v == 0 ? 1 : v;
}

}  // namespace

// ---- Completion queue setup

OfiCq::OfiCq(std::shared_ptr<OfiDomain> dom, const CqOptions& options)
    : dom_(std::move(dom)), profile_(&dom_->profile()), depth_(options.depth) {
    fi_cq_attr attr{};
    // Provider entries outnumber weft completions (unsignaled requests, two-part write_with_imm).
    attr.size = std::max<std::size_t>(64, static_cast<std::size_t>(options.depth) * 2);
    attr.format = FI_CQ_FORMAT_DATA;
    attr.wait_obj = profile_->native_wait ? FI_WAIT_FD : FI_WAIT_NONE;
    fid_cq* cq = nullptr;
    check(fi_cq_open(dom_->domain(), &attr, &cq, this), "fi_cq_open", "create_cq");
    cq_.reset(cq);
    if (profile_->native_wait) {
        check(fi_control(&cq->fid, FI_GETWAIT, &wait_fd_), "fi_control(FI_GETWAIT)", "create_cq");
        nudge_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (nudge_fd_ < 0) throw_errno(errno, "eventfd for the CQ's waits", backend_name, "create_cq");
    } else {
        // The descriptor fd() hands out exists from the start: fd() has nothing to create.
        event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (event_fd_ < 0) throw_errno(errno, "eventfd for the CQ's descriptor", backend_name, "create_cq");
    }
    if (profile_->progress_thread) {
        service::start_thread_progress(this, wait_fd_);
        thread_progress_ = true;
    }
}

OfiCq::~OfiCq() {
    if (thread_progress_) service::stop_thread_progress(this, wait_fd_);
    service::remove_round(this);
    if (fd_mode_.load(std::memory_order_acquire)) service::fd_mode_left();
    if (event_fd_ >= 0) ::close(event_fd_);
    if (nudge_fd_ >= 0) ::close(nudge_fd_);
}

int OfiCq::fd() {
    if (!fd_mode_.exchange(true, std::memory_order_acq_rel)) {
        detours_.fetch_or(detour_fd, std::memory_order_release);
        // Without a native wait nothing progresses the provider while the application sleeps on the
        // descriptor, and peers in this process may need kicks: the service thread does both.
        if (profile_->needs_kicks) service::add_round(this);
        service::fd_mode_entered();
        wake();  // readable at once: the caller polls until empty, which arms it
    }
    return wait_fd_ >= 0 ? wait_fd_ : event_fd_;
}

void OfiCq::bind(OfiQp* qp) {
    std::lock_guard lock(bound_mu_);
    bound_.push_back(qp);
}

void OfiCq::unbind(OfiQp* qp) noexcept {
    std::lock_guard lock(bound_mu_);
    bound_.erase(std::remove(bound_.begin(), bound_.end(), qp), bound_.end());
}

void OfiCq::local_peer_linked(KickLink& link) noexcept {
    std::lock_guard lock(bound_mu_);
    link.next.store(kicks_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    kicks_.store(&link, std::memory_order_release);
    local_links_.fetch_add(1, std::memory_order_relaxed);
}

void OfiCq::local_peer_unlinked(KickLink& link) noexcept {
    std::lock_guard lock(bound_mu_);
    for (std::atomic<KickLink*>* at = &kicks_;;) {
        KickLink* l = at->load(std::memory_order_relaxed);
        if (l == nullptr) break;
        if (l == &link) {
            at->store(l->next.load(std::memory_order_relaxed), std::memory_order_release);
            break;
        }
        at = &l->next;
    }
    local_links_.fetch_sub(1, std::memory_order_relaxed);
}

void OfiCq::reserve(std::uint32_t n, std::string_view queue) {
    std::uint64_t now = reserved_.load(std::memory_order_acquire);
    do {
        if (now + n > depth_) {
            throw Error(Errc::resource_exhausted,
                        "the " + std::string(queue) + " queue needs " + std::to_string(n) + " entries of its CQ, which has " +
                            std::to_string(depth_ - std::min<std::uint64_t>(now, depth_)) + " of " + std::to_string(depth_) +
                            " left: libfabric's verbs provider keeps a CQ entry for every send and receive slot of the "
                            "QPs on a CQ; create the CQ with depth >= " + std::to_string(now + n) +
                            " or the QP with a smaller max_send/max_recv",
                        backend_name, "create_qp");
        }
    } while (!reserved_.compare_exchange_weak(now, now + n, std::memory_order_acq_rel));
}

// ---- Queue pair setup

OfiQp::OfiQp(std::shared_ptr<OfiDomain> dom, const detail::QpSetup& setup)
    : dom_(std::move(dom)), profile_(dom_->profile()), dcaps_(dom_->caps) {
    send_cq_ = std::dynamic_pointer_cast<OfiCq>(setup.send_cq);
    recv_cq_ = std::dynamic_pointer_cast<OfiCq>(setup.recv_cq);
    if (!send_cq_ || !recv_cq_) {
        throw Error(Errc::invalid_argument, "a CQ of another backend was given to an ofi QP", backend_name,
                    "create_qp");
    }
    if (send_cq_->owner() != dom_.get() || recv_cq_->owner() != dom_.get()) {
        throw Error(Errc::invalid_argument, "a CQ of another ofi domain was given to this domain's QP", backend_name,
                    "create_qp");
    }
    static std::atomic<std::uint32_t> next_qp_num{1};
    qp_num = next_qp_num.fetch_add(1, std::memory_order_relaxed);
    nonce_ = fresh_nonce();

    const QpOptions& o = setup.options;
    if (o.timeout != 0) {
        // 4.096 us x 2^timeout per try, retry_cnt retries after the first: the liveness connection's
        // keepalive (ofi_liveness.cpp).
        live_per_try_ = std::chrono::nanoseconds(4096ll << std::min<int>(o.timeout, 31));
        live_tries_ = o.retry_cnt + 1u;
    }
    if (setup.srq) {
        srq_ = std::dynamic_pointer_cast<OfiSrq>(setup.srq);
        if (!srq_ || srq_->owner() != dom_.get()) {
            throw Error(Errc::invalid_argument, "srq was not created by this ofi domain", backend_name, "create_qp");
        }
        if (srq_->emulated()) {
            // The bounce buffers the endpoint receives into (ofi_srq.cpp); not zeroed, only received into.
            const std::size_t size = profile_.srq_bounce_size;
            const std::uint32_t count = profile_.srq_bounces;
            bounce_store_.reset(new std::byte[size * count]);
            bounces_.resize(count);
            void* desc = nullptr;
            if (profile_.mr_local) {
                fid_mr* mr = nullptr;
                check(fi_mr_reg(dom_->domain(), bounce_store_.get(), size * count, FI_RECV, 0,
                                0x5b0ce000ull + qp_num, 0, &mr, nullptr),
                      "fi_mr_reg", "create_qp", "the bounce buffers of a QP on a shared receive queue");
                bounce_mr_.reset(mr);
                desc = fi_mr_desc(mr);
            }
            for (std::uint32_t i = 0; i < count; ++i) {
                bounces_[i].qp = this;
                bounces_[i].buf = bounce_store_.get() + i * size;
                bounces_[i].desc = desc;
            }
        } else {
            // The endpoint's receives complete on a provider CQ of the QP's own: its entries name this QP
            // (ofi_srq.cpp). The same wait object as the weft CQs: tcp adds its socket to the receive CQ's.
            fi_cq_attr attr{};
            attr.size = std::max<std::size_t>(64, static_cast<std::size_t>(srq_->max_recv) * 2);
            attr.format = FI_CQ_FORMAT_DATA;
            attr.wait_obj = profile_.native_wait ? FI_WAIT_FD : FI_WAIT_NONE;
            fid_cq* cq = nullptr;
            check(fi_cq_open(dom_->domain(), &attr, &cq, nullptr), "fi_cq_open", "create_qp", "the QP's receive CQ");
            srq_cq_.reset(cq);
        }
    }
    caps.max_send = o.max_send;
    caps.max_recv = srq_ ? 0 : o.max_recv;
    caps.max_sge = o.max_sge;  // exactly what was asked, so that validation enforces it
    caps.max_inline = o.max_inline;  // what was asked: the ring keeps max_inline bytes per slot
    if (profile_.provider == "verbs") {
        send_entries_.take(*send_cq_, o.max_send, "send");
        if (!srq_) recv_entries_.take(*recv_cq_, o.max_recv, "receive");
    }
    init_ring(send_, this, send_cq_.get(), true, o.max_send, caps.max_sge);
    if (o.max_inline > 0) {
        send_.inline_size = o.max_inline;
        send_.inline_store = std::make_unique<std::byte[]>(static_cast<std::size_t>(send_.mask + 1) * o.max_inline);
    }
    init_ring(recv_, this, recv_cq_.get(), false, caps.max_recv, caps.max_sge);

    fi_eq_attr eq_attr{};
    eq_attr.size = 64;
    eq_attr.wait_obj = FI_WAIT_NONE;
    fid_eq* eq = nullptr;
    check(fi_eq_open(dom_->fabric(), &eq_attr, &eq, nullptr), "fi_eq_open", "create_qp");
    eq_.reset(eq);

    if (profile_.mr_local && profile_.atomics) {
        // Atomic operands live in the slots; with FI_MR_LOCAL they must be registered like user buffers.
        fid_mr* mr = nullptr;
        std::size_t bytes = sizeof(Slot) * (static_cast<std::size_t>(send_.mask) + 1);
        check(fi_mr_reg(dom_->domain(), send_.slots.get(), bytes, FI_SEND | FI_WRITE | FI_READ | FI_RECV, 0,
                        0x0fe7a000ull + qp_num, 0, &mr, nullptr),
              "fi_mr_reg", "create_qp", "atomic operands");
        operand_mr_.reset(mr);
        operand_desc_ = fi_mr_desc(mr);
    }

    if (profile_.ep_type == FI_EP_MSG) {
        open_msg();
    } else {
        open_rdm();
    }
    open_liveness();
    try {
        encode_address();
        send_cq_->bind(this);
        if (recv_cq_ != send_cq_) recv_cq_->bind(this);
        if (srq_) recv_cq_->add_srq_reader(this);
        registry::add_live(this);
    } catch (...) {
        send_cq_->unbind(this);
        recv_cq_->unbind(this);
        if (srq_) recv_cq_->remove_srq_reader(this);
        close_liveness_listener();
        throw;
    }
    refresh_direct();
}

// The socket whose closing tells the peer this QP is gone (see ofi_liveness.cpp). Bound to the IP of the
// QP's own endpoint name (loopback for shm); none when the name has no IP (the peer then relies on the
// provider to learn of our loss).
void OfiQp::open_liveness() {
    if (!wire::liveness_address(dom_->info()->addr_format, my_name_, live_ip_, live_ip_len_)) return;
    live_listen_.store(liveness_listen(live_ip_, live_ip_len_, live_port_), std::memory_order_release);
}

void OfiQp::close_liveness_listener() noexcept {
    int fd = live_listen_.exchange(-1, std::memory_order_acq_rel);
    if (fd >= 0) ::close(fd);
}

void OfiQp::open_msg() {
    fid_pep* pep = nullptr;
    check(fi_passive_ep(dom_->fabric(), dom_->info(), &pep, this), "fi_passive_ep", "create_qp");
    pep_.reset(pep);
    check(fi_pep_bind(pep, &eq_->fid, 0), "fi_pep_bind", "create_qp");
    check(fi_listen(pep), "fi_listen", "create_qp");
    my_name_ = get_name(&pep->fid, "create_qp");
}

void OfiQp::open_rdm() {
    fi_av_attr av_attr{};
    av_attr.type = dom_->info()->domain_attr->av_type == FI_AV_MAP ? FI_AV_MAP : FI_AV_TABLE;
    av_attr.count = 4;
    fid_av* av = nullptr;
    check(fi_av_open(dom_->domain(), &av_attr, &av, nullptr), "fi_av_open", "create_qp");
    av_.reset(av);
    make_endpoint(dom_->info());
    my_name_ = get_name(&ep_->fid, "create_qp");
}

// Creates, binds and enables the active endpoint; receives posted so far go to it at once.
//
// A MSG endpoint is sized for this QP: fi_info's tx/rx sizes are the provider's defaults, and the verbs
// provider creates its QP with exactly those (rdma_create_qp with max_send_wr = tx_attr->size, ...), its
// CQ credits too. The queues get what the QP was created with (two provider operations per send slot
// where write_with_imm is emulated), clamped to what fi_info allows. RDM endpoints keep the defaults: a
// layered provider (rxm) sizes its own buffering with them.
//
// The active side of a MSG connection names its peer in dest_addr: the verbs provider resolves the route
// (rdma_resolve_addr) when the endpoint is opened, and fails with EINVAL without a destination.
void OfiQp::make_endpoint(fi_info* info, std::span<const std::byte> dest) {
    InfoPtr own;
    if (profile_.ep_type == FI_EP_MSG) {
        if (info == dom_->info()) {
            // The domain's fi_info is shared by every QP: size a copy.
            own.reset(fi_dupinfo(info));
            if (!own) throw std::bad_alloc();
            info = own.get();
            if (!dest.empty()) {
                void* addr = std::malloc(dest.size());  // fi_freeinfo frees it
                if (addr == nullptr) throw std::bad_alloc();
                std::memcpy(addr, dest.data(), dest.size());
                std::free(info->dest_addr);
                info->dest_addr = addr;
                info->dest_addrlen = dest.size();
            }
        }
        // A connection request's fi_info is ours alone (it carries the request's handle): sized in place.
        const std::size_t per_slot = profile_.emulated_imm ? 2 : 1;
        fi_tx_attr& tx = *info->tx_attr;
        fi_rx_attr& rx = *info->rx_attr;
        tx.size = std::min<std::size_t>(tx.size, std::max<std::size_t>(1, caps.max_send) * per_slot);
        const std::uint32_t receives = srq_ && srq_->emulated() ? profile_.srq_bounces : caps.max_recv;
        rx.size = std::min<std::size_t>(rx.size, std::max<std::size_t>(1, receives));
        tx.iov_limit = std::min<std::size_t>(tx.iov_limit, std::max<std::size_t>(1, caps.max_sge));
        rx.iov_limit = std::min<std::size_t>(rx.iov_limit, std::max<std::size_t>(1, caps.max_sge));
    }
    fid_ep* ep = nullptr;
    check(fi_endpoint(dom_->domain(), info, &ep, this), "fi_endpoint", "create_qp");
    ep_.reset(ep);
    if (profile_.ep_type == FI_EP_MSG) {
        check(fi_ep_bind(ep, &eq_->fid, 0), "fi_ep_bind(eq)", "create_qp");
    } else {
        check(fi_ep_bind(ep, &av_->fid, 0), "fi_ep_bind(av)", "create_qp");
    }
    if (srq_ && srq_->emulated()) {
        check(fi_ep_bind(ep, &send_cq_->fid()->fid, FI_TRANSMIT), "fi_ep_bind(send cq)", "create_qp");
        check(fi_ep_bind(ep, &srq_->bounce_cq()->fid, FI_RECV), "fi_ep_bind(the queue's bounce cq)", "create_qp");
    } else if (srq_) {
        check(fi_ep_bind(ep, &send_cq_->fid()->fid, FI_TRANSMIT), "fi_ep_bind(send cq)", "create_qp");
        check(fi_ep_bind(ep, &srq_cq_->fid, FI_RECV), "fi_ep_bind(the QP's receive cq)", "create_qp");
        check(fi_ep_bind(ep, &srq_->fid()->fid, 0), "fi_ep_bind(srx)", "create_qp");
    } else if (send_cq_ == recv_cq_) {
        check(fi_ep_bind(ep, &send_cq_->fid()->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)", "create_qp");
    } else {
        check(fi_ep_bind(ep, &send_cq_->fid()->fid, FI_TRANSMIT), "fi_ep_bind(send cq)", "create_qp");
        check(fi_ep_bind(ep, &recv_cq_->fid()->fid, FI_RECV), "fi_ep_bind(recv cq)", "create_qp");
    }
    int enabled = fi_enable(ep);
    if (enabled < 0 && profile_.provider.find(";ofi_rxm") != std::string::npos) {
        // rxm opens its core CQ with msg rx size + msg tx size x FI_UNIVERSE_SIZE entries (rx size x FI_UNIVERSE_SIZE
        // too without a shared receive context; the backend makes the universe 16 and asks for the shared
        // context unless the environment says otherwise; see prepare_libfabric).
        const char* universe = std::getenv("FI_UNIVERSE_SIZE");
        errors.fail_fabric(enabled, "fi_enable", "create_qp",
             "rxm could not open its " + profile_.provider.substr(0, profile_.provider.find(';')) +
                 " CQ, sized by FI_UNIVERSE_SIZE (now " + (universe ? universe : "unset") +
                 "): a device with few CQ entries needs a smaller one");
    }
    check(enabled, "fi_enable", "create_qp");
    ep_ready_.store(true, std::memory_order_release);
    post_backlog(recv_);
    if (srq_ && srq_->emulated()) {
        auto quiet = srq_->quiesce_bounces();
        for (SrqBounce& b : bounces_) {
            if (b.state == SrqBounce::State::idle) post_bounce(b);
        }
    }
}

// The layout is in ofi_wire.hpp. A peer's endpoint name is checked against the address format before
// anything reaches the provider (wire::check_peer).
void OfiQp::encode_address() {
    wire::PeerAddress a;
    a.ep_type = profile_.ep_type;
    a.flags = address_flags(profile_);
    a.addr_format = dom_->info()->addr_format;
    a.nonce = nonce_;
    a.liveness_port = live_port_;
    a.provider = profile_.provider;
    a.name = my_name_;
    my_address_ = wire::encode_address(a);
}

std::vector<std::byte> OfiQp::address() const { return my_address_; }

void OfiQp::connect(std::span<const std::byte> bytes) {
    constexpr std::string_view object = "QueuePair::connect";
    wire::PeerAddress p = wire::decode_address(bytes);
    wire::check_peer(p, {.ep_type = profile_.ep_type,
                         .provider = profile_.provider,
                         .addr_format = dom_->info()->addr_format,
                         .flags = address_flags(profile_),
                         .name = my_name_});
    const std::uint64_t peer_nonce = p.nonce;
    {
        std::lock_guard lock(mu_);
        if (connect_called_.load(std::memory_order_acquire)) {
            throw Error(Errc::invalid_state, "connect() was already called on this QP", backend_name, object);
        }
        if (profile_.ep_type == FI_EP_RDM) {
            fi_addr_t addr = FI_ADDR_UNSPEC;
            int n = fi_av_insert(av_.get(), p.name.data(), 1, &addr, 0, nullptr);
            if (n != 1) errors.fail_fabric(n < 0 ? n : -FI_EINVAL, "fi_av_insert", object, "the peer's endpoint name");
            peer_ = addr;
            watch_peer(p);
            link_local_peer(peer_nonce);
            peer_addr_ = std::move(p);
            peer_nonce_.store(peer_nonce, std::memory_order_release);
            connect_called_.store(true, std::memory_order_release);
            if (!error_.load(std::memory_order_acquire)) state_.store(QpState::rts, std::memory_order_release);
            refresh_direct();
            return;
        }
        if (peer_nonce == nonce_) {
            throw Error(Errc::invalid_argument, "a QP cannot connect to itself over MSG endpoints", backend_name,
                        object);
        }
        bool active = std::lexicographical_compare(my_name_.begin(), my_name_.end(), p.name.begin(), p.name.end()) ||
                      (my_name_ == p.name && nonce_ < peer_nonce);
        if (active) {
            make_endpoint(dom_->info(), p.name);
            std::array<std::byte, 16> param{};
            detail::put_le<std::uint64_t>(param.data(), nonce_);
            detail::put_le<std::uint64_t>(param.data() + 8, peer_nonce);
            check(fi_connect(ep_.get(), p.name.data(), param.data(), param.size()), "fi_connect", object);
            cm_ = Cm::active_wait;
        } else {
            cm_ = Cm::passive_wait_request;
        }
        watch_peer(p);
        link_local_peer(peer_nonce);
        peer_addr_ = std::move(p);
        peer_nonce_.store(peer_nonce, std::memory_order_release);
        connect_called_.store(true, std::memory_order_release);
        if (!error_.load(std::memory_order_acquire)) state_.store(QpState::rtr, std::memory_order_release);
        refresh_direct();
    }
    registry::want_attention(this);
    if (!registry::peer_connecting(peer_nonce)) {
        // The peer has not called connect() yet (or lives in another process): finish lazily.
        registry::drive_all(true);
        return;
    }
    // Both halves are in this process and started: finish both now.
    auto deadline = std::chrono::steady_clock::now() + local_handshake_limit;
    while (state() == QpState::rtr || !registry::peer_settled(peer_nonce)) {
        registry::drive_all(false);
        if (state() != QpState::rtr && registry::peer_settled(peer_nonce)) break;
        if (std::chrono::steady_clock::now() > deadline) {
            throw Error(Errc::invalid_state,
                        "the handshake with the peer QP in this process did not finish within 10 s", backend_name,
                        object);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    std::lock_guard lock(mu_);
    if (cm_ == Cm::failed) {
        throw Error(Errc::invalid_state, "connection handshake failed: " + cm_error_, backend_name, object);
    }
}

void OfiQp::await_connected(std::chrono::steady_clock::time_point deadline, std::string_view call) {
    while (state() == QpState::rtr) {
        registry::drive_all(false);
        progress_own();
        if (state() != QpState::rtr) break;
        if (std::chrono::steady_clock::now() > deadline) {
            throw Error(std::make_error_code(std::errc::timed_out),
                        "the connection handshake of QP " + std::to_string(qp_num) + " did not finish in time",
                        backend_name, call);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    std::lock_guard lock(mu_);
    if (cm_ == Cm::failed) {
        throw Error(Errc::invalid_state, "connection handshake failed: " + cm_error_, backend_name, call);
    }
    if (state_.load(std::memory_order_acquire) != QpState::rts) {
        throw Error(Errc::invalid_state, "the QP went to error while connecting", backend_name, call);
    }
}

bool OfiQp::drive(bool try_only) noexcept {
    std::unique_lock lock(mu_, std::defer_lock);
    if (try_only) {
        if (!lock.try_lock()) return true;
    } else {
        lock.lock();
    }
    bool busy = false;
    if (cm_ == Cm::active_wait || cm_ == Cm::passive_wait_request || cm_ == Cm::passive_wait_established) {
        busy = drive_cm();
    }
    for (Ring* r : {&recv_, &send_}) {
        post_backlog(*r);
        if (r->backlog && connect_called_.load(std::memory_order_acquire)) busy = true;
    }
    refresh_direct();
    return busy;
}

// Reads the QP's event queue (lock held). Returns whether the handshake is still under way.
bool OfiQp::drive_cm() noexcept {
    for (int i = 0; i < 16; ++i) {
        std::uint32_t event = 0;
        alignas(fi_eq_cm_entry) std::array<std::byte, sizeof(fi_eq_cm_entry) + 256> buf{};
        ssize_t rd = fi_eq_read(eq_.get(), &event, buf.data(), buf.size(), 0);
        if (rd == -FI_EAGAIN) break;
        if (rd == -FI_EAVAIL) {
            fi_eq_err_entry err{};
            fi_eq_readerr(eq_.get(), &err, 0);
            connection_failed(err.err != 0 ? err.err : FI_ECONNREFUSED);
            break;
        }
        if (rd < 0) {
            connection_failed(static_cast<int>(-rd));
            break;
        }
        auto* cm = reinterpret_cast<fi_eq_cm_entry*>(buf.data());
        const std::byte* data = buf.data() + sizeof(fi_eq_cm_entry);
        std::size_t data_len =
            static_cast<std::size_t>(rd) > sizeof(fi_eq_cm_entry) ? static_cast<std::size_t>(rd) - sizeof(fi_eq_cm_entry) : 0;
        switch (event) {
            case FI_CONNREQ: {
                InfoPtr request(cm->info);
                // The connect request's parameter: the peer's nonce and ours, as its address and ours carry them.
                const detail::WireReader param({data, data_len}, {});
                const bool expected = cm_ == Cm::passive_wait_request && detail::wire_problem([&] {
                                          if (param.at<std::uint64_t>(0, "nonce") != peer_addr_.nonce ||
                                              param.at<std::uint64_t>(8, "peer nonce") != nonce_) {
                                              param.fail("not the peer this QP was told to expect");
                                          }
                                      }).empty();
                if (!expected) {
                    WEFT_LOGF(ofi, warn, "QP %u: rejected a connection request that is not from the peer it was told "
                              "to expect%s", qp_num, cm_ == Cm::passive_wait_request ? "" : " (not waiting for one)");
                    fi_reject(pep_.get(), request->handle, nullptr, 0);
                    break;
                }
                accept_request(request.get());
                break;
            }
            case FI_CONNECTED:
                if (ep_ && cm->fid == &ep_->fid) established();
                if (cm->info) fi_freeinfo(cm->info);
                break;
            case FI_SHUTDOWN:
                WEFT_LOGF(ofi, warn, "QP %u: the provider reports the connection shut down%s", qp_num,
                          cm_ == Cm::done ? ": the peer is gone" : " during the handshake");
                if (cm_ == Cm::done) {
                    peer_gone();
                    return false;
                }
                connection_failed(FI_ECONNRESET);
                break;
            default:
                if (cm->info) fi_freeinfo(cm->info);
                break;
        }
        if (cm_ == Cm::done || cm_ == Cm::failed) break;
    }
    return cm_ != Cm::done && cm_ != Cm::failed;
}

void OfiQp::accept_request(fi_info* request) noexcept {
    try {
        make_endpoint(request);
    } catch (const std::exception& e) {
        cm_error_ = e.what();
        fi_reject(pep_.get(), request->handle, nullptr, 0);
        ep_.reset();
        ep_ready_.store(false, std::memory_order_release);
        connection_failed(FI_ECONNABORTED);
        return;
    }
    int ret = fi_accept(ep_.get(), nullptr, 0);
    if (ret != 0) {
        connection_failed(-ret);
        return;
    }
    cm_ = Cm::passive_wait_established;
}

void OfiQp::established() noexcept {
    cm_ = Cm::done;
    if (!error_.load(std::memory_order_acquire)) state_.store(QpState::rts, std::memory_order_release);
    post_backlog(send_);
    refresh_direct();
}

// The handshake failed or the peer went away before it finished: the QP goes to error and the first
// request that could not reach the peer reports transport_retry_exceeded (the peer-gone status).
void OfiQp::connection_failed(int err) noexcept {
    WEFT_LOGF(ofi, warn, "QP %u: the connection handshake failed: %s (%d); the QP goes to error", qp_num,
              fi_strerror(err), err);
    cm_ = Cm::failed;
    try {
        if (cm_error_.empty()) cm_error_ = fi_strerror(err);
    } catch (...) {
    }
    origin_vendor_err_ = static_cast<std::uint32_t>(err);
    enter_error(send_, send_.posted.load(std::memory_order_acquire), WcStatus::transport_retry_exceeded);
    post_backlog(send_);
    post_backlog(recv_);
}

// Connects to the peer QP's liveness socket when this QP has a finite timeout and the peer has one (mu_
// held). Without a socket (the peer's name has no IP, or none could be made) the peer's loss is what the
// provider reports.
void OfiQp::watch_peer(const wire::PeerAddress& p) noexcept {
    if (live_per_try_.count() == 0 || p.liveness_port == 0) return;
    LivenessTarget to;
    sockaddr_storage ip{};
    socklen_t len = 0;
    if (!wire::liveness_address(p.addr_format, p.name, ip, len)) return;
    to.addr = ip;
    to.len = len;
    const std::uint16_t port = htons(p.liveness_port);
    if (ip.ss_family == AF_INET6) {
        reinterpret_cast<sockaddr_in6*>(&to.addr)->sin6_port = port;
    } else {
        reinterpret_cast<sockaddr_in*>(&to.addr)->sin_port = port;
    }
    bool refused = false;
    int fd = liveness_connect(to, live_per_try_, live_tries_, refused);
    // The peer QP is in error or gone before we could watch it (a peer on this host answers at once): the
    // next send fails at post instead of reaching a provider that may complete it success (shm completes
    // a send once buffered). The watch still reports the loss for requests already out.
    if (refused) {
        WEFT_LOGF(ofi, warn, "QP %u: the peer QP's liveness listener refused the connection: the peer is gone",
                  qp_num);
        peer_gone();
    }
    if (fd < 0) return;
    // Published before the watch starts: the service thread reads it in liveness_lost().
    live_conn_.store(fd, std::memory_order_release);
    try {
        live_watch_ = service::watch(fd, this);
    } catch (...) {
        live_conn_.store(-1, std::memory_order_release);
        ::close(fd);
    }
}

// A peer QP in this process: while a request of ours waits on it, idle polls of our CQs kick its CQs (the
// provider moves its data only inside calls on them).
void OfiQp::link_local_peer(std::uint64_t peer_nonce) noexcept {
    if (!profile_.needs_kicks || local_peer_linked_.load(std::memory_order_relaxed)) return;
    try {
        auto cqs = registry::local_cqs(peer_nonce);
        if (!cqs[0]) return;
        for (auto& cq : cqs) {
            if (cq == send_cq_ || cq == recv_cq_) cq.reset();  // polled anyway when we wait
        }
        if (!cqs[0] && !cqs[1]) return;
        local_peer_cqs_ = std::move(cqs);
    } catch (...) {
        return;
    }
    local_peer_linked_.store(true, std::memory_order_release);
    kick_links_[0].qp = this;
    send_cq_->local_peer_linked(kick_links_[0]);
    if (recv_cq_ != send_cq_) {
        kick_links_[1].qp = this;
        recv_cq_->local_peer_linked(kick_links_[1]);
    }
}

void OfiQp::kick_local_peer() noexcept {
    for (auto& cq : local_peer_cqs_) {
        if (cq) cq->kick();
    }
}

void OfiQp::liveness_lost() noexcept {
    // The service thread no longer watches the connection: reading it here races with nothing.
    const bool goodbye = liveness_heard_goodbye(live_conn_.load(std::memory_order_acquire));
    WEFT_LOGF(ofi, warn, "QP %u: the liveness connection to the peer ended%s", qp_num,
              goodbye ? " with its goodbye (it disconnected)" : ": the peer is gone");
    if (goodbye) peer_said_goodbye();
    if (peer_lost_.exchange(true, std::memory_order_acq_rel)) return;
    peer_gone();
    send_cq_->peer_lost();
    service::wake_at(send_cq_, std::chrono::steady_clock::now() + loss_grace);
}

bool OfiQp::handle_loss(std::chrono::steady_clock::time_point now) noexcept {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return false;
    if (loss_handled_) return true;
    if (!loss_seen_) {
        loss_seen_ = true;
        loss_since_ = now;
    }
    if (error_.load(std::memory_order_acquire)) {
        loss_handled_ = true;
        return true;
    }
    if (now - loss_since_ < loss_grace) return false;
    loss_handled_ = true;
    // The send CQ's consumer (this thread) has read what the provider had: the first request still
    // unfinished is the one the peer's loss ends.
    Ring& r = send_;
    const std::uint64_t tail = r.cursors.posted_seen();
    std::uint64_t seq = r.head;
    while (seq < tail && r.at(seq).done.load(std::memory_order_acquire)) ++seq;
    if (goodbye_.load(std::memory_order_acquire)) {
        // The peer disconnected: this QP goes to error whether or not a request is out, and everything
        // unfinished, receives included, completes flushed with no error before it.
        give_up(seq, WcStatus::flushed);
        if (profile_.ep_type == FI_EP_MSG && ep_) fi_shutdown(ep_.get(), 0);
        return true;
    }
    if (seq < tail) {
        origin_vendor_err_ = FI_ENOTCONN;
        give_up(seq, WcStatus::transport_retry_exceeded);
        // MSG endpoints: make the provider end what it still holds (rxe retries a write to a destroyed QP
        // for as long as the endpoint lives); its late completions change nothing (complete_op()).
        if (profile_.ep_type == FI_EP_MSG && ep_) fi_shutdown(ep_.get(), 0);
    }
    return true;
}

// The request at `seq` is ended by the peer's loss: the QP goes to error with it as the origin, and its
// operations and those of later requests still at the provider are given up (the provider keeps them
// until the endpoint closes; complete_op() ignores their completions if they ever come). mu_ held.
void OfiQp::give_up(std::uint64_t seq, WcStatus status) noexcept {
    enter_error(send_, seq, status);
    const std::uint64_t posted = send_.posted.load(std::memory_order_acquire);
    for (std::uint64_t i = seq; i < posted; ++i) {
        Slot& s = send_.at(i);
        if (s.ops_posted == 0) continue;
        s.ops_total = s.ops_posted;  // what was not handed over never will be
        if (s.ops_left.exchange(0, std::memory_order_acq_rel) == 0) continue;
        if (i == seq) {
            s.status = status;
            if (status != WcStatus::flushed) s.vendor_err = origin_vendor_err_;
        }
        s.done.store(true, std::memory_order_release);
    }
    post_backlog(send_);
    post_backlog(recv_);
    refresh_direct();
    send_.cq->notify(send_);
}

void OfiQp::peer_said_goodbye() noexcept {
    if (goodbye_.exchange(true, std::memory_order_acq_rel)) return;
    dom_->push_event({EventType::peer_disconnected, qp_num, 0, "peer disconnected"});
}

void OfiQp::disconnect() {
    std::lock_guard lock(mu_);
    if (told_peer_) return;
    told_peer_ = true;
    if (std::uint64_t peer = peer_nonce_.load(std::memory_order_acquire); peer != 0) registry::tell_peer_goodbye(peer);
    // The goodbye goes out before enter_error closes the listener (a QP already in error has closed it:
    // its peer has learned of the loss already, and only a peer in this process hears the goodbye).
    liveness_say_goodbye(live_listen_.load(std::memory_order_acquire));
    fail_all();
}

void OfiQp::to_error() {
    std::lock_guard lock(mu_);
    fail_all();
}

// What is outstanding flushes: receives are cancelled at the provider; requests it holds complete with what
// it reports, and every later one flushed. mu_ held.
void OfiQp::fail_all() noexcept {
    enter_error(send_, send_.cursors.posted_seen(), WcStatus::flushed);
    // The verbs provider cannot cancel a posted receive: shutting its connection down moves the QP to
    // error, which flushes them (the peer's provider then flushes its own). Other providers cancel them,
    // and a shutdown would make the peer's provider fail its receives before it hears the goodbye.
    if (profile_.ep_type == FI_EP_MSG && profile_.provider == "verbs" && ep_ && ep_ready_.load(std::memory_order_acquire)) {
        fi_shutdown(ep_.get(), 0);
    }
    post_backlog(send_);
    post_backlog(recv_);
    refresh_direct();
    send_.cq->notify(send_);
    recv_.cq->notify(recv_);
}

// The connected peer is gone (destroyed in this process, in error, or lost): the next send fails with
// transport_retry_exceeded without reaching the provider. Libfabric does not always survive a post to a
// peer endpoint closed in the same process (shm 1.17 faults in fi_writemsg).
void OfiQp::peer_gone() noexcept {
    peer_gone_.store(true, std::memory_order_release);
    send_.direct.store(false, std::memory_order_release);
}

OfiQp::~OfiQp() {
    // The liveness watch first: when unwatch() returns, the service thread no longer calls us.
    service::unwatch(live_watch_);
    close_liveness_listener();
    if (const int conn = live_conn_.load(std::memory_order_acquire); conn >= 0) ::close(conn);
    registry::remove_live(this);
    if (std::uint64_t peer = peer_nonce_.load(std::memory_order_acquire); peer != 0) registry::tell_peer_gone(peer);
    registry::drop_attention(this);
    send_cq_->unbind(this);
    recv_cq_->unbind(this);
    if (local_peer_linked_.load(std::memory_order_acquire)) {
        send_cq_->local_peer_unlinked(kick_links_[0]);
        if (recv_cq_ != send_cq_) recv_cq_->local_peer_unlinked(kick_links_[1]);
    }
    std::lock_guard lock(mu_);
    ep_ready_.store(false, std::memory_order_release);
    {
        // After fi_close no provider entry names our slots; read the ones already queued before letting go.
        OfiCq* first = std::min(send_cq_.get(), recv_cq_.get());
        OfiCq* second = std::max(send_cq_.get(), recv_cq_.get());
        auto quiet_first = first->quiesce();
        std::unique_lock<std::mutex> quiet_second;
        if (second != first) quiet_second = second->quiesce();
        // A QP on a shared receive queue: its receive CQ's consumer may be reading the private CQ.
        std::unique_lock<std::mutex> quiet_srq;
        if (srq_) quiet_srq = recv_cq_->quiesce_srq();
        // An emulated queue's readers re-post bounces of every QP on it, this one's too.
        std::unique_lock<std::mutex> quiet_bounces;
        if (srq_ && srq_->emulated()) {
            quiet_bounces = srq_->quiesce_bounces();
            bounces_closed_ = true;
        }
        ep_.reset();
        pep_.reset();
    }
    if (srq_) {
        // Receives the endpoint had taken come back as it closes: they complete flushed, naming this QP.
        recv_cq_->remove_srq_reader(this);
        srq_cq_.reset();
    }
    send_cq_->drain_provider();
    if (recv_cq_ != send_cq_) recv_cq_->drain_provider();
    send_cq_->detach(send_);
    recv_cq_->detach(recv_);
    av_.reset();
    operand_mr_.reset();
    eq_.reset();
}

}  // namespace weft::ofi
