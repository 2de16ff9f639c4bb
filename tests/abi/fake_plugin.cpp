// A plugin module wrong in one way, chosen at build time (FAKE_PLUGIN_FAULT), that the loader must refuse
// with a reason naming the fault (tests/CMakeLists.txt, abi.plugin_*): built as libweft-ofi.so in a
// directory of its own, found there through $WEFT_PLUGIN_PATH.
//   1  another plugin ABI number
//   2  no layout record (weft_plugin_layout_v1)
//   3  a layout record in which weft::SendRequest is 8 bytes longer than this build's
//   4  a layout record with one type more than this build's
#include <weft/backend.hpp>

#include <array>
#include <cstdint>
#include <string>

namespace {

std::string probe() { return "a fake plugin: the loader should have refused it before asking"; }

const weft::detail::Plugin plugin{
    .abi = weft::detail::plugin_abi_version + (FAKE_PLUGIN_FAULT == 1 ? 1 : 0),
    .name = "ofi",
    .summary = "a plugin built wrong on purpose",
    .keys = {},
    .probe = probe,
    .open = nullptr,
};

constexpr std::size_t ours = std::size(weft::detail::plugin_types);

// This build's table, changed as FAKE_PLUGIN_FAULT says.
constexpr std::array<weft::detail::TypeLayout, ours + 1> changed() {
    std::array<weft::detail::TypeLayout, ours + 1> t{};
    for (std::size_t i = 0; i < ours; ++i) {
        t[i] = weft::detail::plugin_types[i];
        if (FAKE_PLUGIN_FAULT == 3 && std::string_view(t[i].name) == "weft::SendRequest") t[i].size += 8;
    }
    t[ours] = {"weft::MemoryWindow", 16, 8};
    return t;
}
[[maybe_unused]] constexpr auto table = changed();  // unused when FAKE_PLUGIN_FAULT is 2

}  // namespace

extern "C" __attribute__((visibility("default"))) const weft::detail::Plugin* weft_plugin_v1() { return &plugin; }

#if FAKE_PLUGIN_FAULT != 2
extern "C" __attribute__((visibility("default"))) weft::detail::PluginLayout weft_plugin_layout_v1() {
    return {static_cast<std::uint32_t>(FAKE_PLUGIN_FAULT == 4 ? ours + 1 : ours), table.data()};
}
#endif
