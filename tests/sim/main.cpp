// Simulator-specific tests: fabrics, virtual time, determinism.
#define BOOST_TEST_MODULE weft_sim
#include <boost/test/unit_test.hpp>
