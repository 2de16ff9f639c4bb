// Uses weft through its public API as a consumer project would: opens the backend named by argv[1]
// (default "sim:fabric=consumer"), writes 64 bytes from one QP to another, lists the backends.
#include <weft/weft.hpp>

#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

int main(int argc, char** argv) try {
    auto dom = weft::open(argc > 1 ? argv[1] : "sim:fabric=consumer");
    auto cq = dom.create_cq();
    auto qp = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    auto peer = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    qp.connect(peer.address());
    peer.connect(qp.address());
    std::vector<std::byte> src(64, std::byte{0x5a}), dst(64);
    auto smr = dom.register_memory(src, weft::Access::local_write);
    auto dmr = dom.register_memory(dst, weft::Access::local_write | weft::Access::remote_write);
    if (!qp.post_send({weft::write(1, smr.slice(0, 64), dmr.remote())})) return 1;
    weft::Completion wc[1];
    while (cq.poll(wc).empty()) {
    }
    for (const auto& b : weft::backends()) {
        std::printf("consumer: backend %-5s %s%s\n", b.name.c_str(), b.usable ? "usable" : "unusable: ",
                    b.usable ? "" : b.reason.c_str());
    }
    bool ok = wc[0].ok() && std::memcmp(src.data(), dst.data(), 64) == 0;
    std::printf("consumer: write on %s %s\n", dom.capabilities().backend.c_str(), ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
}
