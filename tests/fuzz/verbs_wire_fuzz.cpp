// Fuzz target: the verbs backend's wire formats (backends/verbs/verbs_wire.hpp): the QP address a peer
// sends and the frames of rdma_cm private data (answers, refusals, connect requests). The first input byte
// picks the decoder. Properties: no crash, no read outside the input; decode_address throws only
// weft::Error, and an address it accepts encodes back to exactly the same bytes; an accepted frame's payload
// lies inside the input, and framing that payload again gives the input's leading bytes; a connect request
// decode_request accepts encodes back to its payload, its private data inside the payload and within the
// limit.
#include "fuzz.hpp"

#include "verbs_wire.hpp"

#include <weft/error.hpp>

#include <cstring>
#include <vector>

namespace wire = weft::verbs::wire;

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
    if (size == 0) return 0;
    const unsigned char which = data[0] % 4;
    const unsigned char* body = data + 1;
    const std::size_t n = size - 1;
    if (which == 0) {
        wire::QpAddress a;
        try {
            a = wire::decode_address(weft::fuzz::bytes(body, n));
        } catch (const weft::Error&) {
            return 0;
        }
        const auto again = wire::encode_address(a);
        if (n != again.size() || std::memcmp(again.data(), body, n) != 0) {
            weft::fuzz::property_failed("verbs_wire", "an accepted QP address does not encode back to its bytes");
        }
        return 0;
    }
    const auto kind = which == 1 ? wire::FrameKind::address
                      : which == 2 ? wire::FrameKind::refusal
                                   : wire::FrameKind::request;
    // A copy of exactly n bytes on the heap, so that AddressSanitizer sees any read past the field.
    std::vector<unsigned char> field(body, body + n);
    std::span<const std::byte> payload;
    const std::string why = wire::decode_frame(n == 0 ? nullptr : field.data(), n, kind, payload);
    if (!why.empty()) return 0;
    const auto* first = reinterpret_cast<const std::byte*>(field.data());
    if (payload.data() < first || payload.data() + payload.size() > first + n) {
        weft::fuzz::property_failed("verbs_wire", "an accepted frame's payload lies outside the private data");
    }
    const auto framed = wire::encode_frame(kind, payload, n);
    if (framed.size() > n || std::memcmp(framed.data(), field.data(), framed.size()) != 0) {
        weft::fuzz::property_failed("verbs_wire", "an accepted frame does not frame back to the same bytes");
    }
    if (kind == wire::FrameKind::refusal) (void)wire::printable(payload);
    if (kind == wire::FrameKind::request) {
        wire::Request r;
        if (!wire::decode_request(payload, r).empty()) return 0;
        if (r.private_data.size() > wire::max_private_data || r.private_data.data() < payload.data() ||
            r.private_data.data() + r.private_data.size() > payload.data() + payload.size()) {
            weft::fuzz::property_failed("verbs_wire", "a connect request's private data lies outside its payload");
        }
        const auto again = wire::encode_request(r);
        if (again.size() != payload.size() || std::memcmp(again.data(), payload.data(), again.size()) != 0) {
            weft::fuzz::property_failed("verbs_wire", "an accepted connect request does not encode back to its bytes");
        }
    }
    return 0;
}
