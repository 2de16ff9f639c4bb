// Shared by the ofi backend's own tests: the configuration under test.
#pragma once

#include <boost/test/unit_test.hpp>

#include <cstring>
#include <string>

namespace weft::test {

/// The configuration given as `-- --backend=CONFIG`, "ofi:provider=tcp" without one.
inline std::string ofi_config() {
    auto& suite = boost::unit_test::framework::master_test_suite();
    for (int i = 1; i < suite.argc; ++i) {
        if (std::strncmp(suite.argv[i], "--backend=", 10) == 0) return suite.argv[i] + 10;
    }
    return "ofi:provider=tcp";
}

}  // namespace weft::test
