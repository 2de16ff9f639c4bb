// ibv_post_send(IBV_WR_RDMA_WRITE_WITH_IMM), fi_writemsg(FI_REMOTE_CQ_DATA) / fi_writedata,
// rpma_write_with_imm  ->  weft::write(...).with_imm(value).
// Checks: the target consumes a posted receive (one without buffer is enough); its completion is
// recv_rdma_with_imm with byte_len = the write's length and imm in HOST order (verbs gives
// wc.imm_data in network order: ntohl() is gone); the initiator's completion says write.
#include "pair.hpp"

#include <vector>

int main() {
    Pair p;
    std::vector<std::byte> src(64, std::byte{0x11}), dst(64);
    auto smr = p.dom.register_memory(src, weft::Access::local_write);
    auto dmr = p.dom.register_memory(dst, weft::Access::local_write | weft::Access::remote_write);

    PORTING_CHECK(p.b.post_recv({weft::RecvRequest{.id = 9}}));            // ibv_post_recv, num_sge = 0
    PORTING_CHECK(p.a.post_send({weft::write(1, smr.slice(0, 64), dmr.remote()).with_imm(0x01020304)}));

    weft::Completion init = next(p.cq_a);
    PORTING_CHECK(init.ok() && init.id == 1 && init.opcode == weft::Opcode::write);
    weft::Completion target = next(p.cq_b);
    PORTING_CHECK(target.ok() && target.id == 9 && target.opcode == weft::Opcode::recv_rdma_with_imm);
    PORTING_CHECK(target.has_imm && target.imm == 0x01020304u && target.byte_len == 64);
    PORTING_CHECK(dst == src);

    // send_with_imm: IBV_WR_SEND_WITH_IMM, fi_senddata, rpma_send_with_imm.
    std::vector<std::byte> rx(64);
    auto rmr = p.dom.register_memory(rx, weft::Access::local_write);
    PORTING_CHECK(p.b.post_recv({weft::recv(10, rmr.slice(0, 64))}));
    PORTING_CHECK(p.a.post_send({weft::send(2, smr.slice(0, 16)).with_imm(7)}));
    PORTING_CHECK(next(p.cq_a).opcode == weft::Opcode::send);
    weft::Completion got = next(p.cq_b);
    PORTING_CHECK(got.opcode == weft::Opcode::recv && got.has_imm && got.imm == 7 && got.byte_len == 16);
    std::puts("write_with_imm: ok");
}
