// Simulator tests that run several threads (docs/simulator.md, "Threads"): listen/accept/connect in two
// threads, a wait() woken by another thread's post, a poster beside a poller.
#define BOOST_TEST_MODULE weft_sim_threads
#include <boost/test/unit_test.hpp>
