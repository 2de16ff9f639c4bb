// weft/request.hpp — work requests and the builders that make them.
//
// Requests are small values. Builders follow the verbs vocabulary and chain flags fluently; each flag
// method returns a modified copy, so a builder expression can sit inside a braced batch:
//
//   std::array<weft::LocalSegment, 2> gather{hdr_mr.slice(0, 64), body_mr.slice(off, len)};
//   auto st = qp.post_send({
//       weft::write(slot, gather, dst.slice(0, 64 + len)).with_imm(slot),
//       weft::read(slot + 1, scratch.slice(0, 8), dst.slice(0, 8)).fence().unsignaled(),
//   });
//   auto rs = qp.post_recv({weft::recv(slot, rx_mr.slice(0, 4096))});
//
// A request that refers to an external gather list (a span) only borrows it for the duration of the post
// call: backends copy the list when they accept the request. The memory the segments describe must stay
// registered and untouched until the request completes. So that the list cannot dangle silently, the
// builders refuse a temporary list (`weft::write(id, std::array{a, b}, dst)` does not compile): name it.
//
// Reads and atomics are built as ReadRequest, which has no with_imm(), inline_data() or solicited():
// immediate data, inlining and the solicited event belong to requests that carry data to the peer.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include <weft/memory.hpp>
#include <weft/types.hpp>

namespace weft {

/// One send-queue request: send, write, read or an atomic. Build it with weft::send, weft::write,
/// weft::read, weft::fetch_add or weft::compare_swap and the flag methods, then post it with
/// QueuePair::post_send.
struct SendRequest {
    std::uint64_t id = 0;              ///< returned in the completion; opaque to weft
    std::uint64_t remote_addr = 0;     ///< write, read, atomics
    std::uint64_t rkey = 0;            ///< write, read, atomics
    std::uint64_t compare_add = 0;     ///< fetch_add: the addend; compare_swap: the value compared
    std::uint64_t swap = 0;            ///< compare_swap: the value stored when equal
    const LocalSegment* sg_list = nullptr;  ///< borrowed gather list; null means `sge` is the only one
    LocalSegment sge{};                ///< the single local segment when sg_list is null
    std::uint32_t num_sge = 0;         ///< number of segments (0 = zero-length operation)
    std::uint32_t imm = 0;             ///< immediate data, host byte order
    Opcode opcode = Opcode::send;      ///< what the request does
    SendFlags flags = SendFlags::signaled;  ///< signaled, fence, inline_data, solicited
    /// The backend that registered the remote region (write, read, atomics): set by the builders from
    /// RemoteRegion::backend(), so that a QP refuses another backend's region at post time
    /// (PostStatus::invalid). Value-initialised (0, no backend) in a request built by hand: not checked.
    BackendKind remote_backend{};

    /// The gather list: `sg_list` when set, else `sge` (num_sge of them).
    std::span<const LocalSegment> segments() const noexcept {
        return sg_list ? std::span<const LocalSegment>(sg_list, num_sge)
                       : std::span<const LocalSegment>(&sge, num_sge);
    }
    /// Sum of the segment lengths.
    std::uint64_t length() const noexcept {
        std::uint64_t n = 0;
        for (const auto& s : segments()) n += s.length;
        return n;
    }

    /// Carry immediate data: send becomes send_with_imm, write becomes write_with_imm. Other opcodes
    /// cannot carry immediate data; posting them with it is rejected as invalid.
    [[nodiscard]] constexpr SendRequest with_imm(std::uint32_t value) const noexcept {
        SendRequest r = *this;
        r.imm = value;
        if (r.opcode == Opcode::send) r.opcode = Opcode::send_with_imm;
        else if (r.opcode == Opcode::write) r.opcode = Opcode::write_with_imm;
        else r.opcode = Opcode::recv;  // not a request opcode: post rejects it with a clear reason
        return r;
    }
    /// Wait for earlier reads and atomics on this QP to complete before this request executes.
    [[nodiscard]] constexpr SendRequest fence() const noexcept { return with(SendFlags::fence); }
    /// Copy the payload at post time (up to the QP's max_inline bytes); no registration needed.
    [[nodiscard]] constexpr SendRequest inline_data() const noexcept { return with(SendFlags::inline_data); }
    /// Ask the responder's completion queue to wake a waiter for solicited events (send, write_with_imm).
    [[nodiscard]] constexpr SendRequest solicited() const noexcept { return with(SendFlags::solicited); }
    /// No completion on success (errors still complete). Requests are signaled by default.
    [[nodiscard]] constexpr SendRequest unsignaled() const noexcept {
        SendRequest r = *this;
        r.flags = r.flags & ~SendFlags::signaled;
        return r;
    }
    /// A completion on success when `on` (the default), none when not.
    [[nodiscard]] constexpr SendRequest signaled(bool on = true) const noexcept {
        return on ? with(SendFlags::signaled) : unsignaled();
    }

private:
    constexpr SendRequest with(SendFlags f) const noexcept {
        SendRequest r = *this;
        r.flags = r.flags | f;
        return r;
    }
};

// remote_backend sits in what was padding: the struct keeps its size and layout for plugins built before it.
static_assert(sizeof(void*) != 8 || sizeof(SendRequest) == 88, "SendRequest grows by addition only");

/// A read, fetch_add or compare_swap from its builder: a SendRequest without the flags that make no sense
/// for a request whose data comes back. `weft::read(...).with_imm(1)` does not compile (a read cannot carry
/// immediate data), nor do inline_data() (nothing of it is sent) and solicited() (it raises no event at
/// the peer). It converts to SendRequest wherever one is expected, so it sits in a braced batch as any
/// other request.
struct ReadRequest : SendRequest {
    SendRequest with_imm(std::uint32_t) const = delete;
    SendRequest inline_data() const = delete;
    SendRequest solicited() const = delete;

    /// SendRequest::fence, keeping the type.
    [[nodiscard]] constexpr ReadRequest fence() const noexcept { return ReadRequest{SendRequest::fence()}; }
    /// SendRequest::unsignaled, keeping the type.
    [[nodiscard]] constexpr ReadRequest unsignaled() const noexcept {
        return ReadRequest{SendRequest::unsignaled()};
    }
    /// SendRequest::signaled, keeping the type.
    [[nodiscard]] constexpr ReadRequest signaled(bool on = true) const noexcept {
        return ReadRequest{SendRequest::signaled(on)};
    }
};

/// One receive: where an incoming send's payload goes (a write_with_imm consumes one without using its
/// buffers). Build it with weft::recv, post it with QueuePair::post_recv.
struct RecvRequest {
    std::uint64_t id = 0;                   ///< returned in the completion; opaque to weft
    const LocalSegment* sg_list = nullptr;  ///< borrowed scatter list; null means `sge` is the only one
    LocalSegment sge{};                     ///< the single local segment when sg_list is null
    std::uint32_t num_sge = 0;              ///< number of segments (0: a receive without buffer)

    /// The scatter list: `sg_list` when set, else `sge` (num_sge of them).
    std::span<const LocalSegment> segments() const noexcept {
        return sg_list ? std::span<const LocalSegment>(sg_list, num_sge)
                       : std::span<const LocalSegment>(&sge, num_sge);
    }
    /// Sum of the segment lengths: the largest payload it takes.
    std::uint64_t length() const noexcept {
        std::uint64_t n = 0;
        for (const auto& s : segments()) n += s.length;
        return n;
    }
};

namespace detail {
constexpr SendRequest make(std::uint64_t id, Opcode op, std::span<const LocalSegment> local) noexcept {
    SendRequest r;
    r.id = id;
    r.opcode = op;
    if (local.size() == 1) {
        r.sge = local[0];
        r.num_sge = 1;
    } else {
        r.sg_list = local.data();
        r.num_sge = static_cast<std::uint32_t>(local.size());
    }
    return r;
}
constexpr SendRequest make(std::uint64_t id, Opcode op, const LocalSegment& local) noexcept {
    return make(id, op, std::span<const LocalSegment>(&local, 1));
}
constexpr SendRequest at(SendRequest r, const RemoteRegion& remote) noexcept {
    r.remote_addr = remote.addr();
    r.rkey = remote.rkey();
    r.remote_backend = remote.backend();
    return r;
}
}  // namespace detail

/// Send the bytes of `local` to the peer's next posted receive.
constexpr SendRequest send(std::uint64_t id, const LocalSegment& local) noexcept {
    return detail::make(id, Opcode::send, local);
}
constexpr SendRequest send(std::uint64_t id, std::span<const LocalSegment> local) noexcept {
    return detail::make(id, Opcode::send, local);
}
/// Write `local` to `remote.addr()` on the peer.
constexpr SendRequest write(std::uint64_t id, const LocalSegment& local, const RemoteRegion& remote) noexcept {
    return detail::at(detail::make(id, Opcode::write, local), remote);
}
constexpr SendRequest write(std::uint64_t id, std::span<const LocalSegment> local,
                            const RemoteRegion& remote) noexcept {
    return detail::at(detail::make(id, Opcode::write, local), remote);
}
/// Read from `remote.addr()` on the peer into `local`.
constexpr ReadRequest read(std::uint64_t id, const LocalSegment& local, const RemoteRegion& remote) noexcept {
    return ReadRequest{detail::at(detail::make(id, Opcode::read, local), remote)};
}
constexpr ReadRequest read(std::uint64_t id, std::span<const LocalSegment> local,
                           const RemoteRegion& remote) noexcept {
    return ReadRequest{detail::at(detail::make(id, Opcode::read, local), remote)};
}
/// Atomically add `add` to the 8 bytes at `remote.addr()`; the previous value lands in `result`.
constexpr ReadRequest fetch_add(std::uint64_t id, const LocalSegment& result, const RemoteRegion& remote,
                                std::uint64_t add) noexcept {
    ReadRequest r{detail::at(detail::make(id, Opcode::fetch_add, result), remote)};
    r.compare_add = add;
    return r;
}
/// Atomically replace the 8 bytes at `remote.addr()` with `swap` when they equal `compare`; the previous
/// value lands in `result` either way.
constexpr ReadRequest compare_swap(std::uint64_t id, const LocalSegment& result, const RemoteRegion& remote,
                                   std::uint64_t compare, std::uint64_t swap) noexcept {
    ReadRequest r{detail::at(detail::make(id, Opcode::compare_swap, result), remote)};
    r.compare_add = compare;
    r.swap = swap;
    return r;
}

/// A receive buffer for one incoming send or write_with_imm.
constexpr RecvRequest recv(std::uint64_t id, const LocalSegment& local) noexcept {
    RecvRequest r;
    r.id = id;
    r.sge = local;
    r.num_sge = 1;
    return r;
}
constexpr RecvRequest recv(std::uint64_t id, std::span<const LocalSegment> local) noexcept {
    RecvRequest r;
    r.id = id;
    if (local.size() == 1) {
        r.sge = local[0];
        r.num_sge = 1;
    } else {
        r.sg_list = local.data();
        r.num_sge = static_cast<std::uint32_t>(local.size());
    }
    return r;
}

// A gather or scatter list the request would outlive: a temporary array, vector or braced list. The request
// keeps a pointer to the list (it is not copied until the post), so these overloads are deleted: keep the
// list in a named variable that lives until post_send/post_recv returns.
template <std::size_t N>
SendRequest send(std::uint64_t, std::array<LocalSegment, N>&&) = delete;
SendRequest send(std::uint64_t, std::vector<LocalSegment>&&) = delete;
SendRequest send(std::uint64_t, std::initializer_list<LocalSegment>) = delete;
template <std::size_t N>
SendRequest write(std::uint64_t, std::array<LocalSegment, N>&&, const RemoteRegion&) = delete;
SendRequest write(std::uint64_t, std::vector<LocalSegment>&&, const RemoteRegion&) = delete;
SendRequest write(std::uint64_t, std::initializer_list<LocalSegment>, const RemoteRegion&) = delete;
template <std::size_t N>
ReadRequest read(std::uint64_t, std::array<LocalSegment, N>&&, const RemoteRegion&) = delete;
ReadRequest read(std::uint64_t, std::vector<LocalSegment>&&, const RemoteRegion&) = delete;
ReadRequest read(std::uint64_t, std::initializer_list<LocalSegment>, const RemoteRegion&) = delete;
template <std::size_t N>
RecvRequest recv(std::uint64_t, std::array<LocalSegment, N>&&) = delete;
RecvRequest recv(std::uint64_t, std::vector<LocalSegment>&&) = delete;
RecvRequest recv(std::uint64_t, std::initializer_list<LocalSegment>) = delete;

/// True for the seven request opcodes (send .. compare_swap).
constexpr bool is_request_opcode(Opcode op) noexcept { return op <= Opcode::compare_swap; }
constexpr bool is_atomic(Opcode op) noexcept { return op == Opcode::fetch_add || op == Opcode::compare_swap; }
constexpr bool needs_remote(Opcode op) noexcept {
    return op == Opcode::write || op == Opcode::write_with_imm || op == Opcode::read || is_atomic(op);
}
/// Whether a QP of backend `kind` may take `r`: the remote region the builders recorded, if any, was
/// registered by that backend.
constexpr bool remote_backend_matches(const SendRequest& r, BackendKind kind) noexcept {
    return r.remote_backend == BackendKind{} || r.remote_backend == kind;
}
constexpr bool consumes_receive(Opcode op) noexcept {
    return op == Opcode::send || op == Opcode::send_with_imm || op == Opcode::write_with_imm;
}
/// The opcode a send-queue completion reports for a request opcode (verbs convention).
constexpr Opcode completion_opcode(Opcode op) noexcept {
    switch (op) {
        case Opcode::send_with_imm: return Opcode::send;
        case Opcode::write_with_imm: return Opcode::write;
        default: return op;
    }
}

}  // namespace weft
