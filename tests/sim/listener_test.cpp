// listen/accept/connect on the simulator, in two threads as docs/concepts.md shows: accept() and connect()
// return only once both QPs are connected, so a request posted right after either call finds its peer
// ready; virtual time never runs a request's retries out while the other thread is still connecting.
#include "node.hpp"

#include <thread>

using namespace weft;
using weft::sim::test::next;

BOOST_AUTO_TEST_SUITE(sim_listener)

BOOST_AUTO_TEST_CASE(a_write_right_after_accept_succeeds) {
    QpOptions o;
    o.timeout = 1;    // 8 us of virtual time per try
    o.retry_cnt = 0;  // one try: a peer not connected yet would fail the write at once
    for (int run = 0; run < 200; ++run) {
        const std::string cfg = "sim:fabric=listener_race,seed=" + std::to_string(run + 1);
        Domain server_dom = open(cfg), client_dom = open(cfg);
        auto lis = listen(server_dom, "server:0");
        auto scq = server_dom.create_cq({.depth = 16});
        auto ccq = client_dom.create_cq({.depth = 16});
        o.send_cq = o.recv_cq = scq;
        auto sqp = server_dom.create_qp(o);
        o.send_cq = o.recv_cq = ccq;
        auto cqp = client_dom.create_qp(o);
        std::vector<std::byte> sbuf(64, std::byte{7}), cbuf(64);
        auto smr = server_dom.register_memory(sbuf, all_access);
        auto cmr = client_dom.register_memory(cbuf, all_access);
        std::exception_ptr failed;
        std::thread client([&] {
            try {
                // The client is slow to come: the server's accept waits for it in real time.
                std::this_thread::sleep_for(std::chrono::microseconds(run % 7 * 100));
                weft::connect(cqp, lis.address(), std::chrono::seconds(30));
            } catch (...) {
                failed = std::current_exception();
            }
        });
        lis.accept(sqp, std::chrono::seconds(30));
        BOOST_TEST_REQUIRE((cqp.state() == QpState::rts), "run " << run << ": accept returned before the peer connected");
        BOOST_REQUIRE(sqp.post_send({write(1, smr.slice(0, 64), cmr.remote().slice(0, 64))}));
        auto c = next(scq);
        client.join();
        if (failed) std::rethrow_exception(failed);
        BOOST_TEST_REQUIRE(c.ok(), "run " << run << ": " << c);
        BOOST_TEST((cbuf[63] == std::byte{7}));
    }
}

BOOST_AUTO_TEST_SUITE_END()
