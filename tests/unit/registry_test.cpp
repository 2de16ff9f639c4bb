// The backend registry: listing, opening by name, and the errors for unknown or unusable backends.
#include <weft/weft.hpp>

#include <boost/test/unit_test.hpp>

#include "../support/expect_error.hpp"

#include <cstdlib>
#include <string>

using namespace weft;
using weft::test::contains;
using weft::test::error_of;

BOOST_AUTO_TEST_SUITE(registry)

BOOST_AUTO_TEST_CASE(lists_every_backend_of_the_build) {
    auto list = backends();
    BOOST_REQUIRE(list.size() == 3u);
    BOOST_TEST(list[0].name == "sim");
    BOOST_TEST(list[0].usable);
    BOOST_TEST(list[0].reason.empty());
    BOOST_TEST(!list[0].keys.empty());
    BOOST_TEST(list[1].name == "verbs");
    BOOST_TEST(list[2].name == "ofi");
    for (const auto& b : list) {
        // An unusable backend always says why.
        BOOST_TEST((b.usable || !b.reason.empty()), b.name << " is unusable without a reason");
    }
}

BOOST_AUTO_TEST_CASE(unknown_backend_names_the_known_ones) {
    auto e = error_of([] { open("infiniband"); });
    BOOST_TEST((e.code() == Errc::unknown_backend));
    BOOST_TEST(contains(e.what(), "no backend named 'infiniband'"));
    BOOST_TEST(contains(e.what(), "sim, verbs, ofi"));
}

BOOST_AUTO_TEST_CASE(unknown_key_names_the_accepted_ones) {
    auto e = error_of([] { open("sim:sede=4"); });
    BOOST_TEST((e.code() == Errc::invalid_config));
    BOOST_TEST(contains(e.what(), "unknown key 'sede'"));
    BOOST_TEST(contains(e.what(), "seed"));
    BOOST_TEST(contains(e.what(), "fabric"));
}

BOOST_AUTO_TEST_CASE(bad_value_names_key_and_range) {
    auto e = error_of([] { open("sim:latency_ns=soon"); });
    BOOST_TEST((e.code() == Errc::invalid_config));
    BOOST_TEST(contains(e.what(), "latency_ns"));
    BOOST_TEST(contains(e.what(), "soon"));
}

BOOST_AUTO_TEST_CASE(unusable_backend_fails_with_its_reason) {
    for (const auto& b : backends()) {
        if (b.usable) continue;
        auto e = error_of([&] { open(b.name); });
        BOOST_TEST(!std::string(e.what()).empty());
        BOOST_TEST(e.backend() == b.name);
    }
}

BOOST_AUTO_TEST_CASE(open_without_arguments_reads_weft_backend) {
    ::setenv("WEFT_BACKEND", "sim:fabric=from_env", 1);
    BOOST_TEST(default_config() == "sim:fabric=from_env");
    auto dom = open();
    BOOST_TEST(dom.capabilities().backend == "sim");
    BOOST_TEST(contains(dom.capabilities().device, "from_env"));
    ::unsetenv("WEFT_BACKEND");
    BOOST_TEST(default_config() == "sim");
}

BOOST_AUTO_TEST_CASE(missing_plugin_directory_is_reported) {
    ::setenv("WEFT_PLUGIN_PATH", "/nonexistent/weft-plugins", 1);
    auto list = backends();
    ::unsetenv("WEFT_PLUGIN_PATH");
    // The sim backend is built in and unaffected.
    BOOST_TEST(list[0].usable);
}

BOOST_AUTO_TEST_SUITE_END()
