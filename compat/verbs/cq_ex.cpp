// The extended CQ's polling (ibv_start_poll, ibv_next_poll, ibv_end_poll and the ibv_wc_read_*
// functions verbs.h inlines): the function pointers of struct ibv_cq_ex. A completion is taken from the
// CQ one at a time and kept in the CQ until the next one; status and wr_id are set in the ibv_cq_ex as
// verbs requires. As providers do for CQs that are not single-threaded, a lock is held from a successful
// start_poll to end_poll.
#include "frontend.hpp"

#include <arpa/inet.h>

namespace weft::compat {
namespace {

// Takes the next completion into cq.current; ENOENT when there is none.
int advance(Cq& cq) noexcept {
    if (take(cq, std::span(&cq.current, 1)).empty()) return ENOENT;
    cq.status = static_cast<ibv_wc_status>(cq.current.status);
    cq.wr_id = cq.current.id;
    return 0;
}

int start_poll(ibv_cq_ex* ibcq, ibv_poll_cq_attr* attr) {
    if (attr->comp_mask) return EINVAL;
    Cq& cq = cq_of(ibcq);
    cq.poll_mu.lock();
    if (int err = advance(cq)) {
        cq.poll_mu.unlock();
        return err;
    }
    cq.polling = true;
    return 0;
}

int next_poll(ibv_cq_ex* cq) { return advance(cq_of(cq)); }

// Also called by programs after a start_poll that found nothing (pyverbs does); only a poll that holds the
// lock releases it.
void end_poll(ibv_cq_ex* ibcq) {
    Cq& cq = cq_of(ibcq);
    if (cq.polling.exchange(false)) cq.poll_mu.unlock();
}

const Completion& current(ibv_cq_ex* cq) noexcept { return cq_of(cq).current; }

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) { return to_wc_opcode(current(cq).opcode); }
std::uint32_t read_vendor_err(ibv_cq_ex* cq) { return current(cq).vendor_err; }
std::uint32_t read_byte_len(ibv_cq_ex* cq) { return current(cq).byte_len; }
__be32 read_imm_data(ibv_cq_ex* cq) { return htonl(current(cq).imm); }
std::uint32_t read_qp_num(ibv_cq_ex* cq) { return current(cq).qp_num; }
unsigned int read_wc_flags(ibv_cq_ex* cq) { return current(cq).has_imm ? IBV_WC_WITH_IMM : 0; }
// Datagram and path fields: always 0 on RC, as ibv_poll_cq reports them.
std::uint32_t read_zero32(ibv_cq_ex*) { return 0; }
std::uint8_t read_zero8(ibv_cq_ex*) { return 0; }

}  // namespace

void install_cq_ex_ops(Cq& cq) noexcept {
    cq.start_poll = start_poll;
    cq.next_poll = next_poll;
    cq.end_poll = end_poll;
    cq.read_opcode = read_opcode;
    cq.read_vendor_err = read_vendor_err;
    cq.read_byte_len = read_byte_len;
    cq.read_imm_data = read_imm_data;
    cq.read_qp_num = read_qp_num;
    cq.read_src_qp = read_zero32;
    cq.read_wc_flags = read_wc_flags;
    cq.read_slid = read_zero32;
    cq.read_sl = read_zero8;
    cq.read_dlid_path_bits = read_zero8;
}

}  // namespace weft::compat
