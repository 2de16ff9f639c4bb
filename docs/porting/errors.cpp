// ibv_poll_cq with wc.status, fi_cq_read returning -FI_EAVAIL then fi_cq_readerr, rpma_cq_get_wc
// returning an error  ->  cq.poll(): failed requests come in the same array as successes, each with
// its status; there is no second call.
// ibv_post_send returning EINVAL / ENOMEM with bad_wr, fi_write returning -FI_EAGAIN  ->  PostStatus:
// invalid (with the index of the bad request) or queue_full; in both cases nothing of the batch was
// posted (verbs posts the requests before bad_wr).
#include "pair.hpp"

#include <cstring>
#include <string>
#include <vector>

int main() {
    Pair p({.max_send = 4});
    std::vector<std::byte> src(64), dst(64), small(4);
    auto smr = p.dom.register_memory(src, weft::Access::local_write);
    auto dmr = p.dom.register_memory(dst, weft::Access::local_write | weft::Access::remote_write);
    auto tiny = p.dom.register_memory(small, weft::Access::local_write);

    // A batch with a bad request: refused whole, the index names it, nothing completes.
    auto st = p.a.post_send({weft::write(1, smr.slice(0, 8), dmr.remote()),
                             weft::fetch_add(2, tiny.slice(0, 4), dmr.remote(), 1)});  // result must be 8 bytes
    PORTING_CHECK(st.code() == weft::PostStatus::Code::invalid && st.index() == 1);
    PORTING_CHECK(std::strlen(st.reason()) > 0);
    PORTING_CHECK(stays_empty(p.cq_a));

    // More than the queue holds: queue_full, nothing posted.
    std::vector<weft::SendRequest> five(5, weft::write(3, smr.slice(0, 8), dmr.remote()));
    PORTING_CHECK(p.a.post_send(five).code() == weft::PostStatus::Code::queue_full);
    PORTING_CHECK(stays_empty(p.cq_a));

    // A receive too small for the send: both sides see an error completion from poll().
    PORTING_CHECK(p.b.post_recv({weft::recv(20, tiny.slice(0, 4))}));
    PORTING_CHECK(p.a.post_send({weft::send(4, smr.slice(0, 64))}));
    weft::Completion mine = next(p.cq_a);
    PORTING_CHECK(!mine.ok() && mine.id == 4);   // remote_invalid_request per the spec (profiles may differ)
    weft::Completion theirs = next(p.cq_b);
    PORTING_CHECK(!theirs.ok() && theirs.id == 20 && theirs.status == weft::WcStatus::local_length);
    std::printf("errors: ok (sender: %s, receiver: %s)\n", std::string(weft::to_string(mine.status)).c_str(),
                std::string(weft::to_string(theirs.status)).c_str());
}
