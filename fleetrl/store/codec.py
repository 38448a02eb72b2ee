"""Lossless delta codecs for one weight tensor, and the entropy floor they are measured against.

Role: turn (previous words, new words) of one tensor into a small payload and back,
bit-exactly. A tensor's raw bytes are viewed as unsigned words of its element size (bf16 →
uint16; elements wider than 8 bytes as several uint64 words). The codec's name is stored
in the manifest beside the payload:

    same    no bit changed: no payload at all.
    sparse  the changed elements only (RL steps leave ~98 % of bf16 words unchanged):
              positions  gaps between changed positions, Rice-split into a high part q
                         (one byte; q >= 255 escaped to a uint64 list) and b low bits,
                         bit-packed (near-uniform: packing costs what a coder would);
              values     new minus old word (wrapping), zigzag-mapped to small unsigned
                         codes and split into byte planes. Small optimizer steps move a
                         float by one or two units in the last place, so the difference
                         is ±1 or ±2 (~2 bits) where the XOR word is 1, 3, 7, … depending
                         on the carry chain (~2.8 bits) and the new value ~11 bits.
            q and each value plane are entropy-coded by deflate in Huffman-only or RLE mode
            (stdlib zlib), not zstd: these streams are i.i.d. symbols of 1-3 bits of entropy,
            where zstd's match finder spends 10-25 % more bits than an order-0 Huffman code.
    xor     the XOR of all words, split into byte planes, each zstd-compressed (level and
            threads configurable). Tried when at least half the words changed; float
            deltas still favour `sparse` there, bit-pattern flips do not.
    raw     the new bytes, zstd-compressed: there is no usable previous (new tensor, or the
            dtype or shape changed).

The floor (`floor_bits`) is what an ideal order-0 coder of "which elements changed, and
how" costs: n·H(k/n) bits for the positions plus k times the empirical entropy of the
changed XOR words. `sparse` lands below it on optimizer steps (value differences carry
less entropy than XOR words).

Not covered: hashing (the caller verifies content), lossy compression, GPU codecs.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
import zstandard

# Unsigned word type per element size; wider elements (complex128) use several uint64 words.
_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
# Payload stream methods (one varint each in the sparse/xor headers).
_STORED, _DEFLATE = 0, 1
_ESCAPE = 255  # a q byte of 255 means "look up q in the escape list"


@dataclass(frozen=True)
class CodecOptions:
    """Knobs of the zstd-based codecs (`xor`, `raw`); `sparse` has none."""

    zstd_level: int = 3  # 1 (fast) … 19 (small); the dense codecs rarely gain past 3
    zstd_threads: int = 0  # zstd worker threads for large inputs; 0 = in the calling thread


@dataclass
class Encoded:
    """One tensor's delta, ready to store."""

    codec: str  # "same", "sparse", "xor" or "raw"
    payload: bytes  # empty for "same"
    changed: int  # words that differ from the previous version (all words for "raw")


class CodecError(ValueError):
    """A payload does not decode: truncated, corrupt, or meant for another shape."""


def word_view(raw: np.ndarray, itemsize: int) -> np.ndarray:
    """View a tensor's raw bytes (contiguous uint8, 1-D) as unsigned words of its element size."""
    return raw.view(_WORDS[math.gcd(itemsize, 8)])


def encode(new: np.ndarray, old: np.ndarray | None, options: CodecOptions) -> Encoded:
    """Encode `new` (unsigned words) against `old` (same dtype and length) or from scratch.

    One pass over all words finds the changed ones; the sparse codec's work after that
    is proportional to the changed elements only.
    """
    if old is None or old.dtype != new.dtype or old.size != new.size:
        return Encoded("raw", _zstd(new.tobytes(), options), new.size)
    positions = changed_positions(new, old)
    k, n = positions.size, new.size
    if k == 0:
        return Encoded("same", b"", 0)
    best = Encoded("sparse", _encode_sparse(new, old, positions), k)
    if 2 * k >= n:  # measured: below half changed, sparse always wins
        dense = _encode_xor(np.bitwise_xor(new, old), options)
        if len(dense) < len(best.payload):
            best = Encoded("xor", dense, k)
    return best


def apply(codec: str, payload: bytes, target: np.ndarray) -> None:
    """Turn `target` (writable words of the previous version) into the new version, in place.

    Raises CodecError for a payload that does not fit `target`; `target` may then be
    partly modified, so callers decode into their own copy (see WeightStore.fetch).
    """
    try:
        if codec == "same":
            return
        if codec == "sparse":
            positions, steps = _decode_sparse(payload, target.size, target.dtype)
            target[positions] += steps  # unsigned: wraps modulo 2**bits, as encoded
        elif codec == "xor":
            target ^= _decode_xor(payload, target.size, target.dtype)
        else:
            raise CodecError(f"codec {codec!r} is not a delta codec")
    except (zlib.error, zstandard.ZstdError, IndexError, ValueError) as err:
        raise CodecError(f"{codec} payload does not decode: {err}") from err


def decode_raw(payload: bytes, nbytes: int) -> np.ndarray:
    """The raw bytes (uint8) of a tensor stored with codec `raw`."""
    try:
        data = zstandard.ZstdDecompressor().decompress(payload, max_output_size=nbytes)
    except zstandard.ZstdError as err:
        raise CodecError(f"raw payload does not decode: {err}") from err
    if len(data) != nbytes:
        raise CodecError(f"raw payload holds {len(data)} bytes, expected {nbytes}")
    return np.frombuffer(data, dtype=np.uint8).copy()


def changed_positions(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Ascending int64 indices of the words that differ.

    Through a boolean mask: numpy's nonzero has a fast path for booleans, 3-6x faster
    than np.flatnonzero on XOR words at RL densities (1-20 %).
    """
    return np.flatnonzero(new != old)


# -- sparse -------------------------------------------------------------------------------


def _rice_bits(n: int, k: int) -> int:
    """Low bits per gap so that q = gap >> b is ~0 half the time (geometric gaps, mean n/k).

    Capped at 8 so the low bits pack into whole bytes; sparser tensors leave a wider q,
    which the Huffman stage codes just as well.
    """
    return min(8, max(0, math.floor(math.log2(max(1.0, math.log(2) * n / k)))))


def _encode_sparse(new: np.ndarray, old: np.ndarray, positions: np.ndarray) -> bytes:
    k = positions.size
    b = _rice_bits(new.size, k)
    gaps = np.diff(positions, prepend=-1) - 1
    q = gaps >> b
    big = q >= _ESCAPE
    q_bytes = np.minimum(q, _ESCAPE).astype(np.uint8).tobytes()
    escapes = q[big].astype("<u8").tobytes()
    low = _pack_bits(gaps & ((1 << b) - 1), b)
    values = _zigzag(new[positions] - old[positions])  # unsigned: wraps modulo 2**bits
    planes = values.view(np.uint8).reshape(k, values.itemsize).T
    streams = [_deflate(q_bytes), *(_deflate(np.ascontiguousarray(p)) for p in planes)]
    header = [new.size, k, b, len(escapes), len(low)]
    for method, data in streams:
        header += [method, len(data)]
    return b"".join([_uvarints(header), escapes, low, *(data for _, data in streams)])


def _decode_sparse(payload: bytes, n: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    itemsize = np.dtype(dtype).itemsize
    header, offset = _read_uvarints(payload, 5 + 2 * (1 + itemsize))
    size, k, b, escapes_len, low_len = header[:5]
    if size != n or k > n or b > 8:
        raise CodecError(f"sparse header (n={size}, k={k}, b={b}) does not fit {n} elements")
    escapes = np.frombuffer(payload, "<u8", escapes_len // 8, offset).astype(np.int64)
    offset += escapes_len
    low = _unpack_bits(payload[offset : offset + low_len], k, b)
    offset += low_len
    streams = []
    for i in range(1 + itemsize):
        method, length = header[5 + 2 * i], header[6 + 2 * i]
        streams.append(_inflate(method, payload[offset : offset + length], k))
        offset += length
    if offset != len(payload):
        raise CodecError(f"sparse payload has {len(payload)} bytes, header says {offset}")
    q = np.frombuffer(streams[0], np.uint8).astype(np.int64)
    escaped = np.flatnonzero(q == _ESCAPE)
    if escaped.size != escapes.size:
        raise CodecError("sparse payload: escape count mismatch")
    q[escaped] = escapes
    positions = np.cumsum((q << b) + low + 1) - 1
    if k and (positions[-1] >= n or positions[0] < 0):
        raise CodecError(f"sparse payload: position {positions[-1]} outside {n} elements")
    planes = np.stack([np.frombuffer(s, np.uint8) for s in streams[1:]], axis=1)
    return positions, _unzigzag(planes.view(dtype).reshape(k))


def _zigzag(steps: np.ndarray) -> np.ndarray:
    """Wrapped differences (unsigned words) to small unsigned codes: 0, -1, 1, -2 → 0, 1, 2, 3."""
    signed = steps.view(steps.dtype.str.replace("u", "i"))
    return ((signed << 1) ^ (signed >> (8 * steps.itemsize - 1))).view(steps.dtype)


def _unzigzag(codes: np.ndarray) -> np.ndarray:
    return (codes >> 1) ^ (codes.dtype.type(0) - (codes & 1))


def _pack_bits(values: np.ndarray, b: int) -> bytes:
    """The low `b` (<= 8) bits of each value, concatenated LSB first.

    Eight b-bit values fill exactly b bytes, so each group of eight is shifted into one
    uint64 and its low b bytes are kept: no per-bit arrays.
    """
    if b == 0 or values.size == 0:
        return b""
    groups = np.zeros(-(-values.size // 8) * 8, np.uint64)
    groups[: values.size] = values
    shifted = groups.reshape(-1, 8) << (np.arange(8, dtype=np.uint64) * np.uint64(b))
    packed = np.bitwise_or.reduce(shifted, axis=1).astype("<u8")
    return packed.view(np.uint8).reshape(-1, 8)[:, :b].tobytes()


def _unpack_bits(data: bytes, k: int, b: int) -> np.ndarray:
    if b == 0 or k == 0:
        return np.zeros(k, np.int64)
    groups = -(-k // 8)
    if len(data) != groups * b:
        raise CodecError(f"sparse payload: {len(data)} bytes of low bits, expected {groups * b}")
    padded = np.zeros((groups, 8), np.uint8)
    padded[:, :b] = np.frombuffer(data, np.uint8).reshape(groups, b)
    words = padded.view("<u8")
    shifts = np.arange(8, dtype=np.uint64) * np.uint64(b)
    low = (words >> shifts) & np.uint64((1 << b) - 1)
    return low.reshape(-1)[:k].astype(np.int64)


def _deflate(data: bytes | np.ndarray) -> tuple[int, bytes]:
    """Order-0 Huffman (or run-length when mostly zeros) coding; stored when that is smaller."""
    array = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data
    mostly_zero = 4 * np.count_nonzero(array) < array.size
    strategy = zlib.Z_RLE if mostly_zero else zlib.Z_HUFFMAN_ONLY
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15, 9, strategy)
    packed = compressor.compress(array) + compressor.flush()
    if len(packed) < array.size:
        return _DEFLATE, packed
    return _STORED, array.tobytes()


def _inflate(method: int, data: bytes, size: int) -> bytes:
    if method == _STORED:
        out = data
    elif method == _DEFLATE:
        out = zlib.decompress(data, -15, size)
    else:
        raise CodecError(f"unknown stream method {method}")
    if len(out) != size:
        raise CodecError(f"stream holds {len(out)} bytes, expected {size}")
    return out


# -- xor (dense) --------------------------------------------------------------------------


def _encode_xor(xor: np.ndarray, options: CodecOptions) -> bytes:
    # Byte planes: the high bytes of bf16 XOR words are almost all zero and compress to
    # nothing apart, while interleaved with the low bytes they halve zstd's efficiency.
    planes = xor.view(np.uint8).reshape(xor.size, xor.itemsize).T
    packed = [_zstd(np.ascontiguousarray(p), options) for p in planes]
    return _uvarints([len(p) for p in packed]) + b"".join(packed)


def _decode_xor(payload: bytes, n: int, dtype: np.dtype) -> np.ndarray:
    itemsize = np.dtype(dtype).itemsize
    lengths, offset = _read_uvarints(payload, itemsize)
    planes = np.empty((n, itemsize), np.uint8)
    decompressor = zstandard.ZstdDecompressor()
    for i, length in enumerate(lengths):
        plane = decompressor.decompress(payload[offset : offset + length], max_output_size=n)
        if len(plane) != n:
            raise CodecError(f"xor plane {i} holds {len(plane)} bytes, expected {n}")
        planes[:, i] = np.frombuffer(plane, np.uint8)
        offset += length
    return planes.view(dtype).reshape(n)


def _zstd(data: bytes | np.ndarray, options: CodecOptions) -> bytes:
    compressor = zstandard.ZstdCompressor(
        level=options.zstd_level, threads=options.zstd_threads, write_checksum=False
    )
    return compressor.compress(data)


# -- header varints -----------------------------------------------------------------------


def _uvarints(values: list[int]) -> bytes:
    """LEB128: a handful of header integers in 1-3 bytes each instead of 8."""
    out = bytearray()
    for value in values:
        while value >= 0x80:
            out.append(value & 0x7F | 0x80)
            value >>= 7
        out.append(value)
    return bytes(out)


def _read_uvarints(data: bytes, count: int) -> tuple[list[int], int]:
    values, offset = [], 0
    for _ in range(count):
        value = shift = 0
        while True:
            if offset >= len(data):
                raise CodecError("payload header is truncated")
            byte = data[offset]
            offset += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        values.append(value)
    return values, offset


# -- measurement --------------------------------------------------------------------------


def floor_bits(xor: np.ndarray) -> float:
    """Ideal order-0 cost in bits of one tensor's delta (see the module docstring)."""
    n = xor.size
    changed = xor[xor != 0]
    k = changed.size
    if k == 0:
        return 0.0
    p = k / n
    positions = 0.0 if k == n else -n * (p * math.log2(p) + (1 - p) * math.log2(1 - p))
    if changed.itemsize <= 2:
        counts = np.bincount(changed)
        counts = counts[counts > 0]
    else:
        counts = np.unique(changed, return_counts=True)[1]
    q = counts / k
    return positions + k * float(-(q * np.log2(q)).sum())


def plain_xor_zstd_size(new: np.ndarray, old: np.ndarray, level: int = 3) -> int:
    """Bytes of the baseline open systems ship: the XOR of raw bytes, zstd-compressed whole."""
    xor = np.bitwise_xor(new, old)
    if not xor.any():
        return 0
    return len(zstandard.ZstdCompressor(level=level, write_checksum=False).compress(xor))
