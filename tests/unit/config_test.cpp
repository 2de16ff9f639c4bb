// Configuration strings: grammar, typed getters, and the errors for bad input.
#include <weft/config.hpp>
#include <weft/error.hpp>

#include <boost/test/unit_test.hpp>

#include "../support/expect_error.hpp"

#include <array>
#include <string>

using weft::Config;
using weft::Errc;
using weft::Error;

namespace {

// The message of the weft::Error `f` throws, which must be an invalid_config error.
template <class F>
std::string error_of(F f) {
    auto e = weft::test::error_of(f);
    BOOST_TEST((e.code() == Errc::invalid_config));
    return e.what();
}

using weft::test::contains;

}  // namespace

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(backend_alone) {
    auto c = Config::parse("sim");
    BOOST_TEST(c.backend() == "sim");
    BOOST_TEST(c.entries().empty());
}

BOOST_AUTO_TEST_CASE(keys_and_values_in_order) {
    auto c = Config::parse("ofi:provider=tcp;ofi_rxm, node = 127.0.0.1");
    BOOST_TEST(c.backend() == "ofi");
    BOOST_REQUIRE(c.entries().size() == 2u);
    BOOST_TEST(c.entries()[0].first == "provider");
    BOOST_TEST(c.entries()[0].second == "tcp;ofi_rxm");
    BOOST_TEST(c.get_string("node", "") == "127.0.0.1");
    BOOST_TEST(!c.get("missing").has_value());
    BOOST_TEST(c.get_string("missing", "fallback") == "fallback");
}

BOOST_AUTO_TEST_CASE(trailing_colon_means_no_keys) { BOOST_TEST(Config::parse("sim:").entries().empty()); }

BOOST_AUTO_TEST_CASE(malformed_strings_are_rejected_with_the_reason) {
    BOOST_TEST(contains(error_of([] { Config::parse(""); }), "empty backend name"));
    BOOST_TEST(contains(error_of([] { Config::parse("Sim"); }), "has character 'S'"));
    BOOST_TEST(contains(error_of([] { Config::parse("sim:seed"); }), "\"seed\" is not key=value"));
    BOOST_TEST(contains(error_of([] { Config::parse("sim:seed="); }), "key 'seed' has an empty value"));
    BOOST_TEST(contains(error_of([] { Config::parse("sim:seed=1,seed=2"); }), "key 'seed' given twice"));
    BOOST_TEST(contains(error_of([] { Config::parse("sim:=3"); }), "empty key"));
    BOOST_TEST(contains(error_of([] { Config::parse("sim:seed=1,"); }), "is not key=value"));
    // The message quotes the whole string so the user can find it.
    BOOST_TEST(contains(error_of([] { Config::parse("sim:seed"); }), "in \"sim:seed\""));
}

BOOST_AUTO_TEST_CASE(uint_values_are_range_checked) {
    auto c = Config::parse("sim:seed=42,hex=0x10,big=99999999999999999999,neg=-1,frac=1.5");
    BOOST_TEST(c.get_uint("seed", 0, 0, 100) == 42u);
    BOOST_TEST(c.get_uint("hex", 0, 0, 100) == 16u);
    BOOST_TEST(contains(error_of([&] { c.get_uint("seed", 0, 0, 10); }), "an integer in 0..10"));
    BOOST_TEST(contains(error_of([&] { c.get_uint("big", 0, 0, UINT64_MAX); }), "bad value \"99999999999999999999\""));
    BOOST_TEST(contains(error_of([&] { c.get_uint("neg", 0, 0, 10); }), "key 'neg'"));
    BOOST_TEST(contains(error_of([&] { c.get_uint("frac", 0, 0, 10); }), "key 'frac'"));
    BOOST_TEST(c.get_uint("absent", 7, 0, 10) == 7u);
}

BOOST_AUTO_TEST_CASE(bool_double_and_choice_values) {
    auto c = Config::parse("x:a=yes,b=off,d=2.5,e=fast,bad=maybe");
    BOOST_TEST(c.get_bool("a", false));
    BOOST_TEST(!c.get_bool("b", true));
    BOOST_TEST(c.get_double("d", 0, 0, 10) == 2.5);
    constexpr std::array<std::string_view, 2> modes{"fast", "slow"};
    BOOST_TEST(c.get_choice("e", "slow", modes) == "fast");
    BOOST_TEST(contains(error_of([&] { c.get_bool("bad", false); }), "1/0, true/false"));
    BOOST_TEST(contains(error_of([&] { c.get_choice("bad", "slow", modes); }), "accepted: fast, slow"));
    BOOST_TEST(contains(error_of([&] { c.get_double("d", 0, 0, 1); }), "key 'd'"));
}

BOOST_AUTO_TEST_CASE(unknown_keys_are_rejected_listing_the_accepted_ones) {
    constexpr std::array<weft::KeySpec, 2> keys{{{"seed", ""}, {"fabric", ""}}};
    Config::parse("sim:seed=1,fabric=x").check_keys(keys);
    auto msg = error_of([&] { Config::parse("sim:sed=1").check_keys(keys); });
    BOOST_TEST(contains(msg, "unknown key 'sed' for backend 'sim'"));
    BOOST_TEST(contains(msg, "accepted keys: seed, fabric"));
}

BOOST_AUTO_TEST_SUITE_END()
