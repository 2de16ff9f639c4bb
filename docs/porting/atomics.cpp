// IBV_WR_ATOMIC_FETCH_AND_ADD / IBV_WR_ATOMIC_CMP_AND_SWP, fi_fetch_atomic(FI_SUM) /
// fi_compare_atomic(FI_CSWAP) on FI_UINT64  ->  weft::fetch_add / weft::compare_swap.
// Checks: 8 host-order bytes, the previous value lands in the 8-byte result segment, the target needs
// remote_atomic, and a misaligned target address is refused at post time.
#include "pair.hpp"

#include <cstdint>
#include <cstring>

int main() {
    Pair p;
    alignas(8) std::uint64_t counter = 5;
    alignas(8) std::uint64_t result = 0;
    auto target = p.dom.register_memory(&counter, sizeof counter,
                                        weft::Access::local_write | weft::Access::remote_atomic);
    auto res = p.dom.register_memory(&result, sizeof result, weft::Access::local_write);

    PORTING_CHECK(p.a.post_send({weft::fetch_add(1, res.slice(0, 8), target.remote(), 3)}));
    PORTING_CHECK(next(p.cq_a).ok());
    PORTING_CHECK(result == 5 && counter == 8);

    PORTING_CHECK(p.a.post_send({weft::compare_swap(2, res.slice(0, 8), target.remote(), 8, 100)}));
    PORTING_CHECK(next(p.cq_a).ok());
    PORTING_CHECK(result == 8 && counter == 100);
    PORTING_CHECK(p.a.post_send({weft::compare_swap(3, res.slice(0, 8), target.remote(), 7, 1)}));
    PORTING_CHECK(next(p.cq_a).ok());
    PORTING_CHECK(result == 100 && counter == 100);                 // not equal: unchanged

    weft::RemoteRegion misaligned(target.remote().addr() + 4, 4, target.remote().rkey(), weft::BackendKind::sim);
    auto st = p.a.post_send({weft::fetch_add(4, res.slice(0, 8), misaligned, 1)});
    PORTING_CHECK(st.code() == weft::PostStatus::Code::invalid);
    std::puts("atomics: ok");
}
