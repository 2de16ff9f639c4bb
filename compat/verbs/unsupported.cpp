// The rest of libibverbs' public symbols, so that any program built against rdma-core loads: each fails
// the way its verb reports failure (null and errno EOPNOTSUPP, the errno value, or -1 and errno), or
// does what is right on a device without kernel memory pinning (fork support) — and the static-rate
// conversions, which need no device.
#include "frontend.hpp"

#include <array>
#include <cstddef>

namespace {

constexpr int not_supported = EOPNOTSUPP;

int fail_minus_one() noexcept {
    errno = not_supported;
    return -1;
}

// The static rates with a link-width multiple of 2.5 Gbit/s.
struct Rate {
    ibv_rate rate;
    int mult;
};
constexpr std::array<Rate, 9> rates{{{IBV_RATE_2_5_GBPS, 1},
                                     {IBV_RATE_5_GBPS, 2},
                                     {IBV_RATE_10_GBPS, 4},
                                     {IBV_RATE_20_GBPS, 8},
                                     {IBV_RATE_30_GBPS, 12},
                                     {IBV_RATE_40_GBPS, 16},
                                     {IBV_RATE_60_GBPS, 24},
                                     {IBV_RATE_80_GBPS, 32},
                                     {IBV_RATE_120_GBPS, 48}}};

}  // namespace

using weft::compat::fail;

extern "C" {

// Declared by rdma-core's private headers, exported by its libibverbs all the same.
const char* ibv_get_sysfs_path();
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);
void ibv_copy_path_rec_from_kern(void* dst, const void* src);
void ibv_copy_path_rec_to_kern(void* dst, const void* src);
void ibv_copy_qp_attr_from_kern(void* dst, const void* src);
void ibv_copy_ah_attr_from_kern(void* dst, const void* src);
int ibv_dofork_range(void* base, size_t size);
int ibv_dontfork_range(void* base, size_t size);

// No sysfs device and no kernel ABI structures: the front end has no kernel driver.
const char* ibv_get_sysfs_path() { return fail(not_supported); }
int ibv_read_sysfs_file(const char*, const char*, char*, size_t) { return fail_minus_one(); }
void ibv_copy_path_rec_from_kern(void*, const void*) {}
void ibv_copy_path_rec_to_kern(void*, const void*) {}
void ibv_copy_qp_attr_from_kern(void*, const void*) {}
void ibv_copy_ah_attr_from_kern(void*, const void*) {}

// No memory is pinned, so fork() needs no protection.
int ibv_fork_init() { return 0; }
ibv_fork_status ibv_is_fork_initialized() { return IBV_FORK_UNNEEDED; }
int ibv_dofork_range(void*, size_t) { return 0; }
int ibv_dontfork_range(void*, size_t) { return 0; }

int ibv_rate_to_mult(ibv_rate rate) {
    for (const Rate& r : rates) {
        if (r.rate == rate) return r.mult;
    }
    return -1;
}
ibv_rate mult_to_ibv_rate(int mult) {
    for (const Rate& r : rates) {
        if (r.mult == mult) return r.rate;
    }
    return IBV_RATE_MAX;
}
int ibv_rate_to_mbps(ibv_rate rate) {
    int mult = ibv_rate_to_mult(rate);
    return mult < 0 ? -1 : mult * 2500;
}
ibv_rate mbps_to_ibv_rate(int mbps) { return mbps % 2500 ? IBV_RATE_MAX : mult_to_ibv_rate(mbps / 2500); }

int ibv_resize_cq(ibv_cq*, int) { return not_supported; }

// Address handles from a received message's headers, and multicast (UD).
ibv_ah* ibv_create_ah_from_wc(ibv_pd*, ibv_wc*, ibv_grh*, std::uint8_t) { return fail(not_supported); }
int ibv_init_ah_from_wc(ibv_context*, std::uint8_t, ibv_wc*, ibv_grh*, ibv_ah_attr*) { return not_supported; }
int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, std::uint8_t*, std::uint16_t*) { return not_supported; }
int ibv_attach_mcast(ibv_qp*, const ibv_gid*, std::uint16_t) { return not_supported; }
int ibv_detach_mcast(ibv_qp*, const ibv_gid*, std::uint16_t) { return not_supported; }

// Memory: dma-buf, sharing objects between processes.
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, std::uint64_t, size_t, std::uint64_t, int, int) { return fail(not_supported); }
ibv_context* ibv_import_device(int) { return fail(not_supported); }
ibv_pd* ibv_import_pd(ibv_context*, std::uint32_t) { return fail(not_supported); }
ibv_mr* ibv_import_mr(ibv_pd*, std::uint32_t) { return fail(not_supported); }
ibv_dm* ibv_import_dm(ibv_context*, std::uint32_t) { return fail(not_supported); }
void ibv_unimport_pd(ibv_pd*) {}
void ibv_unimport_mr(ibv_mr*) {}
void ibv_unimport_dm(ibv_dm*) {}

// Enhanced connection establishment, data-in-order query.
int ibv_query_ece(ibv_qp*, ibv_ece*) { return not_supported; }
int ibv_set_ece(ibv_qp*, ibv_ece*) { return not_supported; }
int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, std::uint32_t) { return 0; }  // no guarantee given

}  // extern "C"
