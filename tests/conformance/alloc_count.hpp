// Heap allocations of the whole process, counted while `counting_allocations` is set (alloc_count.cpp).
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define WEFT_CONFORMANCE_COUNTS_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define WEFT_CONFORMANCE_COUNTS_ALLOCATIONS 0
#endif
#endif
#ifndef WEFT_CONFORMANCE_COUNTS_ALLOCATIONS
#define WEFT_CONFORMANCE_COUNTS_ALLOCATIONS 1
#endif

namespace weft::test {

/// While true, every malloc, calloc, realloc and aligned allocation in the process adds one to `allocations`.
extern std::atomic<bool> counting_allocations;
extern std::atomic<std::uint64_t> allocations;

/// False in sanitizer builds, whose allocator this binary does not replace.
bool allocations_counted() noexcept;

/// Counts the allocations made while it lives.
class AllocationCount {
public:
    AllocationCount() noexcept : start_(allocations.load()) { counting_allocations.store(true); }
    ~AllocationCount() { stop(); }
    AllocationCount(const AllocationCount&) = delete;
    AllocationCount& operator=(const AllocationCount&) = delete;
    /// Stops counting; returns how many were made.
    std::uint64_t stop() noexcept {
        counting_allocations.store(false);
        if (!stopped_) {
            stopped_ = true;
            counted_ = allocations.load() - start_;
        }
        return counted_;
    }

private:
    std::uint64_t start_;
    std::uint64_t counted_ = 0;
    bool stopped_ = false;
};

}  // namespace weft::test
