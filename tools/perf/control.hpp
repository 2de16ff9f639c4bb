// weft-perf's control channel between client and server: a second QP of the same domain, connected through
// the same listener before the data QP, carrying fixed-size messages by send/recv. Everything a peer sends
// is checked before use: magic, version, kind, lengths, enum values and ranges.
//
//   client                                   server
//   connect(control) ───────────────────────▶ accept(control)
//   hello: setup, its region ───────────────▶ registers as asked, makes the data QP
//            ◀─────────────────────────────── hello: its region, features, device
//   connect(data) ──────────────────────────▶ accept(data)
//   begin: spec ────────────────────────────▶ prepares (receives, patterns, counter)
//            ◀─────────────────────────────── ready | refused: why
//   ... the test on the data QP ...
//   end: receives it left posted ───────────▶ waits for the last messages, checks
//            ◀─────────────────────────────── result: receives it left, what was wrong (or nothing)
//   both consume the other's leftover receives with zero-length sends (Drainer)
//   quit ───────────────────────────────────▶
//            ◀─────────────────────────────── bye
// A server that fails sends `abort: why` when it can.
#pragma once

#include "perf.hpp"

#include <deque>
#include <span>

namespace weft_perf {

enum class Kind : std::uint32_t { hello = 1, hello_reply, begin, ready, refused, end, result, quit, bye, abort };
std::string_view name(Kind k) noexcept;

inline constexpr std::uint32_t message_size = 256;
inline constexpr std::uint32_t protocol_version = 1;

/// A decoded control message; which fields mean something depends on the kind.
struct Message {
    Kind kind = Kind::hello;
    Setup setup{};                // hello
    std::uint32_t features = 0;   // hello, hello_reply
    weft::RemoteRegion region{};  // hello, hello_reply
    Spec spec{};                  // begin
    std::uint32_t left = 0;       // end, result: receives left posted
    std::string text;             // hello_reply: device; refused, result, abort: why
};

/// Encodes `m` into `out` (message_size bytes).
void encode(const Message& m, std::span<std::byte, message_size> out);
/// Decodes and checks `in` (`len` bytes arrived); throws Failure naming the first problem.
Message decode(std::span<const std::byte> in);

/// Empty when `spec` is acceptable under `setup` (and the backend's QP limits); the problem otherwise.
std::string check_spec(const Spec& spec, const Setup& setup);

class Control {
public:
    Control(weft::Domain& dom, const char* role);
    ~Control();

    /// Posts `m` and waits for its completion.
    void send(const Message& m);
    /// Waits up to `timeout` for the next message; fails naming `what` on timeout or error.
    Message receive(const char* what, std::chrono::seconds timeout);
    /// The next message if one has arrived; never blocks.
    std::optional<Message> try_receive();

    weft::QueuePair qp;

private:
    void poll_once();
    void repost(std::uint32_t slot);

    const char* role_;
    weft::CompletionQueue cq_;
    std::vector<std::byte> mem_;
    weft::MemoryRegion mr_;
    std::deque<Message> arrived_;
    bool send_done_ = true;
    static constexpr std::uint32_t receives = 4;
};

}  // namespace weft_perf
