// rdma_create_id / rdma_resolve_addr / rdma_resolve_route / rdma_connect on one side and rdma_listen /
// rdma_get_request / rdma_accept on the other, rpma_ep_listen / rpma_conn_req_new / rpma_conn_req_connect,
// fi_passive_ep / fi_listen / fi_connect / fi_accept with their EQ events  ->  weft::listen, accept and
// weft::connect on QPs created beforehand. Checks: both QPs end in rts and carry data; the handshake
// carries no application private data, so what rdma_conn_param.private_data or rpma's private data held
// goes in the first message (here a send) instead.
#include "pair.hpp"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

int main() {
    using namespace std::chrono_literals;
    auto server = weft::open("sim:fabric=porting");
    auto client = weft::open("sim:fabric=porting");
    auto scq = server.create_cq();
    auto ccq = client.create_cq();
    auto sqp = server.create_qp({.send_cq = scq, .recv_cq = scq});
    auto cqp = client.create_qp({.send_cq = ccq, .recv_cq = ccq});

    std::vector<std::byte> hello(16), got(16);
    std::memcpy(hello.data(), "private data", 12);
    auto hmr = client.register_memory(hello, weft::Access::local_write);
    auto gmr = server.register_memory(got, weft::Access::local_write);
    PORTING_CHECK(sqp.post_recv({weft::recv(1, gmr.slice(0, 16))}));  // allowed before the connection

    auto lis = weft::listen(server, "server:7471");
    std::thread accepting([&] { lis.accept(sqp, 10s); });
    weft::connect(cqp, lis.address(), 10s);
    accepting.join();
    PORTING_CHECK(sqp.state() == weft::QpState::rts && cqp.state() == weft::QpState::rts);

    PORTING_CHECK(cqp.post_send({weft::send(2, hmr.slice(0, 16))}));
    PORTING_CHECK(next(ccq).ok());
    weft::Completion c = next(scq);
    PORTING_CHECK(c.ok() && c.byte_len == 16 && std::memcmp(got.data(), "private data", 12) == 0);
    std::puts("connect: ok");
}
