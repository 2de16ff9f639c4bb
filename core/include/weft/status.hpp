// weft/status.hpp — the data-path result of a post.
//
// Posting never throws and never allocates. It returns a PostStatus, one compare to test:
//
//   if (auto st = qp.post_send(batch); !st) {
//       if (st.code() == weft::PostStatus::Code::queue_full) retry_later();
//       else log("request ", st.index(), " rejected: ", st.reason());
//   }
//
// A batch is all or nothing: when the status is not ok, no request of the batch was posted.
// Failures of requests that were accepted arrive later as completions with an error status.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace weft {

/// The result of QueuePair::post_send / post_recv: ok, or why nothing of the batch was posted.
class [[nodiscard]] PostStatus {
public:
    /// What happened to the batch.
    enum class Code : std::uint8_t {
        ok,             ///< the whole batch was posted
        queue_full,     ///< the batch does not fit in the free slots of the queue; nothing was posted
        invalid,        ///< request index() is malformed or exceeds a limit; nothing was posted
        not_connected,  ///< the QP is not in a state that accepts this queue's requests; nothing was posted
    };

    /// ok.
    constexpr PostStatus() noexcept = default;

    /// The batch was posted.
    static constexpr PostStatus ok() noexcept { return {}; }
    /// The batch does not fit in the queue's free slots.
    static constexpr PostStatus queue_full(std::uint32_t index = 0) noexcept {
        return {Code::queue_full, index, "the queue has fewer free slots than the batch needs"};
    }
    /// Request `index` of the batch is malformed. `reason` must be a string with static storage duration.
    static constexpr PostStatus invalid(std::uint32_t index, const char* reason) noexcept {
        return {Code::invalid, index, reason};
    }
    /// The QP's state does not accept the batch. `reason` must have static storage duration.
    static constexpr PostStatus not_connected(const char* reason) noexcept {
        return {Code::not_connected, 0, reason};
    }

    /// True when the batch was posted.
    constexpr explicit operator bool() const noexcept { return code_ == Code::ok; }
    /// True when the batch was posted.
    constexpr bool is_ok() const noexcept { return code_ == Code::ok; }
    /// What happened.
    constexpr Code code() const noexcept { return code_; }
    /// Index within the batch of the request that was rejected (for `invalid`), 0 otherwise.
    constexpr std::uint32_t index() const noexcept { return index_; }
    /// Why, in words; never null.
    constexpr const char* reason() const noexcept { return reason_; }

    /// `st == PostStatus::Code::queue_full`.
    friend constexpr bool operator==(const PostStatus& a, Code c) noexcept { return a.code_ == c; }

private:
    constexpr PostStatus(Code c, std::uint32_t index, const char* reason) noexcept
        : reason_(reason), index_(index), code_(c) {}

    const char* reason_ = "ok";
    std::uint32_t index_ = 0;
    Code code_ = Code::ok;
};
static_assert(sizeof(PostStatus) <= 16, "PostStatus is returned in registers on x86-64");

std::string_view to_string(PostStatus::Code code) noexcept;
/// "ok", "queue_full: ...", "invalid request 3: ...".
std::ostream& operator<<(std::ostream& os, const PostStatus& status);

}  // namespace weft
