// weft/completion.hpp — what a completion queue hands back.
//
//   weft::Completion wc[16];
//   for (const auto& c : cq.poll(wc)) {
//       if (!c.ok()) { log(c); continue; }      // prints "id=7 status=remote_access opcode=write ..."
//       if (c.opcode == weft::Opcode::recv_rdma_with_imm) on_slot_written(c.imm);
//   }
#pragma once

#include <cstdint>
#include <iosfwd>

#include <weft/types.hpp>

namespace weft {

/// One work completion. On an error completion only id, status, qp_num and vendor_err are meaningful
/// (as in verbs); backends fill opcode where they know it.
struct Completion {
    std::uint64_t id = 0;            ///< the request's id
    std::uint32_t byte_len = 0;      ///< receives: bytes placed (for write_with_imm, the write length)
    std::uint32_t imm = 0;           ///< immediate data in host byte order, when has_imm
    std::uint32_t qp_num = 0;        ///< the local QP the request was posted on
    std::uint32_t vendor_err = 0;    ///< the backend's own error code, for diagnostics
    WcStatus status = WcStatus::success;  ///< success, or what went wrong
    Opcode opcode = Opcode::send;    ///< what completed (see Opcode for the opcodes completions report)
    bool has_imm = false;            ///< whether `imm` carries immediate data

    /// True when the request succeeded.
    constexpr bool ok() const noexcept { return status == WcStatus::success; }
    /// True for completions of the receive queue.
    constexpr bool is_recv() const noexcept {
        return opcode == Opcode::recv || opcode == Opcode::recv_rdma_with_imm;
    }
};

std::ostream& operator<<(std::ostream& os, const Completion& c);

}  // namespace weft
