// host:port parsing for weft::listen / weft::connect, and the "not supported" default of the backend interface.
#include <weft/backend.hpp>
#include <weft/weft.hpp>

#include <boost/test/unit_test.hpp>

#include "../support/expect_error.hpp"

#include <string>
#include <type_traits>

using namespace weft;
using weft::detail::HostPort;
using weft::detail::parse_host_port;

static_assert(!std::is_copy_constructible_v<Listener> && std::is_nothrow_move_assignable_v<Listener>);

namespace {

using weft::test::contains;

// A backend that implements nothing optional.
class BareDomain final : public detail::DomainImpl {
public:
    BareDomain() { caps.backend = "bare"; }
    std::unique_ptr<detail::MrImpl> register_memory(void*, std::size_t, Access) override { return nullptr; }
    std::shared_ptr<detail::CqImpl> create_cq(const CqOptions&) override { return nullptr; }
    std::unique_ptr<detail::QpImpl> create_qp(const detail::QpSetup&) override { return nullptr; }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(host_port)

BOOST_AUTO_TEST_CASE(ipv4_name_and_bracketed_ipv6_parse) {
    HostPort a = parse_host_port("192.0.2.1:7471", "t", "listen");
    BOOST_TEST(a.host == "192.0.2.1");
    BOOST_TEST(a.port == 7471);
    BOOST_TEST(a.text() == "192.0.2.1:7471");
    HostPort b = parse_host_port("[fe80::1%d0]:0", "t", "listen");
    BOOST_TEST(b.host == "fe80::1%d0");
    BOOST_TEST(b.port == 0);
    BOOST_TEST(b.text() == "[fe80::1%d0]:0");
    HostPort c = parse_host_port("server:65535", "t", "listen");
    BOOST_TEST(c.host == "server");
    BOOST_TEST(c.port == 65535);
}

BOOST_AUTO_TEST_CASE(malformed_addresses_name_the_accepted_forms) {
    for (const char* bad : {"", "server", "server:", ":1", "server:65536", "server:1x", "[::1", "[]:1", "[::1]1",
                            "::1:80", "a b:1", "server:123456"}) {
        BOOST_TEST_CONTEXT("'" << bad << "'") {
            try {
                parse_host_port(bad, "t", "listen");
                BOOST_ERROR("accepted");
            } catch (const Error& e) {
                BOOST_TEST((e.code() == Errc::invalid_argument));
                BOOST_TEST(contains(e.what(), "accepted forms"), e.what());
                BOOST_TEST(e.backend() == "t");
                BOOST_TEST(e.object() == "listen");
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(a_backend_without_listener_says_so) {
    BareDomain dom;
    try {
        dom.listen(HostPort{"x", 1});
        BOOST_ERROR("no error");
    } catch (const Error& e) {
        BOOST_TEST((e.code() == Errc::not_supported));
        BOOST_TEST(e.backend() == "bare");
        BOOST_TEST(contains(e.what(), "QueuePair::address()"), e.what());
    }
}

BOOST_AUTO_TEST_CASE(an_empty_listener_handle_throws) {
    Listener lis;
    BOOST_TEST(!lis);
    BOOST_CHECK_THROW(lis.address(), Error);
}

BOOST_AUTO_TEST_SUITE_END()
