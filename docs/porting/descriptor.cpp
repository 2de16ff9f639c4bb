// rpma_mr_get_descriptor / rpma_mr_remote_from_descriptor, fi_mr_key + the address (or offset under
// FI_MR_VIRT_ADDR off) sent by hand, ibv_mr->rkey + addr sent by hand  ->  mr.remote().encode() and
// weft::RemoteRegion::decode. Checks: the round trip gives the same region, and a corrupted descriptor
// is refused with Errc::bad_descriptor instead of becoming a wild rkey.
#include "pair.hpp"

#include <vector>

int main() {
    Pair p;
    std::vector<std::byte> buf(4096);
    auto mr = p.dom.register_memory(buf, weft::Access::local_write | weft::Access::remote_read);

    weft::RemoteRegion::Encoded bytes = mr.remote().encode();       // 36 bytes, for any channel
    auto back = weft::RemoteRegion::decode(bytes);
    PORTING_CHECK(back == mr.remote() && back.length() == 4096);

    bytes[10] ^= std::byte{0x40};
    try {
        (void)weft::RemoteRegion::decode(bytes);
        PORTING_CHECK(!"a corrupted descriptor was accepted");
    } catch (const weft::Error& e) {
        PORTING_CHECK(e.code() == weft::Errc::bad_descriptor);
    }
    // A sub-range for one request: rpma's offset arguments, or addr + offset by hand.
    PORTING_CHECK(back.slice(1024, 512).addr() == back.addr() + 1024);
    std::puts("descriptor: ok");
}
