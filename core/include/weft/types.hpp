// weft/types.hpp — small vocabulary types: access rights, opcodes, completion statuses, QP states.
//
//   auto rights = weft::Access::local_write | weft::Access::remote_read;
//   if (has(rights, weft::Access::remote_read)) ...
//   std::cout << weft::WcStatus::rnr_retry_exceeded;   // prints "rnr_retry_exceeded"
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace weft {

/// Access rights of a memory region. Remote write and remote atomic imply local write (as in verbs, the
/// backend adds it when asked for either).
enum class Access : std::uint32_t {
    none = 0,
    local_write = 1u << 0,
    remote_write = 1u << 1,
    remote_read = 1u << 2,
    remote_atomic = 1u << 3,
};
constexpr Access operator|(Access a, Access b) noexcept {
    return static_cast<Access>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr Access operator&(Access a, Access b) noexcept {
    return static_cast<Access>(static_cast<std::uint32_t>(a) & static_cast<std::uint32_t>(b));
}
constexpr Access& operator|=(Access& a, Access b) noexcept { return a = a | b; }
/// True when every right in `wanted` is in `rights`.
constexpr bool has(Access rights, Access wanted) noexcept { return (rights & wanted) == wanted; }
inline constexpr Access all_access =
    Access::local_write | Access::remote_write | Access::remote_read | Access::remote_atomic;

/// Operations. The first seven are request opcodes. Completions use the verbs convention: a send-queue
/// completion reports `send` for send and send_with_imm, `write` for write and write_with_imm; a receive
/// completion reports `recv` (a send arrived) or `recv_rdma_with_imm` (a write_with_imm consumed it).
enum class Opcode : std::uint8_t {
    send,
    send_with_imm,
    write,
    write_with_imm,
    read,
    fetch_add,
    compare_swap,
    recv,
    recv_rdma_with_imm,
};
inline constexpr int opcode_count = 9;

/// Work-completion statuses, one to one with ibv_wc_status (same order, same meaning).
enum class WcStatus : std::uint8_t {
    success,
    local_length,             ///< a receive too small, or a local length violation
    local_qp_operation,       ///< internal QP consistency error
    local_eec_operation,
    local_protection,         ///< bad lkey, or a local buffer outside its region or without the right
    flushed,                  ///< the QP was in error when this request was processed
    mw_bind,
    bad_response,
    local_access,
    remote_invalid_request,   ///< the responder rejected the request (e.g. its receive was too small)
    remote_access,            ///< bad rkey, out of bounds, or missing remote right
    remote_operation,         ///< the responder could not complete the operation
    transport_retry_exceeded, ///< no acknowledgement after timeout x retry_cnt (peer gone)
    rnr_retry_exceeded,       ///< the responder had no receive posted, rnr_retry times
    local_rdd_violation,
    remote_invalid_rd_request,
    remote_aborted,
    invalid_eecn,
    invalid_eec_state,
    fatal,
    response_timeout,
    general,
};
inline constexpr int wc_status_count = 22;

/// Queue-pair states (the verbs state machine; backends without one map onto it).
enum class QpState : std::uint8_t { reset, init, rtr, rts, sqd, sqe, error };

/// What an asynchronous event of a domain is about (Domain::next_event).
enum class EventType : std::uint8_t {
    qp_fatal,           ///< a QP went to error without a completion saying why (verbs: IBV_EVENT_QP_FATAL,
                        ///< QP_REQ_ERR, QP_ACCESS_ERR)
    peer_disconnected,  ///< the peer of a QP disconnected (QueuePair::disconnect); the QP is in error
    cq_error,           ///< a completion queue overran; it and its QPs are in error (IBV_EVENT_CQ_ERR)
    port_active,        ///< the domain's port came up (IBV_EVENT_PORT_ACTIVE)
    port_error,         ///< the domain's port went down (IBV_EVENT_PORT_ERR)
    device_fatal,       ///< the device failed (IBV_EVENT_DEVICE_FATAL): nothing of the domain works any more
    srq_limit_reached,  ///< fewer receives than its armed limit remain in a shared receive queue; the limit is
                        ///< now disarmed (IBV_EVENT_SRQ_LIMIT_REACHED; SharedReceiveQueue::arm_limit)
    qp_last_wqe_reached,  ///< a QP that takes receives from a shared receive queue went to error and takes no
                          ///< more of them (IBV_EVENT_QP_LAST_WQE_REACHED): its receive side is drained
    other,              ///< another event of the backend, named by AsyncEvent::what
};

/// One asynchronous event (Domain::next_event).
struct AsyncEvent {
    EventType type = EventType::other;  ///< what happened
    std::uint32_t qp_num = 0;  ///< the QP of qp_fatal, peer_disconnected and qp_last_wqe_reached; 0 otherwise
    std::uint32_t srq_num = 0; ///< the shared receive queue of srq_limit_reached (SharedReceiveQueue::srq_num); 0 otherwise
    const char* what = "";     ///< the backend's name for it ("IBV_EVENT_QP_FATAL", "peer disconnected")
    std::uint32_t cq_num = 0;  ///< the completion queue of cq_error (CompletionQueue::cq_num); 0 otherwise
};

/// Send-request flags.
enum class SendFlags : std::uint8_t {
    none = 0,
    signaled = 1u << 0,     ///< produce a completion on success (errors always complete)
    fence = 1u << 1,        ///< wait for earlier reads and atomics on this QP to complete first
    inline_data = 1u << 2,  ///< copy the payload at post time; the buffer is reusable at once, no lkey needed
    solicited = 1u << 3,    ///< ask the responder's CQ to wake a solicited-only waiter
};
constexpr SendFlags operator|(SendFlags a, SendFlags b) noexcept {
    return static_cast<SendFlags>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
constexpr SendFlags operator&(SendFlags a, SendFlags b) noexcept {
    return static_cast<SendFlags>(static_cast<std::uint8_t>(a) & static_cast<std::uint8_t>(b));
}
constexpr SendFlags operator~(SendFlags a) noexcept {
    return static_cast<SendFlags>(~static_cast<std::uint8_t>(a));
}
constexpr bool has(SendFlags flags, SendFlags wanted) noexcept { return (flags & wanted) == wanted; }

std::string_view to_string(Opcode op) noexcept;
std::string_view to_string(WcStatus status) noexcept;
std::string_view to_string(QpState state) noexcept;
std::string_view to_string(EventType type) noexcept;
/// "local_write|remote_read", or "none".
std::string to_string(Access access);
/// A one-line explanation of a status, for logs ("the responder had no receive posted ...").
std::string_view describe(WcStatus status) noexcept;

std::ostream& operator<<(std::ostream& os, Opcode op);
std::ostream& operator<<(std::ostream& os, WcStatus status);
std::ostream& operator<<(std::ostream& os, QpState state);
std::ostream& operator<<(std::ostream& os, Access access);

}  // namespace weft
