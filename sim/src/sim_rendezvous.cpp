// The simulator's listen/connect: a named rendezvous per fabric. listen(dom, "NAME:PORT") registers
// (NAME, PORT) in the domain's fabric while the Listener lives; connect() queues the connecting QP's
// address there and waits; accept() takes the oldest queued connect, connects its QP to it, and hands back
// its own address, with which the connector connects its QP. accept() returns only once the connector's QP
// is connected too, so neither side can send into a QP that is not ready: virtual time would otherwise run
// a request's retries out while the other thread is still inside connect().
//
// The rendezvous runs in real time, outside the simulated clock: QP connection schedules no events, so
// the data path stays deterministic from the seed whichever thread reaches the rendezvous first. Its lock
// is taken before the fabric's (QueuePair::connect) and never the other way round.
#include "sim.hpp"

#include <weft/error.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

namespace weft::sim::detail {
namespace {

constexpr std::uint32_t first_free_port = 49152;  // where port 0 starts looking, as IANA's dynamic range

// One connect() waiting at a listener.
struct Request {
    enum class State { pending, accepted, connected, refused, failed };
    std::vector<std::byte> connector_address;
    std::vector<std::byte> connector_data;    // private data
    std::vector<std::byte> acceptor_address;  // when accepted
    std::vector<std::byte> acceptor_data;     // the reply, when accepted
    std::string refusal;                      // when refused, or why the connector failed
    State state = State::pending;
};

struct Endpoint {
    std::deque<std::shared_ptr<Request>> pending;
};

// (fabric, name, port). A fabric outlives its endpoints: a listener holds its domain, the domain its fabric.
using Key = std::tuple<const FabricState*, std::string, std::uint16_t>;

struct Table {
    std::mutex mu;
    std::condition_variable cv;
    std::map<Key, std::shared_ptr<Endpoint>> endpoints;
};

Table& table() {
    static Table t;
    return t;
}

std::string ms_text(std::chrono::milliseconds t) { return std::to_string(t.count()) + " ms"; }

// "a:1, b:49152" — what listens on `fabric`, for messages.
std::string listening_on(const Table& t, const FabricState* fabric) {
    std::string out;
    for (const auto& [key, ep] : t.endpoints) {
        if (std::get<0>(key) != fabric) continue;
        if (!out.empty()) out += ", ";
        out += std::get<1>(key) + ":" + std::to_string(std::get<2>(key));
    }
    return out.empty() ? std::string("none") : out;
}

class SimListener final : public weft::detail::ListenerImpl {
public:
    SimListener(std::shared_ptr<SimDomain> dom, weft::detail::HostPort where, std::shared_ptr<Endpoint> ep)
        : dom_(std::move(dom)), where_(std::move(where)), endpoint_(std::move(ep)) {}

    ~SimListener() override {
        Table& t = table();
        std::lock_guard lock(t.mu);
        for (auto& r : endpoint_->pending) {
            r->state = Request::State::refused;
            r->refusal = "the listener at '" + where_.text() + "' was closed before it accepted";
        }
        endpoint_->pending.clear();
        t.endpoints.erase(Key{dom_->fabric().get(), where_.host, where_.port});
        t.cv.notify_all();
    }

    std::vector<std::byte> accept(weft::detail::QpImpl& qp, std::chrono::milliseconds timeout,
                                  const AcceptReply& decide) override {
        Table& t = table();
        std::unique_lock lock(t.mu);
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        if (!t.cv.wait_until(lock, deadline, [&] { return !endpoint_->pending.empty(); })) {
            errors.fail(std::errc::timed_out,
                        "no connect() to '" + where_.text() + "' on fabric '" + dom_->fabric()->params.name +
                            "' within " + ms_text(timeout),
                        "Listener::accept");
        }
        std::shared_ptr<Request> r = std::move(endpoint_->pending.front());
        endpoint_->pending.pop_front();
        try {
            r->acceptor_data = decide(r->connector_data);
        } catch (const std::exception& e) {
            r->state = Request::State::refused;
            r->refusal = "the listener at '" + where_.text() + "' refused: " + e.what();
            t.cv.notify_all();
            throw;
        }
        try {
            qp.connect(r->connector_address);
            r->acceptor_address = qp.address();
        } catch (const std::exception& e) {
            r->state = Request::State::refused;
            r->refusal = "the listener at '" + where_.text() + "' failed to connect its QP: " + e.what();
            t.cv.notify_all();
            throw;
        }
        r->state = Request::State::accepted;
        t.cv.notify_all();
        // The connector connects its QP as soon as it wakes; it never waits for anything else.
        t.cv.wait(lock, [&] { return r->state != Request::State::accepted; });
        if (r->state == Request::State::failed) {
            errors.fail(std::errc::connection_aborted,
                        "the peer's connect() to '" + where_.text() + "' failed to connect its QP: " + r->refusal,
                        "Listener::accept");
        }
        return std::move(r->connector_data);
    }

    std::string address() const override { return where_.text(); }

private:
    std::shared_ptr<SimDomain> dom_;
    weft::detail::HostPort where_;
    std::shared_ptr<Endpoint> endpoint_;
};

}  // namespace

std::unique_ptr<weft::detail::ListenerImpl> SimDomain::listen(const weft::detail::HostPort& where) {
    Table& t = table();
    std::lock_guard lock(t.mu);
    weft::detail::HostPort bound = where;
    if (bound.port == 0) {
        std::uint32_t port = first_free_port;
        while (port <= 65535 && t.endpoints.count(Key{fabric_.get(), bound.host, port}) != 0) ++port;
        if (port > 65535) {
            errors.fail(Errc::resource_exhausted,
                        "every port of '" + bound.host + "' from " + std::to_string(first_free_port) +
                            " up is listened on in fabric '" + fabric_->params.name + "'",
                        "listen");
        }
        bound.port = static_cast<std::uint16_t>(port);
    }
    auto [it, inserted] =
        t.endpoints.try_emplace(Key{fabric_.get(), bound.host, bound.port}, std::make_shared<Endpoint>());
    if (!inserted) {
        errors.fail(std::errc::address_in_use,
                    "'" + bound.text() + "' is already listened on in fabric '" + fabric_->params.name +
                        "'; destroy that Listener first, or ask for port 0",
                    "listen");
    }
    auto self = std::static_pointer_cast<SimDomain>(shared_from_this());
    return std::make_unique<SimListener>(std::move(self), std::move(bound), it->second);
}

std::vector<std::byte> SimDomain::connect_to(weft::detail::QpImpl& qp, const weft::detail::HostPort& where,
                                             std::chrono::milliseconds timeout,
                                             std::span<const std::byte> private_data) {
    constexpr const char* call = "connect";
    auto request = std::make_shared<Request>();
    request->connector_address = qp.address();
    request->connector_data.assign(private_data.begin(), private_data.end());

    Table& t = table();
    std::unique_lock lock(t.mu);
    const auto it = t.endpoints.find(Key{fabric_.get(), where.host, where.port});
    if (it == t.endpoints.end()) {
        errors.fail(std::errc::connection_refused,
                    "nothing listens on '" + where.text() + "' in fabric '" + fabric_->params.name +
                        "' (listeners in that fabric: " + listening_on(t, fabric_.get()) + ")",
                    call);
    }
    std::shared_ptr<Endpoint> endpoint = it->second;
    endpoint->pending.push_back(request);
    t.cv.notify_all();

    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (!t.cv.wait_until(lock, deadline, [&] { return request->state != Request::State::pending; })) {
        std::erase(endpoint->pending, request);
        errors.fail(std::errc::timed_out,
                    "the listener at '" + where.text() + "' in fabric '" + fabric_->params.name +
                        "' did not accept within " + ms_text(timeout),
                    call);
    }
    if (request->state == Request::State::refused) {
        errors.fail(std::errc::connection_refused, request->refusal, call);
    }
    // Still under the rendezvous lock (taken before the fabric's, as in accept), so that accept() returns
    // only after this QP is connected.
    try {
        qp.connect(request->acceptor_address);
    } catch (const std::exception& e) {
        request->state = Request::State::failed;
        request->refusal = e.what();
        t.cv.notify_all();
        throw;
    }
    request->state = Request::State::connected;
    t.cv.notify_all();
    return std::move(request->acceptor_data);
}

}  // namespace weft::sim::detail
