// Keys of released regions: a domain never hands out a key it handed out before (a stale key held by a
// peer must never name a later region), and the keys the backend chooses do not follow from one another.
#include <weft/weft.hpp>

#include "support.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

using namespace weft;

// The verbs provider (FI_MR_PROV_KEY) takes the device's keys, which the backend does not choose.
bool provider_chooses_keys(const Domain& dom) {
    if (dom.capabilities().device.rfind("verbs", 0) != 0) return false;
    BOOST_TEST_MESSAGE("skipped: the device chooses the keys on " << dom.capabilities().device);
    return true;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(region_keys)

// 70000 cycles of one buffer: more than 2^16, so a key that carries the address and a short counter wraps.
BOOST_AUTO_TEST_CASE(register_deregister_cycles_never_reissue_a_key) {
    Domain dom = open(weft::test::ofi_config());
    if (provider_chooses_keys(dom)) return;
    if (dom.capabilities().device.find("ofi_rxm") != std::string::npos) {
        BOOST_TEST_MESSAGE("skipped: rxm addresses targets by offset, so its keys carry the region base and 15 "
                           "bits of their own; a key of one address repeats after 2^15 registrations of it "
                           "(docs/backends/ofi.md)");
        return;
    }
    std::vector<std::byte> buf(4096);
    std::unordered_set<std::uint64_t> seen;
    constexpr int cycles = 70000;
    seen.reserve(cycles);
    int reissued = 0;
    for (int i = 0; i < cycles; ++i) {
        // Alternate the rights: keys must not repeat whatever the region's rights.
        Access access = i % 2 ? all_access : Access::local_write | Access::remote_write;
        auto mr = dom.register_memory(buf, access);
        if (!seen.insert(mr.rkey()).second && reissued++ == 0) {
            BOOST_TEST_MESSAGE("key 0x" << std::hex << mr.rkey() << std::dec << " reissued at cycle " << i);
        }
    }
    BOOST_TEST(reissued == 0);
}

// Keys of live regions of one buffer in two domains differ (a key of one domain means nothing to the other,
// even for the same bytes registered in the same order).
BOOST_AUTO_TEST_CASE(two_domains_give_the_same_buffer_different_keys) {
    Domain a = open(weft::test::ofi_config());
    Domain b = open(weft::test::ofi_config());
    if (provider_chooses_keys(a)) return;
    std::vector<std::byte> buf(4096);
    std::set<std::uint64_t> keys_a;
    std::vector<MemoryRegion> hold;
    for (int i = 0; i < 64; ++i) {
        hold.push_back(a.register_memory(buf, all_access));
        keys_a.insert(hold.back().rkey());
    }
    int shared = 0;
    for (int i = 0; i < 64; ++i) {
        hold.push_back(b.register_memory(buf, all_access));
        shared += keys_a.count(hold.back().rkey()) != 0;
    }
    BOOST_TEST(shared == 0);
}

// Where the backend chooses keys, consecutive ones are not a counter: the differences between them vary,
// and so do their low 16 bits.
BOOST_AUTO_TEST_CASE(consecutive_keys_do_not_follow_from_one_another) {
    Domain dom = open(weft::test::ofi_config());
    if (provider_chooses_keys(dom)) return;
    std::vector<std::byte> buf(4096);
    std::set<std::uint64_t> deltas;
    std::set<std::uint64_t> low_bits;
    std::uint64_t prev = 0;
    for (int i = 0; i < 256; ++i) {
        auto mr = dom.register_memory(buf, all_access);
        if (i > 0) deltas.insert(mr.rkey() - prev);
        low_bits.insert(mr.rkey() & 0xffff);
        prev = mr.rkey();
    }
    BOOST_TEST_MESSAGE("distinct deltas " << deltas.size() << ", distinct low 16 bits " << low_bits.size());
    BOOST_TEST(deltas.size() > 200u);
    BOOST_TEST(low_bits.size() > 200u);
}

BOOST_AUTO_TEST_SUITE_END()
