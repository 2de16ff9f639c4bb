// Error categories and weft::Error's message layout.
#include <weft/error.hpp>

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <string>

namespace weft {
namespace {

class WeftCategory final : public std::error_category {
public:
    const char* name() const noexcept override { return "weft"; }
    std::string message(int code) const override {
        switch (static_cast<Errc>(code)) {
            case Errc::invalid_config: return "invalid configuration";
            case Errc::unknown_backend: return "unknown backend";
            case Errc::backend_unavailable: return "backend unavailable";
            case Errc::invalid_argument: return "invalid argument";
            case Errc::bad_descriptor: return "malformed descriptor";
            case Errc::not_supported: return "not supported";
            case Errc::invalid_state: return "invalid state";
            case Errc::resource_exhausted: return "resource exhausted";
            case Errc::misuse: return "API misuse";
            case Errc::internal: return "internal error";
        }
        return "weft error " + std::to_string(code);
    }
};

// libfabric's FI_E* codes below 256 are errno values (FI_ETIMEDOUT is ETIMEDOUT); its own start at 256
// (FI_ERRNO_OFFSET). The text is fi_strerror's, found in the libfabric this process has loaded (the ofi
// plugin's), without linking it: the core does not depend on libfabric.
constexpr int fabric_errno_limit = 256;

using StrerrorFn = const char* (*)(int);

// fi_strerror of the libfabric loaded in this process, or null while none is. Once found, its handle is kept
// (libfabric then stays loaded).
StrerrorFn loaded_fi_strerror() noexcept {
    static std::atomic<StrerrorFn> found{nullptr};
    if (StrerrorFn fn = found.load(std::memory_order_acquire); fn != nullptr) return fn;
    void* lib = ::dlopen("libfabric.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (lib == nullptr) return nullptr;
    auto fn = reinterpret_cast<StrerrorFn>(::dlsym(lib, "fi_strerror"));
    StrerrorFn expected = nullptr;
    if (fn == nullptr || !found.compare_exchange_strong(expected, fn, std::memory_order_acq_rel)) ::dlclose(lib);
    return fn;
}

class FabricCategory final : public std::error_category {
public:
    const char* name() const noexcept override { return "libfabric"; }
    std::string message(int code) const override {
        if (StrerrorFn fn = loaded_fi_strerror(); fn != nullptr) {
            if (const char* text = fn(code); text != nullptr) return text;
        }
        if (code > 0 && code < fabric_errno_limit) return std::generic_category().message(code);
        return "libfabric error " + std::to_string(code);
    }
    std::error_condition default_error_condition(int code) const noexcept override {
        if (code > 0 && code < fabric_errno_limit) return {code, std::generic_category()};
        return {code, *this};
    }
};

std::string compose(const std::string& message, std::string_view backend, std::string_view object) {
    std::string out = "weft";
    if (!backend.empty()) {
        out += '[';
        out += backend;
        out += ']';
    }
    if (!object.empty()) {
        out += ' ';
        out += object;
    }
    out += ": ";
    out += message;
    return out;
}

}  // namespace

const std::error_category& error_category() noexcept {
    static const WeftCategory category;
    return category;
}

const std::error_category& fabric_category() noexcept {
    static const FabricCategory category;
    return category;
}

Error::Error(std::error_code code, std::string message, std::string_view backend, std::string_view object)
    : std::system_error(code, compose(message, backend, object)),
      backend_(backend),
      object_(object),
      message_(std::move(message)) {}

void throw_errno(int err, std::string message, std::string_view backend, std::string_view object) {
    throw Error(std::error_code(err, std::system_category()), std::move(message), backend, object);
}

}  // namespace weft
