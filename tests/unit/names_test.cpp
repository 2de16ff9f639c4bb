// Readable names of statuses, opcodes, states, access rights and post results.
#include <weft/weft.hpp>

#include <boost/test/unit_test.hpp>

#include <set>
#include <sstream>

using namespace weft;

BOOST_AUTO_TEST_SUITE(names)

BOOST_AUTO_TEST_CASE(every_status_has_a_distinct_name_and_description) {
    std::set<std::string_view> seen;
    for (int i = 0; i < wc_status_count; ++i) {
        auto s = static_cast<WcStatus>(i);
        BOOST_TEST(to_string(s) != "unknown_status");
        BOOST_TEST(!describe(s).empty());
        seen.insert(to_string(s));
    }
    BOOST_TEST(seen.size() == static_cast<std::size_t>(wc_status_count));
    BOOST_TEST(to_string(WcStatus::rnr_retry_exceeded) == "rnr_retry_exceeded");
    BOOST_TEST(to_string(WcStatus::flushed) == "flushed");
}

BOOST_AUTO_TEST_CASE(opcodes_and_states_print) {
    std::ostringstream os;
    os << Opcode::recv_rdma_with_imm << ' ' << QpState::rts << ' ' << (Access::local_write | Access::remote_read);
    BOOST_TEST(os.str() == "recv_rdma_with_imm rts local_write|remote_read");
    BOOST_TEST(to_string(Access::none) == "none");
}

BOOST_AUTO_TEST_CASE(completions_print_what_matters) {
    Completion c;
    c.id = 7;
    c.status = WcStatus::remote_access;
    c.opcode = Opcode::write;
    c.qp_num = 3;
    c.vendor_err = 0x88;
    std::ostringstream os;
    os << c;
    BOOST_TEST(os.str() == "id=7 status=remote_access opcode=write byte_len=0 qp=3 vendor_err=0x88");
}

BOOST_AUTO_TEST_CASE(post_status_is_cheap_and_explains_itself) {
    PostStatus ok;
    BOOST_TEST(static_cast<bool>(ok));
    auto inv = PostStatus::invalid(3, "too many segments");
    BOOST_TEST(!inv);
    std::ostringstream os;
    os << inv << " / " << PostStatus::queue_full();
    BOOST_TEST(os.str().find("invalid request 3: too many segments") == 0u);
    BOOST_TEST(os.str().find("queue_full:") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
