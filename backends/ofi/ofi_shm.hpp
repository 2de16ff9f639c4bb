// What libfabric's shm provider leaves in /dev/shm when a process ends without closing its endpoints, and
// its removal (ofi_shm.cpp). Needs no provider: the tests compile it in.
//
// shm (1.17) backs every endpoint with a POSIX shared-memory region named "<pid>:<uid>:<index>": the pid of
// the process that called fi_getinfo (decimal), its real uid, and a per-process endpoint count. A process
// that closes the endpoint, or that shm's own handlers see die (SIGINT, SIGTERM, SIGSEGV, SIGBUS), unlinks
// it; one ended by another signal (SIGKILL, SIGABRT) leaves the file, 16 MiB of tmpfs (3.75 MiB written),
// until it is removed or the machine reboots. docs/backends/ofi.md, "shm leftovers".
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string_view>

namespace weft::ofi {

// The parts of an shm region's name, "<pid>:<uid>:<index>".
struct ShmRegionName {
    pid_t pid = 0;
    uid_t uid = 0;
};

// Parses `name` as an shm region's name; false for anything else (a region named through the provider's
// node or service, another program's file).
bool parse_shm_region_name(std::string_view name, ShmRegionName& out) noexcept;

// Removes from `dir` the regions of this user's shm endpoints whose process has ended: names
// "<pid>:<uid>:<index>" with our real uid, regular files owned by our effective uid, and no process <pid>
// (kill(pid, 0) fails with ESRCH; a zombie still counts as a process). Returns how many it removed. Regions of
// live processes, of other users and of processes in another pid namespace that shares the directory are
// told apart only by that test: the last would be removed (the `shm_cleanup=off` key turns it off).
std::size_t remove_dead_shm_regions(const char* dir = "/dev/shm") noexcept;

}  // namespace weft::ofi
