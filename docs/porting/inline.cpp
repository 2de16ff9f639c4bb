// IBV_SEND_INLINE (max_inline_data), fi_inject / fi_inject_write / FI_INJECT  ->  .inline_data() with
// QpOptions::max_inline. Checks: the source needs no registration (lkey 0), the buffer may be reused as
// soon as post_send returns, and a payload over the QP's limit is refused at post time with nothing posted.
#include "pair.hpp"

#include <array>
#include <cstring>
#include <vector>

int main() {
    Pair p({.max_inline = 64});
    PORTING_CHECK(p.a.caps().max_inline >= 64);
    std::vector<std::byte> dst(64);
    auto dmr = p.dom.register_memory(dst, weft::Access::local_write | weft::Access::remote_write);

    std::array<std::byte, 32> stack{};                  // not registered
    stack.fill(std::byte{0x33});
    weft::LocalSegment seg{.addr = reinterpret_cast<std::uint64_t>(stack.data()), .length = 32, .lkey = 0};
    PORTING_CHECK(p.a.post_send({weft::write(1, seg, dmr.remote()).inline_data()}));
    stack.fill(std::byte{0});                           // reused at once: the payload was copied
    PORTING_CHECK(next(p.cq_a).ok());
    PORTING_CHECK(dst[0] == std::byte{0x33} && dst[31] == std::byte{0x33});

    std::vector<std::byte> big(p.a.caps().max_inline + 1);
    weft::LocalSegment too_long{.addr = reinterpret_cast<std::uint64_t>(big.data()),
                                .length = static_cast<std::uint32_t>(big.size()), .lkey = 0};
    auto st = p.a.post_send({weft::write(2, too_long, dmr.remote()).inline_data()});
    PORTING_CHECK(st.code() == weft::PostStatus::Code::invalid);   // ibv_post_send: EINVAL, bad_wr
    std::puts("inline: ok");
}
