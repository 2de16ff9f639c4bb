// Fuzz target: the frames of the ofi backend's listener rendezvous (backends/ofi/ofi_cm.cpp): each input is
// what a stray TCP client sends to a weft::listen port, or a stray server answers weft::connect, read as
// the backend reads it (wire::read_frame over the bytes; the connection closes where they end). A hello or
// accepted frame's payload is split as a greeting (address, private data), whose address then goes through
// QueuePair::connect's checks (ofi_fuzz.hpp); a refusal's text is made printable for the error message.
// Properties: no crash, no read outside the input; the header is checked before any payload is asked for, and
// no more than 64 KiB of payload is; an accepted frame encodes back to the bytes it was read from, and an
// accepted greeting's address and private data lie inside its payload, the private data within the limit,
// and encode back to it; a refusal's text reaches the message printable and bounded.
#include "fuzz.hpp"
#include "ofi_fuzz.hpp"

#include <weft/detail/bytes.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace wire = weft::ofi::wire;

namespace {

constexpr const char* target = "ofi_rendezvous";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
    const auto input = weft::fuzz::bytes(data, size);
    std::size_t offset = 0;
    std::vector<std::size_t> asked;
    const wire::ReadExact read = [&](std::byte* dst, std::size_t n) -> std::string {
        asked.push_back(n);
        const std::size_t got = std::min(n, size - offset);
        if (got > 0) std::memcpy(dst, data + offset, got);
        offset += got;
        return got == n ? std::string() : std::string("the peer closed the rendezvous connection");
    };
    wire::Frame frame;
    const std::string why = wire::read_frame(read, frame);

    if (asked.empty() || asked[0] != wire::frame_header || asked.size() > 2) {
        weft::fuzz::property_failed(target, "the frame was not read as a header, then at most one payload");
    }
    if (asked.size() == 2) {
        // A payload was asked for: only after a whole, well-formed header, and only as long as it says.
        const bool magic = size >= wire::frame_header && std::memcmp(data, "weftofi2", 8) == 0;
        const auto length = magic ? weft::detail::get_le<std::uint32_t>(input.data() + 12) : 0u;
        if (!magic || asked[1] != length || length > wire::frame_max) {
            weft::fuzz::property_failed(target, "a payload was read after a malformed header, or beyond 64 KiB");
        }
    }
    if (!why.empty()) return 0;

    const std::size_t used = wire::frame_header + frame.payload.size();
    const auto again = wire::encode_frame(frame.kind, frame.payload);
    if (used > size || again.size() != used || std::memcmp(again.data(), data, used) != 0) {
        weft::fuzz::property_failed(target, "an accepted frame does not encode back to the bytes it was read from");
    }
    switch (frame.kind) {
        case wire::FrameKind::hello:     // the listener connects its QP with the connector's address
        case wire::FrameKind::accepted: {  // the connector connects its QP with the listener's
            wire::Greeting g;
            if (!wire::split_greeting(frame.payload, g).empty()) break;
            const std::byte* first = frame.payload.data();
            const std::byte* end = first + frame.payload.size();
            if (g.private_data.size() > wire::max_private_data || g.address.data() < first ||
                g.private_data.data() + g.private_data.size() > end) {
                weft::fuzz::property_failed(target, "a greeting's parts lie outside its payload or over the limit");
            }
            if (wire::encode_greeting(g.address, g.private_data) != frame.payload) {
                weft::fuzz::property_failed(target, "an accepted greeting does not encode back to its payload");
            }
            weft::fuzz::ofi::connect_checks(target, g.address);
            break;
        }
        case wire::FrameKind::refused: {
            const std::string text = wire::printable(frame.payload);
            if (!weft::fuzz::ofi::printable_text(text) || text.size() > wire::refusal_text_max + 3) {
                weft::fuzz::property_failed(target, "a refusal's text is not printable or not bounded");
            }
            break;
        }
        default:
            weft::fuzz::property_failed(target, "a frame of an unknown kind was accepted");
    }
    return 0;
}
