// Two-process mode of the conformance suite: side b of every Pair lives in a peer process.
//
// `weft-conformance -- --backend=CONFIG --peer=process` (or $WEFT_CONFORMANCE_PEER=process) forks a peer
// at start-up, before anything opens a domain, and keeps a socket to it. Side b's Domain is then a proxy
// (weft::detail::DomainImpl) whose CQs, QPs and memory regions forward every call over that socket to the
// peer, which runs it on real objects of the same backend config. The test bodies do not change: b's
// handles are ordinary weft handles. b's memory is a block of an arena mapped shared before the fork, so
// both processes see the same bytes at the same address.
//
// Between commands the peer polls all its CQs and keeps their completions, in order, for the proxy's
// poll: providers that move data only inside CQ calls (docs/backends/ofi.md, "Progress") keep going.
#pragma once

#include <weft/domain.hpp>

#include <cstddef>
#include <span>
#include <string>

namespace weft::test::peer {

/// Reads `--peer=MODE` from argv, or $WEFT_CONFORMANCE_PEER, and forks the peer for backend `config` when
/// the mode is "process". Returns 0 to go on, or an exit status after printing why not (an unknown mode, a
/// backend that cannot run in two processes). Call once, before anything opens a domain.
int start(int argc, char** argv, const std::string& config);
/// Closes the socket, reaps the peer, and returns non-zero (after saying so) if it died abnormally.
int finish();

/// True when the suite runs in two processes.
bool active();
/// A domain of the backend config `config` in the peer process (only when active()).
Domain open(const std::string& config);
/// Whether `dom` or `cq` lives in the peer process.
bool is_remote(const Domain& dom);
bool is_remote(const CompletionQueue& cq);

/// Zeroed bytes of the shared arena, returned to it when destroyed. Memory a peer domain registers must
/// come from here.
class Block {
public:
    Block() noexcept = default;
    /// Throws weft::Error when the arena has no room left.
    explicit Block(std::size_t bytes);
    Block(Block&& other) noexcept;
    Block& operator=(Block&& other) noexcept;
    ~Block();

    std::span<std::byte> bytes() const noexcept { return bytes_; }

private:
    void release() noexcept;
    std::span<std::byte> bytes_;
};

}  // namespace weft::test::peer
