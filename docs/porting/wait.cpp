// ibv_req_notify_cq + ibv_get_cq_event + ibv_ack_cq_events (and re-arming, and polling again to close
// the race), fi_cq_sread, rpma_cq_wait  ->  cq.wait(timeout), then poll until empty.
// For an event loop (the completion channel's fd, fi_control(FI_GETWAIT)), cq.fd() gives a descriptor
// that becomes readable when poll may return completions. Checks: wait returns true once a completion
// is ready and false when nothing is outstanding.
#include "pair.hpp"

#include <chrono>
#include <vector>

int main() {
    using namespace std::chrono_literals;
    Pair p;
    PORTING_CHECK(p.dom.capabilities().has(weft::Feature::wait));
    std::vector<std::byte> src(64), dst(64);
    auto smr = p.dom.register_memory(src, weft::Access::local_write);
    auto dmr = p.dom.register_memory(dst, weft::Access::local_write | weft::Access::remote_write);

    PORTING_CHECK(p.a.post_send({weft::write(1, smr.slice(0, 64), dmr.remote())}));
    PORTING_CHECK(p.cq_a.wait(5s));                           // no arming, no event to acknowledge
    weft::Completion wc[8];
    auto got = p.cq_a.poll(wc);
    PORTING_CHECK(got.size() == 1 && got[0].ok());
    PORTING_CHECK(!p.cq_a.wait(1ms));                         // nothing outstanding: times out
    std::puts("wait: ok");
}
