// Fuzz target: configuration strings, the text a user or $WEFT_BACKEND hands to weft::open. Properties:
// parse never crashes and throws only weft::Error; a text it accepts renders back to a text that parses to
// the same backend and entries; on the simulator, open either succeeds or throws weft::Error.
#include "fuzz.hpp"

#include <weft/weft.hpp>

#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    weft::Config cfg;
    try {
        cfg = weft::Config::parse(text);
    } catch (const weft::Error&) {
        return 0;
    }
    std::string again = cfg.backend();
    for (std::size_t i = 0; i < cfg.entries().size(); ++i) {
        again += (i == 0 ? ":" : ",") + cfg.entries()[i].first + "=" + cfg.entries()[i].second;
    }
    weft::Config back;
    try {
        back = weft::Config::parse(again);
    } catch (const weft::Error&) {
        weft::fuzz::property_failed("config", "an accepted config does not parse again once rendered");
    }
    if (back.backend() != cfg.backend() || back.entries() != cfg.entries()) {
        weft::fuzz::property_failed("config", "an accepted config renders to a different one");
    }
    // Opening names a simulated fabric per distinct fabric= value, which the process keeps: only the
    // default fabric here, so that memory stays flat over millions of inputs. trace= names a file the
    // fabric writes when it closes, anywhere: never from fuzzed text.
    if (cfg.backend() == "sim" && !cfg.has("fabric") && !cfg.has("trace")) {
        try {
            (void)weft::open(text);
        } catch (const weft::Error&) {
        }
    }
    return 0;
}
