// Counts the heap allocations of the whole process (libweft, the backend plugin, libfabric, rdma-core and
// any thread of theirs) while counting is on: this binary defines malloc and its kin, which the dynamic
// linker then binds every library's calls to, and forwards them to glibc's own entry points. Under a
// sanitizer, which replaces the allocator itself, nothing is replaced and counting reports itself off.
// $WEFT_ALLOC_BACKTRACES=N prints the call stacks of the first N counted allocations to stderr, to find
// whose they are.
#include "alloc_count.hpp"

#if WEFT_CONFORMANCE_COUNTS_ALLOCATIONS
#include <execinfo.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>

extern "C" {
void* __libc_malloc(std::size_t n);
void* __libc_calloc(std::size_t count, std::size_t n);
void* __libc_realloc(void* p, std::size_t n);
void* __libc_memalign(std::size_t alignment, std::size_t n);
}
#endif

namespace weft::test {

std::atomic<bool> counting_allocations{false};
std::atomic<std::uint64_t> allocations{0};

bool allocations_counted() noexcept { return WEFT_CONFORMANCE_COUNTS_ALLOCATIONS != 0; }

}  // namespace weft::test

#if WEFT_CONFORMANCE_COUNTS_ALLOCATIONS
namespace {

std::atomic<int> backtraces_left{0};
thread_local bool in_backtrace = false;

// Reads $WEFT_ALLOC_BACKTRACES once, before main, and loads what backtrace() needs then (its first call
// may allocate).
[[gnu::constructor]] void read_backtrace_request() {
    if (const char* n = std::getenv("WEFT_ALLOC_BACKTRACES")) {
        void* frames[2];
        (void)::backtrace(frames, 2);
        backtraces_left.store(std::atoi(n));
    }
}

inline void count() noexcept {
    if (!weft::test::counting_allocations.load(std::memory_order_relaxed)) return;
    weft::test::allocations.fetch_add(1, std::memory_order_relaxed);
    if (backtraces_left.load(std::memory_order_relaxed) > 0 && !in_backtrace && backtraces_left.fetch_sub(1) > 0) {
        in_backtrace = true;
        void* frames[32];
        const int n = ::backtrace(frames, 32);
        static const char header[] = "--- allocation while counting:\n";
        (void)!::write(2, header, sizeof header - 1);
        ::backtrace_symbols_fd(frames, n, 2);
        in_backtrace = false;
    }
}

}  // namespace

extern "C" {
void* malloc(std::size_t n) noexcept {
    count();
    return __libc_malloc(n);
}
void* calloc(std::size_t count_, std::size_t n) noexcept {
    count();
    return __libc_calloc(count_, n);
}
void* realloc(void* p, std::size_t n) noexcept {
    count();
    return __libc_realloc(p, n);
}
void* memalign(std::size_t alignment, std::size_t n) noexcept {
    count();
    return __libc_memalign(alignment, n);
}
void* aligned_alloc(std::size_t alignment, std::size_t n) noexcept {
    count();
    return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t n) noexcept {
    count();
    if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
    void* p = __libc_memalign(alignment, n);
    if (p == nullptr && n != 0) return ENOMEM;
    *out = p;
    return 0;
}
}
#endif
