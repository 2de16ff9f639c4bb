// Conformance harness implementation: backend selection, pair setup, polling with deadlines.
#include "harness.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <span>
#include <string>
#include <thread>

namespace weft::test {
namespace {

bool is_sim() { return backend_caps().kind == BackendKind::sim; }

// ::ffff:a.b.c.d as sysfs writes it ("0000:0000:0000:0000:0000:ffff:c000:0201") -> "a.b.c.d"; empty when the
// GID is not IPv4-mapped.
std::string mapped_ipv4(const std::string& gid) {
    const std::string prefix = "0000:0000:0000:0000:0000:ffff:";
    if (gid.rfind(prefix, 0) != 0 || gid.size() < prefix.size() + 9) return {};
    const unsigned long hi = std::stoul(gid.substr(prefix.size(), 4), nullptr, 16);
    const unsigned long lo = std::stoul(gid.substr(prefix.size() + 5, 4), nullptr, 16);
    return std::to_string(hi >> 8) + "." + std::to_string(hi & 0xff) + "." + std::to_string(lo >> 8) + "." +
           std::to_string(lo & 0xff);
}

// The IPv4 address of a verbs domain's GID (the configured gid_index, or the first IPv4-mapped entry).
std::string verbs_ipv4(const Domain& dom) {
    const std::string port = std::to_string(dom.config().get_uint("port", 1, 1, 255));
    const std::string dir = "/sys/class/infiniband/" + dom.capabilities().device + "/ports/" + port + "/gids/";
    auto read_gid = [&](unsigned index) {
        std::ifstream in(dir + std::to_string(index));
        std::string gid;
        in >> gid;
        return mapped_ipv4(gid);
    };
    if (dom.config().has("gid_index")) {
        return read_gid(static_cast<unsigned>(dom.config().get_uint("gid_index", 0, 0, 255)));
    }
    for (unsigned i = 0; i < 16; ++i) {
        if (auto ip = read_gid(i); !ip.empty()) return ip;
    }
    return {};
}

const Pair* current_pair = nullptr;

// Every Side alive, for keep_local_sides_moving().
std::vector<Side*>& live_sides() {
    static std::vector<Side*> sides;
    return sides;
}

// In two processes each process drives its own side: the peer polls its CQs between commands, and this
// process, while a case waits on a CQ of the peer, lets its own CQs progress without taking completions
// from them (wait with a zero timeout). Providers that move data only inside CQ calls need it
// (docs/backends/ofi.md, "Progress"); in one process the backend's idle poll does it.
void keep_local_sides_moving() {
    if (!backend_caps().has(Feature::wait)) return;
    for (Side* s : live_sides()) {
        if (s->cq && !peer::is_remote(s->cq)) s->cq.wait(std::chrono::nanoseconds(0));
    }
}

int unrecorded_scopes = 0;  // Unrecorded objects alive

std::ofstream* recorder() {
    if (unrecorded_scopes > 0) return nullptr;
    static std::ofstream* out = [] () -> std::ofstream* {
        const char* path = std::getenv("WEFT_CONFORMANCE_RECORD");
        if (!path || !*path) return nullptr;
        auto* f = new std::ofstream(path, std::ios::trunc);
        if (!*f) BOOST_FAIL("cannot write WEFT_CONFORMANCE_RECORD file " << path);
        return f;
    }();
    return out;
}

std::string case_name() { return boost::unit_test::framework::current_test_case().full_name(); }

std::uint64_t digest(std::span<const std::byte> buf) {
    std::uint64_t h = 1469598103934665603ull;
    for (auto b : buf) h = (h ^ static_cast<std::uint64_t>(b)) * 1099511628211ull;
    return h;
}

}  // namespace

std::string config_from(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], "--backend=", 10) == 0) return argv[i] + 10;
    }
    if (const char* env = std::getenv("WEFT_CONFORMANCE_BACKEND"); env && *env) return env;
    return default_config();
}

const std::string& backend_config() {
    static const std::string config = [] {
        auto& suite = boost::unit_test::framework::master_test_suite();
        auto c = config_from(suite.argc, suite.argv);
        BOOST_TEST_MESSAGE("conformance backend: " << c);
        return c;
    }();
    return config;
}

const Capabilities& backend_caps() {
    static const Capabilities caps = [] {
        auto dom = open(backend_config());
        return dom.capabilities();
    }();
    return caps;
}

boost::unit_test::precondition needs(Feature f) {
    return boost::unit_test::precondition([f](boost::unit_test::test_unit_id) {
        boost::test_tools::assertion_result r(backend_caps().has(f));
        if (!r) r.message() << "backend '" << backend_config() << "' lacks feature " << to_string(f);
        return r;
    });
}

boost::unit_test::precondition only_if(bool (*holds)(), const char* reason) {
    return boost::unit_test::precondition([holds, reason](boost::unit_test::test_unit_id) {
        boost::test_tools::assertion_result r(holds());
        if (!r) r.message() << "backend '" << backend_config() << "': " << reason;
        return r;
    });
}

WcStatus expected(WcStatus spec, std::initializer_list<Deviation> deviations) {
    for (const auto& d : deviations) {
        if (d.profile == backend_caps().profile) return d.status;
    }
    return spec;
}

void Side::fill(std::size_t off, std::size_t len, std::uint8_t seed) {
    for (std::size_t i = 0; i < len; ++i) buf[off + i] = static_cast<std::byte>(seed + i * 7);
}

bool Side::holds(std::size_t off, std::size_t len, std::uint8_t seed) const {
    for (std::size_t i = 0; i < len; ++i) {
        if (buf[off + i] != static_cast<std::byte>(seed + i * 7)) return false;
    }
    return true;
}

Unrecorded::Unrecorded() { ++unrecorded_scopes; }

Unrecorded::~Unrecorded() { --unrecorded_scopes; }

Domain open_side_b() { return peer::active() ? peer::open(backend_config()) : open(backend_config()); }

Memory::Memory(const Domain& dom, std::size_t bytes) {
    if (peer::is_remote(dom)) {
        shared_ = peer::Block(bytes);
        bytes_ = shared_.bytes();
    } else {
        local_.assign(bytes, std::byte{0});
        bytes_ = local_;
    }
}

Side::Side() { live_sides().push_back(this); }

Side::~Side() { std::erase(live_sides(), this); }

void Side::allocate(std::size_t bytes) {
    storage = memory(bytes);
    buf = storage.bytes();
}

Pair::Pair(QpOptions options, Access access) : Pair(unconnected, options, access) { connect(); }

Pair::Pair(Unconnected, QpOptions options, Access access) {
    for (Side* s : {&a, &b}) {
        s->domain = s == &b ? open_side_b() : open(backend_config());
        s->cq = s->domain.create_cq({.depth = 1024});
        QpOptions o = options;
        o.send_cq = s->cq;
        o.recv_cq = s->cq;
        s->qp = s->domain.create_qp(o);
        s->allocate(buffer_size);
        s->mr = s->domain.register_memory(s->buf, access);
    }
    current_pair = this;
}

void Pair::connect() { connect_both(a.qp, b.qp); }

std::string listen_address(const Domain& dom) {
    if (const char* env = std::getenv("WEFT_CONFORMANCE_LISTEN"); env && *env) return env;
    if (dom.capabilities().kind == BackendKind::verbs) {
        const std::string ip = verbs_ipv4(dom);
        if (ip.empty()) {
            BOOST_FAIL("no IPv4-mapped GID on " << dom.capabilities().device
                                                << " to listen on; set WEFT_CONFORMANCE_LISTEN=HOST:PORT");
        }
        return ip + ":0";
    }
    // ofi meets over a TCP rendezvous, whatever the provider: loopback serves one machine.
    if (dom.capabilities().kind == BackendKind::ofi) return "127.0.0.1:0";
    return "conformance:0";
}

void Pair::connect_through_listener() {
    Listener lis = weft::listen(a.domain, listen_address(a.domain));
    const std::string address = lis.address();
    std::exception_ptr connect_error;
    std::thread connector([&] {
        try {
            weft::connect(b.qp, address, handshake_timeout);
        } catch (...) {
            connect_error = std::current_exception();
        }
    });
    std::exception_ptr accept_error;
    try {
        lis.accept(a.qp, handshake_timeout);
    } catch (...) {
        accept_error = std::current_exception();
    }
    connector.join();
    if (accept_error) std::rethrow_exception(accept_error);
    if (connect_error) std::rethrow_exception(connect_error);
}

void connect_both(QueuePair& a, QueuePair& b) {
    auto addr_a = a.address();
    auto addr_b = b.address();
    a.connect(addr_b);
    b.connect(addr_a);
    if (peer::active()) {
        // In one process the backends finish both halves of a handshake inside connect(); across processes
        // a handshake may still be under way: a pair is connected when both QPs are ready to send.
        const auto deadline = std::chrono::steady_clock::now() + completion_deadline;
        for (;;) {
            const QpState sa = a.state();
            const QpState sb = b.state();
            if (sa == QpState::rts && sb == QpState::rts) break;
            if (sa == QpState::error || sb == QpState::error || std::chrono::steady_clock::now() > deadline) {
                BOOST_FAIL("the pair did not connect across processes within " << completion_deadline.count()
                           << " s: a is " << sa << ", b is " << sb);
            }
            keep_local_sides_moving();
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
}

Pair::~Pair() {
    if (auto* out = recorder()) {
        *out << case_name() << " data a=" << std::hex << digest(a.buf) << " b=" << digest(b.buf) << std::dec << '\n';
        out->flush();
    }
    if (current_pair == this) current_pair = nullptr;
}

void record(const CompletionQueue& cq, const Completion& c) {
    auto* out = recorder();
    if (!out) return;
    const char* side = "-";
    if (current_pair && &cq == &current_pair->a.cq) side = "a";
    if (current_pair && &cq == &current_pair->b.cq) side = "b";
    *out << case_name() << ' ' << side << " id=" << c.id << " status=" << c.status;
    if (c.ok()) {
        // Fields the contract defines: opcode on success; byte_len for receives, reads and atomics; imm.
        *out << " opcode=" << c.opcode;
        if (c.is_recv() || c.opcode == Opcode::read || is_atomic(c.opcode)) *out << " byte_len=" << c.byte_len;
        if (c.has_imm) *out << " imm=" << c.imm;
    }
    *out << '\n';
}

std::optional<Completion> maybe_next(CompletionQueue& cq, std::chrono::milliseconds patience) {
    Completion wc[1];
    auto deadline = std::chrono::steady_clock::now() + patience;
    const bool remote = peer::is_remote(cq);
    do {
        if (!cq.poll(wc).empty()) {
            record(cq, wc[0]);
            return wc[0];
        }
        if (remote) keep_local_sides_moving();
        if (!is_sim()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    } while (std::chrono::steady_clock::now() < deadline);
    return std::nullopt;
}

std::optional<AsyncEvent> await_event(Domain& dom, std::chrono::milliseconds patience) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    do {
        if (auto e = dom.next_event()) return e;
        if (!is_sim()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    } while (std::chrono::steady_clock::now() < deadline);
    return std::nullopt;
}

Completion next(CompletionQueue& cq) {
    auto c = maybe_next(cq, std::chrono::duration_cast<std::chrono::milliseconds>(completion_deadline));
    if (!c) BOOST_FAIL("no completion within " << completion_deadline.count() << " s");
    return *c;
}

void expect_empty(CompletionQueue& cq) {
    auto c = maybe_next(cq, std::chrono::milliseconds(20));
    BOOST_TEST(!c.has_value(), "unexpected completion: " << (c ? *c : Completion{}));
}

}  // namespace weft::test
