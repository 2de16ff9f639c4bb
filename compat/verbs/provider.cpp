// rdma-core's private provider interface (IBVERBS_PRIVATE_34): the symbols libibverbs exports for its
// provider libraries (libmlx5, libefa, ...) and for rdma-core's own tools and pyverbs. Programs that link a
// provider library load only if every symbol it names is here, with this version. The front end has no
// kernel driver and never loads a provider: a provider's constructor registers with
// verbs_register_driver_34, which keeps nothing, so no device ever reaches the provider's code, and the
// kernel commands (ibv_cmd_*) and ioctl helpers fail with EOPNOTSUPP if anything calls them anyway.
// ibv_query_gid_type is implemented: pyverbs calls it for every GID it reads.
#include "frontend.hpp"

#include <cstdint>

extern "C" {

// rdma-core's driver.h: the type of a GID as sysfs names it.
enum ibv_gid_type_sysfs { IBV_GID_TYPE_SYSFS_IB_ROCE_V1, IBV_GID_TYPE_SYSFS_ROCE_V2 };

int ibv_query_gid_type(ibv_context* context, std::uint8_t port_num, unsigned int index, ibv_gid_type_sysfs* type);
void verbs_register_driver_34(const void* ops);
void __verbs_log(verbs_context* ctx, std::uint32_t level, const char* fmt, ...);
void* _verbs_init_and_alloc_context(ibv_device* device, int cmd_fd, size_t alloc_size, verbs_context* offset,
                                    std::uint32_t driver_id);
ibv_context* verbs_open_device(ibv_device* device, void* private_data);
void verbs_uninit_context(verbs_context* context);
void verbs_set_ops(verbs_context* context, const void* ops);
void verbs_init_cq(ibv_cq* cq, ibv_context* context, ibv_comp_channel* channel, void* cq_context);
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void* link);
int execute_ioctl(ibv_context* context, void* cmd);
int ibv_read_ibdev_sysfs_file(char* buf, size_t size, void* sysfs_dev, const char* fnfmt, ...);

// Read by providers when a destroy command fails on a disassociated device.
extern bool verbs_allow_disassociate_destroy;
bool verbs_allow_disassociate_destroy = false;

// The one port's one GID is an InfiniBand one, for which rdma-core reports IB_ROCE_V1 (the type sysfs
// gives InfiniBand and RoCE v1 GIDs alike); rdma-core reports the same for an empty slot.
int ibv_query_gid_type(ibv_context*, std::uint8_t port_num, unsigned int index, ibv_gid_type_sysfs* type) {
    if (port_num != 1 || index >= static_cast<unsigned>(weft::compat::gid_table_len)) {
        errno = EINVAL;
        return -1;
    }
    *type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
    return 0;
}

// A provider library registering itself: the front end offers its own device only.
void verbs_register_driver_34(const void*) {}
void __verbs_log(verbs_context*, std::uint32_t, const char*, ...) {}

// What a provider calls while opening one of its devices, which never happens here.
void* _verbs_init_and_alloc_context(ibv_device*, int, size_t, verbs_context*, std::uint32_t) {
    return weft::compat::fail(EOPNOTSUPP);
}
ibv_context* verbs_open_device(ibv_device*, void*) { return weft::compat::fail(EOPNOTSUPP); }
void verbs_uninit_context(verbs_context*) {}
void verbs_set_ops(verbs_context*, const void*) {}
void verbs_init_cq(ibv_cq*, ibv_context*, ibv_comp_channel*, void*) {}
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void*) { return num_attrs; }
int execute_ioctl(ibv_context*, void*) { return EOPNOTSUPP; }
int ibv_read_ibdev_sysfs_file(char*, size_t, void*, const char*, ...) {
    errno = EOPNOTSUPP;
    return -1;
}

}  // extern "C"

// The kernel commands a provider issues; each returns an errno value. Their arguments are ignored and not
// declared: in the x86-64 and AArch64 calling conventions the caller owns its argument registers and stack,
// so a function taking none stands in for the driver.h prototype, as rdma-core's dummy ops do for absent ops.
#define WEFT_NO_KERNEL_COMMAND(name) \
    extern "C" int name();           \
    extern "C" int name() { return EOPNOTSUPP; }

WEFT_NO_KERNEL_COMMAND(ibv_cmd_advise_mr)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_alloc_dm)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_alloc_mw)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_alloc_pd)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_attach_mcast)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_close_xrcd)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_ah)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_counters)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_cq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_cq_ex)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_flow)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_flow_action_esp)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_qp)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_qp_ex)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_qp_ex2)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_rwq_ind_table)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_srq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_srq_ex)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_create_wq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_dealloc_mw)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_dealloc_pd)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_dereg_mr)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_destroy_ah)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_destroy_counters)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_destroy_cq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_destroy_flow)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_destroy_flow_action)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_destroy_qp)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_destroy_rwq_ind_table)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_destroy_srq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_destroy_wq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_detach_mcast)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_free_dm)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_get_context)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_modify_cq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_modify_flow_action_esp)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_modify_qp)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_modify_qp_ex)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_modify_srq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_modify_wq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_open_qp)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_open_xrcd)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_poll_cq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_post_recv)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_post_send)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_post_srq_recv)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_query_context)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_query_device_any)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_query_mr)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_query_port)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_query_qp)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_query_srq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_read_counters)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_reg_dm_mr)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_reg_dmabuf_mr)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_reg_mr)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_req_notify_cq)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_rereg_mr)
WEFT_NO_KERNEL_COMMAND(ibv_cmd_resize_cq)
