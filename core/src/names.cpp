// Readable names for weft's enums and values, and their stream operators.
#include <weft/completion.hpp>
#include <weft/domain.hpp>
#include <weft/memory.hpp>
#include <weft/status.hpp>
#include <weft/types.hpp>
#include <weft/version.hpp>

#include <array>
#include <ostream>

namespace weft {
namespace {

constexpr std::array<std::string_view, opcode_count> opcode_names{
    "send", "send_with_imm", "write", "write_with_imm", "read", "fetch_add", "compare_swap", "recv",
    "recv_rdma_with_imm"};

constexpr std::array<std::string_view, wc_status_count> status_names{
    "success",
    "local_length",
    "local_qp_operation",
    "local_eec_operation",
    "local_protection",
    "flushed",
    "mw_bind",
    "bad_response",
    "local_access",
    "remote_invalid_request",
    "remote_access",
    "remote_operation",
    "transport_retry_exceeded",
    "rnr_retry_exceeded",
    "local_rdd_violation",
    "remote_invalid_rd_request",
    "remote_aborted",
    "invalid_eecn",
    "invalid_eec_state",
    "fatal",
    "response_timeout",
    "general",
};

constexpr std::array<std::string_view, wc_status_count> status_texts{
    "the request completed",
    "a receive buffer was too small, or a local length limit was exceeded",
    "the local QP met an internal consistency error",
    "the local EE context met an internal consistency error",
    "a local segment has a bad lkey, lies outside its region, or lacks local_write",
    "the QP was in error: the request was flushed without executing",
    "a memory window bind failed",
    "the responder's answer was not what the requester expected",
    "a local access violation was detected on an incoming request",
    "the responder rejected the request (receive too small, misaligned atomic, unsupported operation)",
    "bad rkey, out-of-bounds address, or a missing remote right at the responder",
    "the responder could not complete the operation",
    "no acknowledgement from the peer after timeout x retry_cnt: the peer is gone or unreachable",
    "the responder had no receive posted, rnr_retry times",
    "RDD violation",
    "remote invalid RD request",
    "the remote side aborted the operation",
    "invalid EE context number",
    "invalid EE context state",
    "fatal transport or device error",
    "the response did not arrive in time",
    "an error the backend could not classify",
};

constexpr std::array<std::string_view, 7> state_names{"reset", "init", "rtr", "rts", "sqd", "sqe", "error"};

}  // namespace

std::string_view to_string(Opcode op) noexcept {
    auto i = static_cast<std::size_t>(op);
    return i < opcode_names.size() ? opcode_names[i] : "unknown_opcode";
}

std::string_view to_string(WcStatus status) noexcept {
    auto i = static_cast<std::size_t>(status);
    return i < status_names.size() ? status_names[i] : "unknown_status";
}

std::string_view describe(WcStatus status) noexcept {
    auto i = static_cast<std::size_t>(status);
    return i < status_texts.size() ? status_texts[i] : "unknown status";
}

std::string_view to_string(EventType type) noexcept {
    switch (type) {
        case EventType::qp_fatal: return "qp_fatal";
        case EventType::peer_disconnected: return "peer_disconnected";
        case EventType::cq_error: return "cq_error";
        case EventType::port_active: return "port_active";
        case EventType::port_error: return "port_error";
        case EventType::device_fatal: return "device_fatal";
        case EventType::srq_limit_reached: return "srq_limit_reached";
        case EventType::qp_last_wqe_reached: return "qp_last_wqe_reached";
        case EventType::other: return "other";
    }
    return "unknown_event";
}

std::string_view to_string(QpState state) noexcept {
    auto i = static_cast<std::size_t>(state);
    return i < state_names.size() ? state_names[i] : "unknown_state";
}

std::string to_string(Access access) {
    static constexpr std::array<std::pair<Access, std::string_view>, 4> names{{
        {Access::local_write, "local_write"},
        {Access::remote_write, "remote_write"},
        {Access::remote_read, "remote_read"},
        {Access::remote_atomic, "remote_atomic"},
    }};
    std::string out;
    for (const auto& [bit, name] : names) {
        if (has(access, bit)) {
            if (!out.empty()) out += '|';
            out += name;
        }
    }
    return out.empty() ? std::string("none") : out;
}

std::string_view to_string(BackendKind kind) noexcept {
    switch (kind) {
        case BackendKind::sim: return "sim";
        case BackendKind::verbs: return "verbs";
        case BackendKind::ofi: return "ofi";
    }
    return "unknown";
}

std::string_view to_string(PostStatus::Code code) noexcept {
    switch (code) {
        case PostStatus::Code::ok: return "ok";
        case PostStatus::Code::queue_full: return "queue_full";
        case PostStatus::Code::invalid: return "invalid";
        case PostStatus::Code::not_connected: return "not_connected";
    }
    return "unknown";
}

std::string_view to_string(Feature f) noexcept {
    switch (f) {
        case Feature::send_with_imm: return "send_with_imm";
        case Feature::write_with_imm: return "write_with_imm";
        case Feature::read: return "read";
        case Feature::atomics: return "atomics";
        case Feature::fence: return "fence";
        case Feature::inline_data: return "inline_data";
        case Feature::solicited: return "solicited";
        case Feature::wait: return "wait";
        case Feature::cq_fd: return "cq_fd";
        case Feature::rnr: return "rnr";
        case Feature::error_flush: return "error_flush";
        case Feature::remote_access_check: return "remote_access_check";
        case Feature::zero_length: return "zero_length";
        case Feature::listener: return "listener";
        case Feature::disconnect: return "disconnect";
        case Feature::async_events: return "async_events";
        case Feature::srq: return "srq";
    }
    return "unknown_feature";
}

std::string_view version() noexcept { return WEFT_PROJECT_VERSION; }

std::ostream& operator<<(std::ostream& os, Opcode op) { return os << to_string(op); }
std::ostream& operator<<(std::ostream& os, WcStatus status) { return os << to_string(status); }
std::ostream& operator<<(std::ostream& os, QpState state) { return os << to_string(state); }
std::ostream& operator<<(std::ostream& os, Access access) { return os << to_string(access); }

std::ostream& operator<<(std::ostream& os, const PostStatus& status) {
    switch (status.code()) {
        case PostStatus::Code::ok: return os << "ok";
        case PostStatus::Code::invalid:
            return os << "invalid request " << status.index() << ": " << status.reason();
        default: return os << to_string(status.code()) << ": " << status.reason();
    }
}

std::ostream& operator<<(std::ostream& os, const Completion& c) {
    os << "id=" << c.id << " status=" << c.status << " opcode=" << c.opcode << " byte_len=" << c.byte_len;
    if (c.has_imm) os << " imm=" << c.imm;
    os << " qp=" << c.qp_num;
    if (c.vendor_err != 0) os << " vendor_err=0x" << std::hex << c.vendor_err << std::dec;
    return os;
}

std::ostream& operator<<(std::ostream& os, const RemoteRegion& r) {
    return os << "RemoteRegion{" << to_string(r.backend()) << " addr=0x" << std::hex << r.addr() << std::dec
              << " length=" << r.length() << " rkey=0x" << std::hex << r.rkey() << std::dec << '}';
}

bool Capabilities::supports(Opcode op) const noexcept {
    switch (op) {
        case Opcode::send:
        case Opcode::write: return true;
        case Opcode::send_with_imm: return has(Feature::send_with_imm);
        case Opcode::write_with_imm: return has(Feature::write_with_imm);
        case Opcode::read: return has(Feature::read);
        case Opcode::fetch_add:
        case Opcode::compare_swap: return has(Feature::atomics);
        default: return false;
    }
}

}  // namespace weft
