// The conformance suite's test module. Run as: weft-conformance -- --backend=CONFIG
#define BOOST_TEST_MODULE weft_conformance
#include <boost/test/unit_test.hpp>
