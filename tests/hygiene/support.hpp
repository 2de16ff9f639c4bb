// Shared by the resource-hygiene tests: the configuration under test, and what the process holds (open
// descriptors, resident memory) as the kernel reports it.
#pragma once

#include <boost/test/unit_test.hpp>

#include <dirent.h>
#include <malloc.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

// Sanitizers keep freed memory aside (AddressSanitizer's quarantine) and slow every call: resident memory
// says nothing there, and the loops run shorter.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define WEFT_HYGIENE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define WEFT_HYGIENE_SANITIZED 1
#endif
#endif
#ifndef WEFT_HYGIENE_SANITIZED
#define WEFT_HYGIENE_SANITIZED 0
#endif

namespace weft::test {

inline constexpr bool sanitized = WEFT_HYGIENE_SANITIZED != 0;

/// The configuration given as `-- --backend=CONFIG`, "sim" without one.
inline std::string hygiene_config() {
    auto& suite = boost::unit_test::framework::master_test_suite();
    for (int i = 1; i < suite.argc; ++i) {
        if (std::strncmp(suite.argv[i], "--backend=", 10) == 0) return suite.argv[i] + 10;
    }
    return "sim";
}

/// What the process holds: open descriptors (/proc/self/fd), resident memory (/proc/self/statm), and the
/// bytes malloc has handed out and not had back (all arenas, mmapped blocks included): pages of RSS come
/// and go with the allocator's trimming, this figure moves by the byte.
struct Usage {
    long fds = 0;
    long rss_bytes = 0;
    long heap_bytes = 0;
};

inline Usage usage() {
    Usage u;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        while (const dirent* e = ::readdir(d)) {
            if (e->d_name[0] != '.') ++u.fds;
        }
        ::closedir(d);
        --u.fds;  // the directory's own descriptor
    }
    if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
        long size = 0, resident = 0;
        if (std::fscanf(f, "%ld %ld", &size, &resident) == 2) u.rss_bytes = resident * ::sysconf(_SC_PAGESIZE);
        std::fclose(f);
    }
    const struct mallinfo2 m = ::mallinfo2();
    u.heap_bytes = static_cast<long>(m.uordblks + m.hblkhd);
    return u;
}

}  // namespace weft::test
