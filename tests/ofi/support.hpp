// Shared by the ofi backend's own tests: the configuration under test.
#pragma once

#include <weft/weft.hpp>

#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace weft::test {

/// The configuration given as `-- --backend=CONFIG`, "ofi:provider=tcp" without one.
inline std::string ofi_config() {
    auto& suite = boost::unit_test::framework::master_test_suite();
    for (int i = 1; i < suite.argc; ++i) {
        if (std::strncmp(suite.argv[i], "--backend=", 10) == 0) return suite.argv[i] + 10;
    }
    return "ofi:provider=tcp";
}

/// One side of a test: its own domain, a CQ for both queues, a QP with `options`, and `bytes` of zeroed
/// memory registered with every right.
struct OfiSide {
    Domain dom;
    CompletionQueue cq;
    QueuePair qp;
    std::vector<std::byte> buf;
    MemoryRegion mr;

    explicit OfiSide(const std::string& config = ofi_config(), QpOptions options = {}, std::size_t bytes = 16 * 1024)
        : dom(open(config)), buf(bytes, std::byte{0}) {
        cq = dom.create_cq({.depth = 256});
        options.send_cq = cq;
        options.recv_cq = cq;
        qp = dom.create_qp(options);
        mr = dom.register_memory(buf, all_access);
    }
};

}  // namespace weft::test
