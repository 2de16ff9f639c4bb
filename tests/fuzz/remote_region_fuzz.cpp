// Fuzz target: RemoteRegion::decode, the memory descriptor a peer sends. Properties: never crashes, throws
// only weft::Error; a descriptor it accepts encodes back to exactly the same bytes (nothing is ignored),
// and its range does not wrap around the address space.
#include "fuzz.hpp"

#include <weft/weft.hpp>

#include <cstring>

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
    weft::RemoteRegion r;
    try {
        r = weft::RemoteRegion::decode(weft::fuzz::bytes(data, size));
    } catch (const weft::Error&) {
        return 0;
    }
    const auto again = r.encode();
    if (size != again.size() || std::memcmp(again.data(), data, size) != 0) {
        weft::fuzz::property_failed("remote_region", "an accepted descriptor does not encode back to its bytes");
    }
    if (r.addr() + r.length() < r.addr()) weft::fuzz::property_failed("remote_region", "accepted range wraps");
    return 0;
}
