// weft/detail/slot_ring.hpp — the cursors of a backend's request ring: where requests are posted, where
// their completions have been decided (the flush cursor) and where slots may be reused (the retire cursor),
// with the arithmetic every backend does on them. For implementers of backends; not part of the user API.
//
//   weft::detail::SlotRing<std::uint32_t, weft::detail::RingSync::shared> ring;  // poster and poller apart
//   const std::uint32_t head = ring.head();                                       // poster
//   if (n > ring.free_slots(capacity, head)) return PostStatus::queue_full();
//   ... fill slots ring.slot(head, mask) .. ring.slot(head + n - 1, mask) ...
//   ring.publish(head + n);
//   if (ring.outstanding(pos)) { report(slot(pos)); ring.retire_through(pos); }  // poller
//   ring.flush([&](std::uint32_t pos) { report_flushed(pos); });                 // the QP went to error
//
// Why this header is installed: the plugins are built against the installed weft/backend.hpp, and an
// out-of-tree backend built the same way reuses the ring as the in-tree ones do. Like backend.hpp it is an
// interface between libweft and backends of the same weft version, not a stable API.
//
// Why the ring holds cursors and not the slots: each backend keeps in a slot what is truly its own (verbs
// an id and a completion word in two arrays, so that a poll finds both from an index without scaling it;
// the simulator a cache line per request with its gather list beside it; ofi a provider context per
// operation), and splits a slot into parallel arrays where that makes its poll cheaper. What they share,
// and what the semantics of a queue depend on, is the cursors: a batch fits when the posted count minus
// the retired count leaves room, a position is outstanding between the retired and posted counts, a
// completion retires its slot and every one before it (send-queue completions come in posting order), and
// a queue in error flushes everything from the flush cursor to the posted one, in order. Positions count
// requests from 0 and wrap at the width of Pos; a slot is a position masked by a power of two at least the
// queue's capacity (storage_for), so differences of positions stay right across the wrap.
//
// The two kinds: RingSync::single, where one thread, or one lock holder, moves every cursor (the
// simulator); and RingSync::shared, where the poster moves `posted` and a poller on another thread moves
// `retired` and `completed`. Shared cursors are atomics, the poster's and the poller's on cache lines of
// their own; posted is published with release after the slots are written, and retired with release after
// the slots are read, so neither side sees a slot the other still uses. The member functions carry those
// orders: the data path reads and writes the cursors through them and compiles to the same loads and
// stores it would write by hand.
#pragma once

#include <atomic>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace weft::detail {

enum class RingSync : std::uint8_t {
    single,  ///< one thread, or the holder of one lock, moves every cursor
    shared,  ///< the poster and the poller are different threads
};

template <std::unsigned_integral Pos, RingSync Sync>
struct SlotRing {
    static constexpr bool is_shared = Sync == RingSync::shared;
    using Cursor = std::conditional_t<is_shared, std::atomic<Pos>, Pos>;
    // Apart, a shared ring's poster and poller do not invalidate each other's line with every move.
    static constexpr std::size_t cursor_align = is_shared ? 64 : alignof(Pos);

    /// Storage for a queue of `capacity` requests: a power of two at least `capacity` (and at least 1).
    static constexpr std::uint32_t storage_for(std::uint32_t capacity) noexcept {
        return std::bit_ceil(capacity == 0 ? 1u : capacity);
    }
    /// The slot of position `pos` in storage of `mask + 1` slots.
    static constexpr std::size_t slot(Pos pos, Pos mask) noexcept { return static_cast<std::size_t>(pos & mask); }

    /// Requests posted so far; the poster's.
    alignas(cursor_align) Cursor posted{0};
    /// Slots reusable: every position before it; the poller's (the holder of the lock for a single ring).
    alignas(cursor_align) Cursor retired{0};
    /// Requests whose completion is decided (reported, or to be reported, in order): the flush walk starts
    /// here. retired <= completed <= posted. A backend whose provider flushes (verbs) does not use it.
    Cursor completed{0};

    // ---- poster

    /// The posted count as the poster knows it (its own cursor).
    Pos head() const noexcept { return load(posted, std::memory_order_relaxed); }
    /// How many more requests fit in a queue of `capacity`, `head` being head().
    Pos free_slots(Pos capacity, Pos head) const noexcept {
        return static_cast<Pos>(capacity - static_cast<Pos>(head - load(retired, std::memory_order_acquire)));
    }
    /// Makes the slots before `end` visible to the poller; their contents are written before this.
    void publish(Pos end) noexcept { store(posted, end, std::memory_order_release); }

    // ---- poller

    /// The posted count as the poller sees it: the slots before it are written.
    Pos posted_seen() const noexcept { return load(posted, std::memory_order_acquire); }
    /// The retired count as the poller knows it (its own cursor).
    Pos retired_seen() const noexcept { return load(retired, std::memory_order_relaxed); }
    /// Whether position `pos` is posted and not yet retired: a completion of it is this queue's to report.
    bool outstanding(Pos pos) const noexcept {
        const Pos r = retired_seen();
        return static_cast<Pos>(pos - r) < static_cast<Pos>(posted_seen() - r);
    }
    /// The completion of `pos` retires its slot and every one before it (pos is outstanding).
    void retire_through(Pos pos) noexcept { retire_to(static_cast<Pos>(pos + 1)); }
    /// Retires every slot before `end`; the poller has read them.
    void retire_to(Pos end) noexcept { store(retired, end, std::memory_order_release); }

    // ---- flush cursor

    Pos completed_seen() const noexcept { return load(completed, std::memory_order_relaxed); }
    void complete_to(Pos end) noexcept { store(completed, end, std::memory_order_relaxed); }
    /// The queue went to error: hands every position from the flush cursor to the posted one to `report`,
    /// in order, and moves the flush cursor past them. Returns the posted count it stopped at.
    template <class F>
    Pos flush(F&& report) noexcept(noexcept(report(Pos{}))) {
        const Pos end = posted_seen();
        for (Pos i = completed_seen(); i != end; ++i) report(i);
        complete_to(end);
        return end;
    }

private:
    static Pos load(const Cursor& c, [[maybe_unused]] std::memory_order order) noexcept {
        if constexpr (is_shared) return c.load(order);
        else return c;
    }
    static void store(Cursor& c, Pos v, [[maybe_unused]] std::memory_order order) noexcept {
        if constexpr (is_shared) c.store(v, order);
        else c = v;
    }
};

}  // namespace weft::detail
