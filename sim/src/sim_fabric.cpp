// The simulated fabric: the event queue, the QP table, the per-name registry, the fault model (lost,
// duplicated, delayed packets; cut links, crashed and stalled nodes), misuse reports, and the public Fabric
// API.
#include "sim.hpp"

#include <weft/error.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

namespace weft::sim {
namespace detail {
namespace {

// Fabrics by name, while a domain holds them: a fabric's destructor removes its entry. Never destroyed, so
// that a fabric outliving static destruction (held by a static or a detached thread) still finds it.
std::mutex registry_mutex;
std::map<std::string, std::weak_ptr<FabricState>, std::less<>>& registry() {
    static auto* fabrics = new std::map<std::string, std::weak_ptr<FabricState>, std::less<>>;
    return *fabrics;
}

std::string describe(const Params& p) {
    std::string reorder;
    if (p.reorder == reorder_none) reorder = "none";
    else if (p.reorder == reorder_all) reorder = "all";
    else {
        for (auto [bit, name] : {std::pair{reorder_torn, "torn"}, std::pair{reorder_read_after_write, "read_after_write"},
                                 std::pair{reorder_jitter, "jitter"}, std::pair{reorder_qp_paths, "qp_paths"},
                                 std::pair{reorder_program, "program"}}) {
            if (p.reorder & bit) reorder += (reorder.empty() ? "" : "|") + std::string(name);
        }
    }
    return "seed=" + std::to_string(p.seed) + ",latency_ns=" + std::to_string(p.latency_ns) +
           ",gbps=" + std::to_string(p.gbps) + ",mtu=" + std::to_string(p.mtu) + ",reorder=" + reorder +
           ",profile=" + (p.profile == Profile::rxe ? "rxe" : "spec") + ",strict=" + (p.strict ? "1" : "0") +
           ",check_sources=" + (p.check_sources ? "1" : "0") +
           ",drop=" + std::to_string(p.drop) + ",duplicate=" + std::to_string(p.duplicate) +
           ",delay=" + std::to_string(p.delay) + ",delay_ns=" + std::to_string(p.delay_ns) +
           ",program_ns=" + std::to_string(p.program_ns) + ",programs=" + (p.programs_per_node ? "per_node" : "one") +
           (p.trace_path.empty() ? "" : ",trace=" + p.trace_path) +
           (p.exploring ? ",schedule=" + std::to_string(p.schedule.size()) + " choices" : "");
}

}  // namespace

FabricState::FabricState(Params p, std::uint64_t fabric_id)
    : params(std::move(p)),
      id(fabric_id),
      rng(params.seed),
      ns_per_byte_(8.0 / params.gbps),
      program_rng_(params.seed ^ 0x5851f42d4c957f2dull) {
    if (params.exploring) {
        chooser_ = std::make_unique<Chooser>();
        chooser_->forced = params.schedule;
        rng.chooser = program_rng_.chooser = chooser_.get();
    }
    rates.drop = params.drop;
    rates.duplicate = params.duplicate;
    rates.delay = params.delay;
    rates.delay_ns = params.delay_ns;
    rates.update();
    if (!params.trace_path.empty()) start_trace(1u << 20);
}

std::uint64_t FabricState::enter_call(std::uint32_t node, bool observes) noexcept {
    if (!reorders(reorder_program)) return now;
    // Mostly the short stretch of code between two calls; now and then a long pause (a page fault, a
    // preemption, a slow handler), up to program_ns.
    std::uint64_t pause;
    if (chooser_) {
        // Exploring: no pause, a short one or the longest.
        const unsigned c = chooser_->choose(3);
        pause = c == 0 ? 0 : c == 1 ? params.program_ns / 16 : params.program_ns;
    } else {
        pause = program_rng_.chance(0.125) ? program_rng_.below(params.program_ns + 1)
                                           : program_rng_.below(params.program_ns / 16 + 1);
    }
    std::uint64_t& clock = program_clock_[params.programs_per_node ? node : 0];
    const std::uint64_t at = std::max(clock, now) + pause;
    if (observes || !params.programs_per_node) {
        run([] { return false; }, at, SIZE_MAX);
        now = std::max(now, at);
        clock = now;
        return now;
    }
    clock = at;
    return at;
}

// The fault model's part of send_packet: the packet may be lost, held up or duplicated.
void FabricState::send_faulty(Event& e) noexcept {
    if (rng.chance(rates.drop)) {
        ++stats.dropped;
        if (tracing) {
            TraceRecord r;
            r.kind = TraceKind::lost;
            r.time = now;
            r.node = e.from_node;
            r.qpn = e.peer;
            r.peer = e.qpn;
            r.msn = e.msn;
            record(r);
        }
        return;
    }
    if (rng.chance(rates.delay)) {
        e.time += 1 + rng.below(rates.delay_ns);
        ++stats.delayed;
    }
    if (rng.chance(rates.duplicate)) {
        Event copy = e;
        copy.time += 1 + rng.below(params.latency_ns + 1);
        schedule(copy);
        ++stats.duplicated;
    }
    schedule(e);
}

namespace {

// The choice points of the last explored fabric of each name, for weft::testing::explore.
std::mutex explored_mutex;
std::map<std::string, std::vector<std::uint8_t>, std::less<>>& explored() {
    static std::map<std::string, std::vector<std::uint8_t>, std::less<>> logs;
    return logs;
}

}  // namespace

FabricState::~FabricState() {
    {
        // The name is free again. The entry may already name a newer fabric of that name, opened after this
        // one's last reference went: that one stays.
        std::lock_guard lock(registry_mutex);
        auto& fabrics = registry();
        if (auto it = fabrics.find(params.name); it != fabrics.end() && it->second.expired()) fabrics.erase(it);
    }
    if (chooser_) {
        std::lock_guard lock(explored_mutex);
        explored()[params.name] = std::move(chooser_->arity);
    }
    if (params.trace_path.empty()) return;
    if (std::FILE* f = std::fopen(params.trace_path.c_str(), "w")) {
        const std::string json = trace_json();
        std::fwrite(json.data(), 1, json.size(), f);
        std::fclose(f);
    } else {
        std::fprintf(stderr, "weft sim: cannot write the trace of fabric '%s' to %s\n", params.name.c_str(),
                     params.trace_path.c_str());
    }
}

void FabricState::start_trace(std::size_t capacity) {
    trace.clear();
    trace.reserve(capacity);
    trace_capacity = capacity;
    trace_overflow = 0;
    tracing = capacity > 0;
}

std::string FabricState::trace_json() const {
    std::string out = "{\"traceEvents\":[\n";
    char buf[512];
    std::vector<std::uint32_t> nodes;
    auto us = [](std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
    bool first = true;
    auto add = [&](int n) {
        if (n <= 0) return;
        if (!first) out += ",\n";
        first = false;
        out.append(buf, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1));
    };
    for (const TraceRecord& r : trace) {
        if (std::find(nodes.begin(), nodes.end(), r.node) == nodes.end()) nodes.push_back(r.node);
        const std::string op(to_string(r.opcode));
        const std::string st(to_string(r.status));
        switch (r.kind) {
            case TraceKind::transmit:
                add(std::snprintf(buf, sizeof buf,
                                  R"j({"name":"%s msn=%llu","cat":"request","ph":"X","ts":%.3f,"dur":%.3f,"pid":%u,"tid":%u,"args":{"bytes":%u,"to_qp":%u}})j",
                                  op.c_str(), static_cast<unsigned long long>(r.msn), us(r.time), us(r.end - r.time),
                                  r.node, r.qpn, r.bytes, r.peer));
                break;
            case TraceKind::place:
                add(std::snprintf(buf, sizeof buf,
                                  R"j({"name":"place msn=%llu packet=%u","cat":"placement","ph":"i","s":"t","ts":%.3f,"pid":%u,"tid":%u,"args":{"offset":%llu,"bytes":%u}})j",
                                  static_cast<unsigned long long>(r.msn), r.peer, us(r.time), r.node, r.qpn,
                                  static_cast<unsigned long long>(r.id), r.bytes));
                break;
            case TraceKind::ack:
                add(std::snprintf(buf, sizeof buf,
                                  R"j({"name":"%s msn=%llu","cat":"response","ph":"X","ts":%.3f,"dur":%.3f,"pid":%u,"tid":%u,"args":{"bytes":%u,"to_qp":%u}})j",
                                  r.status == WcStatus::success ? "ack"
                                  : r.status == WcStatus::invalid_eecn ? "sequence nak"   // the NAK markers of
                                  : r.status == WcStatus::rnr_retry_exceeded ? "rnr nak"  // sim_datapath.cpp
                                                                              : ("nak " + st).c_str(),
                                  static_cast<unsigned long long>(r.msn),
                                  us(r.time), us(r.end - r.time), r.node, r.qpn, r.bytes, r.peer));
                break;
            case TraceKind::completion:
                add(std::snprintf(buf, sizeof buf,
                                  R"j({"name":"cqe id=%llu %s","cat":"completion","ph":"i","s":"t","ts":%.3f,"pid":%u,"tid":%u,"args":{"opcode":"%s","byte_len":%u}})j",
                                  static_cast<unsigned long long>(r.id), st.c_str(), us(r.time), r.node, r.qpn,
                                  op.c_str(), r.bytes));
                break;
            case TraceKind::lost:
                add(std::snprintf(buf, sizeof buf,
                                  R"j({"name":"lost msn=%llu","cat":"fault","ph":"i","s":"t","ts":%.3f,"pid":%u,"tid":%u,"args":{"to_qp":%u}})j",
                                  static_cast<unsigned long long>(r.msn), us(r.time), r.node, r.qpn, r.peer));
                break;
            case TraceKind::deferred:
                add(std::snprintf(buf, sizeof buf,
                                  R"j({"name":"%s msn=%llu executes (deferred)","cat":"reorder","ph":"i","s":"t","ts":%.3f,"pid":%u,"tid":%u})j",
                                  op.c_str(), static_cast<unsigned long long>(r.msn), us(r.time), r.node, r.qpn));
                break;
        }
    }
    std::sort(nodes.begin(), nodes.end());
    for (std::uint32_t n : nodes) {
        add(std::snprintf(buf, sizeof buf, R"j({"name":"process_name","ph":"M","pid":%u,"args":{"name":"%s node %u"}})j",
                          n, params.name.c_str(), n));
    }
    out += "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"fabric\":\"" + params.name + "\",\"seed\":" +
           std::to_string(params.seed) + ",\"records_not_kept\":" + std::to_string(trace_overflow) + "}}\n";
    return out;
}

std::string FabricState::trace_text() const {
    std::string out;
    char buf[256];
    for (const TraceRecord& r : trace) {
        const auto op = to_string(r.opcode);
        const auto st = to_string(r.status);
        int n = std::snprintf(buf, sizeof buf, "%12.3f us  node %u qp %u  ", static_cast<double>(r.time) / 1000.0,
                              r.node, r.qpn);
        out.append(buf, static_cast<std::size_t>(n));
        switch (r.kind) {
            case TraceKind::transmit:
                n = std::snprintf(buf, sizeof buf, "transmit %.*s msn=%llu bytes=%u -> qp %u", int(op.size()), op.data(),
                                  static_cast<unsigned long long>(r.msn), r.bytes, r.peer);
                break;
            case TraceKind::place:
                n = std::snprintf(buf, sizeof buf, "place msn=%llu packet=%u offset=%llu bytes=%u",
                                  static_cast<unsigned long long>(r.msn), r.peer, static_cast<unsigned long long>(r.id),
                                  r.bytes);
                break;
            case TraceKind::ack:
                n = std::snprintf(buf, sizeof buf, "%s msn=%llu bytes=%u -> qp %u",
                                  r.status == WcStatus::success              ? "ack"
                                  : r.status == WcStatus::invalid_eecn       ? "sequence-nak"
                                  : r.status == WcStatus::rnr_retry_exceeded ? "rnr-nak"
                                                                             : "nak",
                                  static_cast<unsigned long long>(r.msn), r.bytes, r.peer);
                break;
            case TraceKind::completion:
                n = std::snprintf(buf, sizeof buf, "completion id=%llu %.*s %.*s byte_len=%u",
                                  static_cast<unsigned long long>(r.id), int(st.size()), st.data(), int(op.size()),
                                  op.data(), r.bytes);
                break;
            case TraceKind::lost:
                n = std::snprintf(buf, sizeof buf, "lost msn=%llu -> qp %u", static_cast<unsigned long long>(r.msn),
                                  r.peer);
                break;
            case TraceKind::deferred:
                n = std::snprintf(buf, sizeof buf, "deferred %.*s msn=%llu executes", int(op.size()), op.data(),
                                  static_cast<unsigned long long>(r.msn));
                break;
        }
        out.append(buf, static_cast<std::size_t>(std::max(n, 0)));
        if (r.kind == TraceKind::ack && r.status != WcStatus::success && r.status != WcStatus::invalid_eecn &&
            r.status != WcStatus::rnr_retry_exceeded) {
            out += ' ';
            out += st;
        }
        out += '\n';
    }
    if (trace_overflow) out += "(" + std::to_string(trace_overflow) + " records not kept: the trace was full)\n";
    return out;
}

bool FabricState::link_up(std::uint32_t a, std::uint32_t b, std::uint64_t t) const noexcept {
    if ((a < crashed.size() && crashed[a]) || (b < crashed.size() && crashed[b])) return false;
    if (port_is_down(a, t) || port_is_down(b, t)) return false;
    for (const Cut& c : cuts) {
        if (t < c.until && ((c.a == a && c.b == b) || (c.a == b && c.b == a))) return false;
    }
    return true;
}

namespace {
// Every fabric's misuses, for Fabric::misuse_tally (weft::testing::sweep).
std::mutex tally_mu;
weft::sim::Fabric::MisuseTally tally;
}  // namespace

void FabricState::report_misuse(std::string what) {
    std::string line = "weft sim misuse (fabric '" + params.name + "', t=" + std::to_string(now) + " ns): " + what;
    std::fprintf(stderr, "%s\n", line.c_str());
    {
        std::lock_guard lock(tally_mu);
        ++tally.count;
        tally.last = line;
    }
    misuse_log.push_back(std::move(what));
    if (params.strict) {
        std::fprintf(stderr, "weft sim: strict mode (sim:strict=1): aborting on the first misuse\n");
        std::abort();
    }
}

void FabricState::handle_overruns() noexcept {
    while (!overrun_cqs.empty()) {
        SimCq* cq = overrun_cqs.back();
        overrun_cqs.pop_back();
        for (const QpSlot& s : qps_) {
            if (s.qp && s.qp->uses_cq(cq)) s.qp->on_cq_error();
        }
    }
}

void FabricState::port_down(std::uint32_t node, std::uint64_t until) {
    nodes_touched = true;
    if (port_down_until.size() <= node) {
        port_down_until.resize(node + 1, 0);
        port_outages.resize(node + 1, 0);
    }
    const bool was_down = port_is_down(node, now);
    port_down_until[node] = until;
    const std::uint32_t outage = ++port_outages[node];  // a coming-back event of an earlier outage is stale
    if (!was_down && node_domains[node]) {
        node_domains[node]->push_event({EventType::port_error, 0, 0, "port down (sim::Fabric::port_down)"});
    }
    if (until != UINT64_MAX) {
        Event ev;
        ev.kind = EventKind::port;
        ev.time = until;
        ev.peer = node;
        ev.generation = outage;
        schedule(ev);
    }
}

void FabricState::port_up(std::uint32_t node) {
    if (!port_is_down(node, now)) return;
    port_down_until[node] = 0;
    ++port_outages[node];
    if (node_domains[node]) node_domains[node]->push_event({EventType::port_active, 0, 0, "port up"});
}

bool FabricState::held_by_nodes(Event& e, const SimQp& qp) noexcept {
    const std::uint32_t node = qp.domain().node();
    if (node < crashed.size() && crashed[node]) return true;  // a crashed node does nothing
    if (e.kind == EventKind::deliver || e.kind == EventKind::ack || e.kind == EventKind::disconnect) {
        if (!cuts.empty() || !crashed.empty() || !port_down_until.empty()) {
            if (!link_up(e.from_node, node, e.time)) {
                ++stats.dropped;
                return true;
            }
        }
        if (e.kind != EventKind::ack && node < stalled_until.size() && stalled_until[node] > e.time) {
            e.time = stalled_until[node];  // the stalled responder takes it up later, in arrival order
            schedule(e);
            return true;
        }
    }
    return false;
}

bool FabricState::step() {
    if (events_.empty()) return false;
    Event e = events_.pop();
    // A few QPs' lines stay in cache: asking for them again would only cost the look at the next event.
    // The queue's front is found now all the same: a cascade before this event's pushes slots them once,
    // where one after them would move them again.
    if (qps_.size() > prefetch_from_qps) prefetch_next();
    else if (!events_.empty()) (void)events_.top();
    if (e.kind == EventKind::port) [[unlikely]] {
        if (e.generation != port_outages[e.peer]) return true;  // ended earlier, or extended
        now = std::max(now, e.time);
        ++events_run;
        port_down_until[e.peer] = 0;
        if (node_domains[e.peer]) node_domains[e.peer]->push_event({EventType::port_active, 0, 0, "port up"});
        return true;
    }
    SimQp* qp = find_qp(e.qpn);
    if (!qp || qp->drop_if_stale(e)) return true;  // a destroyed QP's packets and timers, a cancelled timer: no time passes
    if (nodes_touched && held_by_nodes(e, *qp)) [[unlikely]] return true;
    now = std::max(now, e.time);
    ++events_run;
    switch (e.kind) {
        case EventKind::deliver: qp->on_deliver(e); break;
        case EventKind::ack: qp->on_ack(e); break;
        case EventKind::rnr_retry: qp->on_rnr_retry(e); break;
        case EventKind::timeout: qp->on_timeout(e); break;
        case EventKind::place: qp->on_place(e); break;
        case EventKind::deferred: qp->on_deferred(e); break;
        case EventKind::respond: qp->on_respond(e); break;
        case EventKind::disconnect: qp->on_disconnect(e); break;
        case EventKind::port: break;  // handled above
    }
    if (!overrun_cqs.empty()) handle_overruns();
    return true;
}

void FabricState::prefetch_next() noexcept {
    // With thousands of QPs the next event's QP is seldom in cache: its lines are asked for now, to arrive
    // while the current event runs. Looking at the next event changes nothing of the order. A stale
    // pointer does no harm: a prefetch never faults.
    if (events_.empty()) return;
    const Event& next = events_.top();
    auto prefetch = [this](std::uint32_t qpn, int lines) {
        const std::uint32_t slot = slot_of(qpn);
        if (slot >= qps_.size() || !qps_[slot].qp) return;
        const char* qp = reinterpret_cast<const char*>(qps_[slot].qp);
        for (int k = 0; k < lines; ++k) __builtin_prefetch(qp + 64 * k);
    };
    // The hot members lead the QP (sim.hpp, aligned to a line): a requester's in its first 6 lines; a
    // message arriving also needs the responder's state behind them, and the requester's send queue.
    const bool receiving = next.kind == EventKind::deliver || next.kind == EventKind::place;
    prefetch(next.qpn, receiving ? 8 : 6);
    if (next.kind == EventKind::deliver) prefetch(next.peer, 6);
    // The send-queue entry a message or an acknowledgement is about, and its gather list.
    if (next.kind == EventKind::deliver || next.kind == EventKind::ack) {
        const std::uint32_t slot = slot_of(next.kind == EventKind::deliver ? next.peer : next.qpn);
        if (slot >= qps_.size()) return;
        const SendRing& r = qps_[slot].ring;
        if (!r.entries) return;
        const std::uint64_t i = next.msn & r.mask;
        const char* entry = reinterpret_cast<const char*>(r.entries + i);
        __builtin_prefetch(entry);  // one line (alignas)
        __builtin_prefetch(r.segments + i * r.max_sge);
    }
}

std::uint32_t FabricState::add_qp(SimQp* qp, const SendRing& ring) {
    std::uint32_t slot;
    if (!free_slots_.empty()) {
        slot = free_slots_.back();
        free_slots_.pop_back();
    } else {
        if (qps_.size() >= max_qps) {
            errors.fail(Errc::resource_exhausted, "the fabric has " + std::to_string(qps_.size()) +
                                                      " queue pairs, the most it supports",
                        "create_qp");
        }
        slot = static_cast<std::uint32_t>(qps_.size());
        qps_.emplace_back();
        qp_gen_.push_back(0);
    }
    qps_[slot] = {qp, ring};
    const std::uint32_t gen = ++qp_gen_[slot];  // wraps at 256
    const std::uint32_t s = slot + 1;
    return (s >> 16) << 24 | gen << 16 | (s & 0xffff);
}

void FabricState::remove_qp(std::uint32_t qpn) noexcept {
    const std::uint32_t slot = slot_of(qpn);
    if (slot < qps_.size() && qps_[slot].qp && qps_[slot].qp->qp_num == qpn) {
        qps_[slot] = {};
        free_slots_.push_back(slot);
    }
}

std::shared_ptr<FabricState> attach_fabric(const Params& params) {
    // Declared before the lock: when this is the last reference (the fabric's last domain closed meanwhile
    // on another thread) the destructor runs after the lock is released, and takes it itself.
    std::shared_ptr<FabricState> existing;
    std::lock_guard lock(registry_mutex);
    static std::uint64_t instances = 0;
    auto& fabrics = registry();
    if (auto it = fabrics.find(params.name); it != fabrics.end()) {
        if ((existing = it->second.lock())) {
            if (!(existing->params == params)) {
                errors.fail(Errc::invalid_config,
                            "fabric '" + params.name + "' is already open with " + describe(existing->params) +
                                "; a domain joining it must use the same parameters (asked: " +
                                describe(params) + ")",
                            "open");
            }
            return existing;
        }
    }
    std::uint64_t id = std::hash<std::string>{}(params.name) ^ (++instances * 0x9e3779b97f4a7c15ull);
    auto fabric = std::make_shared<FabricState>(params, id);
    fabrics[params.name] = fabric;
    return fabric;
}

std::uint64_t ack_timeout_ns(std::uint8_t timeout) noexcept {
    // IB: 4.096 us * 2^timeout; 0 means infinite.
    return timeout == 0 ? 0 : 4096ull << timeout;
}

std::uint64_t rnr_delay_ns(std::uint8_t code) noexcept {
    // IB spec table of RNR NAK timer values, in microseconds x 100 (code 0 is the longest, 655.36 ms).
    static constexpr std::uint32_t centi_us[32] = {
        65536, 1,    2,    3,    4,    6,    8,    12,   16,   24,    32,    48,    64,    96,    128,   192,
        256,   384,  512,  768,  1024, 1536, 2048, 3072, 4096, 6144,  8192,  12288, 16384, 24576, 32768, 49152};
    return static_cast<std::uint64_t>(centi_us[code & 31]) * 10000ull;
}

}  // namespace detail

Fabric Fabric::of(const Domain& domain) {
    auto* sim_domain = dynamic_cast<detail::SimDomain*>(domain.impl());
    if (!sim_domain) {
        detail::errors.fail(Errc::invalid_argument,
                    "the domain is not a sim domain (backend '" + domain.capabilities().backend + "')", "sim::Fabric::of");
    }
    return Fabric(sim_domain->fabric());
}

std::uint64_t Fabric::now() const {
    std::lock_guard lock(state_->mu);
    return state_->now;
}

std::size_t Fabric::run_until_idle(std::size_t max_events) {
    std::lock_guard lock(state_->mu);
    detail::FabricState::ReturnToProgram stage{*state_};
    return state_->run([] { return false; }, UINT64_MAX, max_events);
}

void Fabric::run_for(std::chrono::nanoseconds duration) {
    std::lock_guard lock(state_->mu);
    detail::FabricState::ReturnToProgram stage{*state_};
    std::uint64_t deadline = state_->now + static_cast<std::uint64_t>(std::max<std::int64_t>(0, duration.count()));
    state_->run([] { return false; }, deadline, SIZE_MAX);
    state_->now = std::max(state_->now, deadline);
}

bool Fabric::idle() const {
    std::lock_guard lock(state_->mu);
    return state_->idle();
}

const std::string& Fabric::name() const { return state_->params.name; }
std::uint64_t Fabric::seed() const { return state_->params.seed; }

std::uint64_t Fabric::events_processed() const {
    std::lock_guard lock(state_->mu);
    return state_->events_run;
}

namespace {

std::uint32_t node_of(const Domain& domain) {
    auto* d = dynamic_cast<detail::SimDomain*>(domain.impl());
    if (!d) detail::errors.fail(Errc::invalid_argument, "the domain is not a sim domain", "sim::Fabric");
    return d->node();
}

std::uint64_t until(std::uint64_t now, std::chrono::nanoseconds d) {
    if (d == Fabric::forever) return UINT64_MAX;
    return now + static_cast<std::uint64_t>(std::max<std::int64_t>(0, d.count()));
}

void check_probability(double p, const char* what) {
    if (!(p >= 0 && p <= 1)) {
        detail::errors.fail(Errc::invalid_argument, std::string(what) + " must be a probability in [0, 1], got " + std::to_string(p),
                    "sim::Fabric::set_faults");
    }
}

}  // namespace

void Fabric::set_faults(const Faults& f) {
    check_probability(f.drop, "drop");
    check_probability(f.duplicate, "duplicate");
    check_probability(f.delay, "delay");
    std::lock_guard lock(state_->mu);
    state_->rates.drop = f.drop;
    state_->rates.duplicate = f.duplicate;
    state_->rates.delay = f.delay;
    state_->rates.delay_ns = static_cast<std::uint64_t>(std::max<std::int64_t>(1, f.max_delay.count()));
    state_->rates.update();
}

Fabric::Faults Fabric::faults() const {
    std::lock_guard lock(state_->mu);
    const auto& r = state_->rates;
    return {r.drop, r.duplicate, r.delay, std::chrono::nanoseconds(r.delay_ns)};
}

void Fabric::cut(const Domain& a, const Domain& b, std::chrono::nanoseconds duration) {
    const auto na = node_of(a), nb = node_of(b);
    std::lock_guard lock(state_->mu);
    state_->cuts.push_back({na, nb, until(state_->now, duration)});
    state_->nodes_touched = true;
}

void Fabric::heal(const Domain& a, const Domain& b) {
    const auto na = node_of(a), nb = node_of(b);
    std::lock_guard lock(state_->mu);
    std::erase_if(state_->cuts, [&](const detail::FabricState::Cut& c) {
        return (c.a == na && c.b == nb) || (c.a == nb && c.b == na);
    });
}

void Fabric::crash(const Domain& node) {
    const auto n = node_of(node);
    std::lock_guard lock(state_->mu);
    if (state_->crashed.size() <= n) state_->crashed.resize(n + 1, 0);
    state_->crashed[n] = 1;
    state_->nodes_touched = true;
}

void Fabric::port_down(const Domain& node, std::chrono::nanoseconds duration) {
    const auto n = node_of(node);
    std::lock_guard lock(state_->mu);
    state_->port_down(n, until(state_->now, duration));
    state_->sync_fds();
}

void Fabric::port_up(const Domain& node) {
    const auto n = node_of(node);
    std::lock_guard lock(state_->mu);
    state_->port_up(n);
    state_->sync_fds();
}

void Fabric::stall(const Domain& node, std::chrono::nanoseconds duration) {
    const auto n = node_of(node);
    std::lock_guard lock(state_->mu);
    if (state_->stalled_until.size() <= n) state_->stalled_until.resize(n + 1, 0);
    state_->nodes_touched = true;
    state_->stalled_until[n] = until(state_->now, duration);
}

std::uint64_t Fabric::program_time(const Domain& node) const {
    const auto n = node_of(node);
    std::lock_guard lock(state_->mu);
    return state_->program_time(n);
}

void Fabric::fail_next_registration(unsigned count) {
    std::lock_guard lock(state_->mu);
    state_->fail_registrations += count;
}

void Fabric::fail_next_qp_creation(unsigned count) {
    std::lock_guard lock(state_->mu);
    state_->fail_qp_creations += count;
}

std::vector<std::uint8_t> Fabric::explored_choices(const std::string& name) {
    std::lock_guard lock(detail::explored_mutex);
    auto& logs = detail::explored();
    auto it = logs.find(name);
    if (it == logs.end()) return {};
    auto out = std::move(it->second);
    logs.erase(it);
    return out;
}

Fabric::Stats Fabric::stats() const {
    std::lock_guard lock(state_->mu);
    return state_->stats;
}

void Fabric::start_trace(std::size_t max_records) {
    std::lock_guard lock(state_->mu);
    state_->start_trace(max_records);
}

void Fabric::stop_trace() {
    std::lock_guard lock(state_->mu);
    state_->tracing = false;
}

std::string Fabric::trace_json() const {
    std::lock_guard lock(state_->mu);
    return state_->trace_json();
}

std::string Fabric::trace_text() const {
    std::lock_guard lock(state_->mu);
    return state_->trace_text();
}

Fabric::MisuseTally Fabric::misuse_tally() {
    std::lock_guard lock(detail::tally_mu);
    return detail::tally;
}

std::vector<std::string> Fabric::misuse() const {
    std::lock_guard lock(state_->mu);
    return state_->misuse_log;
}

void Fabric::clear_misuse() {
    std::lock_guard lock(state_->mu);
    state_->misuse_log.clear();
}

}  // namespace weft::sim
