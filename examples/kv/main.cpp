// weft-kv — the key-value store of kv.hpp: a demo with server and clients in one process, or a server and
// a client process meeting through weft::listen/weft::connect.
//
//   weft-kv [--backend CONFIG] [--demo] [WORKLOAD] [TABLE]           server and clients in this process
//   weft-kv [--backend CONFIG] --listen HOST:PORT [--clients N] [TABLE]    server: serves N clients, exits
//   weft-kv [--backend CONFIG] --connect HOST:PORT [WORKLOAD]        N clients against that server
//     WORKLOAD: --clients N (4) --ops N (10000 per client) --keys N (64) --put-percent P (20) --seed S (1)
//     TABLE:    --slots N (4096) --bucket N (8)
//
// The clients run a mixed GET/PUT workload, check that every GET returned a value some PUT wrote (or
// nothing, before any PUT), that versions never go backwards and that no operation misses a PUT completed
// before it started, and print the rate and how many bucket reads were torn and taken again. The server
// and the clients are two domains opened with the same config (on sim, two nodes of one fabric).
#include "kv.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Options {
    std::string backend = weft::default_config();
    std::string listen, connect;
    std::size_t clients = 4;
    kv::Workload workload;
    kv::ServerOptions table;
};

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr,
                 "weft-kv: %s\n"
                 "usage: weft-kv [--backend CONFIG] [--demo] [WORKLOAD] [TABLE]              one process\n"
                 "       weft-kv [--backend CONFIG] --listen HOST:PORT [--clients N] [TABLE]   server\n"
                 "       weft-kv [--backend CONFIG] --connect HOST:PORT [WORKLOAD]           clients\n"
                 "  WORKLOAD: --clients N (4) --ops N (10000 per client) --keys N (64) --put-percent P (20) --seed S (1)\n"
                 "  TABLE:    --slots N (4096) --bucket N (8 slots, read together by a GET)\n"
                 "  CONFIG e.g. sim, sim:seed=7,mtu=256, verbs:device=rxe0, ofi:provider=tcp (default $WEFT_BACKEND or sim)\n"
                 "  --listen prints 'listening on HOST:PORT' (port 0: a free one), serves N clients, then exits\n",
                 why.c_str());
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    bool workload = false, table = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--demo") continue;
        if (i + 1 >= argc) usage("missing value after " + arg);
        const std::string value = argv[++i];
        const auto number = [&] {
            char* end = nullptr;
            const unsigned long long n = std::strtoull(value.c_str(), &end, 10);
            if (value.empty() || *end != '\0') usage(arg + " takes a number, not '" + value + "'");
            return n;
        };
        if (arg == "--backend") o.backend = value;
        else if (arg == "--listen") o.listen = value;
        else if (arg == "--connect") o.connect = value;
        else if (arg == "--clients") o.clients = number();
        else if (arg == "--slots") o.table.slots = static_cast<std::uint32_t>(number()), table = true;
        else if (arg == "--bucket") o.table.bucket_slots = static_cast<std::uint32_t>(number()), table = true;
        else if (arg == "--ops") o.workload.ops = number(), workload = true;
        else if (arg == "--keys") o.workload.keys = number(), workload = true;
        else if (arg == "--put-percent") o.workload.put_percent = static_cast<unsigned>(number()), workload = true;
        else if (arg == "--seed") o.workload.seed = number(), workload = true;
        else usage("unknown argument " + arg);
    }
    if (!o.listen.empty() && !o.connect.empty()) usage("give --listen (server) or --connect (clients), not both");
    if (!o.listen.empty() && workload) usage("the workload is the clients': give it to --connect");
    if (!o.connect.empty() && table) usage("the table is the server's: give it to --listen");
    if (o.clients == 0 || o.clients > 64) usage("--clients must be 1..64");
    if (o.workload.keys == 0 || o.workload.put_percent > 100) usage("--keys must be positive, --put-percent 0..100");
    o.table.max_clients = static_cast<std::uint32_t>(o.clients);
    return o;
}

weft::Domain open_for(const Options& o) {
    auto dom = weft::open(o.backend);
    if ((!o.listen.empty() || !o.connect.empty()) && dom.capabilities().kind == weft::BackendKind::sim) {
        throw std::runtime_error("'" + o.backend + "' cannot run in two processes: the simulator's fabric lives "
                                 "inside one process; drop --listen/--connect to run the demo in this one");
    }
    return dom;
}

// Prints what run() measured and checked; the exit code.
int summarize(const Options& o, const kv::Report& r) {
    const double ops = static_cast<double>(r.gets + r.puts);
    std::printf("weft-kv: %.0f ops (%llu GET, %llu PUT, %llu not found), %llu torn bucket reads taken again; "
                "%.0f ops/s",
                ops, static_cast<unsigned long long>(r.gets), static_cast<unsigned long long>(r.puts),
                static_cast<unsigned long long>(r.not_found), static_cast<unsigned long long>(r.torn_reads),
                ops / r.elapsed.count());
    if (r.virtual_ns) std::printf(" (simulated: %.0f ops/s)", ops * 1e9 / static_cast<double>(r.virtual_ns));
    std::printf("\n");
    if (r.full) std::printf("weft-kv: %llu PUTs found their bucket full\n", static_cast<unsigned long long>(r.full));
    if (r.violations.empty()) {
        std::printf("weft-kv: every GET returned a value a PUT wrote; no version went backwards or missed a "
                    "completed PUT (%zu clients)\n", o.clients);
        return 0;
    }
    std::fprintf(stderr, "weft-kv: %zu violation(s), the first:\n", r.violations.size());
    for (std::size_t i = 0; i < std::min<std::size_t>(r.violations.size(), 10); ++i) {
        std::fprintf(stderr, "  %s\n", r.violations[i].c_str());
    }
    return 1;
}

int serve(const Options& o) {
    kv::Server server(open_for(o), o.table);
    auto lis = weft::listen(server.domain(), o.listen);
    std::printf("weft-kv: listening on %s\n", lis.address().c_str());
    std::fflush(stdout);
    // The client process connects all its clients before it starts, so accepting them one after the other
    // and serving only then leaves none waiting.
    for (std::size_t n = 0; n < o.clients; ++n) {
        const std::size_t i = server.add_client();
        lis.accept(server.qp(i), std::chrono::seconds(60));
        server.welcome(i);
    }
    while (!server.done()) server.progress();
    std::printf("weft-kv: served %zu clients, %llu PUTs\n", o.clients, static_cast<unsigned long long>(server.puts()));
    return 0;
}

int run_clients(const Options& o, kv::Server* server, weft::Domain& dom) {
    std::vector<kv::Client> clients;
    clients.reserve(o.clients);
    for (std::size_t i = 0; i < o.clients; ++i) {
        kv::Client& c = clients.emplace_back(dom);
        if (server) kv::link(*server, c);
        else weft::connect(c.qp(), o.connect, std::chrono::seconds(10));
    }
    const auto& w = o.workload;
    std::printf("weft-kv: backend %s (%s), %zu clients x %llu ops (%u%% PUT) over %llu keys\n", o.backend.c_str(),
                dom.capabilities().device.c_str(), o.clients, static_cast<unsigned long long>(w.ops), w.put_percent,
                static_cast<unsigned long long>(w.keys));
    std::fflush(stdout);
    return summarize(o, kv::run(w, clients, dom, server));
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    try {
        if (!o.listen.empty()) return serve(o);
        auto dom = open_for(o);
        if (!o.connect.empty()) return run_clients(o, nullptr, dom);
        kv::Server server(weft::open(o.backend), o.table);
        return run_clients(o, &server, dom);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "weft-kv: %s\n", e.what());
        return 1;
    }
}
