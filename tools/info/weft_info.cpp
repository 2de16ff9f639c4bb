// weft-info — lists the backends of this build, whether each can run here (and why not), and the
// configuration keys each accepts; with a config argument, opens it and prints its capabilities.
//
//   weft-info                 # every backend
//   weft-info verbs:device=rxe0
#include <weft/weft.hpp>

#include <cstdio>
#include <string>

namespace {

void print_caps(const weft::Capabilities& c) {
    std::printf("backend %s, device %s, profile %s\n", c.backend.c_str(), c.device.c_str(), c.profile.c_str());
    std::printf("  max_qp_wr %u  max_sge %u  max_inline %u  max_cqe %u  max_msg_size %llu  max_mr_size %llu\n",
                c.max_qp_wr, c.max_sge, c.max_inline, c.max_cqe, static_cast<unsigned long long>(c.max_msg_size),
                static_cast<unsigned long long>(c.max_mr_size));
    std::printf("  features:");
    for (std::uint32_t bit = 1; bit != 0; bit <<= 1) {
        auto f = static_cast<weft::Feature>(bit);
        if (weft::to_string(f) == "unknown_feature") continue;
        std::printf(" %s%s", c.has(f) ? "" : "-", std::string(weft::to_string(f)).c_str());
    }
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        if (argc > 1) {
            auto dom = weft::open(argv[1]);
            print_caps(dom.capabilities());
            return 0;
        }
        for (const auto& b : weft::backends()) {
            std::printf("%-6s %s — %s\n", b.name.c_str(), b.usable ? "usable  " : "UNUSABLE", b.summary.c_str());
            if (!b.usable) std::printf("       why: %s\n", b.reason.c_str());
            if (!b.module.empty()) std::printf("       module: %s\n", b.module.c_str());
            for (const auto& k : b.keys) {
                std::printf("       %-12s %s\n", std::string(k.name).c_str(), std::string(k.help).c_str());
            }
        }
    } catch (const weft::Error& e) {
        std::fprintf(stderr, "weft-info: %s\n", e.what());
        return 1;
    }
    return 0;
}
