// Removal of the shared-memory regions that shm endpoints of ended processes left behind (ofi_shm.hpp).
#include "ofi_shm.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <limits>

namespace weft::ofi {
namespace {

// A decimal number filling all of `text`, without sign or leading zero (as printf's %d prints it).
bool whole_number(std::string_view text, std::uint64_t max, std::uint64_t& out) noexcept {
    if (text.empty() || (text.size() > 1 && text.front() == '0')) return false;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && ptr == text.data() + text.size() && out <= max;
}

}  // namespace

bool parse_shm_region_name(std::string_view name, ShmRegionName& out) noexcept {
    const auto first = name.find(':');
    if (first == std::string_view::npos) return false;
    const auto second = name.find(':', first + 1);
    if (second == std::string_view::npos) return false;
    std::uint64_t pid = 0, uid = 0, index = 0;
    if (!whole_number(name.substr(0, first), std::numeric_limits<pid_t>::max(), pid) || pid == 0) return false;
    if (!whole_number(name.substr(first + 1, second - first - 1), std::numeric_limits<uid_t>::max(), uid)) return false;
    if (!whole_number(name.substr(second + 1), std::numeric_limits<int>::max(), index)) return false;
    out.pid = static_cast<pid_t>(pid);
    out.uid = static_cast<uid_t>(uid);
    return true;
}

std::size_t remove_dead_shm_regions(const char* dir) noexcept {
    const int dfd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return 0;
    DIR* d = ::fdopendir(dfd);
    if (d == nullptr) {
        ::close(dfd);
        return 0;
    }
    const uid_t uid = ::getuid();
    const uid_t euid = ::geteuid();
    const pid_t self = ::getpid();
    std::size_t removed = 0;
    while (const dirent* e = ::readdir(d)) {
        ShmRegionName n;
        if (!parse_shm_region_name(e->d_name, n) || n.uid != uid || n.pid == self) continue;
        if (::kill(n.pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
        struct stat st {};
        if (::fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) || st.st_uid != euid) {
            continue;
        }
        if (::unlinkat(dfd, e->d_name, 0) == 0) ++removed;
    }
    ::closedir(d);
    return removed;
}

}  // namespace weft::ofi
