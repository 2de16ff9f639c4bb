// weft/detail/wire.hpp — the one reader and writer of weft's wire encodings: RemoteRegion descriptors, every
// backend's QP address and the handshake frames of its connection manager. The reader checks the length
// before each field and throws one kind of error, weft::Error with Errc::bad_descriptor, naming the
// encoding, the field, the length received and the length expected; a decoder then adds only the checks
// of its own values (ranges, flags, which fabric). For implementers of backends; not part of the user API
// (installed beside weft/backend.hpp for the plugins, as weft/detail/bytes.hpp is).
//
//   weft::detail::WireReader r(bytes, {"malformed peer QP address", "verbs", "QueuePair::connect"});
//   r.expect_size(40);                              // "...: expected 40 bytes, got 39"
//   r.expect_magic(magic, "not a verbs QP address");
//   r.expect_version(1);
//   r.expect_checksum(36);                          // fnv1a of bytes 0..35, stored at 36
//   auto qpn = r.at<std::uint32_t>(28, "QP number");
//
//   weft::detail::WireWriter w(out);                // a span of the encoding's size
//   w.bytes(magic); w.u8(1); w.skip(2); w.put<std::uint32_t>(qpn); w.checksum();
//
// A decoder whose problems are text (a handshake frame, refused back to the peer) runs the same reads
// inside wire_problem(), which returns the reason instead of throwing it.
#pragma once

#include <weft/detail/bytes.hpp>
#include <weft/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace weft::detail {

/// What a decoder's errors say: the encoding (the start of every message, "malformed peer QP address";
/// empty where the call names it well enough), and the backend and call weft::Error names.
struct WireContext {
    std::string_view what;
    std::string_view backend;
    std::string_view object;
};

/// Throws the decoders' error: `ctx.what`: `why`.
[[noreturn, gnu::cold]] inline void throw_bad_wire(const WireContext& ctx, const std::string& why) {
    std::string message(ctx.what);
    if (!message.empty()) message += ": ";
    message += why;
    throw Error(Errc::bad_descriptor, std::move(message), ctx.backend, ctx.object);
}

/// A bounds-checked view of bytes a peer sent. Fields are read in order (get, take, skip_zero) from a
/// cursor, or at a fixed offset (at); each checks that the bytes are there before it reads them.
class WireReader {
public:
    WireReader(std::span<const std::byte> bytes, const WireContext& ctx) noexcept : bytes_(bytes), ctx_(ctx) {}

    std::size_t size() const noexcept { return bytes_.size(); }
    std::size_t offset() const noexcept { return offset_; }
    std::size_t remaining() const noexcept { return bytes_.size() - offset_; }
    std::span<const std::byte> bytes() const noexcept { return bytes_; }

    /// The encoding has exactly `n` bytes; `hint` (may be empty) is added to the message when it has not.
    void expect_size(std::size_t n, std::string_view hint = {}) const {
        if (bytes_.size() != n) {
            fail("expected " + std::to_string(n) + " bytes, got " + std::to_string(bytes_.size()) + std::string(hint));
        }
    }
    /// The encoding has at least `n` bytes.
    void expect_at_least(std::size_t n) const {
        if (bytes_.size() < n) {
            fail("expected at least " + std::to_string(n) + " bytes, got " + std::to_string(bytes_.size()));
        }
    }
    /// The encoding starts with `magic` (the size was checked); else `why`.
    void expect_magic(std::span<const std::byte> magic, std::string_view why) const {
        need(0, magic.size(), "magic");
        if (std::memcmp(bytes_.data(), magic.data(), magic.size()) != 0) fail(std::string(why));
    }
    /// The version byte at `at` is `accepted`; `prefix` names it in the message ("version", "descriptor version").
    void expect_version(std::size_t at, std::uint8_t accepted, std::string_view prefix = "version") const {
        const auto v = this->at<std::uint8_t>(at, "version");
        if (v != accepted) {
            fail(std::string(prefix) + " " + std::to_string(v) + " is not supported (accepted: " +
                 std::to_string(accepted) + ")");
        }
    }
    /// The 32-bit FNV-1a of bytes [0, body) is stored little-endian at `body`; else `why`.
    void expect_checksum(std::size_t body, std::string_view why) const {
        if (at<std::uint32_t>(body, "checksum") != fnv1a(bytes_.data(), body)) fail(std::string(why));
    }
    /// `n` bytes at `at` are zero (reserved).
    void expect_zero(std::size_t at, std::size_t n, std::string_view why = "reserved bytes are not zero") const {
        need(at, n, "reserved bytes");
        for (std::size_t i = 0; i < n; ++i) {
            if (bytes_[at + i] != std::byte{0}) fail(std::string(why));
        }
    }

    /// The little-endian field `field` at offset `at`.
    template <class T>
    T at(std::size_t at, std::string_view field) const {
        need(at, sizeof(T), field);
        return get_le<T>(bytes_.data() + at);
    }
    /// The `n` bytes of field `field` at offset `at`.
    std::span<const std::byte> span(std::size_t at, std::size_t n, std::string_view field) const {
        need(at, n, field);
        return bytes_.subspan(at, n);
    }
    /// The next little-endian field.
    template <class T>
    T get(std::string_view field) {
        const T v = at<T>(offset_, field);
        offset_ += sizeof(T);
        return v;
    }
    /// The next `n` bytes.
    std::span<const std::byte> take(std::size_t n, std::string_view field) {
        need(offset_, n, field);
        const auto out = bytes_.subspan(offset_, n);
        offset_ += n;
        return out;
    }
    /// Nothing is left after the fields read.
    void expect_end() const {
        if (offset_ != bytes_.size()) {
            fail("expected " + std::to_string(offset_) + " bytes, got " + std::to_string(bytes_.size()));
        }
    }

    /// Throws the decoder's error with `why`.
    [[noreturn]] void fail(const std::string& why) const { throw_bad_wire(ctx_, why); }

private:
    void need(std::size_t at, std::size_t n, std::string_view field) const {
        if (at > bytes_.size() || bytes_.size() - at < n) [[unlikely]] {
            fail("the " + std::string(field) + " field needs bytes " + std::to_string(at) + ".." +
                 std::to_string(at + n - 1) + ": expected at least " + std::to_string(at + n) + " bytes, got " +
                 std::to_string(bytes_.size()));
        }
    }

    std::span<const std::byte> bytes_;
    WireContext ctx_;
    std::size_t offset_ = 0;
};

/// Writes an encoding into bytes the caller sized: fields in order, little-endian. Writing past the end is
/// a bug of the encoder, checked in debug builds.
class WireWriter {
public:
    explicit WireWriter(std::span<std::byte> out) noexcept : out_(out) {}

    template <class T>
    void put(T v) noexcept {
        check(sizeof(T));
        put_le<T>(out_.data() + offset_, v);
        offset_ += sizeof(T);
    }
    void u8(std::uint8_t v) noexcept { put<std::uint8_t>(v); }
    void bytes(std::span<const std::byte> b) noexcept {
        check(b.size());
        if (!b.empty()) std::memcpy(out_.data() + offset_, b.data(), b.size());
        offset_ += b.size();
    }
    /// `n` zero bytes (reserved).
    void skip(std::size_t n) noexcept {
        check(n);
        std::memset(out_.data() + offset_, 0, n);
        offset_ += n;
    }
    /// The 32-bit FNV-1a of everything written so far, as the next field.
    void checksum() noexcept { put<std::uint32_t>(fnv1a(out_.data(), offset_)); }
    std::size_t offset() const noexcept { return offset_; }

private:
    void check([[maybe_unused]] std::size_t n) const noexcept {
#ifndef NDEBUG
        if (out_.size() - offset_ < n) __builtin_trap();
#endif
    }

    std::span<std::byte> out_;
    std::size_t offset_ = 0;
};

/// For a decoder that reports a problem as text rather than throwing (a handshake frame, whose problem goes
/// back to the peer as a refusal): runs `decode`, which reads through a WireReader, and returns the
/// reader's reason when it failed, or an empty string.
template <class F>
std::string wire_problem(F&& decode) {
    try {
        decode();
        return {};
    } catch (const Error& e) {
        return e.message();
    }
}

}  // namespace weft::detail
