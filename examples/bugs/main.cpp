// weft-bugs — runs the bug zoo on the simulator: for each bug, the first seed that exposes it, and whether
// the naive in-order fabric or the fixed version ever shows it.
//
//   weft-bugs [--seeds N] [--first K] [--base CONFIG] [NAME...]
//
// Seeds K .. K+N-1 (default 1 .. 100); CONFIG is the simulator config without a seed (default "sim");
// NAME picks bugs (default: all). `weft-bugs --first 7 --seeds 1 torn_flag` replays seed 7.
#include "bugs.hpp"

#include <weft/error.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

std::string with_seed(const std::string& base, std::uint64_t seed, const std::string& extra = "") {
    const auto colon = base.find(':');
    std::string out = base.substr(0, colon) + ":seed=" + std::to_string(seed);
    if (colon != std::string::npos) out += "," + base.substr(colon + 1);
    if (!extra.empty()) out += "," + extra;
    return out;
}

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr, "weft-bugs: %s\nusage: weft-bugs [--seeds N] [--first K] [--base CONFIG] [NAME...]\n", why);
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    std::uint64_t seeds = 100, first = 1;
    std::string base = "sim";
    std::vector<const weft::bugs::Bug*> chosen;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "--seeds" && i + 1 < argc) seeds = std::strtoull(argv[++i], nullptr, 10);
        else if (arg == "--first" && i + 1 < argc) first = std::strtoull(argv[++i], nullptr, 10);
        else if (arg == "--base" && i + 1 < argc) base = argv[++i];
        else if (auto* b = weft::bugs::find(arg)) chosen.push_back(b);
        else usage(("unknown argument or bug " + arg).c_str());
    }
    if (seeds == 0) usage("--seeds must be positive");
    if (chosen.empty()) {
        for (const auto& b : weft::bugs::all()) chosen.push_back(&b);
    }
    int wrong = 0;
    try {
        for (const auto* bug : chosen) {
            const auto t0 = std::chrono::steady_clock::now();
            std::uint64_t found = 0, shown = 0;
            for (std::uint64_t s = first; s < first + seeds; ++s) {
                if (bug->buggy(with_seed(base, s))) {
                    ++shown;
                    if (!found) found = s;
                }
            }
            std::uint64_t in_order = 0, fixed = 0;
            for (std::uint64_t s = first; s < first + seeds; ++s) {
                in_order += bug->buggy(with_seed(base, s, "reorder=none"));
                fixed += bug->fixed(with_seed(base, s));
            }
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            std::printf("%-18s %s\n  caught: %s", std::string(bug->name).c_str(), std::string(bug->summary).c_str(),
                        found ? ("first at seed " + std::to_string(found) + ", on " + std::to_string(shown) + " of " + std::to_string(seeds) + " seeds").c_str() : ("not within " + std::to_string(seeds) + " seeds").c_str());
            std::printf("; in order (reorder=none): shown on %llu of %llu seeds; fixed: shown on %llu of %llu (%.0f ms)\n",
                        static_cast<unsigned long long>(in_order), static_cast<unsigned long long>(seeds),
                        static_cast<unsigned long long>(fixed), static_cast<unsigned long long>(seeds), ms);
            if (found) {
                std::printf("  replay: %s --first %llu --seeds 1 --base '%s' %s\n", argv[0],
                            static_cast<unsigned long long>(found), base.c_str(), std::string(bug->name).c_str());
            }
            std::printf("  fix: %s\n", std::string(bug->fix).c_str());
            wrong += !found || in_order != 0 || fixed != 0;
        }
    } catch (const weft::Error& e) {
        std::fprintf(stderr, "weft-bugs: %s\n", e.what());
        return 1;
    }
    return wrong == 0 ? 0 : 1;
}
