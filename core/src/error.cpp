// Error categories and weft::Error's message layout.
#include <weft/error.hpp>

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

class FabricCategory final : public std::error_category {
public:
    const char* name() const noexcept override { return "libfabric"; }
    std::string message(int code) const override { return "libfabric error " + std::to_string(code); }
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
