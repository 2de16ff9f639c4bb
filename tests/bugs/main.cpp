// The bug zoo and the seed-sweep helpers of <weft/testing.hpp>, on the simulator.
#define BOOST_TEST_MODULE weft_bugs
#include <boost/test/unit_test.hpp>
