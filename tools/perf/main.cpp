// weft-perf — perftest-style bandwidth, message rate and latency of write, write_with_imm, read, send,
// fetch_add and compare_swap on any weft backend, in one process (both sides here: the simulator's only
// mode) or as a server and a client meeting through weft::listen / weft::connect. Prints a perftest-like
// table, or JSON. See --help.
#include "control.hpp"
#include "perf.hpp"

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

namespace weft_perf {
namespace {

constexpr const char* usage_text =
    "usage: weft-perf [OPTIONS]                      both sides in this process\n"
    "       weft-perf [OPTIONS] --listen HOST:PORT   server: answers one client, then exits\n"
    "       weft-perf [OPTIONS] --connect HOST:PORT  client: runs the tests against that server\n";

constexpr const char* help_text =
    "Measures bandwidth, message rate and latency of RDMA operations through weft, as perftest does for\n"
    "verbs (ib_write_bw, ib_write_lat, ...), on any backend: the same binary runs on verbs, ofi or the\n"
    "simulator, chosen by --backend.\n"
    "\n"
    "Modes:\n"
    "  (default)              both sides in this process, each with its own domain, connected by address\n"
    "                         exchange; the only mode on the simulator, whose fabric lives in one process\n"
    "  --listen HOST:PORT     server: listens (port 0: a free one, printed as 'weft-perf: listening on\n"
    "                         HOST:PORT'), answers one client, exits; takes every test option from it\n"
    "  --connect HOST:PORT    client: connects to a server, runs the tests and prints the results\n"
    "  (perftest's positional server name is not used: the address always comes with --connect.)\n"
    "\n"
    "Options:\n"
    "  -b, --backend CONFIG   weft configuration (default $WEFT_BACKEND, else sim), e.g. sim,\n"
    "                         ofi:provider=tcp, verbs:device=rxe0,gid_index=1\n"
    "  -o, --op LIST          comma list of write, write_imm, read, send, fetch_add, compare_swap, or all\n"
    "                         (default write); an op the backend lacks is listed as not supported\n"
    "  -T, --test LIST        bw, lat, both, or a comma list (default bw)\n"
    "  -s, --size BYTES       message size (default 65536 for bw, 2 for lat; atomics always move 8)\n"
    "  -a, --all              sweep the sizes 2, 4, ..., 8M (perftest's -a)\n"
    "      --sizes LIST       comma list of sizes (suffixes K, M), or MIN:MAX for the powers of two between\n"
    "  -n, --iters N          measured requests (bw) or round trips (lat) (default 5000 bw, 1000 lat)\n"
    "      --warmup N         unmeasured requests or round trips first (default iters/10, at most 100)\n"
    "  -t, --tx-depth N       requests in flight, bw (default 128)\n"
    "  -Q, --cq-mod N         one signaled request in every N, bw (default 100, at most tx-depth - batch + 1)\n"
    "      --batch N          requests per post_send call, bw (default 1)\n"
    "  -I, --inline SIZE      send, write and write_imm of at most SIZE bytes go inline (default 0: none)\n"
    "  -r, --rx-depth N       receives the responder keeps posted, send/write_imm bw (default 512)\n"
    "      --area BYTES       source and target area of each side (default 8M); slots of the message\n"
    "                         size rounded to 64 B, one per request in flight as far as it holds\n"
    "      --check            compare every byte that arrives (default: stamps, and the final image)\n"
    "      --json             print JSON on stdout instead of the table\n"
    "      --progress         a progress line on stderr (default: only when stderr is a terminal)\n"
    "      --no-progress      never a progress line\n"
    "      --timeout SECS     how long the server waits for its client, and for each next test (default 60)\n"
    "  -h, --help             this text\n"
    "  -V, --version          the version of weft-perf and of the weft library\n"
    "\n"
    "Output: per op and test, a table as perftest prints it. bw: #bytes, #iterations, BW average in MiB/s\n"
    "(2^20 bytes, perftest's MB), message rate in millions of requests per second. lat: microseconds per\n"
    "operation, one way for the ping-pongs (write, write_imm, send: half a round trip, as perftest) and a\n"
    "whole round trip for read and atomics; min, max, typical (median), average, stdev, 99% and 99.9%.\n"
    "Every test checks its data: stamps and patterns of what arrived, the counter after atomics, the\n"
    "image of the target after writes and reads; --check compares every byte of every message.\n"
    "\n"
    "Exit status: 0 when every test ran and its data checked out (ops the backend lacks are listed and\n"
    "skipped), 1 when a test failed or a data check found a difference, 2 on bad usage.\n"
    "\n"
    "Environment: WEFT_BACKEND (the default backend), and what the backends read (weft-info --env).\n"
    "\n"
    "Examples:\n"
    "  weft-perf -b sim -o all -T both --check\n"
    "  weft-perf -b ofi:provider=tcp --listen 127.0.0.1:18515 &\n"
    "  weft-perf -b ofi:provider=tcp --connect 127.0.0.1:18515 -o write,read -a --json\n";

struct Options {
    std::string backend = weft::default_config();
    std::vector<Op> ops{Op::write};
    std::vector<Test> tests{Test::bw};
    std::vector<std::uint32_t> sizes;  // empty: the per-test default
    std::optional<std::uint32_t> iters, warmup, cq_mod;
    std::uint32_t depth = 128, batch = 1, inline_size = 0;
    std::optional<std::uint32_t> rx_depth;  // default: 512, or the backend's queue limit when lower
    std::uint64_t area = 8u << 20;
    bool check = false, json = false;
    int progress = -1;  // -1: when stderr is a terminal
    std::chrono::seconds timeout{60};
    std::string listen, connect;
};

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr, "weft-perf: %s\n%sTry 'weft-perf --help' for more.\n", why.c_str(), usage_text);
    std::exit(2);
}

std::uint64_t parse_number(const std::string& opt, std::string_view text, std::uint64_t max) {
    std::string s(text);
    std::uint64_t mult = 1;
    if (!s.empty()) {
        switch (s.back()) {
            case 'k': case 'K': mult = 1024; break;
            case 'm': case 'M': mult = 1024 * 1024; break;
            case 'g': case 'G': mult = 1024ull * 1024 * 1024; break;
            default: break;
        }
        if (mult != 1) s.pop_back();
    }
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
        usage(opt + " takes a number (with an optional K, M or G), not '" + std::string(text) + "'");
    }
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
    if (errno != 0 || v > max / mult) usage(opt + " " + std::string(text) + " is larger than " + std::to_string(max));
    return v * mult;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    for (std::size_t at = 0;;) {
        const std::size_t next = s.find(sep, at);
        out.push_back(s.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
        if (next == std::string_view::npos) return out;
        at = next + 1;
    }
}

std::vector<std::uint32_t> parse_sizes(const std::string& opt, std::string_view text) {
    std::vector<std::uint32_t> out;
    constexpr std::uint64_t max = 1u << 30;
    if (auto colon = text.find(':'); colon != std::string_view::npos) {
        const auto lo = parse_number(opt, text.substr(0, colon), max), hi = parse_number(opt, text.substr(colon + 1), max);
        if (lo == 0 || lo > hi) usage(opt + " " + std::string(text) + ": MIN:MAX with 1 <= MIN <= MAX");
        std::uint64_t v = 1;
        while (v < lo) v <<= 1;
        for (; v <= hi; v <<= 1) out.push_back(static_cast<std::uint32_t>(v));
        if (out.empty()) usage(opt + " " + std::string(text) + " holds no power of two");
        return out;
    }
    for (auto part : split(text, ',')) {
        const auto v = parse_number(opt, part, max);
        if (v == 0) usage(opt + ": sizes are 1 byte or more");
        out.push_back(static_cast<std::uint32_t>(v));
    }
    return out;
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::optional<std::string> inline_value;
        if (arg.rfind("--", 0) == 0) {
            if (auto eq = arg.find('='); eq != std::string::npos) {
                inline_value = arg.substr(eq + 1);
                arg.resize(eq);
            }
        }
        auto value = [&]() -> std::string {
            if (inline_value) return *inline_value;
            if (i + 1 >= argc) usage("missing value after " + arg);
            return argv[++i];
        };
        auto number = [&](std::uint64_t max) { return parse_number(arg, value(), max); };
        constexpr std::uint64_t u32max = 0xffffffffu;
        if (arg == "-h" || arg == "--help") {
            std::printf("%s\n%s", usage_text, help_text);
            std::exit(0);
        } else if (arg == "-V" || arg == "--version") {
            std::printf("weft-perf %d.%d.%d (weft library %.*s)\n", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR,
                        WEFT_VERSION_PATCH, static_cast<int>(weft::version().size()), weft::version().data());
            std::exit(0);
        } else if (arg == "-b" || arg == "--backend") {
            o.backend = value();
        } else if (arg == "-o" || arg == "--op") {
            o.ops.clear();
            const std::string v = value();
            for (auto part : split(v, ',')) {
                if (part == "all") {
                    o.ops.assign(std::begin(all_ops), std::end(all_ops));
                } else if (auto op = parse_op(part)) {
                    o.ops.push_back(*op);
                } else {
                    usage("unknown op '" + std::string(part) +
                          "' (accepted: write, write_imm, read, send, fetch_add, compare_swap, all)");
                }
            }
        } else if (arg == "-T" || arg == "--test") {
            const std::string v = value();
            o.tests.clear();
            for (auto part : split(v, ',')) {
                if (part == "bw") o.tests.push_back(Test::bw);
                else if (part == "lat") o.tests.push_back(Test::lat);
                else if (part == "both") o.tests = {Test::bw, Test::lat};
                else usage("--test takes bw, lat or both (or a comma list), not '" + std::string(part) + "'");
            }
        } else if (arg == "-s" || arg == "--size") {
            o.sizes = {static_cast<std::uint32_t>(number(1u << 30))};
            if (o.sizes[0] == 0) usage("--size must be 1 or more");
        } else if (arg == "-a" || arg == "--all") {
            o.sizes = parse_sizes(arg, "2:8M");
        } else if (arg == "--sizes") {
            o.sizes = parse_sizes(arg, value());
        } else if (arg == "-n" || arg == "--iters") {
            o.iters = static_cast<std::uint32_t>(number(u32max / 2));
            if (*o.iters == 0) usage("--iters must be 1 or more");
        } else if (arg == "--warmup") {
            o.warmup = static_cast<std::uint32_t>(number(u32max / 2));
        } else if (arg == "-t" || arg == "--tx-depth") {
            o.depth = static_cast<std::uint32_t>(number(1u << 16));
        } else if (arg == "-Q" || arg == "--cq-mod") {
            o.cq_mod = static_cast<std::uint32_t>(number(1u << 16));
        } else if (arg == "--batch") {
            o.batch = static_cast<std::uint32_t>(number(1u << 16));
        } else if (arg == "-I" || arg == "--inline") {
            o.inline_size = static_cast<std::uint32_t>(number(1u << 16));
        } else if (arg == "-r" || arg == "--rx-depth") {
            o.rx_depth = static_cast<std::uint32_t>(number(1u << 16));
            if (*o.rx_depth == 0) usage("--rx-depth must be 1 or more");
        } else if (arg == "--area") {
            o.area = number(1u << 30);
        } else if (arg == "--check") {
            o.check = true;
        } else if (arg == "--json") {
            o.json = true;
        } else if (arg == "--progress") {
            o.progress = 1;
        } else if (arg == "--no-progress") {
            o.progress = 0;
        } else if (arg == "--timeout") {
            o.timeout = std::chrono::seconds(number(86400));
        } else if (arg == "--listen") {
            o.listen = value();
        } else if (arg == "--connect") {
            o.connect = value();
        } else {
            usage("unknown argument '" + std::string(argv[i]) + "'");
        }
    }
    if (!o.listen.empty() && !o.connect.empty()) usage("give --listen (server) or --connect (client), not both");
    if (o.depth == 0 || o.batch == 0) usage("--tx-depth and --batch must be 1 or more");
    if (o.batch > o.depth) usage("--batch " + std::to_string(o.batch) + " exceeds --tx-depth " + std::to_string(o.depth));
    if (o.cq_mod) {
        if (*o.cq_mod == 0) usage("--cq-mod must be 1 or more");
        if (*o.cq_mod + o.batch - 1 > o.depth) {
            usage("--cq-mod " + std::to_string(*o.cq_mod) + " with --batch " + std::to_string(o.batch) +
                  " leaves a window of --tx-depth " + std::to_string(o.depth) +
                  " requests without a signaled one (needs cq-mod + batch - 1 <= tx-depth)");
        }
    }
    for (auto s : o.sizes) o.area = std::max<std::uint64_t>(o.area, (s + 63u) & ~63u);
    if (o.area < 64) usage("--area must be 64 bytes or more");
    return o;
}

/// The receive depth: as asked, or 512 within the backend's queue limit.
std::uint32_t rx_depth_of(const Options& o, const weft::Capabilities& caps) {
    return o.rx_depth.value_or(std::min<std::uint32_t>(512, std::max<std::uint32_t>(1, caps.max_qp_wr)));
}

std::vector<Spec> specs_of(const Options& o, const weft::Capabilities& caps) {
    std::vector<Spec> out;
    for (Op op : o.ops) {
        for (Test t : o.tests) {
            std::vector<std::uint32_t> sizes = o.sizes;
            if (is_atomic(op)) sizes = {8};
            else if (sizes.empty()) sizes = {t == Test::bw ? 65536u : 2u};
            for (auto size : sizes) {
                Spec s;
                s.op = op;
                s.test = t;
                s.size = size;
                s.iters = o.iters.value_or(t == Test::bw ? 5000u : 1000u);
                s.warmup = o.warmup.value_or(std::min<std::uint32_t>(100, s.iters / 10));
                s.depth = t == Test::bw ? o.depth : 1;
                s.batch = t == Test::bw ? o.batch : 1;
                s.cq_mod = t == Test::bw ? o.cq_mod.value_or(std::min<std::uint32_t>(100, o.depth - o.batch + 1)) : 1;
                s.inline_size = o.inline_size;
                s.rx_depth = rx_depth_of(o, caps);
                s.check = o.check;
                out.push_back(s);
            }
        }
    }
    return out;
}

/// The setup of a run on a backend with `caps`; fails naming the limit an option exceeds.
Setup setup_of(const Options& o, const weft::Capabilities& caps) {
    Setup s;
    s.area = o.area;
    s.max_depth = std::max(o.depth, rx_depth_of(o, caps));
    s.inline_size = o.inline_size;
    if (caps.max_qp_wr != 0 && s.max_depth > caps.max_qp_wr) {
        fail("--tx-depth " + std::to_string(o.depth) + " / --rx-depth " + std::to_string(rx_depth_of(o, caps)) +
             ": this backend's queues hold at most " + std::to_string(caps.max_qp_wr) + " requests (" + caps.backend +
             " on " + caps.device + ")", 2);
    }
    if (s.inline_size > caps.max_inline) {
        fail("--inline " + std::to_string(s.inline_size) + ": this backend sends at most " + std::to_string(caps.max_inline) +
             " bytes inline (" + caps.backend + " on " + caps.device + ")", 2);
    }
    return s;
}

struct Result {
    Spec spec;
    std::string skipped;  // why the test did not run (the op is not supported)
    std::string error;    // what its checks found wrong
    LatencyStats lat;
    double seconds = 0;
};

std::string label_of(const Spec& s) {
    return "weft-perf " + std::string(name(s.op)) + " " + std::string(name(s.test)) + " " + std::to_string(s.size) + " B";
}

bool show_progress(const Options& o) { return o.progress == 1 || (o.progress == -1 && !o.json && ::isatty(2)); }

// ---- Output

std::string json_string(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += c;
                }
        }
    }
    return out + "\"";
}

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

struct RunInfo {
    std::string backend, device, mode, peer;
};

void print_json(const RunInfo& info, const Options& o, const std::vector<Result>& results) {
    std::ostringstream os;
    os << "{\"tool\":\"weft-perf\",\"version\":" << json_string(weft::version()) << ",\"backend\":" << json_string(info.backend)
       << ",\"device\":" << json_string(info.device) << ",\"mode\":" << json_string(info.mode);
    if (!info.peer.empty()) os << ",\"peer\":" << json_string(info.peer);
    os << ",\"check\":" << (o.check ? "true" : "false") << ",\"results\":[";
    bool first = true;
    for (const Result& r : results) {
        const Spec& s = r.spec;
        os << (first ? "" : ",") << "\n  {\"op\":" << json_string(name(s.op)) << ",\"test\":" << json_string(name(s.test))
           << ",\"size\":" << s.size << ",\"iterations\":" << s.iters << ",\"warmup\":" << s.warmup
           << ",\"tx_depth\":" << s.depth << ",\"cq_mod\":" << s.cq_mod << ",\"batch\":" << s.batch
           << ",\"inline\":" << (s.uses_inline() ? "true" : "false");
        first = false;
        if (!r.skipped.empty()) {
            os << ",\"supported\":false,\"reason\":" << json_string(r.skipped) << "}";
            continue;
        }
        os << ",\"supported\":true,\"ok\":" << (r.error.empty() ? "true" : "false");
        if (!r.error.empty()) os << ",\"error\":" << json_string(r.error);
        if (s.test == Test::bw) {
            const double bytes = static_cast<double>(s.size) * s.iters;
            os << ",\"seconds\":" << number(r.seconds) << ",\"bw_mib_s\":" << number(bytes / r.seconds / 1048576.0)
               << ",\"bw_gbit_s\":" << number(bytes * 8 / r.seconds / 1e9)
               << ",\"msg_rate_mpps\":" << number(s.iters / r.seconds / 1e6);
        } else {
            const LatencyStats& l = r.lat;
            os << ",\"one_way\":" << (is_ping_pong(s.op) ? "true" : "false") << ",\"t_min_us\":" << number(l.min)
               << ",\"t_max_us\":" << number(l.max) << ",\"t_typical_us\":" << number(l.typical)
               << ",\"t_avg_us\":" << number(l.avg) << ",\"t_stdev_us\":" << number(l.stdev)
               << ",\"t_p99_us\":" << number(l.p99) << ",\"t_p999_us\":" << number(l.p999);
        }
        os << "}";
    }
    os << "\n]}\n";
    std::fputs(os.str().c_str(), stdout);
}

const char* rule = "---------------------------------------------------------------------------------------\n";

void print_header(const RunInfo& info, const Spec& s) {
    std::printf("%s", rule);
    std::printf("                    %s %s%s\n", std::string(name(s.op)).c_str(),
                s.test == Test::bw ? "bandwidth" : "latency",
                s.test == Test::lat ? (is_ping_pong(s.op) ? " (one way: half a round trip)" : " (round trip)") : "");
    std::printf(" backend        : %s (%s)\n", info.backend.c_str(), info.device.c_str());
    std::printf(" mode           : %s%s%s\n", info.mode.c_str(), info.peer.empty() ? "" : ", server ", info.peer.c_str());
    if (s.test == Test::bw) {
        std::printf(" tx depth       : %u   cq-mod : %u   batch : %u   rx depth : %u\n", s.depth, s.cq_mod, s.batch, s.rx_depth);
    }
    std::printf(" inline         : %s   data check : %s\n", s.inline_size ? ("up to " + std::to_string(s.inline_size) + " B").c_str() : "off",
                s.check ? "every byte" : "stamps and final image");
    std::printf("%s", rule);
    if (s.test == Test::bw) {
        std::printf(" #bytes     #iterations    BW average[MiB/sec]    MsgRate[Mpps]\n");
    } else {
        std::printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
                    "   99%% percentile[usec]   99.9%% percentile[usec]\n");
    }
}

void print_row(const Result& r) {
    const Spec& s = r.spec;
    if (!r.skipped.empty()) {
        std::printf(" %-10u %s: %s\n", s.size, std::string(name(s.op)).c_str(), r.skipped.c_str());
    } else if (s.test == Test::bw) {
        const double bytes = static_cast<double>(s.size) * s.iters;
        std::printf(" %-10u %-14u %-22.2f %.6f\n", s.size, s.iters, bytes / r.seconds / 1048576.0, s.iters / r.seconds / 1e6);
    } else {
        const LatencyStats& l = r.lat;
        std::printf(" %-6u %-11u %-14.2f %-14.2f %-16.2f %-14.2f %-15.2f %-22.2f %.2f\n", s.size, s.iters, l.min, l.max,
                    l.typical, l.avg, l.stdev, l.p99, l.p999);
    }
    if (!r.error.empty()) std::printf(" FAILED: %s\n", r.error.c_str());
    std::fflush(stdout);
}

/// Prints rows as they come, with a header whenever the op or test changes.
class Table {
public:
    Table(const Options& o, RunInfo info) : o_(o), info_(std::move(info)) {}
    void add(const Result& r) {
        results_.push_back(r);
        if (o_.json) return;
        if (!have_last_ || last_.op != r.spec.op || last_.test != r.spec.test) {
            if (have_last_) std::printf("%s\n", rule);
            print_header(info_, r.spec);
        }
        last_ = r.spec;
        have_last_ = true;
        print_row(r);
    }
    void close() {
        if (o_.json) print_json(info_, o_, results_);
        else if (have_last_) std::printf("%s", rule);
    }
    bool failed() const {
        for (const auto& r : results_) {
            if (!r.error.empty()) return true;
        }
        return false;
    }
    RunInfo& info() { return info_; }

private:
    const Options& o_;
    RunInfo info_;
    std::vector<Result> results_;
    Spec last_{};
    bool have_last_ = false;
};

// ---- One process

int run_one_process(const Options& o) {
    auto dom_a = weft::open(o.backend);
    auto dom_b = weft::open(o.backend);
    const Setup setup = setup_of(o, dom_a.capabilities());
    Side client("client", std::move(dom_a), setup), server("server", std::move(dom_b), setup);
    client.make_qp();
    server.make_qp();
    client.qp.connect(server.qp.address());
    server.qp.connect(client.qp.address());
    client.set_peer(server.mr.remote());
    server.set_peer(client.mr.remote());
    Table table(o, {o.backend, client.dom.capabilities().device, "one process", ""});
    Requester req(client);
    Responder resp(server);
    req.progress = show_progress(o);
    for (const Spec& spec : specs_of(o, client.dom.capabilities())) {
        Result r{spec, {}, {}, {}, 0};
        if (auto why = unsupported(spec.op, client.dom.capabilities()); !why.empty()) {
            r.skipped = why;
            table.add(r);
            continue;
        }
        if (auto why = check_spec(spec, setup); !why.empty()) fail(label_of(spec) + ": " + why, 2);
        req.label = label_of(spec);
        resp.begin(spec);
        req.begin(spec);
        auto idle = [&resp] { resp.step(); };
        if (spec.test == Test::bw) {
            r.seconds = req.run_bw(idle);
        } else {
            auto us = req.run_lat(idle);
            r.lat = summarize(us);
        }
        detail::Watch w;
        while (!resp.done()) {
            resp.step();
            if (w.tick() && w.stalled(0, std::chrono::steady_clock::now())) {
                fail("server: the test's last messages did not arrive within " + std::to_string(stall_limit.count()) + " s");
            }
        }
        r.error = resp.finish();
        if (auto e = req.finish(); r.error.empty()) r.error = e;
        Drainer dc(client, server.posted_receives), ds(server, client.posted_receives);
        while (!dc.done() || !ds.done()) {
            dc.step();
            ds.step();
        }
        table.add(r);
    }
    table.close();
    return table.failed() ? 1 : 0;
}

// ---- Two processes

std::uint32_t feature_bits(const weft::Capabilities& caps) { return caps.features; }

int run_server(const Options& o) {
    auto dom = weft::open(o.backend);
    if (dom.capabilities().kind == weft::BackendKind::sim) {
        fail("'" + o.backend + "' cannot run in two processes: the simulator's fabric lives inside one process; "
             "drop --listen/--connect to run both sides in this one", 2);
    }
    weft::Listener lis = weft::listen(dom, o.listen);
    std::printf("weft-perf: listening on %s\n", lis.address().c_str());
    std::fflush(stdout);
    Control ctl(dom, "server");
    lis.accept(ctl.qp, o.timeout);
    int served = 0;
    try {
        Message hello = ctl.receive("hello", std::chrono::seconds(10));
        if (hello.kind != Kind::hello) fail("server: expected the client's hello, got " + std::string(name(hello.kind)));
        const auto caps = dom.capabilities();
        if (caps.max_qp_wr != 0 && hello.setup.max_depth > caps.max_qp_wr) {
            fail("server: the client asks for queues of " + std::to_string(hello.setup.max_depth) +
                 " requests; this backend holds at most " + std::to_string(caps.max_qp_wr) + " (" + caps.device + ")");
        }
        if (hello.setup.inline_size > caps.max_inline) {
            fail("server: the client asks for " + std::to_string(hello.setup.inline_size) +
                 " bytes inline; this backend sends at most " + std::to_string(caps.max_inline));
        }
        Side side("server", std::move(dom), hello.setup);
        side.make_qp();
        ctl.send({.kind = Kind::hello_reply, .features = feature_bits(caps), .region = side.mr.remote(), .text = caps.device});
        lis.accept(side.qp, std::chrono::seconds(30));
        side.set_peer(hello.region);
        Responder resp(side);
        for (;;) {
            Message m = ctl.receive("next test", o.timeout);
            if (m.kind == Kind::quit) {
                ctl.send({.kind = Kind::bye});
                break;
            }
            if (m.kind != Kind::begin) fail("server: expected begin or quit, got " + std::string(name(m.kind)));
            const Spec& spec = m.spec;
            std::string why = unsupported(spec.op, caps);
            if (why.empty()) why = check_spec(spec, side.setup);
            if (!why.empty()) {
                ctl.send({.kind = Kind::refused, .text = why});
                continue;
            }
            resp.begin(spec);
            ctl.send({.kind = Kind::ready});
            std::optional<Message> end;
            detail::Watch w;
            std::chrono::steady_clock::time_point ended{};
            for (unsigned turn = 0; !end || !resp.done(); ++turn) {
                resp.step();
                if (!end && (turn & 255u) == 0) {
                    end = ctl.try_receive();
                    if (end && end->kind != Kind::end) fail("server: expected end, got " + std::string(name(end->kind)));
                    if (end) ended = std::chrono::steady_clock::now();
                }
                if (end && w.tick() && std::chrono::steady_clock::now() - ended > stall_limit) break;
            }
            std::string err = resp.finish();
            ctl.send({.kind = Kind::result, .left = side.posted_receives, .text = err});
            Drainer(side, end->left).run();
            ++served;
        }
    } catch (const Failure& f) {
        try {
            ctl.send({.kind = Kind::abort, .text = f.why});
        } catch (const Failure&) {
        }
        throw;
    } catch (const weft::Error& e) {
        try {
            ctl.send({.kind = Kind::abort, .text = std::string("server: ") + e.what()});
        } catch (const Failure&) {
        }
        throw;
    }
    std::printf("weft-perf: served %d test%s\n", served, served == 1 ? "" : "s");
    return 0;
}

int run_client(const Options& o) {
    auto dom = weft::open(o.backend);
    if (dom.capabilities().kind == weft::BackendKind::sim) {
        fail("'" + o.backend + "' cannot run in two processes: the simulator's fabric lives inside one process; "
             "drop --listen/--connect to run both sides in this one", 2);
    }
    const Setup setup = setup_of(o, dom.capabilities());
    Control ctl(dom, "client");
    weft::connect(ctl.qp, o.connect, std::chrono::seconds(10));
    Side side("client", std::move(dom), setup);
    const auto& caps = side.dom.capabilities();
    ctl.send({.kind = Kind::hello, .setup = setup, .features = feature_bits(caps), .region = side.mr.remote()});
    Message reply = ctl.receive("hello", std::chrono::seconds(30));
    if (reply.kind != Kind::hello_reply) fail("client: expected the server's hello, got " + std::string(name(reply.kind)));
    side.make_qp();
    weft::connect(side.qp, o.connect, std::chrono::seconds(10));
    side.set_peer(reply.region);
    weft::Capabilities server_caps = caps;
    server_caps.features = reply.features;
    server_caps.device = reply.text;
    Table table(o, {o.backend, caps.device, "two processes", o.connect});
    Requester req(side);
    req.progress = show_progress(o);
    for (const Spec& spec : specs_of(o, caps)) {
        Result r{spec, {}, {}, {}, 0};
        std::string why = unsupported(spec.op, caps);
        if (why.empty()) {
            if (auto theirs = unsupported(spec.op, server_caps); !theirs.empty()) why = "the server: " + theirs;
        }
        if (!why.empty()) {
            r.skipped = why;
            table.add(r);
            continue;
        }
        if (auto bad = check_spec(spec, setup); !bad.empty()) fail(label_of(spec) + ": " + bad, 2);
        req.label = label_of(spec);
        req.begin(spec);
        ctl.send({.kind = Kind::begin, .spec = spec});
        Message ready = ctl.receive("ready", std::chrono::seconds(30));
        if (ready.kind == Kind::refused) fail("client: the server refused " + label_of(spec) + ": " + ready.text);
        if (ready.kind != Kind::ready) fail("client: expected ready, got " + std::string(name(ready.kind)));
        auto idle = [] {};
        if (spec.test == Test::bw) {
            r.seconds = req.run_bw(idle);
        } else {
            auto us = req.run_lat(idle);
            r.lat = summarize(us);
        }
        ctl.send({.kind = Kind::end, .left = side.posted_receives});
        Message res = ctl.receive("result", stall_limit + std::chrono::seconds(10));
        if (res.kind != Kind::result) fail("client: expected result, got " + std::string(name(res.kind)));
        r.error = res.text.empty() ? req.finish() : "server: " + res.text;
        Drainer(side, res.left).run();
        table.add(r);
    }
    ctl.send({.kind = Kind::quit});
    Message bye = ctl.receive("bye", std::chrono::seconds(30));
    if (bye.kind != Kind::bye) fail("client: expected bye, got " + std::string(name(bye.kind)));
    table.close();
    return table.failed() ? 1 : 0;
}

}  // namespace
}  // namespace weft_perf

int main(int argc, char** argv) {
    using namespace weft_perf;
    const Options o = parse(argc, argv);
    try {
        if (!o.listen.empty()) return run_server(o);
        if (!o.connect.empty()) return run_client(o);
        return run_one_process(o);
    } catch (const Failure& f) {
        std::fflush(stdout);
        std::fprintf(stderr, "weft-perf: %s\n", f.why.c_str());
        return f.code;
    } catch (const weft::Error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "weft-perf: %s\n", e.what());
        return 1;
    }
}
