// weft/detail/errors.hpp — how a backend raises its setup errors: one source of weft::Error per backend,
// naming the backend in every error, with the three C conventions it meets mapped in one place (a
// positive errno from rdma-core and system calls, a negative -FI_E* from libfabric, weft's own Errc and
// the std::errc conditions). Decoders of peer bytes raise theirs through weft/detail/wire.hpp. For
// implementers of backends; not part of the user API (installed beside weft/backend.hpp for the plugins).
//
//   constexpr weft::detail::ErrorSource errors{"verbs"};
//   if (::ibv_modify_qp(qp, &attr, mask) != 0) errors.fail_errno(errno, "ibv_modify_qp to rtr", "QueuePair::connect");
//   if (int rc = fi_enable(ep); rc != 0) errors.fail_fabric(rc, "fi_enable", "create_qp");
#pragma once

#include <weft/error.hpp>

#include <string>
#include <string_view>
#include <system_error>

namespace weft::detail {

class ErrorSource {
public:
    constexpr explicit ErrorSource(std::string_view backend) noexcept : backend_(backend) {}

    std::string_view backend() const noexcept { return backend_; }

    /// One of weft's own conditions.
    [[noreturn, gnu::cold]] void fail(Errc code, std::string message, std::string_view call) const {
        throw Error(code, std::move(message), backend_, call);
    }
    /// A std::errc condition (a timeout, a refused connection) that is not a system call's errno.
    [[noreturn, gnu::cold]] void fail(std::errc code, std::string message, std::string_view call) const {
        throw Error(std::make_error_code(code), std::move(message), backend_, call);
    }
    /// A positive errno value (rdma-core, a system call): the message ends with its text.
    [[noreturn, gnu::cold]] void fail_errno(int err, std::string message, std::string_view call) const {
        throw Error(std::error_code(err, std::system_category()), std::move(message), backend_, call);
    }
    /// A libfabric return code (-FI_E*, or its positive value): "CONTEXT: CALL failed", and what() ends with
    /// fi_strerror's text (weft::fabric_category).
    [[noreturn, gnu::cold]] void fail_fabric(long ret, std::string_view fi_call, std::string_view call,
                                             std::string context = {}) const {
        const int err = static_cast<int>(ret < 0 ? -ret : ret);
        std::string message = context.empty() ? std::string() : std::move(context) + ": ";
        message += fi_call;
        message += " failed";
        throw Error(std::error_code(err, fabric_category()), std::move(message), backend_, call);
    }

private:
    std::string_view backend_;
};

}  // namespace weft::detail
