// RemoteRegion's wire encoding and the MemoryRegion handle.
//
// Encoding (36 bytes, little-endian):
//   0  magic "wfRR"      4  version (1)      5  backend kind      6  reserved (0, 2 bytes)
//   8  address (u64)     16 length (u64)     24 rkey (u64)        32 FNV-1a of bytes 0..31 (u32)
#include <weft/backend.hpp>
#include <weft/detail/bytes.hpp>
#include <weft/detail/wire.hpp>
#include <weft/error.hpp>
#include <weft/memory.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace weft {
namespace {

constexpr std::byte magic[4] = {std::byte{'w'}, std::byte{'f'}, std::byte{'R'}, std::byte{'R'}};
constexpr std::uint8_t encoding_version = 1;

constexpr detail::WireContext descriptor_context{{}, {}, "RemoteRegion::decode"};

std::string hex(std::uint64_t v) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    do {
        out.insert(out.begin(), digits[v & 0xf]);
        v >>= 4;
    } while (v);
    return "0x" + out;
}

// The errors of the slice() functions, out of their bodies: a slice in range then saves and restores
// no more registers than it needs.
[[noreturn, gnu::noinline, gnu::cold]] void outside_region(std::uint64_t offset, std::uint64_t length,
                                                          std::uint64_t size, const char* where) {
    throw Error(Errc::invalid_argument,
                "range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                    ") is outside the region of " + std::to_string(size) + " bytes",
                {}, where);
}

[[noreturn, gnu::noinline, gnu::cold]] void bad_local_slice(bool empty, std::uint64_t length) {
    if (empty) throw Error(Errc::invalid_state, "the region is empty (moved from)", {}, "MemoryRegion::slice");
    throw Error(Errc::invalid_argument,
                "a segment is at most 4294967295 bytes; split " + std::to_string(length) + " bytes", {},
                "MemoryRegion::slice");
}

}  // namespace

RemoteRegion RemoteRegion::slice(std::uint64_t offset, std::uint64_t length) const {
    if (offset > length_ || length > length_ - offset) [[unlikely]] {
        outside_region(offset, length, length_, "RemoteRegion::slice");
    }
    return {addr_ + offset, length, rkey_, backend_};
}

RemoteRegion RemoteRegion::slice(std::uint64_t offset) const {
    if (offset > length_) return slice(offset, 0);  // throws with the range in the message
    return slice(offset, length_ - offset);
}

RemoteRegion::Encoded RemoteRegion::encode() const noexcept {
    Encoded out{};
    std::memcpy(out.data(), magic, 4);
    out[4] = std::byte{encoding_version};
    out[5] = static_cast<std::byte>(backend_);
    detail::put_le<std::uint64_t>(out.data() + 8, addr_);
    detail::put_le<std::uint64_t>(out.data() + 16, length_);
    detail::put_le<std::uint64_t>(out.data() + 24, rkey_);
    detail::put_le<std::uint32_t>(out.data() + 32, detail::fnv1a(out.data(), 32));
    return out;
}

RemoteRegion RemoteRegion::decode(std::span<const std::byte> b) {
    const detail::WireReader r(b, descriptor_context);
    r.expect_size(encoded_size);
    r.expect_magic(magic, "not a weft remote-region descriptor (bad magic)");
    r.expect_version(4, encoding_version, "descriptor version");
    const auto kind = r.at<std::uint8_t>(5, "backend kind");
    if (kind < 1 || kind > 3) {
        r.fail("unknown backend kind " + std::to_string(kind) + " (accepted: 1 sim, 2 verbs, 3 ofi)");
    }
    r.expect_zero(6, 2);
    r.expect_checksum(32, "checksum mismatch: the descriptor was corrupted or truncated");
    const auto addr = r.at<std::uint64_t>(8, "address");
    const auto length = r.at<std::uint64_t>(16, "length");
    if (length > std::numeric_limits<std::uint64_t>::max() - addr) {
        r.fail("address " + hex(addr) + " + length " + std::to_string(length) + " overflows");
    }
    return {addr, length, r.at<std::uint64_t>(24, "rkey"), static_cast<BackendKind>(kind)};
}

MemoryRegion::MemoryRegion() noexcept = default;
MemoryRegion::MemoryRegion(MemoryRegion&&) noexcept = default;
MemoryRegion::~MemoryRegion() = default;

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& other) noexcept {
    if (this != &other) {
        impl_ = std::move(other.impl_);  // releases (deregisters) what this handle held
        whole_ = std::exchange(other.whole_, {});
        size_ = std::exchange(other.size_, 0);
        remote_ = std::exchange(other.remote_, {});
        access_ = std::exchange(other.access_, Access::none);
    }
    return *this;
}

MemoryRegion::MemoryRegion(std::unique_ptr<detail::MrImpl> impl) noexcept : impl_(std::move(impl)) {
    whole_.addr = reinterpret_cast<std::uint64_t>(impl_->addr);
    whole_.length = static_cast<std::uint32_t>(
        std::min<std::size_t>(impl_->length, std::numeric_limits<std::uint32_t>::max()));
    whole_.lkey = impl_->lkey;
    whole_.desc = impl_->desc;
    size_ = impl_->length;
    remote_ = RemoteRegion(whole_.addr, impl_->length, impl_->rkey, impl_->kind);
    access_ = impl_->access;
}

LocalSegment MemoryRegion::slice(std::size_t offset, std::size_t length) const {
    if (!impl_) [[unlikely]] bad_local_slice(true, length);
    if (offset > size_ || length > size_ - offset) [[unlikely]] {
        outside_region(offset, length, size_, "MemoryRegion::slice");
    }
    if (length > std::numeric_limits<std::uint32_t>::max()) [[unlikely]] bad_local_slice(false, length);
    LocalSegment s = whole_;
    s.addr += offset;
    s.length = static_cast<std::uint32_t>(length);
    return s;
}

}  // namespace weft
