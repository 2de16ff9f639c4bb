// weft::listen / weft::connect on ofi beyond the conformance suite: what the listener does with connectors
// it cannot use (a QP of another provider, a stranger speaking another protocol) and that it keeps serving
// the next one; what a connector makes of a stranger's refusal.
#include <weft/weft.hpp>

#include "../support/expect_error.hpp"
#include "ofi_wire.hpp"
#include "support.hpp"

#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <system_error>
#include <thread>

using namespace std::chrono_literals;
using weft::test::contains;
using weft::test::error_of;

namespace {

std::string config() { return weft::test::ofi_config(); }

using Side = weft::test::OfiSide;

// Writes `bytes` to host:port over a plain TCP connection and returns what came back before it closed.
std::string stranger(const std::string& address, const std::string& bytes) {
    const auto colon = address.rfind(':');
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1))));
    ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &to.sin_addr);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
        if (fd >= 0) ::close(fd);
        return "<could not connect>";
    }
    [[maybe_unused]] auto w = ::write(fd, bytes.data(), bytes.size());
    std::string reply;
    char buf[512];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) reply.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    return reply;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ofi_listener)

BOOST_AUTO_TEST_CASE(a_qp_of_another_provider_is_refused_with_the_reason_and_both_stay_fresh) {
    Side server(config());
    const std::string other = config().find("shm") != std::string::npos ? "ofi:provider=tcp" : "ofi:provider=shm";
    Side client(other);
    weft::Listener lis = weft::listen(server.dom, "127.0.0.1:0");
    std::exception_ptr accept_error;
    std::thread acceptor([&] {
        try {
            lis.accept(server.qp, 1500ms);
        } catch (...) {
            accept_error = std::current_exception();
        }
    });
    weft::Error e = error_of([&] { weft::connect(client.qp, lis.address(), 5s); });
    acceptor.join();
    BOOST_TEST_MESSAGE("connector: " << e.what());
    BOOST_TEST((e.code() == std::errc::connection_refused));
    BOOST_TEST(contains(e.what(), "refused"), e.what());
    BOOST_TEST(contains(e.what(), "the peer QP"), e.what());  // the listener's reason travels back
    BOOST_REQUIRE(accept_error);
    weft::Error a = error_of([&] { std::rethrow_exception(accept_error); });
    BOOST_TEST_MESSAGE("listener: " << a.what());
    BOOST_TEST((a.code() == std::errc::timed_out));
    BOOST_TEST(contains(a.what(), "refused one"), a.what());
    BOOST_TEST(server.qp.state() == weft::QpState::init);
    BOOST_TEST(client.qp.state() == weft::QpState::init);
}

BOOST_AUTO_TEST_CASE(a_stranger_is_refused_and_the_next_connector_is_served) {
    Side server(config());
    Side client(config());
    weft::Listener lis = weft::listen(server.dom, "127.0.0.1:0");
    const std::string address = lis.address();
    std::exception_ptr accept_error;
    std::thread acceptor([&] {
        try {
            lis.accept(server.qp, 10s);
        } catch (...) {
            accept_error = std::current_exception();
        }
    });
    const std::string reply = stranger(address, "GET / HTTP/1.0\r\n\r\n");
    BOOST_TEST(contains(reply, "bad magic"), "reply to the stranger: " << reply);
    weft::connect(client.qp, address, 10s);
    acceptor.join();
    if (accept_error) std::rethrow_exception(accept_error);
    BOOST_TEST(server.qp.state() == weft::QpState::rts);
    BOOST_TEST(client.qp.state() == weft::QpState::rts);

    // And the connection carries data.
    std::vector<std::byte> sbuf(64, std::byte{0}), cbuf(64, std::byte{0x5a});
    auto smr = server.dom.register_memory(sbuf, weft::all_access);
    auto cmr = client.dom.register_memory(cbuf, weft::all_access);
    BOOST_REQUIRE(server.qp.post_recv({weft::recv(1, smr.slice(0, 64))}));
    BOOST_REQUIRE(client.qp.post_send({weft::send(2, cmr.slice(0, 64))}));
    weft::Completion wc[1];
    auto deadline = std::chrono::steady_clock::now() + 10s;
    bool sent = false, received = false;
    while ((!sent || !received) && std::chrono::steady_clock::now() < deadline) {
        if (!client.cq.poll(wc).empty()) {
            BOOST_TEST_MESSAGE("client: " << wc[0]);
            sent = wc[0].ok();
        }
        if (!server.cq.poll(wc).empty()) {
            BOOST_TEST_MESSAGE("server: " << wc[0]);
            received = wc[0].ok() && wc[0].byte_len == 64;
        }
    }
    BOOST_TEST(sent);
    BOOST_TEST(received);
    BOOST_TEST((sbuf == cbuf));
}

// A stray server on the listen address answers with a refusal of its own: its text reaches connect's error
// printable and cut, whatever bytes it holds.
BOOST_AUTO_TEST_CASE(a_strangers_refusal_reaches_the_error_printable_and_cut) {
    Side client(config());
    int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
    BOOST_REQUIRE(lfd >= 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof at;
    BOOST_REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
    BOOST_REQUIRE(::listen(lfd, 1) == 0);
    BOOST_REQUIRE(::getsockname(lfd, reinterpret_cast<sockaddr*>(&at), &len) == 0);
    const std::string text = std::string("no\x1b[2J\0\xff", 8) + std::string(5000, 'x');
    std::thread server([&] {
        int fd = ::accept(lfd, nullptr, nullptr);
        if (fd < 0) return;
        const auto frame = weft::ofi::wire::encode_frame(weft::ofi::wire::FrameKind::refused,
                                                         std::as_bytes(std::span(text.data(), text.size())));
        [[maybe_unused]] auto w = ::write(fd, frame.data(), frame.size());
        char buf[512];
        while (::read(fd, buf, sizeof buf) > 0) {
        }
        ::close(fd);
    });
    weft::Error e = error_of([&] { weft::connect(client.qp, "127.0.0.1:" + std::to_string(ntohs(at.sin_port)), 10s); });
    server.join();
    ::close(lfd);
    const std::string what = e.what();
    BOOST_TEST((e.code() == std::errc::connection_refused), what);
    BOOST_TEST(contains(what, "refused: no?[2J??xxx"), what);
    BOOST_TEST(contains(what, std::string(weft::ofi::wire::refusal_text_max - 8, 'x') + "..."), what);
    BOOST_TEST(what.size() < 1000u);
    BOOST_TEST(std::all_of(what.begin(), what.end(), [](char c) { return c >= 0x20 && c < 0x7f; }), what);
    BOOST_TEST(client.qp.state() == weft::QpState::init);
}

BOOST_AUTO_TEST_CASE(an_unresolvable_host_names_the_forms_accepted) {
    Side server(config());
    weft::Error e = error_of([&] { auto l = weft::listen(server.dom, "no-such-host.invalid:0"); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == weft::Errc::invalid_argument || e.code() == std::errc::invalid_argument));
    BOOST_TEST(contains(e.what(), "no-such-host.invalid"), e.what());
}

BOOST_AUTO_TEST_SUITE_END()

// The verbs provider stalls sends for good when the receive slots bound to a CQ take all its entries; the
// backend refuses such a QP at creation instead, saying what depth would do.
namespace {
boost::test_tools::assertion_result on_verbs_provider(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result r(weft::open(config()).capabilities().profile == "ofi-verbs");
    if (!r) r.message() << config() << " is not libfabric's verbs provider (the only one that counts CQ entries)";
    return r;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(ofi_verbs_cq_entries)

BOOST_AUTO_TEST_CASE(a_cq_smaller_than_its_queues_is_refused_with_the_depth_needed,
                     *boost::unit_test::precondition(&on_verbs_provider)) {
    auto dom = weft::open(config());
    auto cq = dom.create_cq({.depth = 64});
    weft::Error e = error_of([&] { auto qp = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 64, .max_recv = 64}); });
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST((e.code() == weft::Errc::resource_exhausted));
    BOOST_TEST(contains(e.what(), "depth >= 128"), e.what());
    // What fits is accepted, and the entries of a destroyed QP come back.
    {
        auto qp = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 32, .max_recv = 32});
        BOOST_TEST(qp.caps().max_send == 32u);
    }
    auto again = dom.create_qp({.send_cq = cq, .recv_cq = cq, .max_send = 32, .max_recv = 32});
    BOOST_TEST(again.caps().max_recv == 32u);
}

BOOST_AUTO_TEST_SUITE_END()
