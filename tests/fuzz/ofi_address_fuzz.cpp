// Fuzz target: the ofi backend's QP address, the bytes QueuePair::connect takes from a peer, decoded and
// checked as connect does up to the provider call (fi_av_insert on RDM endpoints, fi_connect on MSG ones):
// backends/ofi/ofi_wire.hpp, offered to a QP of each address format (ofi_fuzz.hpp). Each input is tried
// twice: as it is, and with its checksum resealed, so that mutations reach the fields behind it. Properties:
// no crash, no read outside the input; only weft::Error of QueuePair::connect, its message printable; an
// accepted address encodes back to exactly its bytes; an accepted endpoint name has the size and shape the
// provider reads for its format.
#include "fuzz.hpp"
#include "ofi_fuzz.hpp"

#include <weft/detail/bytes.hpp>

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, std::size_t size) {
    // A copy of exactly `size` bytes on the heap (AddressSanitizer sees any read past the address) to reseal.
    const auto input = weft::fuzz::bytes(data, size);
    std::vector<std::byte> bytes(input.begin(), input.end());
    weft::fuzz::ofi::connect_checks("ofi_address", bytes);
    constexpr std::size_t sum = weft::ofi::wire::address_checksum;
    if (size >= weft::ofi::wire::address_header + sum) {
        const std::size_t body = size - sum;
        weft::detail::put_le<std::uint32_t>(bytes.data() + body, weft::detail::fnv1a(bytes.data(), body));
        weft::fuzz::ofi::connect_checks("ofi_address", bytes);
    }
    return 0;
}
