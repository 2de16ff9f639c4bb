// weft's unit tests: configuration, descriptors, request builders, names, registry, handles.
#define BOOST_TEST_MODULE weft_unit
#include <boost/test/unit_test.hpp>
