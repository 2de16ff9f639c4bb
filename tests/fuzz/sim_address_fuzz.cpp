// Fuzz target: the simulator's QP address, the bytes QueuePair::connect takes from a peer. One fabric holds
// two peer QPs; each input is offered to a QP that is not connected yet. Properties: connect never crashes
// and throws only weft::Error; when it accepts an address, that address is exactly one a QP of the fabric
// gives (its own or a peer's): nothing else may connect.
#include "fuzz.hpp"

#include <weft/weft.hpp>

#include <memory>
#include <vector>

namespace {

struct Fabric {
    weft::Domain dom = weft::open("sim:fabric=fuzz_address,seed=1");
    weft::CompletionQueue cq = dom.create_cq({.depth = 16});
    weft::QueuePair peers[2] = {dom.create_qp({.send_cq = cq, .recv_cq = cq}),
                                dom.create_qp({.send_cq = cq, .recv_cq = cq})};
    weft::QueuePair qp = fresh();

    weft::QueuePair fresh() { return dom.create_qp({.send_cq = cq, .recv_cq = cq}); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
    static Fabric* f = new Fabric;  // lives for the process: the fuzzer never returns from its loop
    const auto bytes = weft::fuzz::bytes(data, size);
    try {
        f->qp.connect(bytes);
    } catch (const weft::Error&) {
        return 0;
    }
    const std::vector<std::byte> given(bytes.begin(), bytes.end());
    if (given != f->peers[0].address() && given != f->peers[1].address() && given != f->qp.address()) {
        weft::fuzz::property_failed("sim_address", "connect accepted an address no QP of the fabric gives");
    }
    f->qp = f->fresh();
    return 0;
}
