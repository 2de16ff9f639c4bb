// The simulator's pending events in (time, seq) order at a cost per event that does not grow with the number
// pending: a hierarchical timing wheel over the 64-bit virtual time, with a small heap beside it for the rare
// event scheduled before the wheel's cursor.
//
// The wheel has 8 levels, each a digit of the time: level 0 the low 12 bits (4,096 slots, as many ns), each
// level above the next 8 bits (256 slots; the top one has the last 4). An event goes to the level of the
// highest digit in which its time differs from the cursor, into the slot named by that digit of its time; so
// a level-0 slot holds events of one exact time, and a higher slot a range of times. Popping takes the head
// of the first non-empty level-0 slot; when level 0 is empty, the first non-empty slot of the lowest
// non-empty level is cascaded: the cursor moves to the start of its range and its events are spread over the
// lower levels. An event is cascaded at most 7 times between two rewinds (below), whatever else is pending.
// Level 0 is wide because the simulator's packets and acknowledgements land a few microseconds ahead: in a
// 4,096-ns window most are slotted once and never cascaded, where 256 ns sent nearly all through level 1, and
// a cascade walks its list node by node, one dependent cache miss after another when many QPs are busy.
//
// Ties at one time stay in sequence order, which is what keeps a seed's run identical to the heap this
// replaces: sequence numbers grow with every push, so appending keeps a slot's list sorted, and a cascade
// moves a sorted list into lower levels that are all empty (it happens only then), keeping the order.
//
// The cursor never passes the earliest event in the wheel, but it may pass the simulator's clock (a cascade
// goes to the start of a far slot; a cancelled timer is dropped without moving the clock), so an event may be
// pushed with a time before it. When the cursor is far ahead (typically every message was answered, the
// wheel cascaded to the far ACK timers, and the program posts new work), the cursor is moved back to the new
// event: the lists near the old cursor are spliced whole into one slot of a higher level, however many
// events they hold, so the work that follows is slotted as before and does not pile up in a heap while the
// timers keep being re-armed ahead of it. When the cursor is only a little ahead, the event goes to
// `early_`, a binary heap of events before the cursor, which empties as the clock catches up.
//
// Storage: events live in a pool of nodes linked into per-slot lists by index; the pool and the early heap
// keep their capacity, so once the largest number of pending events has been reached nothing allocates.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

namespace weft::sim::detail {

/// Items ordered by (`time`, `seq`); `T` has `std::uint64_t time, seq` members, and each pushed item's
/// `seq` is larger than that of every item pushed before.
template <class T>
class [[gnu::visibility("hidden")]] EventQueue {
public:
    EventQueue() { nodes_.reserve(1024); }

    bool empty() const noexcept { return size_ == 0; }
    std::size_t size() const noexcept { return size_; }

    void push(const T& item) {
        ++size_;
        // The rare cases (before the cursor, a new node) are calls of their own, so that the common one
        // saves and restores few registers.
        if (item.time < cursor_) [[unlikely]] {
            if (push_before_cursor(item)) return;
        }
        // The cached front stays the front unless this item comes before it (a later one lands behind it).
        if (front_ != nil && later(nodes_[front_].item, item)) front_ = nil;
        std::uint32_t n = free_;
        if (n != nil) [[likely]] {
            free_ = nodes_[n].next;
        } else {
            n = new_node();
        }
        nodes_[n].item = item;
        append(slot_of(item.time), n);
    }

    /// The earliest item. Not empty.
    const T& top() noexcept {
        if (front_ == nil) front_ = wheel_front();
        const std::uint32_t n = front_;
        if (early_.empty() || (n != nil && !later(nodes_[n].item, early_.front()))) return nodes_[n].item;
        return early_.front();
    }

    /// Removes and returns the earliest item. Not empty.
    T pop() noexcept {
        --size_;
        const std::uint32_t n = front_ != nil ? front_ : wheel_front();
        if (!early_.empty() && (n == nil || later(nodes_[n].item, early_.front()))) [[unlikely]] {
            return pop_early(n);
        }
        front_ = nil;
        // n heads a level-0 slot: unlink it.
        const std::uint32_t s = static_cast<std::uint32_t>(nodes_[n].item.time & (slots0 - 1));
        List& l = lists_[s];
        l.head = nodes_[n].next;
        if (l.head == nil) {
            l.tail = nil;
            clear_bit(s);
            // Popped next, most likely: the head of the next non-empty level-0 slot, if in the same word.
            if (const std::uint64_t rest = bits_[s / 64] & ~((std::uint64_t{2} << (s % 64)) - 1); rest != 0) {
                __builtin_prefetch(&nodes_[lists_[(s / 64) * 64 + static_cast<unsigned>(std::countr_zero(rest))].head]);
            }
        } else {
            __builtin_prefetch(&nodes_[l.head]);  // popped next, most likely: its line is on its way meanwhile
        }
        T item = nodes_[n].item;
        nodes_[n].next = free_;
        free_ = n;
        return item;
    }

private:
    static constexpr std::uint32_t nil = UINT32_MAX;
    static constexpr unsigned bits0 = 12;      // level 0's digit
    static constexpr unsigned digit_bits = 8;  // every other level's digit
    static constexpr std::uint32_t slots0 = 1u << bits0;
    static constexpr std::uint32_t slots = 1u << digit_bits;
    static constexpr unsigned levels = 8;      // 12 + 7 * 8 bits cover the 64 of a time
    static constexpr unsigned words0 = slots0 / 64;  // bitmap words of level 0
    static constexpr unsigned words = slots / 64;    // bitmap words of each higher level
    // The least distance to the cursor worth a rewind: a cursor a slot or two ahead (the next event a few
    // hundred ns away) is caught up with soon, and the early heap is cheaper meanwhile than slotting again;
    // one that went to a far timer would send everything to the heap for a long while.
    static constexpr std::uint64_t rewind_gap = std::uint64_t{1} << 16;
    static_assert(bits0 + (levels - 1) * digit_bits >= 64 && bits0 + (levels - 2) * digit_bits < 64);
    static_assert(words0 == 64 && (levels - 1) * words <= 32);
    static constexpr std::uint32_t lists = slots0 + (levels - 1) * slots;

    // Level k's digit starts at this bit of a time, and its lists at this index.
    static constexpr unsigned shift_of(unsigned level) noexcept { return level == 0 ? 0 : bits0 + (level - 1) * digit_bits; }
    static constexpr std::uint32_t first_list(unsigned level) noexcept { return level == 0 ? 0 : slots0 + (level - 1) * slots; }
    // The level of a time that differs from the cursor in `x` (their xor, not 0) first at its highest bit.
    static unsigned level_of(std::uint64_t x) noexcept {
        const unsigned high = static_cast<unsigned>(63 - std::countl_zero(x));
        return high < bits0 ? 0 : 1 + (high - bits0) / digit_bits;
    }

    // Aligned to its size rounded up to a power of two, up to a cache line: a node never straddles two lines.
    struct alignas(std::min<std::size_t>(64, std::bit_ceil(sizeof(T) + sizeof(std::uint32_t)))) Node {
        T item;
        std::uint32_t next = nil;
    };
    struct List {
        std::uint32_t head = nil, tail = nil;
    };

    // An item before the cursor goes to the early heap (true), or the cursor is moved back to it (false:
    // push() slots it then).
    [[gnu::noinline]] bool push_before_cursor(const T& item) {
        if (cursor_ - item.time < rewind_gap) {
            early_.push_back(item);
            std::push_heap(early_.begin(), early_.end(), later);
            return true;
        }
        rewind(item.time);
        return false;
    }
    [[gnu::noinline]] std::uint32_t new_node() {
        nodes_.emplace_back();
        return static_cast<std::uint32_t>(nodes_.size() - 1);
    }
    // pop() when the early heap's front comes first; `n` is the wheel's front (or nil).
    [[gnu::noinline]] T pop_early(std::uint32_t n) noexcept {
        front_ = n;  // still the wheel's front
        std::pop_heap(early_.begin(), early_.end(), later);
        T item = early_.back();
        early_.pop_back();
        return item;
    }

    [[gnu::always_inline]] static bool later(const T& a, const T& b) noexcept {
        return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }

    // The list (first_list(level) + slot) an item of time `t` (>= cursor_) belongs to.
    std::uint32_t slot_of(std::uint64_t t) const noexcept {
        const std::uint64_t x = t ^ cursor_;
        if (x < slots0) return static_cast<std::uint32_t>(t & (slots0 - 1));
        const unsigned level = level_of(x);
        return first_list(level) + static_cast<std::uint32_t>((t >> shift_of(level)) & (slots - 1));
    }

    void set_bit(std::uint32_t list) noexcept {
        const std::uint32_t w = list / 64;
        bits_[w] |= std::uint64_t{1} << (list % 64);
        if (w < words0) summary0_ |= std::uint64_t{1} << w;
        else summary_ |= 1u << (w - words0);
    }

    void append(std::uint32_t list, std::uint32_t n) noexcept {
        List& l = lists_[list];
        nodes_[n].next = nil;
        if (l.tail == nil) {
            l.head = n;
            set_bit(list);
        } else {
            nodes_[l.tail].next = n;
        }
        l.tail = n;
    }

    // Moves the cursor back to `t`, before every event in the wheel. With m the highest byte in which `t`
    // and the cursor differ, an event at a level above m keeps its list, and so does one at level m (its
    // byte m is above the cursor's, hence above t's); an event at a lower level shares the cursor's bytes
    // from m up, so relative to `t` it belongs to slot (cursor's byte m) of level m, which is empty: the
    // lower levels' lists are spliced into it whole, and spread again when the cursor gets there. Events of
    // one time sit in one list, so they stay in sequence order. One splice per non-empty list.
    void rewind(std::uint64_t t) noexcept {
        const unsigned m = level_of(t ^ cursor_);  // >= 1: t is rewind_gap or more before the cursor
        const unsigned mask = m == 0 ? slots0 - 1 : slots - 1;
        const std::uint32_t into_index = first_list(m) + static_cast<std::uint32_t>((cursor_ >> shift_of(m)) & mask);
        List& into = lists_[into_index];
        const unsigned below = first_list(m) / 64;  // the bitmap words of the levels under m
        for (unsigned w = 0; w < below; ++w) {
            for (std::uint64_t b = bits_[w]; b != 0; b &= b - 1) {
                List& l = lists_[w * 64 + static_cast<unsigned>(std::countr_zero(b))];
                if (into.tail == nil) into.head = l.head;
                else nodes_[into.tail].next = l.head;
                into.tail = l.tail;
                l = {};
            }
            bits_[w] = 0;
        }
        if (below > 0) {
            summary0_ = 0;
            summary_ &= ~((1u << (below - words0)) - 1);
        }
        if (into.tail != nil) set_bit(into_index);
        cursor_ = t;
        front_ = nil;  // it may no longer head a level-0 list
    }

    void clear_bit(std::uint32_t list) noexcept {
        const std::uint32_t w = list / 64;
        std::uint64_t& word = bits_[w];
        word &= ~(std::uint64_t{1} << (list % 64));
        if (word != 0) return;
        if (w < words0) summary0_ &= ~(std::uint64_t{1} << w);
        else summary_ &= ~(1u << (w - words0));
    }

    // The node holding the wheel's earliest item (cascading as needed), or nil when the wheel is empty. The
    // lowest non-empty list is the first slot of the lowest non-empty level.
    std::uint32_t wheel_front() noexcept {
        if (summary0_ != 0) [[likely]] {
            const unsigned w = static_cast<unsigned>(std::countr_zero(summary0_));
            return lists_[w * 64 + static_cast<std::uint32_t>(std::countr_zero(bits_[w]))].head;
        }
        return wheel_front_cascading();
    }
    // wheel_front() when level 0 is empty: cascades until it is not, or the wheel is empty.
    [[gnu::noinline]] std::uint32_t wheel_front_cascading() noexcept {
        for (;;) {
            if (summary0_ != 0) {
                const unsigned w = static_cast<unsigned>(std::countr_zero(summary0_));
                return lists_[w * 64 + static_cast<std::uint32_t>(std::countr_zero(bits_[w]))].head;
            }
            if (summary_ == 0) return nil;
            const unsigned w = words0 + static_cast<unsigned>(std::countr_zero(summary_));
            const std::uint32_t list = w * 64 + static_cast<std::uint32_t>(std::countr_zero(bits_[w])) - slots0;
            cascade(1 + list / slots, list % slots);
        }
    }

    // Moves the cursor to the start of slot `s` of `level` (>= 1; every lower level is empty) and spreads its
    // items over the lower levels, in list order.
    void cascade(unsigned level, std::uint32_t s) noexcept {
        const unsigned shift = shift_of(level);
        const std::uint64_t above = shift + digit_bits >= 64 ? 0 : cursor_ >> (shift + digit_bits) << (shift + digit_bits);
        cursor_ = above | (std::uint64_t{s} << shift);
        const std::uint32_t list = first_list(level) + s;
        std::uint32_t n = lists_[list].head;
        lists_[list] = {};
        clear_bit(list);
        while (n != nil) {
            const std::uint32_t next = nodes_[n].next;
            append(slot_of(nodes_[n].item.time), n);
            n = next;
        }
    }

    std::vector<Node> nodes_;
    std::uint32_t free_ = nil;  // free nodes, linked through `next`
    std::array<List, lists> lists_{};
    std::array<std::uint64_t, lists / 64> bits_{};  // non-empty lists
    std::uint64_t summary0_ = 0;                    // bit w: bits_[w] of level 0 is not 0
    std::uint32_t summary_ = 0;                     // bit w: bits_[words0 + w] (the levels above) is not 0
    std::uint32_t front_ = nil;  // the wheel's earliest node as top() found it (heading a level-0 list), or nil
    std::uint64_t cursor_ = 0;  // no item in the wheel is earlier; an item at level k shares the bytes above k
    std::vector<T> early_;      // binary heap of items pushed with a time before cursor_ (a rewind may since have moved it back)
    std::size_t size_ = 0;
};

}  // namespace weft::sim::detail
