// rdma_create_id / rdma_resolve_addr / rdma_resolve_route / rdma_connect on one side and rdma_listen /
// rdma_get_request / rdma_accept on the other, rpma_ep_listen / rpma_conn_req_new / rpma_conn_req_connect,
// fi_passive_ep / fi_listen / fi_connect / fi_accept with their EQ events  ->  weft::listen, accept and
// weft::connect on QPs created beforehand. Checks: both QPs end in rts and carry data; what
// rdma_conn_param.private_data or rpma's private data held travels with the handshake, exactly as sent (here
// the server's memory descriptor, which the client then writes through).
#include "pair.hpp"

#include <chrono>
#include <cstring>
#include <span>
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

    std::vector<std::byte> target(64);
    auto tmr = server.register_memory(target, weft::Access::local_write | weft::Access::remote_write);
    const auto descriptor = tmr.remote().encode();

    auto lis = weft::listen(server, "server:7471");
    std::vector<std::byte> request;
    std::thread accepting([&] { request = lis.accept(sqp, 10s, descriptor); });
    const char version[] = {'v', '2'};
    const auto reply = weft::connect(cqp, lis.address(), 10s, std::as_bytes(std::span(version)));
    accepting.join();
    PORTING_CHECK(sqp.state() == weft::QpState::rts && cqp.state() == weft::QpState::rts);
    PORTING_CHECK(request.size() == 2 && request[0] == std::byte{'v'} && request[1] == std::byte{'2'});

    const weft::RemoteRegion where = weft::RemoteRegion::decode(reply);
    PORTING_CHECK(cqp.post_send({weft::write(3, hmr.slice(0, 16), where.slice(8, 16))}));
    PORTING_CHECK(next(ccq).ok());
    PORTING_CHECK(std::memcmp(target.data() + 8, "private data", 12) == 0);

    PORTING_CHECK(cqp.post_send({weft::send(2, hmr.slice(0, 16))}));
    PORTING_CHECK(next(ccq).ok());
    weft::Completion c = next(scq);
    PORTING_CHECK(c.ok() && c.byte_len == 16 && std::memcmp(got.data(), "private data", 12) == 0);
    std::puts("connect: ok");
}
