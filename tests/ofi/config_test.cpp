// Configuration checks and libfabric errors: a domain the provider does not have is refused with the ones
// it has; libfabric's codes compare equal to the std::errc conditions they stand for and read as
// fi_strerror's text. (Only libfabric's header here: the test does not link libfabric.)
#include <weft/weft.hpp>

#include "support.hpp"

#include <boost/test/unit_test.hpp>

#include <rdma/fi_errno.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

namespace {

using namespace weft;

// The domain part of Capabilities::device, "tcp/lo (msg)" -> "lo".
std::string domain_of(const std::string& device) {
    auto slash = device.find('/');
    auto space = device.find(" (", slash);
    return device.substr(slash + 1, space - slash - 1);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ofi_config)

BOOST_AUTO_TEST_CASE(an_unknown_domain_is_refused_naming_the_ones_there_are) {
    const std::string config = weft::test::ofi_config();
    if (config.find("domain=") != std::string::npos) {
        BOOST_TEST_MESSAGE("skipped: " << config << " names its domain already");
        return;
    }
    const std::string real = domain_of(open(config).capabilities().device);
    try {
        Domain d = open(config + ",domain=nosuch");
        BOOST_ERROR("opened " << d.capabilities().device << " for domain=nosuch");
    } catch (const Error& e) {
        const std::string what = e.what();
        BOOST_TEST_MESSAGE(what);
        BOOST_TEST((e.code() == Errc::invalid_config), e.code().message());
        BOOST_TEST(what.find("nosuch") != std::string::npos);
        BOOST_TEST(what.find(real) != std::string::npos, "the message does not name domain " << real);
    }
}

BOOST_AUTO_TEST_CASE(libfabric_codes_compare_equal_to_std_errc_and_read_as_fi_strerror) {
    Domain loaded = open(weft::test::ofi_config());  // the plugin, and libfabric with it, are in the process
    std::error_code timed_out(FI_ETIMEDOUT, fabric_category());
    BOOST_TEST((timed_out == std::errc::timed_out));
    BOOST_TEST((std::error_code(FI_ECONNREFUSED, fabric_category()) == std::errc::connection_refused));
    BOOST_TEST((std::error_code(FI_ENOMEM, fabric_category()) == std::errc::not_enough_memory));
    BOOST_TEST((std::error_code(FI_EAGAIN, fabric_category()) == std::errc::resource_unavailable_try_again));
    BOOST_TEST((timed_out != std::errc::connection_refused));
    BOOST_TEST(timed_out.message() == std::string(std::strerror(ETIMEDOUT)));  // fi_strerror of an errno code
    // libfabric's own codes (from 256) keep their text and match no errno condition.
    std::error_code trunc(FI_ETRUNC, fabric_category());
    BOOST_TEST(trunc.message() == "Truncation error");  // fi_strerror(FI_ETRUNC) in libfabric 1.17
    BOOST_TEST(trunc.message().find("libfabric error") == std::string::npos);
    BOOST_TEST((trunc.default_error_condition().category() == fabric_category()));
}

BOOST_AUTO_TEST_SUITE_END()
