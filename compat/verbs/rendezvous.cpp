// The front end's per-host rendezvous (docs/verbs-frontend.md, "Several processes"). Verbs programs exchange
// a LID (or GID), a QP number and a PSN between themselves and hand them to ibv_modify_qp; a weft QP
// connects to a backend address. On ofi, each process running the front end claims a LID of its own, and
// publishes the address of each QP, and the weft rkey behind each verbs rkey that is an alias of one, as
// small files in a directory only the user can write:
//
//   lid-L           held with an exclusive flock(2) by the process whose port has LID L, for its lifetime
//   qp-L-N          the weft address of QP N of that process
//   rkey-L-K        the weft rkey (16 hex digits) behind that process's verbs rkey K (8 hex digits)
//
// A lock is given back by the kernel when its process ends, however it ends, so a LID is free exactly when
// its lock can be taken; the process that takes it removes what the last holder left. The bytes read back
// are a peer's: sizes are bounded and contents parsed strictly, and the address goes to the backend,
// which checks it as it checks any address from a peer.
#include "frontend.hpp"

#include <weft/config.hpp>
#include <weft/error.hpp>
#include <weft/log.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace weft::compat {
namespace {

constexpr unsigned max_lid = 0xbfff;              // the unicast LIDs: 1..0xBFFF
constexpr std::size_t max_address_bytes = 4096;  // far above any backend's address

struct Rendezvous {
    bool on = false;       // ofi, and the directory is usable
    std::uint16_t lid = 1;  // this process's; 1 when the rendezvous is off (one process only)
    std::string dir;
    std::string why_off;   // for the error of a lookup while off
    int lock_fd = -1;      // holds lid-L for the process's lifetime
};

std::string directory() {
    if (const char* d = std::getenv("WEFT_VERBS_RENDEZVOUS"); d && *d) return d;
    struct stat st {};
    const std::string base = (::stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) ? "/dev/shm" : "/tmp";
    return base + "/weft-verbs-" + std::to_string(::geteuid());
}

std::string errno_text(int err) { return std::generic_category().message(err); }

// Makes the directory, or checks that the existing one is a directory of this user that nobody else can
// write: the files in it decide which address a QP connects to.
std::string prepare(const std::string& dir) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return "cannot create " + dir + ": " + errno_text(errno);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) return "cannot stat " + dir + ": " + errno_text(errno);
    if (!S_ISDIR(st.st_mode)) return dir + " is not a directory";
    if (st.st_uid != ::geteuid()) return dir + " belongs to another user";
    if (st.st_mode & (S_IWGRP | S_IWOTH)) return dir + " is writable by other users";
    return {};
}

std::string file(const Rendezvous& r, const char* kind, unsigned lid, const std::string& name) {
    return r.dir + "/" + kind + "-" + std::to_string(lid) + "-" + name;
}

std::string hex(std::uint64_t v, int digits) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
    return buf;
}

// Removes the qp- and rkey- files of LID `lid` that an earlier holder left.
void sweep(const Rendezvous& r, unsigned lid) {
    DIR* d = ::opendir(r.dir.c_str());
    if (!d) return;
    const std::string qp = "qp-" + std::to_string(lid) + "-", rkey = "rkey-" + std::to_string(lid) + "-";
    while (dirent* e = ::readdir(d)) {
        std::string_view name = e->d_name;
        if (name.starts_with(qp) || name.starts_with(rkey)) ::unlinkat(::dirfd(d), e->d_name, 0);
    }
    ::closedir(d);
}

Rendezvous make() {
    Rendezvous r;
    try {
        if (Config::parse(default_config()).backend() != "ofi") {
            r.why_off = "the simulator connects QPs of one process only";
            return r;
        }
    } catch (const std::exception&) {
        return r;  // ibv_get_device_list reports the configuration's error
    }
    r.dir = directory();
    if (std::string err = prepare(r.dir); !err.empty()) {
        r.why_off = "the rendezvous directory is not usable: " + err;
        WEFT_LOGF(compat, error, "rendezvous: %s; QPs connect within this process only", r.why_off.c_str());
        return r;
    }
    // Start from a LID derived from the process ID, so that processes starting together rarely meet.
    const unsigned first = 1 + static_cast<unsigned>(::getpid()) % max_lid;
    for (unsigned i = 0; i < max_lid; ++i) {
        const unsigned lid = 1 + (first - 1 + i) % max_lid;
        const std::string path = r.dir + "/lid-" + std::to_string(lid);
        int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) continue;
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            ::close(fd);
            continue;
        }
        sweep(r, lid);
        r.lock_fd = fd;
        r.lid = static_cast<std::uint16_t>(lid);
        r.on = true;
        WEFT_LOGF(compat, info, "rendezvous: LID %u in %s", lid, r.dir.c_str());
        return r;
    }
    r.why_off = "every LID of " + r.dir + " is held";
    WEFT_LOGF(compat, error, "rendezvous: %s; QPs connect within this process only", r.why_off.c_str());
    return r;
}

Rendezvous& rendezvous() {
    static Rendezvous& r = *new Rendezvous(make());  // never destroyed: QPs may go from atexit handlers
    return r;
}

// Writes `bytes` to `path` whole or not at all: a reader never sees a part.
void write_file(const std::string& path, const void* bytes, std::size_t n) {
    const std::string tmp = path + ".new";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) throw Error(std::error_code(errno, std::generic_category()), "rendezvous: cannot create " + tmp);
    const auto* p = static_cast<const char*>(bytes);
    std::size_t done = 0;
    while (done < n) {
        ssize_t w = ::write(fd, p + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            const int err = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            throw Error(std::error_code(err, std::generic_category()), "rendezvous: cannot write " + tmp);
        }
        done += static_cast<std::size_t>(w);
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw Error(std::error_code(err, std::generic_category()), "rendezvous: cannot publish " + path);
    }
}

// The contents of `path`, at most `limit` bytes; nullopt when there is no such file.
std::optional<std::string> read_file(const std::string& path, std::size_t limit) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT) return std::nullopt;
        throw Error(std::error_code(errno, std::generic_category()), "rendezvous: cannot open " + path);
    }
    std::string out;
    char buf[512];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int err = errno;
            ::close(fd);
            throw Error(std::error_code(err, std::generic_category()), "rendezvous: cannot read " + path);
        }
        if (n == 0) break;
        out.append(buf, static_cast<std::size_t>(n));
        if (out.size() > limit) {
            ::close(fd);
            throw Error(Errc::invalid_argument, "rendezvous: " + path + " holds more than " + std::to_string(limit) +
                                                    " bytes: not a file of the front end's");
        }
    }
    ::close(fd);
    return out;
}

// Whether a process holds LID `lid` now: its lock file exists and cannot be locked.
bool held(const Rendezvous& r, unsigned lid) {
    const std::string path = r.dir + "/lid-" + std::to_string(lid);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    const bool taken = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);
    return taken;
}

}  // namespace

bool host_wide() noexcept { return rendezvous().on; }

std::uint16_t port_lid() noexcept { return rendezvous().lid; }

std::uint64_t node_guid() noexcept { return node_guid_base | port_lid(); }

std::optional<std::uint16_t> lid_of_guid(std::uint64_t guid) noexcept {
    if ((guid & ~std::uint64_t{0xffff}) != node_guid_base || (guid & 0xffff) == 0) return std::nullopt;
    return static_cast<std::uint16_t>(guid & 0xffff);
}

void publish_qp(std::uint32_t qp_num, std::span<const std::byte> address) noexcept {
    Rendezvous& r = rendezvous();
    if (!r.on) return;
    try {
        write_file(file(r, "qp", r.lid, std::to_string(qp_num)), address.data(), address.size());
    } catch (const std::exception& e) {
        // The QP stays usable in this process; a peer in another process is told it has no such QP.
        WEFT_LOGF(compat, error, "%s", e.what());
    }
}

void withdraw_qp(std::uint32_t qp_num) noexcept {
    Rendezvous& r = rendezvous();
    if (r.on) ::unlink(file(r, "qp", r.lid, std::to_string(qp_num)).c_str());
}

void publish_rkey(std::uint32_t rkey, std::uint64_t weft_rkey) noexcept {
    Rendezvous& r = rendezvous();
    if (!r.on) return;
    try {
        const std::string text = hex(weft_rkey, 16);
        write_file(file(r, "rkey", r.lid, hex(rkey, 8)), text.data(), text.size());
    } catch (const std::exception& e) {
        // The region stays usable in this process; a peer in another process gets an access error.
        WEFT_LOGF(compat, error, "%s", e.what());
    }
}

void withdraw_rkey(std::uint32_t rkey) noexcept {
    Rendezvous& r = rendezvous();
    if (r.on) ::unlink(file(r, "rkey", r.lid, hex(rkey, 8)).c_str());
}

std::vector<std::byte> peer_address(std::uint16_t lid, std::uint32_t qp_num) {
    Rendezvous& r = rendezvous();
    const std::string who = "dest_qp_num " + std::to_string(qp_num) + " at LID " + std::to_string(lid);
    if (!r.on) throw Error(Errc::invalid_argument, who + " is not this process's LID (" + std::to_string(r.lid) + "), and " + r.why_off);
    if (!held(r, lid)) {
        throw Error(Errc::invalid_argument,
                    who + ": no process on this host has that LID now (" + r.dir + "/lid-" + std::to_string(lid) + ")");
    }
    auto bytes = read_file(file(r, "qp", lid, std::to_string(qp_num)), max_address_bytes);
    if (!bytes) {
        throw Error(Errc::invalid_argument, who + ": the process with that LID has no such QP");
    }
    if (bytes->empty()) throw Error(Errc::invalid_argument, who + ": the published address is empty");
    const auto* p = reinterpret_cast<const std::byte*>(bytes->data());
    return {p, p + bytes->size()};
}

std::optional<std::uint64_t> peer_rkey(std::uint16_t lid, std::uint32_t rkey) noexcept {
    Rendezvous& r = rendezvous();
    if (!r.on) return std::nullopt;
    try {
        auto text = read_file(file(r, "rkey", lid, hex(rkey, 8)), 16);
        if (!text || text->size() != 16) return std::nullopt;
        std::uint64_t v = 0;
        auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v, 16);
        if (ec != std::errc{} || end != text->data() + text->size()) return std::nullopt;
        return v;
    } catch (const std::exception& e) {
        WEFT_LOGF(compat, error, "%s", e.what());
        return std::nullopt;
    }
}

std::uint64_t RkeyAliases::resolve_remote(std::uint64_t rkey) const noexcept {
    if (rkey > UINT32_MAX) return rkey;
    const auto key = static_cast<std::uint32_t>(rkey);
    std::lock_guard lock(mu);
    if (auto it = weft_rkey.find(key); it != weft_rkey.end()) return it->second;
    // Only the front end's own keys are aliases across processes; others are weft's, used as they are.
    if (!(key & 0x80000000u)) return rkey;
    auto weft = peer_rkey(remote_lid, key);
    if (!weft) return rkey;  // names nothing: the responder refuses it
    try {
        weft_rkey.emplace(key, *weft);  // once per key of the peer's
    } catch (...) {
    }
    return *weft;
}

}  // namespace weft::compat
