// Tests of the verbs backend beyond the conformance suite. The wire_* suites check the decoders of peer
// bytes and need no device; the others run on a real device (the Soft-RoCE guest: tests/CMakeLists.txt) and
// are skipped, saying why, where the verbs backend cannot open one. Run as:
//   weft-verbs-tests [-- --backend=verbs:device=rxe0,gid_index=1]
#define BOOST_TEST_MODULE weft_verbs
#include <boost/test/unit_test.hpp>
