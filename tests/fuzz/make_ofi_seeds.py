#!/usr/bin/env python3
"""Writes the seed corpora of the ofi fuzz targets: tests/fuzz/corpus/ofi_address and ofi_rendezvous.

    tests/fuzz/make_ofi_seeds.py            (rewrites both directories)

QP addresses follow the layout in backends/ofi/ofi_wire.hpp, for the sides tests/fuzz/ofi_fuzz.hpp offers
them to (same providers, address formats and immediate flags), so that valid seeds get past every check;
the invalid seeds each break one rule. Rendezvous seeds are the frames of backends/ofi/ofi_cm.cpp.
"""
import pathlib
import socket
import struct

# libfabric's enum fi_addr_format (rdma/fabric.h) and enum fi_ep_type as the address encodes it.
FI_SOCKADDR, FI_SOCKADDR_IN, FI_ADDR_STR, FI_ADDR_EFA = 1, 2, 9, 12
MSG, RDM = 1, 2
HELLO, ACCEPTED, REFUSED = 1, 2, 3


def fnv1a(data: bytes) -> int:
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def sockaddr_in(ip: str, port: int) -> bytes:
    return struct.pack("<H", socket.AF_INET) + struct.pack(">H", port) + socket.inet_aton(ip) + bytes(8)


def sockaddr_in6(ip: str, port: int) -> bytes:
    return (struct.pack("<H", socket.AF_INET6) + struct.pack(">HI", port, 0) +
            socket.inet_pton(socket.AF_INET6, ip) + struct.pack("<I", 0))


def seal(body: bytes) -> bytes:
    return body + struct.pack("<I", fnv1a(body))


def address(ep_type, flags, provider: bytes, addr_format, name: bytes, port=0, nonce=0x0123456789ABCDEF) -> bytes:
    header = b"wfOQ" + struct.pack("<BBBBIHHQ", 2, ep_type, flags, len(provider), addr_format, len(name), port, nonce)
    return seal(header + provider + name)


def frame(kind: int, payload: bytes, length=None) -> bytes:
    return b"weftofi2" + struct.pack("<II", kind, len(payload) if length is None else length) + payload


def greeting(address: bytes, private_data: bytes = b"") -> bytes:
    return struct.pack("<H", len(address)) + address + private_data


tcp = address(MSG, 1, b"tcp", FI_SOCKADDR_IN, sockaddr_in("192.0.2.7", 5001), port=40001)
rxm = address(RDM, 2, b"tcp;ofi_rxm", FI_SOCKADDR_IN, sockaddr_in("127.0.0.1", 5002), port=40002)
addresses = {
    "tcp_msg": tcp,
    "rxm_rdm": rxm,
    "sockets_in6": address(MSG, 1, b"sockets", FI_SOCKADDR, sockaddr_in6("::1", 6001)),
    "shm_str": address(RDM, 2, b"shm", FI_ADDR_STR, b"fi_shm://777:0:0\0", port=40003),
    "efa_opaque": address(RDM, 2, b"efa", FI_ADDR_EFA, bytes(range(32))),
    # Invalid: each breaks one rule.
    "bad_magic": seal(b"wfVQ" + tcp[4:-4]),
    "truncated": tcp[:-5],
    "bad_checksum": tcp[:-1] + bytes([tcp[-1] ^ 1]),
    "port_zero": address(MSG, 1, b"tcp", FI_SOCKADDR_IN, sockaddr_in("192.0.2.7", 0)),
    "short_name": address(RDM, 2, b"tcp;ofi_rxm", FI_SOCKADDR_IN, sockaddr_in("127.0.0.1", 5002)[:8]),
    "unterminated_str": address(RDM, 2, b"shm", FI_ADDR_STR, b"fi_shm://777:0:0"),
    "other_provider": address(MSG, 1, b"tc\x1bp\x00", FI_SOCKADDR_IN, sockaddr_in("192.0.2.7", 5001)),
}
frames = {
    "hello_tcp": frame(HELLO, greeting(tcp)),
    "hello_tcp_data": frame(HELLO, greeting(tcp, bytes(range(56)))),
    "accepted_rxm": frame(ACCEPTED, greeting(rxm, b"reply")),
    "refused_text": frame(REFUSED, b"peer address: checksum mismatch: corrupted or truncated"),
    "refused_control": frame(REFUSED, b"\x1b[2J\x00\xff" * 200),
    "empty_hello": frame(HELLO, b""),
    # Invalid: another protocol, a kind or length out of range, a payload cut short.
    "http_get": b"GET / HTTP/1.0\r\n\r\n",
    "unknown_kind": frame(4, b""),
    "oversize": frame(HELLO, b"", length=64 * 1024 + 1),
    "cut_short": frame(HELLO, greeting(tcp)[:10], length=len(tcp) + 2),
    "greeting_overrun": frame(HELLO, struct.pack("<H", 500) + tcp),
    "greeting_too_much_data": frame(ACCEPTED, greeting(rxm, bytes(57))),
}

corpus = pathlib.Path(__file__).resolve().parent / "corpus"
for target, seeds in (("ofi_address", addresses), ("ofi_rendezvous", frames)):
    directory = corpus / target
    directory.mkdir(exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    for name, data in seeds.items():
        (directory / name).write_bytes(data)
    print(f"{directory}: {len(seeds)} seeds")
