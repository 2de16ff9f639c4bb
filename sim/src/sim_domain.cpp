// The sim backend's setup side: the plugin record, domains (nodes) and their memory-region tables.
#include "sim.hpp"

#include <weft/error.hpp>

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>

namespace weft::sim {
namespace detail {
namespace {

constexpr std::size_t event_budget = 4096;  // events next_event() runs at most while nothing is queued

constexpr std::array<KeySpec, 17> sim_keys{{
    {"seed", "RNG seed for every choice the semantics allow; integer, default 1"},
    {"fabric", "domains opened with the same name share one simulated fabric; default \"default\""},
    {"latency_ns", "one-way latency of a message in virtual nanoseconds; 0..10000000000, default 1000"},
    {"gbps", "link bandwidth in Gbit/s; 0.001..10000, default 100"},
    {"mtu", "packet payload in bytes: 256, 512, 1024, 2048 or 4096; default 4096"},
    {"reorder", "legal behaviours the seed chooses: all, none, or torn|read_after_write|jitter|qp_paths|program; "
                "default all"},
    {"program_ns", "reorder=program: the longest pause of a program between two API calls, virtual ns; "
                   "0..10000000000, default 5000"},
    {"programs", "per_node (each domain is its own program; calls of different domains are concurrent) or one "
                 "(every call of the process takes effect after the one before it); default per_node"},
    {"profile", "whose error statuses to report: spec (the IB specification) or rxe (Soft-RoCE); default spec"},
    {"strict", "abort the process on the first misuse of the API (1/0); default 0"},
    {"check_sources", "report a send/write source buffer changed before its acknowledgement (1/0); default 1"},
    {"drop", "probability that a packet is lost (retransmission hides it); 0..1, default 0"},
    {"duplicate", "probability that a packet arrives twice; 0..1, default 0"},
    {"delay", "probability that a packet is held up by up to delay_ns; 0..1, default 0"},
    {"delay_ns", "the longest extra delay of a held-up packet, virtual ns; 1..10000000000, default 10000"},
    {"schedule", "systematic exploration: the choices of one schedule, a token of digits from "
                 "weft::testing::explore (0: the default schedule); replaces the seed's choices; default none"},
    {"trace", "file to write a Chrome/Perfetto JSON trace of the fabric to when it closes; default none"},
}};

std::uint32_t parse_reorder(const Config& cfg) {
    auto v = cfg.get("reorder");
    if (!v || *v == "all") return reorder_all;
    if (*v == "none") return reorder_none;
    std::uint32_t bits = 0;
    std::string_view rest = *v;
    while (!rest.empty()) {
        auto bar = rest.find('|');
        std::string_view name = rest.substr(0, bar);
        if (name == "torn") bits |= reorder_torn;
        else if (name == "read_after_write") bits |= reorder_read_after_write;
        else if (name == "jitter") bits |= reorder_jitter;
        else if (name == "qp_paths") bits |= reorder_qp_paths;
        else if (name == "program") bits |= reorder_program;
        else {
            errors.fail(Errc::invalid_config,
                        "bad value \"" + std::string(*v) + "\" for key 'reorder' of backend 'sim' (\"" +
                            std::string(name) + "\" is not a behaviour); accepted: all, none, or names joined by '|' "
                            "from torn, read_after_write, jitter, qp_paths, program",
                        "open");
        }
        rest = bar == std::string_view::npos ? std::string_view{} : rest.substr(bar + 1);
    }
    return bits;
}

Params parse_params(const Config& cfg) {
    Params p;
    p.name = cfg.get_string("fabric", "default");
    p.seed = cfg.get_uint("seed", 1, 0, UINT64_MAX);
    p.latency_ns = cfg.get_uint("latency_ns", 1000, 0, 10'000'000'000ull);
    p.gbps = cfg.get_double("gbps", 100.0, 0.001, 10000.0);
    static constexpr std::string_view mtus[] = {"256", "512", "1024", "2048", "4096"};
    p.mtu = static_cast<std::uint32_t>(std::stoul(std::string(cfg.get_choice("mtu", "4096", mtus))));
    p.reorder = parse_reorder(cfg);
    static constexpr std::string_view profiles[] = {"spec", "rxe"};
    p.profile = cfg.get_choice("profile", "spec", profiles) == "rxe" ? Profile::rxe : Profile::spec;
    p.strict = cfg.get_bool("strict", false);
    p.check_sources = cfg.get_bool("check_sources", true);
    p.drop = cfg.get_double("drop", 0, 0, 1);
    p.duplicate = cfg.get_double("duplicate", 0, 0, 1);
    p.delay = cfg.get_double("delay", 0, 0, 1);
    p.delay_ns = cfg.get_uint("delay_ns", 10000, 1, 10'000'000'000ull);
    p.program_ns = cfg.get_uint("program_ns", 5000, 0, 10'000'000'000ull);
    static constexpr std::string_view programs[] = {"per_node", "one"};
    p.programs_per_node = cfg.get_choice("programs", "per_node", programs) == "per_node";
    p.trace_path = cfg.get_string("trace", "");
    if (auto token = cfg.get("schedule")) {
        if (token->empty() || token->size() > 1'000'000 ||
            token->find_first_not_of("012") != std::string_view::npos) {
            errors.fail(Errc::invalid_config,
                        "bad value for key 'schedule' of backend 'sim' (" + std::to_string(token->size()) +
                            " characters): a schedule token is 1 to 1000000 digits 0, 1 or 2, as "
                            "weft::testing::explore prints it",
                        "open");
        }
        p.exploring = true;
        for (char c : *token) p.schedule.push_back(static_cast<std::uint8_t>(c - '0'));
    }
    return p;
}

std::shared_ptr<weft::detail::DomainImpl> open_sim(const Config& cfg) {
    Params p = parse_params(cfg);
    auto fabric = attach_fabric(p);
    return std::make_shared<SimDomain>(std::move(fabric), p);
}

std::string probe_sim() { return {}; }

const weft::detail::Plugin sim_plugin{
    weft::detail::plugin_abi_version, "sim", "in-process RC simulator, deterministic from a seed",
    std::span<const KeySpec>(sim_keys), &probe_sim, &open_sim,
};

// Keys: slot + 1 in the upper 24 bits, an 8-bit generation below, so a stale key never names a new region.
constexpr std::uint64_t make_key(std::uint32_t slot, std::uint8_t gen) noexcept {
    return (static_cast<std::uint64_t>(slot + 1) << 8) | gen;
}

}  // namespace

SimDomain::SimDomain(std::shared_ptr<FabricState> fabric, const Params& params) : fabric_(std::move(fabric)) {
    std::lock_guard lock(fabric_->mu);
    node_ = fabric_->add_node(this);
    caps.kind = BackendKind::sim;
    caps.backend = "sim";
    caps.device = "sim:" + params.name + "/node" + std::to_string(node_);
    caps.profile = params.profile == Profile::rxe ? "rxe" : "spec";
    caps.features = static_cast<std::uint32_t>(
        Feature::send_with_imm | Feature::write_with_imm | Feature::read | Feature::atomics | Feature::fence |
        Feature::inline_data | Feature::solicited | Feature::wait | Feature::cq_fd | Feature::rnr |
        Feature::error_flush | Feature::remote_access_check | Feature::zero_length | Feature::listener |
        Feature::disconnect | Feature::async_events | Feature::srq);
    caps.max_qp_wr = 32768;
    caps.max_sge = 32;
    caps.max_inline = 1024;
    caps.max_cqe = 1u << 22;
    caps.max_msg_size = 1ull << 31;
    caps.max_mr_size = 1ull << 46;
    caps.max_srq_wr = caps.max_qp_wr;
    caps.max_srq_sge = caps.max_sge;
    // rdma_cm's 56 bytes; the verbs backend carries 48 (weft/listener.hpp), and profile=rxe says so.
    caps.max_private_data = params.profile == Profile::rxe ? 48 : 56;
}

SimDomain::~SimDomain() {
    std::lock_guard lock(fabric_->mu);
    fabric_->node_domains[node_] = nullptr;
    if (event_fd_ >= 0) {
        std::erase(fabric_->fd_domains, this);
        ::close(event_fd_);
    }
}

int SimDomain::event_fd() {
    std::lock_guard lock(fabric_->mu);
    if (event_fd_ < 0) {
        event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (event_fd_ < 0) errors.fail_errno(errno, "eventfd failed", "Domain::event_fd");
        fabric_->fd_domains.push_back(this);
        sync_event_fd();
    }
    return event_fd_;
}

bool SimDomain::next_event(AsyncEvent& out) {
    FabricState& f = *fabric_;
    std::lock_guard lock(f.mu);
    FabricState::ReturnToProgram stage{f};
    f.enter_call(node_, true);
    // Like a poll (SimCq::poll): when nothing is queued, simulated time moves on until something is, or for
    // a while; with program time, only until the NIC next does something.
    if (events_.empty() && !f.idle()) {
        if (f.reorders(reorder_program)) {
            f.run([this] { return !events_.empty(); }, f.next_event_time(), SIZE_MAX);
            f.program_waited(node_);
        } else {
            f.run([this] { return !events_.empty(); }, UINT64_MAX, event_budget);
        }
    }
    const bool got = !events_.empty();
    if (got) {
        out = events_.front();
        events_.pop_front();
    }
    f.sync_fds();
    return got;
}

void SimDomain::push_event(const AsyncEvent& e) noexcept {
    try {
        events_.push_back(e);
    } catch (...) {
        return;  // out of memory: the event is lost, the QP's state still says what happened
    }
    sync_event_fd();
}

void SimDomain::sync_event_fd() noexcept {
    if (event_fd_ < 0) return;
    // Readable while next_event() could give something: events queued, or simulated work in flight.
    set_readable(event_fd_, !events_.empty() || !fabric_->idle(), event_fd_armed_);
}

std::unique_ptr<weft::detail::MrImpl> SimDomain::register_memory(void* addr, std::size_t length, Access access) {
    std::lock_guard lock(fabric_->mu);
    FabricState::ReturnToProgram stage{*fabric_};
    fabric_->enter_call(node_, true);
    if (fabric_->fail_registrations > 0) {
        --fabric_->fail_registrations;
        errors.fail(Errc::resource_exhausted, "injected failure (sim::Fabric::fail_next_registration)", "register_memory");
    }
    std::uint32_t slot;
    if (!free_mr_slots_.empty()) {
        slot = free_mr_slots_.back();
        free_mr_slots_.pop_back();
    } else {
        if (mrs_.size() >= (1u << 24) - 2) {
            errors.fail(Errc::resource_exhausted, "the node has the most memory regions it supports", "register_memory");
        }
        slot = static_cast<std::uint32_t>(mrs_.size());
        mrs_.emplace_back();
    }
    MrSlot& m = mrs_[slot];
    m.gen = static_cast<std::uint8_t>(m.gen + 1);
    auto self = std::static_pointer_cast<SimDomain>(shared_from_this());
    auto mr = std::make_unique<SimMr>(std::move(self), slot);
    mr->addr = addr;
    mr->length = length;
    mr->lkey = static_cast<std::uint32_t>(make_key(slot, m.gen));
    mr->rkey = mr->lkey;
    mr->access = access;
    mr->kind = BackendKind::sim;
    m.base = reinterpret_cast<std::uint64_t>(addr);
    m.length = length;
    m.access = access;
    m.live = true;
    return mr;
}

void SimDomain::remove_mr(std::uint32_t slot) noexcept {
    mrs_[slot].live = false;
    ++mr_epoch;
    free_mr_slots_.push_back(slot);
}

SimMr::SimMr(std::shared_ptr<SimDomain> domain, std::uint32_t slot) : domain_(std::move(domain)), slot_(slot) {}

SimMr::~SimMr() {
    FabricState& f = *domain_->fabric();
    std::lock_guard lock(f.mu);
    FabricState::ReturnToProgram stage{f};
    f.enter_call(domain_->node(), true);
    // Releasing a region that posted work still uses is a program error: the work would read or write
    // memory the program may already have freed. Report it; the work itself fails with a local error.
    std::string users;
    f.for_each_qp([&](const SimQp& qp) {
        if (&qp.domain() == domain_.get()) users += qp.references(lkey);
    });
    if (!users.empty()) {
        f.report_misuse("memory region lkey " + std::to_string(lkey) + " (" + std::to_string(length) +
                        " bytes) was deregistered while posted work still uses it:" + users);
    }
    domain_->remove_mr(slot_);
}

std::shared_ptr<weft::detail::CqImpl> SimDomain::create_cq(const CqOptions& options) {
    auto self = std::static_pointer_cast<SimDomain>(shared_from_this());
    return std::make_shared<SimCq>(std::move(self), options.depth);
}

std::unique_ptr<weft::detail::QpImpl> SimDomain::create_qp(const weft::detail::QpSetup& setup) {
    for (const auto* cq : {setup.send_cq.get(), setup.recv_cq.get()}) {
        const auto* sim_cq = dynamic_cast<const SimCq*>(cq);
        if (!sim_cq || &sim_cq->domain() != this) {
            errors.fail(Errc::invalid_argument, "a QP's CQs must come from the same domain", "create_qp");
        }
    }
    if (setup.srq) {
        const auto* sim_srq = dynamic_cast<const SimSrq*>(setup.srq.get());
        if (!sim_srq || &sim_srq->domain() != this) {
            errors.fail(Errc::invalid_argument, "a QP's shared receive queue must come from the same domain", "create_qp");
        }
    }
    {
        std::lock_guard lock(fabric_->mu);
        if (fabric_->fail_qp_creations > 0) {
            --fabric_->fail_qp_creations;
            errors.fail(Errc::resource_exhausted, "injected failure (sim::Fabric::fail_next_qp_creation)", "create_qp");
        }
    }
    auto self = std::static_pointer_cast<SimDomain>(shared_from_this());
    return std::make_unique<SimQp>(std::move(self), setup);
}

std::shared_ptr<weft::detail::SrqImpl> SimDomain::create_srq(const SrqOptions& options) {
    std::uint32_t number = 0;
    {
        std::lock_guard lock(fabric_->mu);
        number = ++fabric_->srqs_created;
    }
    auto self = std::static_pointer_cast<SimDomain>(shared_from_this());
    return std::make_shared<SimSrq>(std::move(self), options, number);
}

}  // namespace detail

const weft::detail::Plugin& plugin() noexcept { return detail::sim_plugin; }

}  // namespace weft::sim
