// weft/memory.hpp — registered memory: local segments, remote regions and the MemoryRegion handle.
//
//   std::vector<std::byte> buf(1 << 20);
//   auto mr  = dom.register_memory(buf, weft::Access::local_write | weft::Access::remote_write);
//   auto seg = mr.slice(0, 4096);                       // a LocalSegment for a request's gather list
//   auto descriptor = mr.remote().encode();             // bytes for the peer, over any channel
//   ...
//   auto dst = weft::RemoteRegion::decode(peer_bytes);  // throws weft::Error on malformed bytes
//   qp.post_send({weft::write(1, seg, dst.slice(0, 4096))});
#pragma once

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>

#include <weft/types.hpp>

namespace weft {

namespace detail {
class MrImpl;
}

/// Which backend family produced a key or descriptor.
enum class BackendKind : std::uint8_t { sim = 1, verbs = 2, ofi = 3 };
std::string_view to_string(BackendKind kind) noexcept;

/// A piece of registered local memory, as a request's scatter/gather entry. Plain value; the region it
/// came from must stay registered until every request using it has completed.
struct LocalSegment {
    std::uint64_t addr = 0;    ///< first byte, a local virtual address
    std::uint32_t length = 0;  ///< bytes
    std::uint32_t lkey = 0;    ///< the local key of the region it lies in
    /// The backend's own handle for the region (libfabric's MR descriptor); may be null, in which case
    /// the backend finds the region by lkey.
    void* desc = nullptr;

    /// The first byte, as a pointer.
    std::byte* data() const noexcept { return reinterpret_cast<std::byte*>(addr); }
    /// Same address, length, key and descriptor.
    friend bool operator==(const LocalSegment&, const LocalSegment&) = default;
};

/// A peer's registered memory: what a request needs to address it. Copyable; exchanged out of band with
/// encode()/decode().
class RemoteRegion {
public:
    /// Bytes of encode()'s result.
    static constexpr std::size_t encoded_size = 36;
    /// encode()'s result: a fixed-size byte array.
    using Encoded = std::array<std::byte, encoded_size>;

    /// An empty region (length 0).
    constexpr RemoteRegion() noexcept = default;
    /// A region from its parts (backends build these; users get them from MemoryRegion::remote or decode).
    constexpr RemoteRegion(std::uint64_t addr, std::uint64_t length, std::uint64_t rkey,
                           BackendKind backend) noexcept
        : addr_(addr), length_(length), rkey_(rkey), backend_(backend) {}

    /// The first byte's address as the peer's backend addresses it (a virtual address or an offset).
    constexpr std::uint64_t addr() const noexcept { return addr_; }
    /// Bytes.
    constexpr std::uint64_t length() const noexcept { return length_; }
    /// The remote key.
    constexpr std::uint64_t rkey() const noexcept { return rkey_; }
    /// The backend that registered it; requests of another backend refuse it.
    constexpr BackendKind backend() const noexcept { return backend_; }

    /// The sub-range [offset, offset + length). Throws weft::Error (invalid_argument) when it does not lie
    /// within this region.
    RemoteRegion slice(std::uint64_t offset, std::uint64_t length) const;
    /// The sub-range from `offset` to the end.
    RemoteRegion slice(std::uint64_t offset) const;
    /// slice() for the data path: inline, noexcept and unchecked in release builds (NDEBUG); a range
    /// outside the region fails an assertion in debug builds. A request built from a bad range is still
    /// refused or completes with an error at the peer; nothing outside the region is touched.
    constexpr RemoteRegion slice_unchecked(std::uint64_t offset, std::uint64_t length) const noexcept {
        assert(offset <= length_ && length <= length_ - offset && "RemoteRegion::slice_unchecked: range outside the region");
        return RemoteRegion(addr_ + offset, length, rkey_, backend_);
    }

    /// A fixed-size, versioned, checksummed little-endian encoding.
    Encoded encode() const noexcept;
    /// Validates size, magic, version, backend, bounds and checksum; throws weft::Error (bad_descriptor)
    /// naming the first problem found.
    static RemoteRegion decode(std::span<const std::byte> bytes);

    /// Same address, length, key and backend.
    friend bool operator==(const RemoteRegion&, const RemoteRegion&) = default;

private:
    std::uint64_t addr_ = 0;
    std::uint64_t length_ = 0;
    std::uint64_t rkey_ = 0;
    BackendKind backend_ = BackendKind::sim;
};

std::ostream& operator<<(std::ostream& os, const RemoteRegion& r);

/// A registered memory region. Move-only; destroying it (or assigning over it) deregisters the memory.
class MemoryRegion {
public:
    /// An empty handle (false); assign one from Domain::register_memory.
    MemoryRegion() noexcept;
    /// Wraps a backend's registration (for backends and tests; users call Domain::register_memory).
    explicit MemoryRegion(std::unique_ptr<detail::MrImpl> impl) noexcept;
    /// Takes the registration from `other`, which becomes empty.
    MemoryRegion(MemoryRegion&& other) noexcept;
    /// Deregisters this handle's memory and takes the registration of `other`.
    MemoryRegion& operator=(MemoryRegion&& other) noexcept;
    ~MemoryRegion();

    /// Whether the handle holds a registration.
    explicit operator bool() const noexcept { return impl_ != nullptr; }

    /// The first registered byte.
    std::byte* data() const noexcept { return reinterpret_cast<std::byte*>(whole_.addr); }
    /// Registered bytes.
    std::size_t size() const noexcept { return size_; }
    /// The local key, as in LocalSegment::lkey.
    std::uint32_t lkey() const noexcept { return whole_.lkey; }
    /// The remote key, as in RemoteRegion::rkey.
    std::uint64_t rkey() const noexcept { return remote_.rkey(); }
    /// The rights it was registered with.
    Access access() const noexcept { return access_; }

    /// The bytes [offset, offset + length) as a LocalSegment. Throws weft::Error (invalid_argument) when
    /// the range is outside the region or longer than a segment can be (4 GiB - 1).
    LocalSegment slice(std::size_t offset, std::size_t length) const;
    /// The whole region as one segment (when it is shorter than 4 GiB).
    LocalSegment segment() const { return slice(0, size_); }
    /// slice() for the data path: inline, noexcept and unchecked in release builds (NDEBUG); a range
    /// outside the region, or longer than 4 GiB - 1, fails an assertion in debug builds. The backend
    /// still refuses a segment outside the region (local protection error); nothing is touched.
    LocalSegment slice_unchecked(std::size_t offset, std::size_t length) const noexcept {
        assert(impl_ != nullptr && offset <= size_ && length <= size_ - offset && length <= 0xffffffffu &&
               "MemoryRegion::slice_unchecked: range outside the region");
        LocalSegment s = whole_;
        s.addr += offset;
        s.length = static_cast<std::uint32_t>(length);
        return s;
    }

    /// The descriptor a peer needs to address this region (meaningful with a remote right).
    const RemoteRegion& remote() const noexcept { return remote_; }

    /// The backend's object (for backends and tests).
    detail::MrImpl* impl() const noexcept { return impl_.get(); }

private:
    std::unique_ptr<detail::MrImpl> impl_;
    LocalSegment whole_{};
    std::size_t size_ = 0;
    RemoteRegion remote_{};
    Access access_ = Access::none;
};

}  // namespace weft
