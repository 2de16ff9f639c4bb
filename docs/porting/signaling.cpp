// IBV_SEND_SIGNALED (with sq_sig_all = 0), FI_COMPLETION with FI_SELECTIVE_COMPLETION,
// rpma's RPMA_F_COMPLETION_ALWAYS / RPMA_F_COMPLETION_ON_ERROR  ->  requests are signaled by default;
// .unsignaled() is the opposite of leaving IBV_SEND_SIGNALED out.
// Checks: an unsignaled success is silent; an unsignaled failure completes (ON_ERROR); an error moves
// the QP to error and what follows is flushed, each with a completion.
#include "pair.hpp"

#include <vector>

int main() {
    Pair p;
    std::vector<std::byte> src(64, std::byte{0x22}), dst(64);
    auto smr = p.dom.register_memory(src, weft::Access::local_write);
    auto dmr = p.dom.register_memory(dst, weft::Access::local_write | weft::Access::remote_write);

    PORTING_CHECK(p.a.post_send({
        weft::write(1, smr.slice(0, 64), dmr.remote()).unsignaled(),
        weft::write(2, smr.slice(0, 64), dmr.remote()),                 // signaled: the default
    }));
    weft::Completion c = next(p.cq_a);
    PORTING_CHECK(c.ok() && c.id == 2);
    PORTING_CHECK(stays_empty(p.cq_a));                                 // nothing for id 1

    // An unsignaled request that fails still completes, with its error (rpma: RPMA_F_COMPLETION_ON_ERROR).
    weft::RemoteRegion wrong(dmr.remote().addr(), 64, dmr.remote().rkey() + 1, weft::BackendKind::sim);
    PORTING_CHECK(p.a.post_send({weft::write(3, smr.slice(0, 64), wrong).unsignaled(),
                                 weft::write(4, smr.slice(0, 64), dmr.remote())}));
    c = next(p.cq_a);
    PORTING_CHECK(c.id == 3 && c.status == weft::WcStatus::remote_access);
    c = next(p.cq_a);
    PORTING_CHECK(c.id == 4 && c.status == weft::WcStatus::flushed);    // IBV_WC_WR_FLUSH_ERR
    PORTING_CHECK(p.a.state() == weft::QpState::error);
    std::puts("signaling: ok");
}
