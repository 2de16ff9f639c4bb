// The thread-safe mode of QPs and CQs (QpOptions::thread_safe, CqOptions::thread_safe): a wrapper around
// the backend's object that serializes the calls the contract otherwise leaves to one thread at a time.
// Chosen once at creation, so a QP or CQ created without it pays nothing, not even a branch per call.
// Backends never see a wrapper: the core hands them the object inside (unwrap). The data-path forwarders of
// the handles are inline in weft/domain.hpp and compiled in the program, which never sees these classes:
// where GCC saw them beside the forwarders, it devirtualized the forwarders towards them speculatively and
// inlined their locks, which every poll and post paid for, locked or not.
#pragma once

#include <weft/backend.hpp>

#include <memory>
#include <mutex>

namespace weft::detail {

/// Any number of threads may poll and wait at once: one lock around each call. wait() holds it while it
/// blocks, so a poll from another thread waits for the wait to end (the completion it takes is the
/// waiter's, as one thread polling after its own wait would see it).
class LockedCq final : public CqImpl {
public:
    explicit LockedCq(std::shared_ptr<CqImpl> inner) : inner_(std::move(inner)) {}
    std::size_t poll(std::span<Completion> out) noexcept override {
        std::lock_guard lock(mu_);
        return inner_->poll(out);
    }
    bool wait(std::chrono::nanoseconds timeout) override {
        std::lock_guard lock(mu_);
        return inner_->wait(timeout);
    }
    int fd() override {
        std::lock_guard lock(mu_);
        return inner_->fd();
    }
    std::uint32_t depth() const noexcept override { return inner_->depth(); }
    const std::shared_ptr<CqImpl>& inner() const noexcept { return inner_; }

private:
    std::mutex mu_;
    std::shared_ptr<CqImpl> inner_;
};

/// Any number of threads may post at once: one lock per queue, so a poster of sends and a poster of
/// receives never wait for each other.
class LockedQp final : public QpImpl {
public:
    explicit LockedQp(std::unique_ptr<QpImpl> inner) : inner_(std::move(inner)) {
        qp_num = inner_->qp_num;
        caps = inner_->caps;
    }
    ~LockedQp() override {
        inner_.reset();  // the backend's QP goes first, while `domain` still holds its domain
    }
    PostStatus post_send(std::span<const SendRequest> batch) noexcept override {
        std::lock_guard lock(send_mu_);
        return inner_->post_send(batch);
    }
    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept override {
        std::lock_guard lock(recv_mu_);
        return inner_->post_recv(batch);
    }
    std::vector<std::byte> address() const override { return inner_->address(); }
    void connect(std::span<const std::byte> peer) override { inner_->connect(peer); }
    QpState state() const noexcept override { return inner_->state(); }
    void disconnect() override {
        std::scoped_lock lock(send_mu_, recv_mu_);
        inner_->disconnect();
    }
    void to_error() override {
        std::scoped_lock lock(send_mu_, recv_mu_);
        inner_->to_error();
    }
    QpImpl& inner() noexcept { return *inner_; }

private:
    std::mutex send_mu_, recv_mu_;
    std::unique_ptr<QpImpl> inner_;
};

/// Any number of threads may post to a shared receive queue at once: one lock around each post.
class LockedSrq final : public SrqImpl {
public:
    explicit LockedSrq(std::shared_ptr<SrqImpl> inner) : inner_(std::move(inner)) {
        srq_num = inner_->srq_num;
        max_recv = inner_->max_recv;
        max_sge = inner_->max_sge;
        domain = inner_->domain;
    }
    PostStatus post_recv(std::span<const RecvRequest> batch) noexcept override {
        std::lock_guard lock(mu_);
        return inner_->post_recv(batch);
    }
    void arm_limit(std::uint32_t limit) override {
        std::lock_guard lock(mu_);
        inner_->arm_limit(limit);
    }
    const std::shared_ptr<SrqImpl>& inner() const noexcept { return inner_; }

private:
    std::mutex mu_;
    std::shared_ptr<SrqImpl> inner_;
};

/// The backend's own object behind a possible wrapper.
inline const std::shared_ptr<CqImpl>& unwrap(const std::shared_ptr<CqImpl>& cq) noexcept {
    if (auto* locked = dynamic_cast<LockedCq*>(cq.get())) return locked->inner();
    return cq;
}
inline const std::shared_ptr<SrqImpl>& unwrap(const std::shared_ptr<SrqImpl>& srq) noexcept {
    if (auto* locked = dynamic_cast<LockedSrq*>(srq.get())) return locked->inner();
    return srq;
}
inline QpImpl& unwrap(QpImpl& qp) noexcept {
    if (auto* locked = dynamic_cast<LockedQp*>(&qp)) return locked->inner();
    return qp;
}

}  // namespace weft::detail
