// The data-path calls of the user-facing handles: CompletionQueue::poll, QueuePair::post_send and post_recv,
// each a check for an empty handle and one indirect call into the backend.
//
// They are kept apart from handles.cpp on purpose: this file must see no implementation of CqImpl or QpImpl
// (in particular not the thread-safe wrappers of locked.hpp). Where GCC sees one, it devirtualizes
// speculatively and inlines the wrapper's lock into the forwarder, several levels deep, and every poll and
// post then saves six registers and compares the vtable entry before the call, the unlocked ones included
// (an empty poll cost some 20 instructions more; bench/verbs_datapath.sh).
#include <weft/backend.hpp>
#include <weft/domain.hpp>

namespace weft {

std::span<Completion> CompletionQueue::poll(std::span<Completion> out) noexcept {
    if (!impl_ || out.empty()) return out.first(0);
    return out.first(impl_->poll(out));
}

PostStatus QueuePair::post_send(std::span<const SendRequest> batch) noexcept {
    if (!impl_) return PostStatus::not_connected("the queue pair handle is empty");
    return impl_->post_send(batch);
}

PostStatus QueuePair::post_recv(std::span<const RecvRequest> batch) noexcept {
    if (!impl_) return PostStatus::not_connected("the queue pair handle is empty");
    return impl_->post_recv(batch);
}

PostStatus SharedReceiveQueue::post_recv(std::span<const RecvRequest> batch) noexcept {
    if (!impl_) return PostStatus::not_connected("the shared receive queue handle is empty");
    return impl_->post_recv(batch);
}

}  // namespace weft
