// Logging: nothing by default, the hook, the levels, the per-subsystem filter, $WEFT_LOG, and errors that
// name $WEFT_BACKEND or $WEFT_PLUGIN_PATH as their source.
#include <weft/weft.hpp>

#include <boost/test/unit_test.hpp>

#include "../support/expect_error.hpp"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

using namespace weft;
using weft::test::contains;
using weft::test::error_of;

namespace {

struct Message {
    LogLevel level;
    LogSubsystem subsystem;
    std::string text;
};

void capture(LogLevel level, LogSubsystem subsystem, std::string_view text, void* context) {
    static_cast<std::vector<Message>*>(context)->push_back({level, subsystem, std::string(text)});
}

// Captures every message while it lives; restores "off" and the default sink afterwards.
struct Captured {
    std::vector<Message> messages;
    Captured() { set_log_function(&capture, &messages); }
    ~Captured() {
        set_log_function(nullptr);
        set_log_level(LogLevel::off);
    }
    bool has(LogLevel level, std::string_view part) const {
        for (const auto& m : messages) {
            if (m.level == level && contains(m.text, part)) return true;
        }
        return false;
    }
    bool any_at(LogLevel level) const {
        for (const auto& m : messages) {
            if (m.level == level) return true;
        }
        return false;
    }
};

// Sets an environment variable for a scope.
struct ScopedEnv {
    std::string name;
    ScopedEnv(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
    ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

int evaluations = 0;
std::string counted(std::string text) {
    ++evaluations;
    return text;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(logging)

BOOST_AUTO_TEST_CASE(nothing_is_logged_by_default) {
    if (const char* env = std::getenv("WEFT_LOG"); env && *env) {
        BOOST_TEST_MESSAGE("skipped: WEFT_LOG is set in this environment, so logging is not at its default");
        return;
    }
    for (int i = 0; i < log_subsystem_count; ++i) {
        BOOST_TEST((log_level(static_cast<LogSubsystem>(i)) == LogLevel::off));
    }
    Captured c;
    set_log_level(LogLevel::off);
    auto dom = open("sim:fabric=log_default");
    auto cq = dom.create_cq();
    auto qp = dom.create_qp({.send_cq = cq, .recv_cq = cq});
    BOOST_TEST(c.messages.empty());
}

BOOST_AUTO_TEST_CASE(hook_receives_messages_at_or_above_the_level) {
    Captured c;
    set_log_level(LogLevel::info);
    BOOST_TEST(log_enabled(LogSubsystem::core, LogLevel::error));
    BOOST_TEST(log_enabled(LogSubsystem::core, LogLevel::info));
    BOOST_TEST(!log_enabled(LogSubsystem::core, LogLevel::debug));

    auto dom = open("sim:fabric=log_hook");
    BOOST_TEST(c.has(LogLevel::info, "opening \"sim:fabric=log_hook\" (given by the program)"));
    BOOST_TEST(c.has(LogLevel::info, "opened backend sim: device sim:log_hook/node0"));
    for (const auto& m : c.messages) BOOST_TEST((m.subsystem == LogSubsystem::core));
    auto cq = dom.create_cq({.depth = 64});
    BOOST_TEST(!c.any_at(LogLevel::debug), "a debug message was delivered at level info");

    set_log_level(LogLevel::debug);
    auto cq2 = dom.create_cq({.depth = 64});
    BOOST_TEST(c.has(LogLevel::debug, "created a CQ of depth"));
    std::vector<std::byte> buf(4096);
    auto mr = dom.register_memory(buf, Access::local_write);
    BOOST_TEST(c.has(LogLevel::debug, "registered 4096 bytes"));
}

BOOST_AUTO_TEST_CASE(message_text_is_built_only_when_wanted) {
    Captured c;
    evaluations = 0;
    set_log_level(LogLevel::warn);
    WEFT_LOGS(core, info, counted("not wanted"));
    WEFT_LOGF(core, debug, "%s", counted("not wanted either").c_str());
    BOOST_TEST(evaluations == 0);
    BOOST_TEST(c.messages.empty());
    WEFT_LOGS(core, warn, counted("wanted"));
    BOOST_TEST(evaluations == 1);
    BOOST_REQUIRE(c.messages.size() == 1u);
    BOOST_TEST(c.messages[0].text == "wanted");
    BOOST_TEST((c.messages[0].level == LogLevel::warn));
    // printf-style formatting of a message longer than the formatter's stack buffer arrives whole.
    const std::string long_text(3000, 'x');
    WEFT_LOGF(ofi, error, "%s|%d", long_text.c_str(), 42);
    BOOST_REQUIRE(c.messages.size() == 2u);
    BOOST_TEST(c.messages[1].text == long_text + "|42");
    BOOST_TEST((c.messages[1].subsystem == LogSubsystem::ofi));
}

BOOST_AUTO_TEST_CASE(subsystem_filter_keeps_other_subsystems_quiet) {
    Captured c;
    set_log_levels("debug:sim,ofi");
    BOOST_TEST((log_level(LogSubsystem::sim) == LogLevel::debug));
    BOOST_TEST((log_level(LogSubsystem::ofi) == LogLevel::debug));
    BOOST_TEST((log_level(LogSubsystem::core) == LogLevel::off));
    BOOST_TEST((log_level(LogSubsystem::verbs) == LogLevel::off));
    auto dom = open("sim:fabric=log_filter");
    for (const auto& m : c.messages) {
        BOOST_TEST((m.subsystem != LogSubsystem::core), "core logged \"" << m.text << "\" with core off");
    }
    // Items apply left to right: every subsystem at warn, then core at trace.
    set_log_levels("warn; trace:core");
    BOOST_TEST((log_level(LogSubsystem::core) == LogLevel::trace));
    BOOST_TEST((log_level(LogSubsystem::sim) == LogLevel::warn));
    BOOST_TEST((log_level(LogSubsystem::compat) == LogLevel::warn));
    auto dom2 = open("sim:fabric=log_filter2");
    BOOST_TEST(c.has(LogLevel::info, "opening \"sim:fabric=log_filter2\""));
}

BOOST_AUTO_TEST_CASE(bad_specifications_are_rejected_and_change_nothing) {
    Captured c;
    set_log_levels("info:core");
    for (const char* bad : {"loud", "debug:gpu", "", "info;;debug", "debug:", "warning", "info:core,"}) {
        auto e = error_of([&] { set_log_levels(bad); });
        BOOST_TEST((e.code() == Errc::invalid_argument), bad);
        BOOST_TEST(contains(e.what(), "off|error|warn|info|debug|trace"), bad << ": " << e.what());
        BOOST_TEST(contains(e.what(), "core|sim|verbs|ofi|compat"), bad);
        BOOST_TEST((log_level(LogSubsystem::core) == LogLevel::info), bad << " changed a level");
        BOOST_TEST((log_level(LogSubsystem::sim) == LogLevel::off), bad << " changed a level");
    }
    BOOST_TEST(contains(error_of([] { set_log_levels("debug:gpu"); }).what(), "\"gpu\" is not a subsystem"));
}

BOOST_AUTO_TEST_CASE(names_of_levels_and_subsystems) {
    BOOST_TEST(to_string(LogLevel::warn) == "warn");
    BOOST_TEST(to_string(LogLevel::trace) == "trace");
    BOOST_TEST(to_string(LogSubsystem::verbs) == "verbs");
    BOOST_TEST(to_string(LogSubsystem::compat) == "compat");
}

BOOST_AUTO_TEST_CASE(errors_caused_by_weft_backend_say_so) {
    Captured c;
    set_log_level(LogLevel::error);
    {
        ScopedEnv env("WEFT_BACKEND", "sim:sede=1");
        auto e = error_of([] { open(); });
        BOOST_TEST((e.code() == Errc::invalid_config));
        BOOST_TEST(contains(e.what(), "unknown key 'sede'"));
        BOOST_TEST(contains(e.what(), "(from WEFT_BACKEND=\"sim:sede=1\")"), e.what());
        BOOST_TEST(e.backend() == "sim");
        BOOST_TEST(c.has(LogLevel::error, "(from WEFT_BACKEND=\"sim:sede=1\")"));
    }
    {
        ScopedEnv env("WEFT_BACKEND", "infiniband");
        auto e = error_of([] { open(); });
        BOOST_TEST((e.code() == Errc::unknown_backend));
        BOOST_TEST(contains(e.what(), "(from WEFT_BACKEND=\"infiniband\")"), e.what());
    }
    {
        ScopedEnv env("WEFT_BACKEND", "--help");
        auto e = error_of([] { open(); });
        BOOST_TEST((e.code() == Errc::invalid_config));
        BOOST_TEST(contains(e.what(), "has character '-'"));
        BOOST_TEST(contains(e.what(), "(from WEFT_BACKEND=\"--help\")"), e.what());
    }
    {
        ScopedEnv env("WEFT_BACKEND", "sim:latency_ns=soon");
        auto e = error_of([] { open(); });
        BOOST_TEST(contains(e.what(), "(from WEFT_BACKEND=\"sim:latency_ns=soon\")"), e.what());
    }
    // The same mistakes given by the program do not blame the environment.
    auto e = error_of([] { open("sim:sede=1"); });
    BOOST_TEST(!contains(e.what(), "WEFT_BACKEND"), e.what());
}

BOOST_AUTO_TEST_CASE(open_logs_where_the_config_came_from) {
    Captured c;
    set_log_level(LogSubsystem::core, LogLevel::info);
    {
        ScopedEnv env("WEFT_BACKEND", "sim:fabric=log_env");
        auto dom = open();
        BOOST_TEST(c.has(LogLevel::info, "opening \"sim:fabric=log_env\" (from WEFT_BACKEND)"));
    }
    ::unsetenv("WEFT_BACKEND");
    auto dom = open();
    BOOST_TEST(c.has(LogLevel::info, "opening \"sim\" (the default: WEFT_BACKEND is unset)"));
}

BOOST_AUTO_TEST_SUITE_END()

// Cases that need a process of their own; disabled in a plain run, run by name by ctest.
BOOST_AUTO_TEST_SUITE(logging_in_a_fresh_process)

// Run alone (ctest log.environment) with WEFT_LOG="warn;debug:sim": libweft applied it when it loaded.
BOOST_AUTO_TEST_CASE(weft_log_is_applied_at_load, *boost::unit_test::disabled()) {
    const char* env = std::getenv("WEFT_LOG");
    BOOST_TEST_REQUIRE(env != nullptr, "run with WEFT_LOG=\"warn;debug:sim\"");
    BOOST_TEST_REQUIRE(std::string(env) == "warn;debug:sim");
    BOOST_TEST((log_level(LogSubsystem::sim) == LogLevel::debug));
    BOOST_TEST((log_level(LogSubsystem::core) == LogLevel::warn));
    BOOST_TEST((log_level(LogSubsystem::ofi) == LogLevel::warn));
}

// Run alone (ctest log.plugin_path), before any plugin was loaded in the process: a module found in a
// $WEFT_PLUGIN_PATH directory that does not load says where the directory came from.
BOOST_AUTO_TEST_CASE(plugin_load_failure_names_weft_plugin_path, *boost::unit_test::disabled()) {
    char dir[] = "/tmp/weft-plugin-path-XXXXXX";
    BOOST_TEST_REQUIRE(::mkdtemp(dir) != nullptr);
    const std::string module = std::string(dir) + "/libweft-verbs.so";
    std::ofstream(module) << "not a shared object\n";
    Captured c;
    set_log_level(LogSubsystem::core, LogLevel::debug);
    std::vector<BackendInfo> list;
    {
        ScopedEnv env("WEFT_PLUGIN_PATH", dir);
        list = backends();
    }
    ::unlink(module.c_str());
    ::rmdir(dir);
    BOOST_REQUIRE(list.size() >= 2u);
    BOOST_TEST(list[1].name == "verbs");
    BOOST_TEST(!list[1].usable);
    BOOST_TEST(contains(list[1].reason, "could not be loaded"), list[1].reason);
    BOOST_TEST(contains(list[1].reason, "(a directory from WEFT_PLUGIN_PATH)"), list[1].reason);
    BOOST_TEST(c.has(LogLevel::debug, "loading plugin " + module + " (from WEFT_PLUGIN_PATH)"));
    BOOST_TEST(c.has(LogLevel::info, "backend verbs unusable"));
}

BOOST_AUTO_TEST_SUITE_END()
