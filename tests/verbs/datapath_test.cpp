// The verbs backend's data path over a fake provider (backends/verbs/fake_provider.hpp): no device needed.
// What the fake cannot do (error completions, which make the backend modify the QP) is left to the
// conformance suite on rxe.
#define BOOST_TEST_MODULE weft_verbs_datapath
#include <boost/test/unit_test.hpp>

#include "../../backends/verbs/fake_provider.hpp"

#include <weft/weft.hpp>

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <vector>

namespace {

namespace fake = weft::verbs::fake;

constexpr std::uint32_t depth = 32;
constexpr std::uint64_t local_addr = 0x10000;
constexpr std::uint32_t lkey = 0x1234;

struct Fixture {
    fake::FakeProvider p;
    fake::FakeSide s = fake::make_side(p, depth);
    weft::LocalSegment seg{local_addr, 64, lkey, nullptr};
    weft::RemoteRegion dst{0x7f0000000000, 1 << 20, 0x5678, weft::BackendKind::verbs};

    // Polls into `room` completions at a time until nothing is left; returns all.
    std::vector<weft::Completion> drain(std::size_t room = 16) {
        std::vector<weft::Completion> all;
        std::array<weft::Completion, 64> wc{};
        for (;;) {
            const auto got = s.cq.poll(std::span(wc.data(), room));
            if (got.empty()) return all;
            all.insert(all.end(), got.begin(), got.end());
        }
    }
    std::uint32_t in_fake_cq() const { return p.cq.head - p.cq.tail; }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(datapath_fake_provider, Fixture)

BOOST_AUTO_TEST_CASE(every_signaled_request_completes_once_in_order) {
    std::vector<weft::SendRequest> batch;
    for (std::uint64_t i = 0; i < 20; ++i) batch.push_back(weft::write(100 + i, seg, dst));
    BOOST_REQUIRE(s.qp.post_send(batch));
    const auto got = drain();
    BOOST_REQUIRE_EQUAL(got.size(), 20u);
    for (std::size_t i = 0; i < got.size(); ++i) {
        BOOST_TEST(got[i].id == 100 + i);
        BOOST_TEST(got[i].ok());
        BOOST_TEST(got[i].opcode == weft::Opcode::write);
        BOOST_TEST(got[i].byte_len == 64u);
        BOOST_TEST(got[i].qp_num == 0x11u);
        BOOST_TEST(!got[i].has_imm);
    }
}

BOOST_AUTO_TEST_CASE(a_signaled_completion_retires_the_unsignaled_before_it) {
    // Three rounds of a full queue, only the last request of each signaled: each round fits only if the
    // previous one was retired by its one completion.
    for (std::uint64_t round = 0; round < 3; ++round) {
        std::vector<weft::SendRequest> batch;
        for (std::uint64_t i = 0; i < depth; ++i) {
            batch.push_back(weft::write(round * 1000 + i, seg, dst).signaled(i + 1 == depth));
        }
        BOOST_REQUIRE(s.qp.post_send(batch));
        BOOST_TEST((s.qp.post_send({weft::write(9, seg, dst)}).code() == weft::PostStatus::Code::queue_full));
        const auto got = drain();
        BOOST_REQUIRE_EQUAL(got.size(), 1u);
        BOOST_TEST(got[0].id == round * 1000 + depth - 1);
    }
}

BOOST_AUTO_TEST_CASE(batches_that_straddle_the_end_of_the_ring_complete_in_order) {
    // Batches of 7 on a ring of 32 slots: most rounds end past the ring's last slot and go on at its first.
    std::uint64_t next = 0;
    for (int round = 0; round < 20; ++round) {
        std::vector<weft::SendRequest> batch;
        for (int i = 0; i < 7; ++i) batch.push_back(weft::write(next + static_cast<std::uint64_t>(i), seg, dst));
        BOOST_REQUIRE(s.qp.post_send(batch));
        const auto got = drain();
        BOOST_REQUIRE_EQUAL(got.size(), 7u);
        for (const auto& c : got) BOOST_TEST(c.id == next++);
    }
}

BOOST_AUTO_TEST_CASE(receive_batches_that_straddle_the_end_of_the_ring_complete_in_order) {
    std::uint64_t next = 0;
    for (int round = 0; round < 20; ++round) {
        std::vector<weft::RecvRequest> batch;
        for (int i = 0; i < 7; ++i) batch.push_back(weft::recv(next + static_cast<std::uint64_t>(i), seg));
        BOOST_REQUIRE(s.qp.post_recv(batch));
        fake::deliver(p.qp, 7, 16);
        const auto got = drain();
        BOOST_REQUIRE_EQUAL(got.size(), 7u);
        for (const auto& c : got) BOOST_TEST(c.id == next++);
    }
}

BOOST_AUTO_TEST_CASE(flag_bits_beyond_the_four_flags_are_ignored) {
    // SendFlags has four bits; a request with others set posts as if they were clear, alone or in a batch.
    const auto odd = [&](std::uint64_t id) {
        weft::SendRequest r = weft::write(id, seg, dst);
        r.flags = static_cast<weft::SendFlags>(static_cast<std::uint8_t>(r.flags) | 0xf0u);
        return r;
    };
    BOOST_REQUIRE(s.qp.post_send({odd(1)}));
    BOOST_REQUIRE(s.qp.post_send({weft::write(2, seg, dst), odd(3)}));
    const auto got = drain();
    BOOST_REQUIRE_EQUAL(got.size(), 3u);
    for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i].id == i + 1);
}

BOOST_AUTO_TEST_CASE(a_batch_that_does_not_fit_is_refused_whole) {
    std::vector<weft::SendRequest> batch(depth + 1, weft::write(1, seg, dst));
    BOOST_TEST((s.qp.post_send(batch).code() == weft::PostStatus::Code::queue_full));
    BOOST_TEST(in_fake_cq() == 0u);
    BOOST_TEST(s.qp.post_send(std::span<const weft::SendRequest>()).is_ok());
    batch.pop_back();
    BOOST_TEST(s.qp.post_send(batch).is_ok());
    BOOST_TEST(drain().size() == depth);
}

BOOST_AUTO_TEST_CASE(invalid_requests_are_refused_with_their_index_and_nothing_is_posted) {
    const std::array<weft::LocalSegment, 5> five{seg, seg, seg, seg, seg};
    const weft::RemoteRegion foreign(0x1000, 4096, 0x1'0000'0001ull, weft::BackendKind::verbs);
    struct Case {
        weft::SendRequest bad;
        const char* what;
    };
    const Case cases[] = {
        {weft::write(1, five, dst), "max_sge"},
        {weft::write(1, seg, foreign), "32 bits"},
        {weft::write(1, weft::LocalSegment{local_addr, 128, lkey, nullptr}, dst).inline_data(), "inline"},
        {weft::write(1, seg, dst).with_imm(1).with_imm(2), "opcode"},
        {weft::write(1, weft::LocalSegment{local_addr, 0x80000001u, lkey, nullptr}, dst), "max_msg_size"},
        {weft::write(1, seg, weft::RemoteRegion(0x1000, 4096, 1, weft::BackendKind::sim)), "another backend"},
    };
    for (const Case& c : cases) {
        const auto st = s.qp.post_send({weft::write(7, seg, dst), c.bad});
        BOOST_TEST_INFO("expecting a refusal naming " << c.what << ", got " << st);
        BOOST_TEST((st.code() == weft::PostStatus::Code::invalid));
        BOOST_TEST(st.index() == 1u);
        BOOST_TEST(std::string(st.reason()).find(c.what) != std::string::npos);
        BOOST_TEST(in_fake_cq() == 0u);
    }
    // The queue is as it was: a full queue still fits.
    std::vector<weft::SendRequest> batch(depth, weft::write(3, seg, dst));
    BOOST_TEST(s.qp.post_send(batch).is_ok());
    BOOST_TEST(drain().size() == depth);
}

BOOST_AUTO_TEST_CASE(single_requests_and_single_completions) {
    // One at a time: posted alone, polled alone, through a full queue and round its ring several times.
    for (std::uint64_t i = 0; i < 3 * depth; ++i) {
        BOOST_REQUIRE(s.qp.post_send({weft::write(i, seg, dst)}));
        std::array<weft::Completion, 16> wc{};
        const auto got = s.cq.poll(wc);
        BOOST_REQUIRE_EQUAL(got.size(), 1u);
        BOOST_TEST(got[0].id == i);
        BOOST_TEST(got[0].opcode == weft::Opcode::write);
    }
    // A single request is checked as a batch is.
    const auto st = s.qp.post_send({weft::write(1, seg, weft::RemoteRegion(0, 8, 1ull << 40, weft::BackendKind::verbs))});
    BOOST_TEST((st.code() == weft::PostStatus::Code::invalid));
    BOOST_TEST(std::string(st.reason()).find("32 bits") != std::string::npos);
    // So is a region of another backend, whose key may well fit in 32 bits.
    const auto foreign = s.qp.post_send({weft::write(1, seg, weft::RemoteRegion(0, 8, 1, weft::BackendKind::sim))});
    BOOST_TEST((foreign.code() == weft::PostStatus::Code::invalid));
    BOOST_TEST(std::string(foreign.reason()).find("another backend") != std::string::npos);
    const std::array<weft::LocalSegment, 2> two{seg, seg};
    BOOST_REQUIRE(s.qp.post_send({weft::send(2, two)}));  // the general way, alone
    BOOST_REQUIRE(s.qp.post_send({weft::send(3, seg)}));
    const auto got = drain(1);
    BOOST_REQUIRE_EQUAL(got.size(), 2u);
    BOOST_TEST(got[0].byte_len == 128u);
    BOOST_TEST(got[1].byte_len == 64u);
    // A full queue refuses a single request too.
    for (std::uint32_t i = 0; i < depth; ++i) BOOST_REQUIRE(s.qp.post_send({weft::write(i, seg, dst).unsignaled()}));
    BOOST_TEST((s.qp.post_send({weft::write(9, seg, dst)}).code() == weft::PostStatus::Code::queue_full));
}

BOOST_AUTO_TEST_CASE(a_request_the_provider_refuses_is_reported_and_only_those_before_it_count) {
    // Alone: nothing was posted, and the queue is as it was.
    p.qp.refuse_send_at = 0;
    auto st = s.qp.post_send({weft::write(1, seg, dst)});
    BOOST_TEST((st.code() == weft::PostStatus::Code::invalid));
    BOOST_TEST(st.index() == 0u);
    BOOST_TEST(std::string(st.reason()).find("provider refused the request") != std::string::npos);
    BOOST_TEST(in_fake_cq() == 0u);
    // In a batch: the two before it were posted and complete; the refused one and the one after did not.
    std::vector<weft::SendRequest> batch;
    for (std::uint64_t i = 0; i < 4; ++i) batch.push_back(weft::write(10 + i, seg, dst));
    p.qp.refuse_send_at = 2;
    st = s.qp.post_send(batch);
    BOOST_TEST((st.code() == weft::PostStatus::Code::invalid));
    BOOST_TEST(st.index() == 2u);
    const auto got = drain();
    BOOST_REQUIRE_EQUAL(got.size(), 2u);
    BOOST_TEST(got[0].id == 10u);
    BOOST_TEST(got[1].id == 11u);
    // Only those two took slots, and both retired: a full queue fits, alone and as a batch.
    std::vector<weft::SendRequest> full(depth, weft::write(20, seg, dst));
    BOOST_TEST(s.qp.post_send(full).is_ok());
    BOOST_TEST(drain().size() == depth);
    for (std::uint64_t i = 0; i < depth; ++i) BOOST_REQUIRE(s.qp.post_send({weft::write(30 + i, seg, dst)}));
    const auto singles = drain();
    BOOST_REQUIRE_EQUAL(singles.size(), depth);
    BOOST_TEST(singles.back().id == 30u + depth - 1);
}

BOOST_AUTO_TEST_CASE(a_gather_request_leaves_later_single_segment_requests_intact) {
    const std::array<weft::LocalSegment, 3> three{seg, seg, seg};
    BOOST_REQUIRE(s.qp.post_send({weft::write(1, three, dst), weft::send(2, seg)}));
    BOOST_REQUIRE(s.qp.post_send({weft::write(3, seg, dst), weft::send(4, seg)}));
    const auto got = drain();
    BOOST_REQUIRE_EQUAL(got.size(), 4u);
    BOOST_TEST(got[0].byte_len == 192u);
    BOOST_TEST(got[1].byte_len == 64u);
    BOOST_TEST(got[1].opcode == weft::Opcode::send);
    BOOST_TEST(got[2].byte_len == 64u);  // one segment, not the three the entry held before
    BOOST_TEST(got[3].byte_len == 64u);
}

BOOST_AUTO_TEST_CASE(a_poll_with_little_room_gets_every_completion_in_order) {
    std::vector<weft::SendRequest> batch;
    for (std::uint64_t i = 0; i < 21; ++i) batch.push_back(weft::write(i, seg, dst));
    BOOST_REQUIRE(s.qp.post_send(batch));
    auto got = drain(1);
    BOOST_REQUIRE_EQUAL(got.size(), 21u);
    for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i].id == i);
    // Again, with room for 3 at a time and a post in between polls.
    BOOST_REQUIRE(s.qp.post_send(batch));
    std::array<weft::Completion, 3> wc{};
    std::vector<std::uint64_t> ids;
    for (const auto& c : s.cq.poll(wc)) ids.push_back(c.id);
    BOOST_REQUIRE(s.qp.post_send({weft::write(500, seg, dst)}));
    for (const auto& c : drain(3)) ids.push_back(c.id);
    BOOST_REQUIRE_EQUAL(ids.size(), 22u);
    for (std::size_t i = 0; i < 21; ++i) BOOST_TEST(ids[i] == i);
    BOOST_TEST(ids[21] == 500u);
}

BOOST_AUTO_TEST_CASE(receives_report_length_and_immediate_data) {
    std::vector<weft::RecvRequest> recvs;
    for (std::uint64_t i = 0; i < 4; ++i) recvs.push_back(weft::recv(40 + i, seg));
    BOOST_REQUIRE(s.qp.post_recv(recvs));
    fake::deliver(p.qp, 2, 48);
    fake::deliver(p.qp, 2, 0, true, htonl(0xabcd0123));
    const auto got = drain();
    BOOST_REQUIRE_EQUAL(got.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) BOOST_TEST(got[i].id == 40 + i);
    BOOST_TEST(got[0].opcode == weft::Opcode::recv);
    BOOST_TEST(got[0].byte_len == 48u);
    BOOST_TEST(!got[1].has_imm);
    BOOST_TEST(got[2].opcode == weft::Opcode::recv_rdma_with_imm);
    BOOST_TEST(got[2].has_imm);
    BOOST_TEST(got[3].imm == 0xabcd0123u);
    // A scatter receive goes the general way and completes as well.
    const std::array<weft::LocalSegment, 2> two{seg, seg};
    BOOST_REQUIRE(s.qp.post_recv({weft::recv(50, two), weft::recv(51, seg)}));
    fake::deliver(p.qp, 2, 8);
    const auto more = drain();
    BOOST_REQUIRE_EQUAL(more.size(), 2u);
    BOOST_TEST(more[0].id == 50u);
    BOOST_TEST(more[1].id == 51u);
    const std::array<weft::LocalSegment, 5> five{seg, seg, seg, seg, seg};
    BOOST_TEST((s.qp.post_recv({weft::recv(52, seg), weft::recv(53, five)}).code() == weft::PostStatus::Code::invalid));
}

BOOST_AUTO_TEST_CASE(completions_found_by_wait_come_first) {
    BOOST_REQUIRE(s.qp.post_send({weft::write(1, seg, dst), weft::write(2, seg, dst)}));
    BOOST_TEST(s.cq.wait(std::chrono::milliseconds(0)));  // takes them from the CQ, for the next poll
    BOOST_TEST(in_fake_cq() == 0u);
    BOOST_REQUIRE(s.qp.post_send({weft::write(3, seg, dst)}));
    std::vector<std::uint64_t> ids;
    for (const auto& c : drain()) ids.push_back(c.id);
    BOOST_TEST(ids == (std::vector<std::uint64_t>{1, 2, 3}), boost::test_tools::per_element());
    BOOST_TEST(!s.cq.wait(std::chrono::milliseconds(0)));
}

BOOST_AUTO_TEST_CASE(fd_mode_arms_only_when_a_poll_finds_nothing) {
    (void)s.cq.fd();
    const std::uint64_t arms = p.cq.arms;
    BOOST_REQUIRE(s.qp.post_send({weft::write(1, seg, dst)}));
    std::array<weft::Completion, 4> wc{};
    BOOST_TEST(s.cq.poll(wc).size() == 1u);
    BOOST_TEST(p.cq.arms == arms);  // a poll that returns completions makes no provider call beyond the poll
    BOOST_TEST(s.cq.poll(wc).empty());
    BOOST_TEST(p.cq.arms == arms + 1);  // the one that found nothing re-armed
    BOOST_TEST(s.cq.poll(wc).empty());
    BOOST_TEST(p.cq.arms == arms + 1);  // and the next need not
}

BOOST_AUTO_TEST_SUITE_END()
