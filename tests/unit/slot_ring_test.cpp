// weft/detail/slot_ring.hpp: the cursor arithmetic every backend's request ring relies on, across the wrap
// of positions, in the single-threaded and the shared kind.
#include <weft/detail/slot_ring.hpp>

#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

using weft::detail::RingSync;
using weft::detail::SlotRing;

BOOST_AUTO_TEST_SUITE(slot_ring)

BOOST_AUTO_TEST_CASE(storage_is_a_power_of_two_at_least_the_capacity) {
    using Ring = SlotRing<std::uint32_t, RingSync::single>;
    BOOST_TEST(Ring::storage_for(0) == 1u);
    BOOST_TEST(Ring::storage_for(1) == 1u);
    BOOST_TEST(Ring::storage_for(100) == 128u);
    BOOST_TEST(Ring::storage_for(128) == 128u);
    BOOST_TEST(Ring::slot(130, 127) == 2u);
}

BOOST_AUTO_TEST_CASE(room_and_retiring_hold_across_the_wrap_of_positions) {
    SlotRing<std::uint32_t, RingSync::shared> ring;
    const std::uint32_t start = 0xfffffffau;  // six positions before the wrap
    ring.publish(start);
    ring.retire_to(start);
    constexpr std::uint32_t capacity = 8;
    BOOST_TEST(ring.free_slots(capacity, ring.head()) == 8u);
    ring.publish(start + 8);  // wraps to 2
    BOOST_TEST(ring.head() == 2u);
    BOOST_TEST(ring.free_slots(capacity, ring.head()) == 0u);
    BOOST_TEST(ring.outstanding(start));
    BOOST_TEST(ring.outstanding(1u));       // after the wrap
    BOOST_TEST(!ring.outstanding(2u));      // not posted
    BOOST_TEST(!ring.outstanding(start - 1));  // retired
    ring.retire_through(0xffffffffu);       // a completion retires its slot and every one before it
    BOOST_TEST(ring.retired_seen() == 0u);
    BOOST_TEST(ring.free_slots(capacity, ring.head()) == 6u);
    BOOST_TEST(!ring.outstanding(start + 5));
    BOOST_TEST(ring.outstanding(0u));
}

BOOST_AUTO_TEST_CASE(flush_hands_over_every_undecided_position_in_order_once) {
    SlotRing<std::uint64_t, RingSync::single> ring;
    ring.posted = 10;
    ring.completed = 4;
    ring.retired = 2;
    std::vector<std::uint64_t> seen;
    BOOST_TEST(ring.flush([&](std::uint64_t i) { seen.push_back(i); }) == 10u);
    BOOST_TEST(seen == (std::vector<std::uint64_t>{4, 5, 6, 7, 8, 9}), boost::test_tools::per_element());
    BOOST_TEST(ring.completed == 10u);
    BOOST_TEST(ring.retired == 2u);  // flushed slots stay in use until their completions are polled
    seen.clear();
    ring.flush([&](std::uint64_t i) { seen.push_back(i); });
    BOOST_TEST(seen.empty());
}

BOOST_AUTO_TEST_CASE(a_shared_ring_keeps_the_poster_and_the_poller_on_lines_of_their_own) {
    using Ring = SlotRing<std::uint32_t, RingSync::shared>;
    BOOST_TEST(offsetof(Ring, retired) - offsetof(Ring, posted) >= 64u);
    BOOST_TEST(alignof(Ring) >= 64u);
    using Plain = SlotRing<std::uint64_t, RingSync::single>;
    BOOST_TEST(sizeof(Plain) == 3 * sizeof(std::uint64_t));
}

BOOST_AUTO_TEST_SUITE_END()
