// The verbs backend's data path over a fake provider (backends/verbs/fake_provider.hpp): no device needed.
// What the fake cannot do (error completions, which make the backend modify the QP) is left to the
// conformance suite on rxe.
#define BOOST_TEST_MODULE weft_verbs_datapath
#include <boost/test/unit_test.hpp>

#include "../../backends/verbs/fake_provider.hpp"

#include <weft/weft.hpp>

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
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

BOOST_AUTO_TEST_CASE(a_queue_filled_by_batches_of_any_size_takes_exactly_its_depth_each_round) {
    // The poster keeps the position it may post up to and reads the poller's again only when that refuses: a
    // queue emptied by a poll must take its whole depth again, alone or in batches, and nothing beyond it.
    for (std::uint32_t round = 0; round < 6; ++round) {
        std::uint32_t posted = 0;
        while (posted < depth) {
            const std::uint32_t k = std::min(1 + (posted + round) % 3, depth - posted);
            std::vector<weft::SendRequest> batch(k, weft::write(posted, seg, dst));
            BOOST_REQUIRE(k == 1 ? s.qp.post_send({batch[0]}) : s.qp.post_send(batch));
            posted += k;
        }
        BOOST_TEST((s.qp.post_send({weft::write(9, seg, dst)}).code() == weft::PostStatus::Code::queue_full));
        BOOST_TEST((s.qp.post_send({weft::write(9, seg, dst), weft::write(9, seg, dst)}).code() ==
                    weft::PostStatus::Code::queue_full));
        BOOST_TEST(drain().size() == depth);
    }
}

BOOST_AUTO_TEST_CASE(a_full_receive_queue_takes_as_many_receives_as_the_completions_polled_retired) {
    // As many as each poll retired fit at once, and one more does not.
    std::vector<weft::RecvRequest> fill(depth, weft::recv(1, seg));
    BOOST_REQUIRE(s.qp.post_recv(fill));
    std::array<weft::Completion, 3> wc{};
    for (int round = 0; round < 2 * static_cast<int>(depth); ++round) {
        BOOST_TEST((s.qp.post_recv({weft::recv(2, seg)}).code() == weft::PostStatus::Code::queue_full));
        fake::deliver(p.qp, 1 + static_cast<std::uint32_t>(round % 3), 16);
        const std::size_t freed = s.cq.poll(std::span(wc.data(), 3)).size();
        BOOST_REQUIRE_EQUAL(freed, static_cast<std::size_t>(1 + round % 3));
        std::vector<weft::RecvRequest> more(freed + 1, weft::recv(3, seg));
        BOOST_TEST((s.qp.post_recv(more).code() == weft::PostStatus::Code::queue_full));
        more.pop_back();
        BOOST_REQUIRE(s.qp.post_recv(more));
    }
    fake::deliver(p.qp, depth, 16);
    BOOST_TEST(drain().size() == depth);
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

// ---- What the provider is handed

namespace {

// A receive as the provider saw it in post_recv: its wr_id and its scatter list, copied during the call.
struct SeenRecv {
    std::uint64_t wr_id = 0;
    std::vector<ibv_sge> sges;
};
std::vector<SeenRecv> seen_recvs;

int recording_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    for (const ibv_recv_wr* w = wr; w != nullptr; w = w->next) {
        seen_recvs.push_back({w->wr_id, std::vector<ibv_sge>(w->sg_list, w->sg_list + w->num_sge)});
    }
    return fake::post_recv(qp, wr, bad);
}

// A send-queue request as the provider saw it in post_send.
struct SeenSend {
    std::uint64_t wr_id = 0;
    ibv_wr_opcode opcode = IBV_WR_SEND;
    unsigned send_flags = 0;
    std::uint32_t imm_data = 0;  // as the provider reads it: network byte order
    std::uint64_t remote_addr = 0;
    std::uint32_t rkey = 0;
};
std::vector<SeenSend> seen_sends;

int recording_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    for (const ibv_send_wr* w = wr; w != nullptr; w = w->next) {
        seen_sends.push_back(
            {w->wr_id, w->opcode, w->send_flags, w->imm_data, w->wr.rdma.remote_addr, w->wr.rdma.rkey});
    }
    return fake::post_send(qp, wr, bad);
}

// The fixture's side over a provider whose post_send and post_recv record what they are handed (set before
// the QP is made: the QP keeps the provider's entries from then).
struct RecordingFixture {
    fake::FakeProvider p;
    fake::FakeSide s = [this] {
        p.context.ops.post_send = &recording_post_send;
        p.context.ops.post_recv = &recording_post_recv;
        seen_sends.clear();
        seen_recvs.clear();
        return fake::make_side(p, depth);
    }();
    weft::LocalSegment seg{local_addr, 64, lkey, nullptr};
    weft::RemoteRegion dst{0x7f0000000000, 1 << 20, 0x5678, weft::BackendKind::verbs};
};

bool same(const ibv_sge& a, const weft::LocalSegment& b) {
    return a.addr == b.addr && a.length == b.length && a.lkey == b.lkey;
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(requests_with_immediate_data_hand_the_provider_their_value_in_network_order,
                        RecordingFixture) {
    // In a batch, between requests without immediate data, and alone (the single-request path).
    BOOST_REQUIRE(s.qp.post_send({weft::write(1, seg, dst), weft::write(2, seg, dst).with_imm(0x01020304),
                                  weft::send(3, seg).with_imm(0xa0b0c0d0), weft::send(4, seg)}));
    BOOST_REQUIRE(s.qp.post_send({weft::write(5, seg, dst).with_imm(0xfeedf00d)}));
    BOOST_REQUIRE_EQUAL(seen_sends.size(), 5u);
    BOOST_TEST(seen_sends[0].opcode == IBV_WR_RDMA_WRITE);
    BOOST_TEST(seen_sends[1].opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
    BOOST_TEST(seen_sends[1].imm_data == htonl(0x01020304));
    BOOST_TEST(seen_sends[1].remote_addr == dst.addr());
    BOOST_TEST(seen_sends[1].rkey == 0x5678u);
    BOOST_TEST((seen_sends[1].send_flags & IBV_SEND_SIGNALED) != 0);
    BOOST_TEST(seen_sends[2].opcode == IBV_WR_SEND_WITH_IMM);
    BOOST_TEST(seen_sends[2].imm_data == htonl(0xa0b0c0d0));
    BOOST_TEST(seen_sends[3].opcode == IBV_WR_SEND);
    BOOST_TEST(seen_sends[4].opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
    BOOST_TEST(seen_sends[4].imm_data == htonl(0xfeedf00d));
    // Their completions report the opcode without immediate data, as verbs does.
    std::array<weft::Completion, 16> wc{};
    const auto got = s.cq.poll(wc);
    BOOST_REQUIRE_EQUAL(got.size(), 5u);
    BOOST_TEST(got[1].opcode == weft::Opcode::write);
    BOOST_TEST(got[2].opcode == weft::Opcode::send);
    BOOST_TEST(got[4].opcode == weft::Opcode::write);
    // A batch across the end of the ring, with immediate data before and after the wrap: every request
    // with its own value, the others as they are.
    std::vector<weft::SendRequest> around;
    for (std::uint32_t i = 0; i < depth - 2; ++i) {
        const weft::SendRequest w = weft::write(100 + i, seg, dst);
        around.push_back(i % 3 == 1 ? w.with_imm(1000 + i) : w);
    }
    BOOST_REQUIRE(s.qp.post_send(around));  // positions 5 to 34 of a ring of 32 slots
    BOOST_REQUIRE_EQUAL(seen_sends.size(), 5u + around.size());
    for (std::uint32_t i = 0; i < around.size(); ++i) {
        const SeenSend& w = seen_sends[5 + i];
        BOOST_TEST_INFO("request " << i);
        BOOST_TEST(w.opcode == (i % 3 == 1 ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE));
        if (i % 3 == 1) BOOST_TEST(w.imm_data == htonl(1000 + i));
    }
    std::vector<std::uint64_t> ids;
    for (auto more = s.cq.poll(wc); !more.empty(); more = s.cq.poll(wc)) {
        for (const auto& c : more) ids.push_back(c.id);
    }
    BOOST_REQUIRE_EQUAL(ids.size(), around.size());
    for (std::uint32_t i = 0; i < ids.size(); ++i) BOOST_TEST(ids[i] == 100 + i);
    seen_sends.resize(5);
    // Immediate data does not let a request past the other checks: another backend's region, a key that
    // is not a verbs key, more inline data than the QP takes, a message longer than the device's.
    const weft::RemoteRegion sim_dst{0x1000, 64, 7, weft::BackendKind::sim};
    const weft::RemoteRegion foreign{0x1000, 64, 0x1'0000'0001ull, weft::BackendKind::verbs};
    const weft::LocalSegment big{local_addr, 128, lkey, nullptr};
    const weft::LocalSegment too_long{local_addr, 0x80000001u, lkey, nullptr};
    for (const auto& bad : {weft::write(6, seg, sim_dst).with_imm(1), weft::write(6, seg, foreign).with_imm(1),
                            weft::write(6, big, dst).with_imm(1).inline_data(),
                            weft::write(6, too_long, dst).with_imm(1)}) {
        const weft::PostStatus one = s.qp.post_send({bad});
        const weft::PostStatus batch = s.qp.post_send({weft::write(7, seg, dst), bad});
        BOOST_TEST((one.code() == weft::PostStatus::Code::invalid));
        BOOST_TEST((batch.code() == weft::PostStatus::Code::invalid));
        BOOST_TEST(batch.index() == 1u);
    }
    BOOST_TEST(seen_sends.size() == 5u);  // nothing of them reached the provider
}

BOOST_FIXTURE_TEST_CASE(a_receive_whose_one_segment_is_a_list_posts_the_list_s_segment, RecordingFixture) {
    // sg_list set with num_sge 1 (a list of one a program made itself): the fast path, which reads `sge`,
    // must not take it, wherever it sits in the batch.
    const weft::LocalSegment listed{0x4000, 24, 41, nullptr};
    const weft::LocalSegment own{0x8000, 64, 31, nullptr};
    weft::RecvRequest from_list = weft::recv(71, own);
    from_list.sg_list = &listed;
    for (std::size_t at = 0; at < 5; ++at) {
        std::vector<weft::RecvRequest> batch(5, weft::recv(70, own));
        batch[at] = from_list;
        seen_recvs.clear();
        BOOST_REQUIRE(s.qp.post_recv(batch));
        BOOST_REQUIRE_EQUAL(seen_recvs.size(), 5u);
        for (std::size_t i = 0; i < 5; ++i) {
            BOOST_REQUIRE_EQUAL(seen_recvs[i].sges.size(), 1u);
            BOOST_TEST(same(seen_recvs[i].sges[0], i == at ? listed : own));
        }
        fake::deliver(p.qp, 5, 8);
        std::array<weft::Completion, 16> wc{};
        const auto got = s.cq.poll(wc);
        BOOST_REQUIRE_EQUAL(got.size(), 5u);
        for (std::size_t i = 0; i < 5; ++i) BOOST_TEST(got[i].id == (i == at ? 71u : 70u));
    }
}

BOOST_FIXTURE_TEST_CASE(a_scatter_receive_reaches_the_provider_whole_and_later_receives_keep_one_segment,
                        RecordingFixture) {
    const std::array<weft::LocalSegment, 3> three{weft::LocalSegment{0x1000, 16, 11, nullptr},
                                                  weft::LocalSegment{0x2000, 32, 12, nullptr},
                                                  weft::LocalSegment{0x3000, 48, 13, nullptr}};
    const std::array<weft::LocalSegment, 4> four{weft::LocalSegment{0x4000, 8, 21, nullptr},
                                                 weft::LocalSegment{0x5000, 8, 22, nullptr},
                                                 weft::LocalSegment{0x6000, 8, 23, nullptr},
                                                 weft::LocalSegment{0x7000, 8, 24, nullptr}};
    const weft::LocalSegment one{0x8000, 64, 31, nullptr};
    const weft::LocalSegment other{0x9000, 128, 32, nullptr};
    // A scatter receive, a single one, then one with the QP's max_sge segments: one batch.
    BOOST_REQUIRE(s.qp.post_recv({weft::recv(60, three), weft::recv(61, one), weft::recv(62, four)}));
    BOOST_REQUIRE_EQUAL(seen_recvs.size(), 3u);
    BOOST_REQUIRE_EQUAL(seen_recvs[0].sges.size(), 3u);
    for (std::size_t i = 0; i < three.size(); ++i) BOOST_TEST(same(seen_recvs[0].sges[i], three[i]));
    BOOST_REQUIRE_EQUAL(seen_recvs[1].sges.size(), 1u);
    BOOST_TEST(same(seen_recvs[1].sges[0], one));
    BOOST_REQUIRE_EQUAL(seen_recvs[2].sges.size(), 4u);
    for (std::size_t i = 0; i < four.size(); ++i) BOOST_TEST(same(seen_recvs[2].sges[i], four[i]));
    // Work-request entries that carried a scatter list go back to one segment of their own: the next batch
    // (the fast path, built in the same entries) hands the provider each receive's own segment only.
    BOOST_REQUIRE(s.qp.post_recv({weft::recv(63, other), weft::recv(64, one), weft::recv(65, other)}));
    BOOST_REQUIRE_EQUAL(seen_recvs.size(), 6u);
    for (std::size_t i = 3; i < 6; ++i) BOOST_REQUIRE_EQUAL(seen_recvs[i].sges.size(), 1u);
    BOOST_TEST(same(seen_recvs[3].sges[0], other));
    BOOST_TEST(same(seen_recvs[4].sges[0], one));
    BOOST_TEST(same(seen_recvs[5].sges[0], other));
    // Each completes once, in order, with its own id.
    fake::deliver(p.qp, 6, 8);
    std::array<weft::Completion, 16> wc{};
    const auto got = s.cq.poll(wc);
    BOOST_REQUIRE_EQUAL(got.size(), 6u);
    for (std::size_t i = 0; i < got.size(); ++i) {
        BOOST_TEST(got[i].id == 60 + i);
        BOOST_TEST(got[i].opcode == weft::Opcode::recv);
        BOOST_TEST(got[i].ok());
    }
    BOOST_TEST(s.cq.poll(wc).empty());
}

// ---- Shared receive queue

namespace {

// A shared receive queue of `max_wr` receives over the fake's, its receives completing on the fixture's CQ
// and on a second one.
struct SharedFixture : Fixture {
    static constexpr std::uint32_t max_wr = 8;
    std::shared_ptr<weft::verbs::VerbsCq> cq1 = std::dynamic_pointer_cast<weft::verbs::VerbsCq>(s.cq.shared_impl());
    std::unique_ptr<fake::FakeCq> fake2 = std::make_unique<fake::FakeCq>();
    std::shared_ptr<weft::verbs::VerbsCq> cq2;
    weft::CompletionQueue second;
    weft::SharedReceiveQueue srq;

    SharedFixture() {
        auto dev = fake::make_device(depth);
        fake2->cq.context = &p.context;
        cq2 = std::make_shared<weft::verbs::VerbsCq>(weft::verbs::Adopt{}, dev, &fake2->cq, nullptr);
        second = weft::CompletionQueue(cq2);
        auto impl = std::make_shared<weft::verbs::VerbsSrq>(weft::verbs::Adopt{}, dev, &p.srq.srq, max_wr, 2);
        impl->attach(cq1);
        impl->attach(cq2);
        impl->attach(cq1);  // once per CQ, however many QPs complete there
        srq = weft::SharedReceiveQueue(impl);
    }
    std::vector<weft::Completion> drain_second() {
        std::vector<weft::Completion> all;
        std::array<weft::Completion, 16> wc{};
        for (auto got = second.poll(wc); !got.empty(); got = second.poll(wc)) all.insert(all.end(), got.begin(), got.end());
        return all;
    }
    std::vector<weft::RecvRequest> receives(std::uint64_t first, std::size_t n) const {
        std::vector<weft::RecvRequest> out;
        for (std::size_t i = 0; i < n; ++i) out.push_back(weft::recv(first + i, seg));
        return out;
    }
};

}  // namespace

BOOST_FIXTURE_TEST_CASE(shared_queue_receives_complete_out_of_order_between_other_completions, SharedFixture) {
    BOOST_REQUIRE(srq.post_recv(receives(100, max_wr)));
    BOOST_TEST((srq.post_recv({weft::recv(1, seg)}).code() == weft::PostStatus::Code::queue_full));
    // On the first CQ: a write's completion, two receives taken by QP 0x21, another write, one more receive;
    // on the second, two receives taken by QP 0x22 in between.
    BOOST_REQUIRE(s.qp.post_send({weft::write(1, seg, dst)}));
    fake::deliver_shared(p.srq, p.cq, 0x21, 2, 10);
    BOOST_REQUIRE(s.qp.post_send({weft::write(2, seg, dst)}));
    fake::deliver_shared(p.srq, *fake2, 0x22, 2, 20);
    fake::deliver_shared(p.srq, p.cq, 0x21, 1, 30);
    const auto on2 = drain_second();
    BOOST_REQUIRE_EQUAL(on2.size(), 2u);
    BOOST_TEST(on2[0].id == 102u);
    BOOST_TEST(on2[1].id == 103u);
    BOOST_TEST(on2[1].qp_num == 0x22u);
    BOOST_TEST(on2[1].byte_len == 20u);
    BOOST_TEST(on2[1].opcode == weft::Opcode::recv);
    const auto on1 = drain();
    const std::uint64_t ids[] = {1, 100, 101, 2, 104};
    const std::uint32_t lens[] = {64, 10, 10, 64, 30};
    BOOST_REQUIRE_EQUAL(on1.size(), 5u);
    for (std::size_t i = 0; i < 5; ++i) {
        BOOST_TEST_CONTEXT("completion " << i) {
            BOOST_TEST(on1[i].id == ids[i]);
            BOOST_TEST(on1[i].byte_len == lens[i]);
            BOOST_TEST(on1[i].status == weft::WcStatus::success);
        }
    }
    BOOST_TEST(on1[1].qp_num == 0x21u);
    BOOST_TEST(on1[3].opcode == weft::Opcode::write);
    // The five completed receives' slots came back, from both CQs: five fit again, a sixth does not.
    BOOST_TEST(srq.post_recv(receives(200, 5)).is_ok());
    BOOST_TEST((srq.post_recv({weft::recv(1, seg)}).code() == weft::PostStatus::Code::queue_full));
    // A flushed receive keeps its id and says recv, with no length.
    fake::deliver_shared(p.srq, p.cq, 0x21, 1, 99, IBV_WC_WR_FLUSH_ERR);
    const auto flushed = drain();
    BOOST_REQUIRE_EQUAL(flushed.size(), 1u);
    BOOST_TEST(flushed[0].id == 105u);
    BOOST_TEST(flushed[0].status == weft::WcStatus::flushed);
    BOOST_TEST(flushed[0].opcode == weft::Opcode::recv);
    BOOST_TEST(flushed[0].byte_len == 0u);
    // The rest, taken in the order posted.
    fake::deliver_shared(p.srq, *fake2, 0x22, max_wr, 1);
    std::vector<std::uint64_t> rest;
    for (const auto& c : drain_second()) rest.push_back(c.id);
    BOOST_TEST(rest == (std::vector<std::uint64_t>{106, 107, 200, 201, 202, 203, 204}), boost::test_tools::per_element());
    BOOST_TEST(srq.post_recv(receives(300, max_wr)).is_ok());
}

BOOST_FIXTURE_TEST_CASE(a_shared_queue_batch_refused_midway_keeps_the_slots_of_the_rest, SharedFixture) {
    p.srq.refuse_at = 2;
    const auto st = srq.post_recv(receives(10, 4));
    BOOST_TEST((st.code() == weft::PostStatus::Code::invalid));
    BOOST_TEST(st.index() == 2u);
    // Two were posted; six more fit, and no more.
    BOOST_TEST(srq.post_recv(receives(20, max_wr - 2)).is_ok());
    BOOST_TEST((srq.post_recv({weft::recv(1, seg)}).code() == weft::PostStatus::Code::queue_full));
    // A receive with more segments than the queue's is refused before anything is posted.
    fake::deliver_shared(p.srq, p.cq, 0x21, 1, 8);
    const std::array<weft::LocalSegment, 3> three{seg, seg, seg};
    const auto bad = srq.post_recv({weft::recv(30, seg), weft::recv(31, three)});
    BOOST_TEST((bad.code() == weft::PostStatus::Code::invalid));
    BOOST_TEST(bad.index() == 1u);
    fake::deliver_shared(p.srq, p.cq, 0x21, max_wr, 8);
    std::vector<std::uint64_t> ids;
    for (const auto& c : drain()) ids.push_back(c.id);
    BOOST_TEST(ids == (std::vector<std::uint64_t>{10, 11, 20, 21, 22, 23, 24, 25}), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(a_destroyed_shared_queue_leaves_its_completions_to_be_dropped, SharedFixture) {
    BOOST_REQUIRE(srq.post_recv(receives(10, 2)));
    fake::deliver_shared(p.srq, p.cq, 0x21, 2, 8);
    srq = weft::SharedReceiveQueue();  // its two completions wait in the CQ
    BOOST_REQUIRE(s.qp.post_send({weft::write(3, seg, dst)}));
    const auto got = drain();
    BOOST_REQUIRE_EQUAL(got.size(), 1u);
    BOOST_TEST(got[0].id == 3u);
}

// Pollers of two CQs hand slots back at the same time as the poster takes them: every receive completes once,
// with its own id, and every slot comes back.
BOOST_AUTO_TEST_CASE(pollers_of_two_cqs_hand_slots_back_while_the_poster_posts) {
    Fixture f;
    constexpr std::uint32_t slots = 512;
    auto dev = fake::make_device(depth);
    auto fake2 = std::make_unique<fake::FakeCq>();
    fake2->cq.context = &f.p.context;
    auto cq1 = std::dynamic_pointer_cast<weft::verbs::VerbsCq>(f.s.cq.shared_impl());
    auto cq2 = std::make_shared<weft::verbs::VerbsCq>(weft::verbs::Adopt{}, dev, &fake2->cq, nullptr);
    weft::CompletionQueue second(cq2);
    auto impl = std::make_shared<weft::verbs::VerbsSrq>(weft::verbs::Adopt{}, dev, &f.p.srq.srq, slots, 1);
    impl->attach(cq1);
    impl->attach(cq2);
    weft::SharedReceiveQueue srq(impl);
    std::vector<std::uint32_t> seen(3 * slots, 0);
    std::uint64_t next_id = 0;
    auto post = [&](std::uint32_t n) {
        for (std::uint32_t i = 0; i < n; ++i) {
            while (!srq.post_recv({weft::recv(next_id, f.seg)})) {
            }
            ++next_id;
        }
    };
    post(slots);
    for (int round = 0; round < 2; ++round) {
        // Every posted receive is taken, alternately into the two CQs; then two threads poll them while this
        // one posts as many again, taking each slot as soon as a poller hands it back.
        for (std::uint32_t i = 0; i < slots; ++i) {
            fake::deliver_shared(f.p.srq, i % 2 == 0 ? f.p.cq : *fake2, 0x21 + i % 2, 1, 8);
        }
        auto poller = [&seen](weft::CompletionQueue& cq, std::uint32_t want) {
            std::array<weft::Completion, 8> wc{};
            for (std::uint32_t got = 0; got < want;) {
                for (const auto& c : cq.poll(wc)) {
                    ++seen[c.id];
                    ++got;
                }
            }
        };
        std::thread a(poller, std::ref(f.s.cq), slots / 2);
        std::thread b(poller, std::ref(second), slots / 2);
        post(slots);
        a.join();
        b.join();
    }
    BOOST_TEST((srq.post_recv({weft::recv(1, f.seg)}).code() == weft::PostStatus::Code::queue_full));
    fake::deliver_shared(f.p.srq, f.p.cq, 0x21, slots, 8);
    for (const auto& c : f.drain()) ++seen[c.id];
    BOOST_TEST(next_id == 3u * slots);
    std::uint32_t once = 0;
    for (std::uint32_t n : seen) once += n == 1 ? 1 : 0;
    BOOST_TEST(once == 3u * slots);
}

BOOST_AUTO_TEST_SUITE_END()
