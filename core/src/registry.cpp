// The backend registry: built-in backends, plugin modules loaded by name, and weft::open().
//
// Plugins are shared modules named libweft-<name>.so exporting `weft_plugin_v1`. They are looked for in
// each directory of $WEFT_PLUGIN_PATH (':'-separated), then next to libweft itself and in its weft/
// subdirectory. A module that fails to load (e.g. libibverbs missing) makes that backend unusable with
// dlopen's reason; every other backend is unaffected.
#include <weft/backend.hpp>
#include <weft/domain.hpp>
#include <weft/error.hpp>
#include <weft/log.hpp>

#include "text.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace weft {
namespace sim {
const weft::detail::Plugin& plugin() noexcept;  // sim/src/sim_domain.cpp
}

namespace {

struct Entry {
    const char* name;
    const char* summary;
    const detail::Plugin* builtin;  // null for plugin modules
};

const std::array<Entry, 3>& entries() {
    static const std::array<Entry, 3> table{{
        {"sim", "in-process RC simulator, deterministic from a seed", &sim::plugin()},
        {"verbs", "native ibverbs on rdma-core (InfiniBand, RoCE, Soft-RoCE)", nullptr},
        {"ofi", "libfabric: verbs, tcp, shm and other providers", nullptr},
    }};
    return table;
}

struct Loaded {
    const detail::Plugin* plugin = nullptr;
    std::string module;
    std::string error;
};

std::mutex load_mutex;

std::string self_dir() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&self_dir), &info) == 0 || info.dli_fname == nullptr) return ".";
    std::string path = info.dli_fname;
    auto slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

struct SearchDir {
    std::string path;
    bool from_environment = false;  // named by $WEFT_PLUGIN_PATH
};

std::vector<SearchDir> search_dirs() {
    std::vector<SearchDir> dirs;
    if (const char* env = std::getenv("WEFT_PLUGIN_PATH"); env && *env) {
        std::string_view rest = env;
        while (!rest.empty()) {
            auto colon = rest.find(':');
            if (auto dir = rest.substr(0, colon); !dir.empty()) dirs.push_back({std::string(dir), true});
            if (colon == std::string_view::npos) break;
            rest.remove_prefix(colon + 1);
        }
    }
    std::string self = self_dir();
    dirs.push_back({self, false});
    dirs.push_back({self + "/weft", false});
    return dirs;
}

std::string describe(const SearchDir& dir) {
    return dir.from_environment ? dir.path + " (from WEFT_PLUGIN_PATH)" : dir.path;
}

bool exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

// Loads (once per process) the plugin module for backend `name`. Modules are never unloaded: objects
// they created may outlive any registry call.
// Empty when a plugin's layout record equals this build's; otherwise the first difference, e.g. "layout of
// weft::SendRequest (112 bytes, aligned to 8; this libweft's: 104 bytes, aligned to 8)".
std::string layout_mismatch(const detail::PluginLayout& theirs) {
    const auto& ours = detail::plugin_types;
    auto text = [](const detail::TypeLayout& t) {
        return std::to_string(t.size) + " bytes, aligned to " + std::to_string(t.align);
    };
    const std::size_t n = std::min<std::size_t>(theirs.count, std::size(ours));
    if (theirs.types == nullptr && theirs.count != 0) return "layout record (a null table)";
    for (std::size_t i = 0; i < n; ++i) {
        const detail::TypeLayout& t = theirs.types[i];
        const char* name = t.name != nullptr ? t.name : "(unnamed)";
        if (std::string_view(name) != ours[i].name) {
            return "list of shared types (entry " + std::to_string(i) + " is " + name + ", this libweft's is " +
                   ours[i].name + ")";
        }
        if (t.size != ours[i].size || t.align != ours[i].align) {
            return "layout of " + std::string(name) + " (" + text(t) + "; this libweft's: " + text(ours[i]) + ")";
        }
    }
    if (theirs.count != std::size(ours)) {
        return "list of shared types (" + std::to_string(theirs.count) + " of them; this libweft's has " +
               std::to_string(std::size(ours)) + ")";
    }
    return {};
}

Loaded load(const Entry& e) {
    if (e.builtin) return {e.builtin, {}, {}};
    std::lock_guard lock(load_mutex);
    static std::vector<std::pair<std::string, Loaded>> cache;
    for (const auto& [n, l] : cache) {
        if (n == e.name) return l;
    }
    Loaded out;
    std::string file = std::string("libweft-") + e.name + ".so";
    std::string tried;
    bool env_dir = false;  // the module found came from a $WEFT_PLUGIN_PATH directory
    for (const auto& dir : search_dirs()) {
        std::string path = dir.path + "/" + file;
        if (!exists(path)) {
            WEFT_LOGS(core, debug, "no " + file + " in " + describe(dir));
            tried += (tried.empty() ? "" : ", ") + describe(dir);
            continue;
        }
        WEFT_LOGS(core, debug, "loading plugin " + path + (dir.from_environment ? " (from WEFT_PLUGIN_PATH)" : ""));
        out.module = path;
        env_dir = dir.from_environment;
        void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            const char* why = ::dlerror();
            out.error = "plugin " + path + " could not be loaded: " + (why ? why : "unknown dlopen error");
            break;
        }
        auto entry = reinterpret_cast<const detail::Plugin* (*)()>(::dlsym(handle, "weft_plugin_v1"));
        if (!entry) {
            out.error = "plugin " + path + " has no weft_plugin_v1 entry point";
            break;
        }
        const detail::Plugin* p = entry();
        if (p == nullptr) {
            out.error = "plugin " + path + " returned no registration record from weft_plugin_v1";
            break;
        }
        if (p->abi != detail::plugin_abi_version) {
            out.error = "plugin " + path + " was built for another weft plugin ABI (version " + std::to_string(p->abi) +
                        "; this libweft's is " + std::to_string(detail::plugin_abi_version) + ")";
            break;
        }
        auto layout = reinterpret_cast<detail::PluginLayout (*)()>(::dlsym(handle, "weft_plugin_layout_v1"));
        if (!layout) {
            out.error = "plugin " + path + " has no weft_plugin_layout_v1 entry point (built against another weft)";
            break;
        }
        if (std::string differs = layout_mismatch(layout()); !differs.empty()) {
            out.error = "plugin " + path + " was built with another " + differs + ": rebuild it with this weft";
            break;
        }
        out.plugin = p;
        break;
    }
    if (!out.plugin && !out.error.empty() && env_dir) out.error += " (a directory from WEFT_PLUGIN_PATH)";
    if (!out.plugin && out.error.empty()) {
        out.error = "plugin " + file + " not found (searched: " + tried +
                    "); the build may lack it, or set WEFT_PLUGIN_PATH";
    }
    if (out.plugin) {
        WEFT_LOGS(core, info, "backend " + std::string(e.name) + ": plugin " + out.module + " loaded");
    } else {
        WEFT_LOGS(core, info, "backend " + std::string(e.name) + " unusable: " + out.error);
    }
    // Only successes and load failures are cached; "not found" is retried, as WEFT_PLUGIN_PATH may change.
    if (out.plugin || !out.module.empty()) cache.emplace_back(e.name, out);
    return out;
}

std::string known_names() {
    return detail::join_names(entries(), [](const Entry& e) { return e.name; });
}

// Opens `text`; `origin` says where it came from, for the log.
Domain open_config(std::string_view text, std::string_view origin) {
    WEFT_LOGS(core, info, "opening \"" + std::string(text) + "\" (" + std::string(origin) + ")");
    Config cfg = Config::parse(text);
    const Entry* entry = nullptr;
    for (const auto& e : entries()) {
        if (cfg.backend() == e.name) entry = &e;
    }
    if (!entry) {
        throw Error(Errc::unknown_backend,
                    "no backend named '" + cfg.backend() + "'; known backends: " + known_names(), {}, "open");
    }
    Loaded l = load(*entry);
    if (!l.plugin) throw Error(Errc::backend_unavailable, l.error, entry->name, "open");
    cfg.check_keys(l.plugin->keys);
    auto impl = l.plugin->open(cfg);
    impl->config = std::move(cfg);
    if (log_enabled(LogSubsystem::core, LogLevel::info)) {
        const auto& c = impl->caps;
        detail::log_printf(LogSubsystem::core, LogLevel::info,
                           "opened backend %s: device %s, profile %s, max_qp_wr %u, max_sge %u, max_inline %u",
                           c.backend.c_str(), c.device.c_str(), c.profile.c_str(), c.max_qp_wr, c.max_sge,
                           c.max_inline);
    }
    return Domain(std::move(impl));
}

// Adds where the configuration came from to an error it caused.
[[noreturn]] void rethrow_from(const Error& e, std::string_view origin) {
    WEFT_LOGS(core, error, std::string(e.what()) + " " + std::string(origin));
    throw Error(e.code(), e.message() + " " + std::string(origin), e.backend(), e.object());
}

}  // namespace

std::string default_config() {
    const char* env = std::getenv("WEFT_BACKEND");
    return (env && *env) ? std::string(env) : std::string("sim");
}

Domain open() {
    const char* env = std::getenv("WEFT_BACKEND");
    if (env == nullptr || *env == '\0') return open_config("sim", "the default: WEFT_BACKEND is unset");
    const std::string text = env;
    const std::string origin = "(from WEFT_BACKEND=\"" + text + "\")";
    try {
        return open_config(text, "from WEFT_BACKEND");
    } catch (const Error& e) {
        rethrow_from(e, origin);
    }
}

Domain open(std::string_view text) {
    try {
        return open_config(text, "given by the program");
    } catch (const Error& e) {
        WEFT_LOGS(core, error, e.what());
        throw;
    }
}

std::vector<BackendInfo> backends() {
    std::vector<BackendInfo> out;
    for (const auto& e : entries()) {
        BackendInfo info;
        info.name = e.name;
        info.summary = e.summary;
        Loaded l = load(e);
        info.module = l.module;
        if (!l.plugin) {
            info.reason = l.error;
        } else {
            info.keys.assign(l.plugin->keys.begin(), l.plugin->keys.end());
            try {
                info.reason = l.plugin->probe ? l.plugin->probe() : std::string();
            } catch (const std::exception& ex) {
                info.reason = ex.what();
            }
            info.usable = info.reason.empty();
        }
        out.push_back(std::move(info));
    }
    return out;
}

}  // namespace weft
