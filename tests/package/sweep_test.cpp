// A consumer's own Boost.Test module on weft::testing: a write between two simulated nodes lands whole
// on every seed of the sweep ($WEFT_SIM_SEEDS sets how many).
#define BOOST_TEST_MODULE consumer_tests
#include <weft/testing.hpp>
#include <weft/weft.hpp>

#include <vector>

WEFT_SEED_SWEEP_TEST_CASE(write_lands_on_every_seed, "sim:mtu=256") {
    auto a = weft::open(seed.config);
    auto b = weft::open(seed.config);
    auto cqa = a.create_cq();
    auto cqb = b.create_cq();
    auto qa = a.create_qp({.send_cq = cqa, .recv_cq = cqa});
    auto qb = b.create_qp({.send_cq = cqb, .recv_cq = cqb});
    qa.connect(qb.address());
    qb.connect(qa.address());
    std::vector<std::byte> src(4096, std::byte{0x33}), dst(4096);
    auto smr = a.register_memory(src, weft::Access::local_write);
    auto dmr = b.register_memory(dst, weft::Access::local_write | weft::Access::remote_write);
    BOOST_TEST_REQUIRE(static_cast<bool>(qa.post_send({weft::write(1, smr.slice(0, 4096), dmr.remote())})));
    weft::Completion wc[1];
    while (cqa.poll(wc).empty()) {
    }
    BOOST_TEST(wc[0].ok());
    BOOST_TEST((dst == src));
}
