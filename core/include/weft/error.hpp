// weft/error.hpp — the setup-time error type.
//
// Everything outside the data path (opening a backend, registering memory, creating queues, connecting,
// decoding descriptors) reports failure by throwing weft::Error. The data path never throws: see
// weft/status.hpp.
//
//   try {
//       auto dom = weft::open("verbs:device=mlx5_9");
//   } catch (const weft::Error& e) {
//       std::cerr << e.what() << '\n';   // "weft[verbs] open: no RDMA device named 'mlx5_9' (found: rxe0)"
//       if (e.code() == weft::Errc::backend_unavailable) ...
//   }
#pragma once

#include <string>
#include <string_view>
#include <system_error>

namespace weft {

/// Error conditions of weft itself. System failures (an errno from rdma-core, a -FI_E* from libfabric)
/// keep their own category: std::system_category() for errno values, weft::fabric_category() for
/// libfabric codes.
enum class Errc : int {
    invalid_config = 1,   ///< malformed configuration string, unknown key or bad value
    unknown_backend,      ///< no backend of that name in this build
    backend_unavailable,  ///< the backend exists but cannot run here (library or device missing)
    invalid_argument,     ///< an option or argument outside what is accepted
    bad_descriptor,       ///< a RemoteRegion or QP address that does not decode
    not_supported,        ///< the backend lacks the capability asked for
    invalid_state,        ///< the object is not in a state that allows the call
    resource_exhausted,   ///< a device, fabric or queue limit was reached
    misuse,               ///< the program broke the API contract (e.g. released memory still in use)
    internal,             ///< a bug in weft or a backend
};

const std::error_category& error_category() noexcept;
/// Category for libfabric's FI_E* codes (positive values); message() is fi_strerror's text when libfabric is
/// loaded in the process (the ofi backend loads it), strerror's or a generic text otherwise. Codes below 256
/// are errno values and compare equal to the std::errc conditions they stand for (FI_ETIMEDOUT ==
/// std::errc::timed_out); libfabric's own codes (FI_ETRUNC, ...) compare equal only to themselves.
const std::error_category& fabric_category() noexcept;

inline std::error_code make_error_code(Errc e) noexcept { return {static_cast<int>(e), error_category()}; }

/// The exception thrown by every setup call. what() reads
/// "weft[BACKEND] OBJECT: MESSAGE: CODE TEXT", naming the backend and object when known.
class Error : public std::system_error {
public:
    /// An error with `code` and `message`, raised by `backend` about `object` (each may be empty).
    Error(std::error_code code, std::string message, std::string_view backend = {}, std::string_view object = {});
    /// The same with one of weft's own codes.
    Error(Errc code, std::string message, std::string_view backend = {}, std::string_view object = {})
        : Error(make_error_code(code), std::move(message), backend, object) {}

    /// The backend that raised it ("sim", "verbs", "ofi"), or empty for core errors.
    const std::string& backend() const noexcept { return backend_; }
    /// The object or call concerned ("create_qp", "QueuePair::connect", "RemoteRegion::decode", ...).
    const std::string& object() const noexcept { return object_; }
    /// The message alone, without the prefix and the code text.
    const std::string& message() const noexcept { return message_; }

private:
    std::string backend_;
    std::string object_;
    std::string message_;
};

/// Throws weft::Error carrying errno value `err` (std::system_category()).
[[noreturn]] void throw_errno(int err, std::string message, std::string_view backend = {},
                              std::string_view object = {});

}  // namespace weft

/// \cond
template <>
struct std::is_error_code_enum<weft::Errc> : std::true_type {};
/// \endcond
