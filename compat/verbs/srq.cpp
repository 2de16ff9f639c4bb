// Shared receive queues: ibv_create_srq (and ibv_create_srq_ex for the basic type), ibv_modify_srq,
// ibv_query_srq, ibv_destroy_srq over weft::SharedReceiveQueue. Receives are posted through
// ibv_context_ops::post_srq_recv (datapath.cpp); QPs take them when created with init_attr.srq (objects.cpp).
//
// weft's queues cannot be resized, so IBV_SRQ_MAX_WR is EINVAL, as on a device without
// IBV_DEVICE_SRQ_RESIZE. The limit is weft's arm_limit: armed by ibv_modify_srq (or srq_limit at
// creation), it raises IBV_EVENT_SRQ_LIMIT_REACHED once (events.cpp).
#include "frontend.hpp"

#include <weft/error.hpp>

#include <algorithm>
#include <memory>
#include <mutex>

namespace weft::compat {
namespace {

ibv_srq* new_srq(ibv_pd* ibpd, ibv_srq_init_attr& init) {
    return guarded_ptr("ibv_create_srq", [&]() -> ibv_srq* {
        auto& pd = static_cast<Pd&>(*ibpd);
        Context& ctx = context_of(pd.context);
        ibv_srq_attr& want = init.attr;
        if (want.srq_limit > want.max_wr) {
            throw Error(Errc::invalid_argument, "srq_limit exceeds max_wr");
        }
        auto srq = std::make_unique<Srq>();
        srq->queue = ctx.domain.create_srq({
            .max_recv = std::max(want.max_wr, 1u),
            .max_sge = std::max(want.max_sge, 1u),
            .limit = want.srq_limit,
            .thread_safe = true,  // verbs SRQs take posts from any number of threads
        });
        srq->limit = want.srq_limit;
        want.max_wr = srq->queue.max_recv();
        want.max_sge = srq->queue.max_sge();
        srq->context = pd.context;
        srq->srq_context = init.srq_context;
        srq->pd = &pd;
        srq->handle = srq->queue.srq_num();
        srq->events_completed = 0;
        {
            std::lock_guard lock(ctx.srq_mu);
            ctx.srqs[srq->queue.srq_num()] = srq.get();
        }
        pthread_mutex_init(&srq->mutex, nullptr);
        pthread_cond_init(&srq->cond, nullptr);
        ++pd.users;
        return srq.release();
    });
}

}  // namespace

// verbs.h's ibv_create_srq_ex calls ibv_create_srq itself for a basic SRQ with a PD; what reaches this is
// another type (XRC, tag matching) or other attributes, which weft has not.
ibv_srq* create_srq_ex(ibv_context* c, ibv_srq_init_attr_ex* attr) {
    constexpr std::uint32_t basic = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
    if (attr->comp_mask >= IBV_SRQ_INIT_ATTR_RESERVED) return fail(EINVAL);
    if ((attr->comp_mask & ~basic) || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ||
        ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)) {
        return fail(EOPNOTSUPP);
    }
    if (!attr->pd || attr->pd->context != c) return fail(EINVAL);
    return new_srq(attr->pd, *reinterpret_cast<ibv_srq_init_attr*>(attr));
}

}  // namespace weft::compat

using namespace weft::compat;

extern "C" {

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) { return new_srq(pd, *init); }

// IBV_SRQ_LIMIT arms the limit (0 disarms it); IBV_SRQ_MAX_WR is EINVAL: weft's queues keep their size.
int ibv_modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
    auto& srq = static_cast<Srq&>(*ibsrq);
    if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) || (mask & IBV_SRQ_MAX_WR)) return EINVAL;
    if (!(mask & IBV_SRQ_LIMIT)) return 0;
    return guarded("ibv_modify_srq", [&] {
        srq.queue.arm_limit(attr->srq_limit);
        srq.limit = attr->srq_limit;
        return 0;
    });
}

int ibv_query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
    const auto& srq = static_cast<const Srq&>(*ibsrq);
    attr->max_wr = srq.queue.max_recv();
    attr->max_sge = srq.queue.max_sge();
    attr->srq_limit = srq.limit;
    return 0;
}

// An SRQ that QPs use is not destroyed (EBUSY, as the kernel refuses). The receives still in it are dropped
// without completions.
int ibv_destroy_srq(ibv_srq* ibsrq) {
    auto* srq = static_cast<Srq*>(ibsrq);
    if (srq->users > 0) return EBUSY;
    Context& ctx = context_of(srq->context);
    {
        std::lock_guard lock(ctx.srq_mu);  // ibv_get_async_event finds it no more
        ctx.srqs.erase(srq->queue.srq_num());
    }
    wait_for_acks(srq->mutex, srq->cond, srq->events_completed, srq->events_reported);
    --static_cast<Pd*>(srq->pd)->users;
    pthread_cond_destroy(&srq->cond);
    pthread_mutex_destroy(&srq->mutex);
    delete srq;
    return 0;
}

}  // extern "C"
