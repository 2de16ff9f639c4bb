// Checks shared by every backend: QP options at setup, request batches before posting.
#include <weft/backend.hpp>
#include <weft/error.hpp>

#include <string>

namespace weft::detail {
namespace {

void check_range(std::string_view backend, const char* name, std::uint64_t value, std::uint64_t min,
                 std::uint64_t max) {
    if (value < min || value > max) {
        throw Error(Errc::invalid_argument,
                    std::string(name) + " = " + std::to_string(value) + " is outside the accepted range " +
                        std::to_string(min) + ".." + std::to_string(max),
                    backend, "create_qp");
    }
}

}  // namespace

void validate_qp_options(const QpSetup& setup, const Capabilities& caps, std::string_view backend) {
    const auto& o = setup.options;
    check_range(backend, "max_send", o.max_send, 1, caps.max_qp_wr);
    check_range(backend, "max_recv", o.max_recv, 0, caps.max_qp_wr);
    check_range(backend, "max_sge", o.max_sge, 1, caps.max_sge);
    check_range(backend, "max_inline", o.max_inline, 0, caps.max_inline);
    check_range(backend, "timeout", o.timeout, 0, 31);
    check_range(backend, "retry_cnt", o.retry_cnt, 0, 7);
    check_range(backend, "rnr_retry", o.rnr_retry, 0, 7);
    check_range(backend, "min_rnr_timer", o.min_rnr_timer, 0, 31);
}

PostStatus validate_send_batch(std::span<const SendRequest> batch, const QpCaps& caps,
                               const Capabilities& domain_caps) noexcept {
    for (std::uint32_t i = 0; i < batch.size(); ++i) {
        const SendRequest& r = batch[i];
        if (!is_request_opcode(r.opcode)) {
            return PostStatus::invalid(i, "not a send-queue opcode (with_imm applies to send and write only)");
        }
        if (!domain_caps.supports(r.opcode)) {
            return PostStatus::invalid(i, "the backend does not support this opcode (see Capabilities)");
        }
        if (r.num_sge > caps.max_sge) return PostStatus::invalid(i, "more segments than the QP's max_sge");
        if (r.num_sge > 1 && r.sg_list == nullptr) {
            return PostStatus::invalid(i, "num_sge > 1 needs sg_list");
        }
        if (!remote_backend_matches(r, domain_caps.kind)) {
            return PostStatus::invalid(i, "the remote region was registered by another backend; its key means "
                                          "nothing to this one");
        }
        const bool inl = has(r.flags, SendFlags::inline_data);
        if (inl) {
            if (r.opcode == Opcode::read || is_atomic(r.opcode)) {
                return PostStatus::invalid(i, "inline_data applies to send and write only");
            }
            if (r.length() > caps.max_inline) {
                return PostStatus::invalid(i, "inline payload exceeds the QP's max_inline");
            }
        }
        if (is_atomic(r.opcode) && (r.num_sge != 1 || r.segments()[0].length != 8)) {
            return PostStatus::invalid(i, "an atomic needs exactly one 8-byte local segment for the result");
        }
        if (is_atomic(r.opcode) && r.remote_addr % 8 != 0) {
            return PostStatus::invalid(i, "an atomic's remote address must be 8-byte aligned");
        }
        if (r.length() > domain_caps.max_msg_size) {
            return PostStatus::invalid(i, "message longer than the backend's max_msg_size");
        }
        if (has(r.flags, SendFlags::fence) && !domain_caps.has(Feature::fence)) {
            return PostStatus::invalid(i, "the backend does not support fence (see Capabilities)");
        }
        if (has(r.flags, SendFlags::solicited) && !domain_caps.has(Feature::solicited)) {
            return PostStatus::invalid(i, "the backend does not support solicited events (see Capabilities)");
        }
    }
    return PostStatus::ok();
}

PostStatus validate_recv_batch(std::span<const RecvRequest> batch, const QpCaps& caps) noexcept {
    for (std::uint32_t i = 0; i < batch.size(); ++i) {
        const RecvRequest& r = batch[i];
        if (r.num_sge > caps.max_sge) return PostStatus::invalid(i, "more segments than the QP's max_sge");
        if (r.num_sge > 1 && r.sg_list == nullptr) return PostStatus::invalid(i, "num_sge > 1 needs sg_list");
    }
    return PostStatus::ok();
}

PostStatus validate_srq_batch(std::span<const RecvRequest> batch, std::uint32_t max_sge) noexcept {
    for (std::uint32_t i = 0; i < batch.size(); ++i) {
        const RecvRequest& r = batch[i];
        if (r.num_sge > max_sge) return PostStatus::invalid(i, "more segments than the shared receive queue's max_sge");
        if (r.num_sge > 1 && r.sg_list == nullptr) return PostStatus::invalid(i, "num_sge > 1 needs sg_list");
    }
    return PostStatus::ok();
}

}  // namespace weft::detail
