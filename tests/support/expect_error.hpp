// Test helpers for setup errors: catch the weft::Error a call throws and look for words in its message.
#pragma once

#include <weft/error.hpp>

#include <boost/test/unit_test.hpp>

#include <string>
#include <string_view>

namespace weft::test {

/// The weft::Error `f` throws; fails the test case when it throws none.
template <class F>
Error error_of(F f) {
    try {
        f();
    } catch (const Error& e) {
        return e;
    }
    BOOST_FAIL("no weft::Error was thrown");
    return Error(Errc::internal, "unreachable");
}

/// The message (what()) of the weft::Error `f` throws.
template <class F>
std::string what_of(F f) {
    return error_of(f).what();
}

inline bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

}  // namespace weft::test
