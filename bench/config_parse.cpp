// Config::parse cost per key as the number of keys grows (100 .. 40,000): linear parsing keeps the cost per key flat. The
// anchor is a plain scan of the same text for its separators (what any parser must at least do).
#include <weft/config.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace {

std::string text_with(std::size_t keys) {
    std::string t = "sim:";
    for (std::size_t i = 0; i < keys; ++i) t += (i ? ",k" : "k") + std::to_string(i) + "=" + std::to_string(i);
    return t;
}

template <class F>
double best_ns(F&& f) {
    double best = 1e300;
    for (int rep = 0; rep < 5; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

}  // namespace

int main() {
    std::printf("config_parse: %8s %14s %14s %10s\n", "keys", "parse ns/key", "scan ns/key", "ratio");
    for (std::size_t keys : {100u, 1000u, 10000u, 20000u, 40000u}) {
        const std::string t = text_with(keys);
        std::size_t parsed = 0;
        const double parse = best_ns([&] { parsed += weft::Config::parse(t).entries().size(); });
        volatile std::size_t seps = 0;
        const double scan = best_ns([&] { seps = seps + static_cast<std::size_t>(std::count(t.begin(), t.end(), ',')); });
        if (parsed != 5 * keys) return 1;
        const double k = static_cast<double>(keys);
        std::printf("config_parse: %8zu %14.1f %14.2f %9.0fx\n", keys, parse / k, scan / k, parse / scan);
    }
    return 0;
}
