// weft's resource-hygiene tests: objects created and destroyed by the thousand give back their descriptors
// and memory, simulated fabrics are forgotten, shm regions of killed processes are removed.
// Run as: weft-hygiene-tests -- --backend=CONFIG (default sim).
//
// main() first looks for the child mode of the shm cases (shm_test.cpp): this binary started again as a
// process that opens shm endpoints and waits to be killed.
#define BOOST_TEST_MODULE weft_hygiene
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>


namespace weft::test {
// shm_test.cpp; returns only when argv does not ask for the child mode.
void run_shm_child_if_asked(int argc, char* argv[]);
}  // namespace weft::test

int main(int argc, char* argv[]) {
    weft::test::run_shm_child_if_asked(argc, argv);
    return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
