"""Delta codecs: bit-exact round trips at every density and word size, the smaller codec
wins, corrupt payloads are errors, and the sparse codec lands near the entropy floor."""

from __future__ import annotations

import numpy as np
import pytest

from fleetrl.store import codec
from fleetrl.store.codec import CodecError, CodecOptions

OPTIONS = CodecOptions()


def mutate(old: np.ndarray, density: float, rng: np.random.Generator) -> np.ndarray:
    """Step about `density` of the words by a few units, the way small optimizer steps
    move floats by a few units in the last place (wrapping, as unsigned words do)."""
    new = old.copy()
    hit = rng.random(old.size) < density
    steps = rng.choice(np.array([-2, -1, 1, 2]), size=int(hit.sum()), p=[0.1, 0.4, 0.4, 0.1])
    new[hit] += steps.astype(old.dtype)  # -1 wraps to the all-ones word
    return new


def bf16_words(x: np.ndarray) -> np.ndarray:
    """float32 → bf16 bit patterns (round to nearest even), as uint16 words."""
    bits = x.view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def round_trip(new: np.ndarray, old: np.ndarray | None) -> codec.Encoded:
    encoded = codec.encode(new, old, OPTIONS)
    if encoded.codec == "raw":
        out = codec.decode_raw(encoded.payload, new.nbytes).view(new.dtype)
    else:
        assert old is not None
        out = old.copy()
        codec.apply(encoded.codec, encoded.payload, out)
    assert out.tobytes() == new.tobytes()
    return encoded


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("density", [0.0, 1e-4, 0.02, 0.3, 0.7, 1.0])
def test_round_trip_every_density_and_word(dtype, density):
    rng = np.random.default_rng(0)
    old = rng.integers(0, np.iinfo(dtype).max, size=10_007, dtype=dtype, endpoint=True)
    new = mutate(old, density, rng)
    encoded = round_trip(new, old)
    assert encoded.changed == int((new != old).sum())
    if density == 0:
        assert encoded.codec == "same" and encoded.payload == b""


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 1000])
def test_odd_sizes_and_empty(size):
    rng = np.random.default_rng(size)
    old = rng.integers(0, 2**16, size=size, dtype=np.uint16)
    round_trip(mutate(old, 0.5, rng), old)
    round_trip(old, None)  # raw, no base


def test_huge_gaps_use_escapes():
    old = np.zeros(3_000_000, np.uint16)
    new = old.copy()
    new[[0, 5, 2_999_999]] = [1, 3, 0x8000]  # gaps far beyond 255 << 8
    encoded = round_trip(new, old)
    assert encoded.codec == "sparse" and len(encoded.payload) < 100


def test_sparse_wins_when_sparse_and_xor_when_dense():
    rng = np.random.default_rng(1)
    old = rng.integers(0, 2**16, size=200_000, dtype=np.uint16)
    assert codec.encode(mutate(old, 0.02, rng), old, OPTIONS).codec == "sparse"
    assert codec.encode(old ^ np.uint16(1), old, OPTIONS).codec == "xor"


def test_sparse_payload_is_near_the_floor_and_beats_plain_xor_zstd():
    # bf16 weights rounded from float32 masters before and after a small step.
    rng = np.random.default_rng(2)
    master = rng.standard_normal(1_000_000, dtype=np.float32) * 0.02
    step = rng.standard_normal(master.size, dtype=np.float32) * 1e-6
    old, new = (bf16_words(master), bf16_words(master + step))
    encoded = codec.encode(new, old, OPTIONS)
    floor = codec.floor_bits(new ^ old) / 8
    assert 0.01 < encoded.changed / new.size < 0.1
    assert len(encoded.payload) < floor  # value steps cost less than XOR words
    assert codec.plain_xor_zstd_size(new, old) > 1.5 * len(encoded.payload)


def test_floor_matches_hand_computation():
    x = np.zeros(8, np.uint16)
    x[[1, 5]] = [1, 3]  # n=8, k=2: 8·H(1/4) bits + 2 values of 1 bit each
    h = -(0.25 * np.log2(0.25) + 0.75 * np.log2(0.75))
    assert codec.floor_bits(x) == pytest.approx(8 * h + 2)
    assert codec.floor_bits(np.zeros(5, np.uint16)) == 0


@pytest.mark.parametrize("density", [0.02, 0.7])
def test_corrupt_payloads_raise_codec_error(density):
    rng = np.random.default_rng(3)
    old = rng.integers(0, 2**16, size=50_000, dtype=np.uint16)
    encoded = codec.encode(mutate(old, density, rng), old, OPTIONS)
    for bad in (encoded.payload[: len(encoded.payload) // 2], b"\xff" * 40, b""):
        with pytest.raises(CodecError):
            codec.apply(encoded.codec, bad, old.copy())
    with pytest.raises(CodecError):
        codec.apply(encoded.codec, encoded.payload, old[:-8].copy())  # wrong base size
    with pytest.raises(CodecError):
        codec.decode_raw(b"not zstd", 10)
