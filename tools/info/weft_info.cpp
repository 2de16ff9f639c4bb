// weft-info — what this build of weft can do here: its backends, whether each can run (and why not), the
// configuration keys each accepts, a backend's capabilities, and the environment variables weft reads.
//
//   weft-info                       # every backend, its keys, why one is unusable
//   weft-info verbs:device=rxe0     # open it and print its capabilities
//   weft-info --json                # the same as JSON (with a CONFIG too)
//   weft-info --env                 # the environment variables weft reads, and their values here
//   weft-info --keys                # "backend<TAB>key<TAB>meaning" lines, for scripts
#include <weft/weft.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#ifndef WEFT_PROJECT_VERSION
#error "WEFT_PROJECT_VERSION is set by tools/CMakeLists.txt"
#endif

namespace {

constexpr std::string_view usage_text = R"(usage: weft-info [OPTIONS] [CONFIG]

Lists the backends of this build of weft, whether each can run on this machine (and why not), and the
configuration keys each accepts. With CONFIG (e.g. sim, verbs:device=rxe0, "ofi:provider=tcp;ofi_rxm"),
opens it and prints the domain's capabilities: device, limits and features.

options:
  -h, --help      print this help and exit
  -V, --version   print the versions of weft-info and of the libweft it runs with, and exit
  -j, --json      print JSON instead of text (the backend list, or with CONFIG the capabilities)
  -e, --env       list the environment variables weft reads, their meaning and their value here
  -k, --keys      print every backend's keys as "backend<TAB>key<TAB>meaning" lines
  --              end of options (a CONFIG may then start with '-')

environment: WEFT_BACKEND is the config weft::open() uses without one; WEFT_LOG=info (or debug, trace,
error, warn; "debug:ofi,core" for some subsystems) makes weft log its setup decisions to stderr.
See weft-info --env for all of them, and docs/environment.md.

exit status: 0 on success, 1 when CONFIG cannot be opened, 2 for a bad command line.
)";

/// An environment variable weft (or a library it loads, on weft's behalf) reads.
struct EnvVar {
    std::string_view name;
    std::string_view who;      ///< which part reads it
    std::string_view meaning;
};

// Every variable read by libweft, its plugins, <weft/testing.hpp> and weft's test programs, and the
// libfabric/rdma-core ones the backends set or depend on. tools/info/check-environment.sh compares this
// list with the getenv/setenv calls in the sources and with docs/environment.md.
constexpr EnvVar environment[] = {
    {"WEFT_BACKEND", "libweft",
     "the config weft::open() uses when given none (default \"sim\"); errors it causes say \"(from "
     "WEFT_BACKEND=...)\"; the libibverbs front end opens it and names its device after the backend"},
    {"WEFT_PLUGIN_PATH", "libweft",
     "':'-separated directories searched for libweft-<name>.so before libweft's own directory and its "
     "weft/ subdirectory"},
    {"WEFT_LOG", "libweft",
     "log level error|warn|info|debug|trace, optionally ':' and the subsystems core,sim,verbs,ofi,compat "
     "(\"debug:ofi,core\"); messages go to stderr unless the program sets weft::set_log_function; unset: "
     "nothing is logged"},
    {"WEFT_OFI_TRACE", "ofi backend", "1: print every provider error completion entry to stderr"},
    {"WEFT_VERBS_RENDEZVOUS", "libibverbs front end",
     "the directory where processes on ofi publish their LIDs, QP addresses and rkeys (default "
     "/dev/shm/weft-verbs-<uid>); it must be this user's and not writable by others"},
    {"FI_MR_CACHE_MAX_COUNT", "ofi backend (sets it)",
     "set to 0 when unset: libfabric's MR cache would keep regions registered, with every remote right, "
     "after they are closed"},
    {"FI_OFI_RXM_USE_SRX", "ofi backend (sets it)",
     "weft sets 1: rxm over verbs otherwise reposts a buffer to a closed verbs endpoint in fi_close (libfabric 1.17 to 2.6)"},
    {"FI_UNIVERSE_SIZE", "ofi backend (sets it)",
     "set to 16 when unset: rxm sizes each endpoint's CQ by it; a larger value needs more CQ entries than "
     "small devices (rxe) have"},
    {"FI_PROVIDER", "libfabric",
     "restricts the providers libfabric offers; an ofi config naming another one is then unusable"},
    {"FI_LOG_LEVEL", "libfabric", "libfabric's own log (warn, info, debug, trace) to stderr"},
    {"RDMAV_FORK_SAFE", "rdma-core",
     "set it (or IBV_FORK_SAFE) in a program that forks after registering memory with the verbs backend"},
    {"WEFT_SIM_SEED", "<weft/testing.hpp>", "run only this seed of every seed sweep (replay)"},
    {"WEFT_SIM_SEEDS", "<weft/testing.hpp>", "the number of seeds each sweep runs (default: the test's own)"},
    {"WEFT_SOAK_SEEDS", "tests/sim (soak)", "seeds of the four-node fault soak instead of 2000"},
    {"WEFT_SOAK_FIRST", "tests/sim (soak)", "first seed of the four-node fault soak instead of 1"},
    {"WEFT_FUZZ_JOBS", "tests/fuzz/run.sh", "fuzz targets run side by side (default: one per core)"},
    {"WEFT_ALLOC_BACKTRACES", "tests/conformance (cost)", "print the call stacks of the first N allocations counted"},
    {"WEFT_SIM_SCHEDULE", "<weft/testing.hpp>", "replay: each exploration runs only the schedule this token names"},
    {"WEFT_CONFORMANCE_BACKEND", "weft-conformance", "the config to test when --backend= is not given"},
    {"WEFT_CONFORMANCE_PEER", "weft-conformance",
     "process: run side b of every pair in a second process (as --peer=process)"},
    {"WEFT_CONFORMANCE_LISTEN", "weft-conformance", "the host:port the listener cases bind"},
    {"WEFT_CONFORMANCE_RECORD", "weft-conformance",
     "a file to write the completion streams and buffers to, for the differential test"},
    {"WEFT_PYVERBS_TESTS", "tests/compat (compat.pyverbs)",
     "rdma-core's pyverbs test suite (its tests/ directory) to run on the libibverbs front end"},
};

// ---- text output ----

void print_caps(const weft::Capabilities& c) {
    std::printf("backend %s, device %s, profile %s\n", c.backend.c_str(), c.device.c_str(), c.profile.c_str());
    std::printf("  max_qp_wr %u  max_sge %u  max_inline %u  max_cqe %u  max_msg_size %llu  max_mr_size %llu  "
                "max_private_data %u  max_srq_wr %u  max_srq_sge %u\n",
                c.max_qp_wr, c.max_sge, c.max_inline, c.max_cqe, static_cast<unsigned long long>(c.max_msg_size),
                static_cast<unsigned long long>(c.max_mr_size), c.max_private_data, c.max_srq_wr, c.max_srq_sge);
    std::printf("  features:");
    for (std::uint32_t bit = 1; bit != 0; bit <<= 1) {
        auto f = static_cast<weft::Feature>(bit);
        if (weft::to_string(f) == "unknown_feature") continue;
        std::printf(" %s%s", c.has(f) ? "" : "-", std::string(weft::to_string(f)).c_str());
    }
    std::printf("\n");
}

void print_backends(const std::vector<weft::BackendInfo>& list) {
    for (const auto& b : list) {
        std::printf("%-6s %s — %s\n", b.name.c_str(), b.usable ? "usable  " : "UNUSABLE", b.summary.c_str());
        if (!b.usable) std::printf("       why: %s\n", b.reason.c_str());
        if (!b.module.empty()) std::printf("       module: %s\n", b.module.c_str());
        for (const auto& k : b.keys) {
            std::printf("       %-12s %s\n", std::string(k.name).c_str(), std::string(k.help).c_str());
        }
    }
}

void print_env() {
    for (const auto& v : environment) {
        const char* value = std::getenv(std::string(v.name).c_str());
        std::printf("%-26s %s — %s\n", std::string(v.name).c_str(), std::string(v.who).c_str(),
                    std::string(v.meaning).c_str());
        if (value) std::printf("%-26s set here: \"%s\"\n", "", value);
    }
}

// ---- JSON output ----

std::string json_string(std::string_view s) {
    std::string out = "\"";
    for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        switch (ch) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    return out + "\"";
}

void print_caps_json(const weft::Capabilities& c) {
    std::printf("{\"backend\": %s, \"device\": %s, \"profile\": %s,\n", json_string(c.backend).c_str(),
                json_string(c.device).c_str(), json_string(c.profile).c_str());
    std::printf(" \"max_qp_wr\": %u, \"max_sge\": %u, \"max_inline\": %u, \"max_cqe\": %u, \"max_msg_size\": %llu, "
                "\"max_mr_size\": %llu, \"max_private_data\": %u, \"max_srq_wr\": %u, \"max_srq_sge\": %u,\n",
                c.max_qp_wr, c.max_sge, c.max_inline, c.max_cqe, static_cast<unsigned long long>(c.max_msg_size),
                static_cast<unsigned long long>(c.max_mr_size), c.max_private_data, c.max_srq_wr, c.max_srq_sge);
    std::printf(" \"features\": {");
    const char* sep = "";
    for (std::uint32_t bit = 1; bit != 0; bit <<= 1) {
        auto f = static_cast<weft::Feature>(bit);
        if (weft::to_string(f) == "unknown_feature") continue;
        std::printf("%s%s: %s", sep, json_string(weft::to_string(f)).c_str(), c.has(f) ? "true" : "false");
        sep = ", ";
    }
    std::printf("}}\n");
}

void print_backends_json(const std::vector<weft::BackendInfo>& list) {
    std::printf("{\"version\": %s, \"backends\": [", json_string(weft::version()).c_str());
    const char* sep = "\n";
    for (const auto& b : list) {
        std::printf("%s  {\"name\": %s, \"summary\": %s, \"usable\": %s, \"reason\": %s, \"module\": %s, \"keys\": [",
                    sep, json_string(b.name).c_str(), json_string(b.summary).c_str(), b.usable ? "true" : "false",
                    json_string(b.reason).c_str(), json_string(b.module).c_str());
        const char* ksep = "";
        for (const auto& k : b.keys) {
            std::printf("%s\n    {\"name\": %s, \"help\": %s}", ksep, json_string(k.name).c_str(),
                        json_string(k.help).c_str());
            ksep = ",";
        }
        std::printf("]}");
        sep = ",\n";
    }
    std::printf("\n]}\n");
}

void print_env_json() {
    std::printf("[");
    const char* sep = "\n";
    for (const auto& v : environment) {
        const char* value = std::getenv(std::string(v.name).c_str());
        std::printf("%s  {\"name\": %s, \"read_by\": %s, \"meaning\": %s, \"value\": %s}", sep,
                    json_string(v.name).c_str(), json_string(v.who).c_str(), json_string(v.meaning).c_str(),
                    value ? json_string(value).c_str() : "null");
        sep = ",\n";
    }
    std::printf("\n]\n");
}

struct Options {
    bool json = false;
    bool env = false;
    bool keys = false;
    std::string config;
};

int bad_usage(const std::string& why) {
    std::fprintf(stderr, "weft-info: %s\nusage: weft-info [-h] [-V] [-j] [-e] [-k] [CONFIG]; see weft-info --help\n",
                 why.c_str());
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    Options opt;
    bool have_config = false;
    bool options_done = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (!options_done && arg.size() > 1 && arg[0] == '-') {
            if (arg == "--") {
                options_done = true;
            } else if (arg == "-h" || arg == "--help") {
                std::fputs(std::string(usage_text).c_str(), stdout);
                return 0;
            } else if (arg == "-V" || arg == "--version") {
                std::printf("weft-info %s (libweft %s)\n", WEFT_PROJECT_VERSION, std::string(weft::version()).c_str());
                return 0;
            } else if (arg == "-j" || arg == "--json") {
                opt.json = true;
            } else if (arg == "-e" || arg == "--env") {
                opt.env = true;
            } else if (arg == "-k" || arg == "--keys") {
                opt.keys = true;
            } else {
                return bad_usage("unknown option '" + std::string(arg) + "'");
            }
            continue;
        }
        if (have_config) return bad_usage("more than one CONFIG ('" + opt.config + "' and '" + std::string(arg) + "')");
        opt.config = arg;
        have_config = true;
    }
    if (opt.env + opt.keys + have_config > 1) {
        return bad_usage("--env, --keys and CONFIG each ask for a different listing: give one of them");
    }

    if (opt.env) {
        if (opt.json) print_env_json();
        else print_env();
        return 0;
    }
    try {
        if (have_config) {
            auto dom = weft::open(opt.config);
            if (opt.json) print_caps_json(dom.capabilities());
            else print_caps(dom.capabilities());
            return 0;
        }
        auto list = weft::backends();
        if (opt.keys) {
            for (const auto& b : list) {
                for (const auto& k : b.keys) {
                    std::printf("%s\t%s\t%s\n", b.name.c_str(), std::string(k.name).c_str(), std::string(k.help).c_str());
                }
            }
        } else if (opt.json) {
            print_backends_json(list);
        } else {
            print_backends(list);
        }
    } catch (const weft::Error& e) {
        std::fprintf(stderr, "weft-info: %s\n", e.what());
        return 1;
    }
    return 0;
}
