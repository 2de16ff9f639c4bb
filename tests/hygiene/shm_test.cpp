// libfabric's shm provider backs every endpoint with a file in /dev/shm, "<pid>:<uid>:<index>", which it
// unlinks when the endpoint closes or when its signal handlers see the process die, never after SIGKILL
// (backends/ofi/ofi_shm.hpp). An shm domain's open removes those of this user's ended processes. The
// shm_regions cases need a provider-free build of the remover; shm_leftovers runs under an shm config.
#include <weft/weft.hpp>

#include "support.hpp"

#if WEFT_HYGIENE_OFI
#include "ofi_shm.hpp"
#endif

#include <boost/test/unit_test.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>

namespace weft::test {
namespace {

constexpr const char* child_flag = "--weft-hygiene-shm-child";

// The names in `dir` that begin with "<pid>:".
std::set<std::string> names_of(const std::filesystem::path& dir, pid_t pid) {
    std::set<std::string> out;
    const std::string prefix = std::to_string(pid) + ":";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(prefix, 0) == 0) out.insert(name);
    }
    return out;
}

bool exists(const std::filesystem::path& p) {
    std::error_code ec;
    return std::filesystem::exists(std::filesystem::symlink_status(p, ec));
}

}  // namespace

// The child: opens `config` (an shm config), connects two QPs and sends a message between them, says so on
// `fd`, and waits to be killed.
void run_shm_child_if_asked(int argc, char* argv[]) {
    if (argc != 4 || std::strcmp(argv[1], child_flag) != 0) return;
    const int fd = std::atoi(argv[2]);
    try {
        Domain dom = open(argv[3]);
        auto cq = dom.create_cq();
        auto a = dom.create_qp({.send_cq = cq, .recv_cq = cq});
        auto b = dom.create_qp({.send_cq = cq, .recv_cq = cq});
        std::vector<std::byte> buf(64);
        auto mr = dom.register_memory(buf, Access::local_write);
        if (!b.post_recv({recv(1, mr.slice(0, 32))})) throw std::runtime_error("receive refused");
        auto address = a.address();
        a.connect(b.address());
        b.connect(address);
        if (!a.post_send({send(2, mr.slice(32, 32))})) throw std::runtime_error("send refused");
        int seen = 0;
        Completion wc[4];
        while (seen < 2) seen += static_cast<int>(cq.poll(wc).size());
        char ready = 1;
        if (::write(fd, &ready, 1) != 1) std::_Exit(2);
        for (;;) ::pause();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "shm child: %s\n", e.what());
        std::_Exit(1);
    }
}

}  // namespace weft::test

namespace {

using namespace weft;

bool shm_config() { return test::hygiene_config().find("provider=shm") != std::string::npos; }

boost::test_tools::assertion_result is_shm(boost::unit_test::test_unit_id) {
    boost::test_tools::assertion_result r(shm_config());
    if (!r) r.message() << "needs an shm config (-- --backend=ofi:provider=shm), not " << test::hygiene_config();
    return r;
}

// A process that started, ran an shm domain with two connected QPs, and was killed with SIGKILL.
struct KilledChild {
    pid_t pid = -1;
    std::set<std::string> regions_alive;  // its regions while it ran

    explicit KilledChild(const std::string& config) {
        int p[2];
        BOOST_REQUIRE(::pipe(p) == 0);
        std::fflush(nullptr);
        pid = ::fork();
        BOOST_REQUIRE(pid >= 0);
        if (pid == 0) {
            ::close(p[0]);
            const std::string fd = std::to_string(p[1]);
            const char* argv[] = {"weft-hygiene-tests", "--weft-hygiene-shm-child", fd.c_str(), config.c_str(), nullptr};
            ::execv("/proc/self/exe", const_cast<char* const*>(argv));
            std::_Exit(127);
        }
        ::close(p[1]);
        char ready = 0;
        const ssize_t n = ::read(p[0], &ready, 1);
        ::close(p[0]);
        regions_alive = test::names_of("/dev/shm", pid);
        ::kill(pid, SIGKILL);
        int status = 0;
        ::waitpid(pid, &status, 0);
        BOOST_REQUIRE_MESSAGE(n == 1, "the child did not get its QPs connected");
        BOOST_REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(shm_leftovers, *boost::unit_test::precondition(&is_shm))

BOOST_AUTO_TEST_CASE(a_killed_process_leaves_its_regions_and_the_next_shm_open_removes_them) {
    const std::string config = test::hygiene_config();
    KilledChild child(config);
    // Two endpoints, two regions, named after the child's pid and our uid.
    BOOST_TEST_MESSAGE("regions of the shm child while it ran: " << child.regions_alive.size());
    BOOST_TEST(child.regions_alive.size() == 2u);
    for (const auto& name : child.regions_alive) {
        BOOST_TEST(name.find(":" + std::to_string(::getuid()) + ":") != std::string::npos, name);
    }
    // SIGKILL leaves them.
    BOOST_TEST(test::names_of("/dev/shm", child.pid) == child.regions_alive);
    {
        // Turned off, the domain leaves them too.
        Domain off = open(config + ",shm_cleanup=off");
        BOOST_TEST(test::names_of("/dev/shm", child.pid) == child.regions_alive);
    }
    // Our own live region (a QP's endpoint) stays through the next open, which removes the child's.
    Domain dom = open(config);
    auto cq = dom.create_cq();
    auto qp = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    const auto ours = test::names_of("/dev/shm", ::getpid());
    BOOST_TEST(!ours.empty());
    Domain again = open(config);
    BOOST_TEST(test::names_of("/dev/shm", child.pid).empty());
    BOOST_TEST(test::names_of("/dev/shm", ::getpid()) == ours);
}

BOOST_AUTO_TEST_SUITE_END()

#if WEFT_HYGIENE_OFI

namespace {

// A directory of its own under the temporary directory, removed with what it holds.
struct TempDir {
    std::filesystem::path path;
    TempDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "weft-shm-XXXXXX").string();
        BOOST_REQUIRE(::mkdtemp(pattern.data()) != nullptr);
        path = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    void touch(const std::string& name) const {
        const int fd = ::open((path / name).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        BOOST_REQUIRE(fd >= 0);
        ::close(fd);
    }
};

// The pid of a process that has ended and been reaped.
pid_t ended_pid() {
    const pid_t pid = ::fork();
    BOOST_REQUIRE(pid >= 0);
    if (pid == 0) std::_Exit(0);
    ::waitpid(pid, nullptr, 0);
    return pid;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(shm_regions)

BOOST_AUTO_TEST_CASE(names_are_pid_uid_index_in_decimal) {
    ofi::ShmRegionName n;
    BOOST_TEST(ofi::parse_shm_region_name("6446:0:0", n));
    BOOST_TEST(n.pid == 6446);
    BOOST_TEST(n.uid == 0u);
    BOOST_TEST(ofi::parse_shm_region_name("123:1000:17", n));
    BOOST_TEST(n.uid == 1000u);
    for (const char* other : {"", "6446", "6446:0", "6446:0:", ":0:0", "0:0:0", "06446:0:0", "6446:0:0:1",
                              "x6446:0:0", "6446:0:0x", "-5:0:0", "99999999999:0:0", "fi_shm:0:0", "sem.x"}) {
        BOOST_TEST(!ofi::parse_shm_region_name(other, n), other);
    }
}

BOOST_AUTO_TEST_CASE(only_this_users_regions_of_ended_processes_are_removed) {
    TempDir dir;
    const pid_t dead = ended_pid();
    const std::string uid = std::to_string(::getuid());
    const std::string d = std::to_string(dead);
    const std::string removed[] = {d + ":" + uid + ":0", d + ":" + uid + ":1"};
    const std::string kept[] = {
        std::to_string(::getpid()) + ":" + uid + ":0",  // a live process: this one
        "1:" + uid + ":0",                              // a live process: init
        d + ":" + std::to_string(::getuid() + 1) + ":0",  // another user's name
        d + ":" + uid,                                  // not a region's name
        "fi_" + d + ":" + uid + ":0",
    };
    for (const auto& n : removed) dir.touch(n);
    for (const auto& n : kept) dir.touch(n);
    // Not a regular file: left alone.
    const std::string subdir = d + ":" + uid + ":7";
    BOOST_REQUIRE(::mkdir((dir.path / subdir).c_str(), 0700) == 0);

    BOOST_TEST(ofi::remove_dead_shm_regions(dir.path.c_str()) == 2u);
    for (const auto& n : removed) BOOST_TEST(!test::exists(dir.path / n), n);
    for (const auto& n : kept) BOOST_TEST(test::exists(dir.path / n), n);
    BOOST_TEST(test::exists(dir.path / subdir));
    // Nothing left to remove.
    BOOST_TEST(ofi::remove_dead_shm_regions(dir.path.c_str()) == 0u);
    BOOST_TEST(ofi::remove_dead_shm_regions((dir.path / "missing").c_str()) == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

#endif
