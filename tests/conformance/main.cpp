// The conformance suite's test module. Run as: weft-conformance -- --backend=CONFIG [--peer=process]
//
// main() comes first so that, in two-process mode, the peer is forked before anything opens a domain: no
// libfabric or ibverbs state is ever copied into it.
#define BOOST_TEST_MODULE weft_conformance
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include "harness.hpp"
#include "peer.hpp"

int main(int argc, char* argv[]) {
    if (int rc = weft::test::peer::start(argc, argv, weft::test::config_from(argc, argv)); rc != 0) return rc;
    const int rc = boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
    const int peer_rc = weft::test::peer::finish();
    return rc != 0 ? rc : peer_rc;
}
