// The backend registry: built-in backends, plugin modules loaded by name, and weft::open().
//
// Plugins are shared modules named libweft-<name>.so exporting `weft_plugin_v1`. They are looked for in
// each directory of $WEFT_PLUGIN_PATH (':'-separated), then next to libweft itself and in its weft/
// subdirectory. A module that fails to load (e.g. libibverbs missing) makes that backend unusable with
// dlopen's reason; every other backend is unaffected.
#include <weft/backend.hpp>
#include <weft/domain.hpp>
#include <weft/error.hpp>

#include "text.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <array>
#include <cstdlib>
#include <mutex>
#include <string>
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

std::vector<std::string> search_dirs() {
    std::vector<std::string> dirs;
    if (const char* env = std::getenv("WEFT_PLUGIN_PATH"); env && *env) {
        std::string_view rest = env;
        while (!rest.empty()) {
            auto colon = rest.find(':');
            if (auto dir = rest.substr(0, colon); !dir.empty()) dirs.emplace_back(dir);
            if (colon == std::string_view::npos) break;
            rest.remove_prefix(colon + 1);
        }
    }
    std::string self = self_dir();
    dirs.push_back(self);
    dirs.push_back(self + "/weft");
    return dirs;
}

bool exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

// Loads (once per process) the plugin module for backend `name`. Modules are never unloaded: objects
// they created may outlive any registry call.
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
    for (const auto& dir : search_dirs()) {
        std::string path = dir + "/" + file;
        if (!exists(path)) {
            tried += (tried.empty() ? "" : ", ") + dir;
            continue;
        }
        out.module = path;
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
        if (p == nullptr || p->abi != detail::plugin_abi_version) {
            out.error = "plugin " + path + " was built for another weft plugin ABI (expected version " +
                        std::to_string(detail::plugin_abi_version) + ")";
            break;
        }
        out.plugin = p;
        break;
    }
    if (!out.plugin && out.error.empty()) {
        out.error = "plugin " + file + " not found (searched: " + tried +
                    "); the build may lack it, or set WEFT_PLUGIN_PATH";
    }
    // Only successes and load failures are cached; "not found" is retried, as WEFT_PLUGIN_PATH may change.
    if (out.plugin || !out.module.empty()) cache.emplace_back(e.name, out);
    return out;
}

std::string known_names() {
    return detail::join_names(entries(), [](const Entry& e) { return e.name; });
}

}  // namespace

std::string default_config() {
    const char* env = std::getenv("WEFT_BACKEND");
    return (env && *env) ? std::string(env) : std::string("sim");
}

Domain open() { return open(default_config()); }

Domain open(std::string_view text) {
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
    return Domain(std::move(impl));
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
