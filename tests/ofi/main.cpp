// Tests of the ofi backend's own mechanisms, beyond the conformance suite: what the backend adds on top of
// a provider (fence emulation). The ofi_wire_* suites check the decoders of peer bytes and need no
// provider. Run as: weft-ofi-tests -- --backend=ofi:provider=tcp
#define BOOST_TEST_MODULE weft_ofi
#include <boost/test/unit_test.hpp>
