// The libibverbs front end's objects: each verbs object is the rdma-core struct a program sees, extended
// with the weft handle behind it. A program's pointer (ibv_cq*, ibv_qp*, ...) is cast back to ours with
// static_cast, since ours derives from it; nothing but this library creates them.
#pragma once

#include <infiniband/verbs.h>

#include <weft/domain.hpp>

#include <atomic>
#include <cerrno>
#include <cstddef>

namespace weft::compat {

// An opened device: rdma-core's extended context (abi_compat = __VERBS_ABI_IS_EXTENDED, so verbs.h's
// inline functions find query_port) over one weft Domain.
struct Context : verbs_context {
    Domain domain;
};

// `users` counts the regions and QPs made with it: a PD or CQ in use is not destroyed (EBUSY, as in
// rdma-core, where the kernel refuses).
struct Pd : ibv_pd {
    std::atomic<int> users{0};
};

struct Mr : ibv_mr {
    MemoryRegion region;
};

struct Cq : ibv_cq {
    CompletionQueue queue;
    std::atomic<int> users{0};
};

// An RC queue pair. The weft QP is created with it (so receives can be posted from INIT on) and
// connected at RTR; `attr` keeps what ibv_modify_qp was given, for ibv_query_qp.
struct Qp : ibv_qp {
    QueuePair queue;
    ibv_qp_attr attr{};
    ibv_qp_cap cap{};
    bool sq_sig_all = false;
};

inline Context& context_of(ibv_context* c) noexcept { return static_cast<Context&>(*verbs_get_ctx(c)); }

// The operations verbs.h's inline functions call through ibv_context::ops (datapath.cpp).
void install_ops(ibv_context_ops& ops) noexcept;

// The errno value for the exception being handled (weft::Error, bad_alloc, ...); logs it under `call`.
// Call only inside a catch block.
int current_errno(const char* call) noexcept;

// Runs `f` (returning an errno value, 0 on success) and turns an exception into its errno value.
template <class F>
int guarded(const char* call, F&& f) noexcept {
    try {
        return f();
    } catch (...) {
        return current_errno(call);
    }
}

// Runs `f` (returning a pointer); on an exception sets errno and returns null.
template <class F>
auto guarded_ptr(const char* call, F&& f) noexcept -> decltype(f()) {
    try {
        return f();
    } catch (...) {
        errno = current_errno(call);
        return nullptr;
    }
}

// Sets errno to `err` and returns null: the failure of a verb that returns a pointer.
inline std::nullptr_t fail(int err) noexcept {
    errno = err;
    return nullptr;
}

}  // namespace weft::compat
