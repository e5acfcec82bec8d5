"""MinHash signatures and LSH band hashes for near-duplicate detection, vectorised over batches.

A document becomes a set of shingles, the n-grams of its units. After NFKC normalisation and case
folding, a unit is one CJK character or a run of other letters and digits; punctuation, symbols and
whitespace are dropped. Space-delimited languages thus get word n-grams (`word_ngram`) and zh/ja/ko,
by the `lang` column, character n-grams (`char_ngram`), with Latin words inside CJK text kept whole.
Each shingle is hashed to 32 bits, and the signature is the element-wise minimum, over the
document's shingles, of `num_perm` affine permutations of that hash.

The permutations are exactly those of datasketch 2.0's `MinHash(num_perm, seed, scheme="affine32")`:
the shingle hash goes through the 32-bit MurmurHash3 finalizer, then `a_k * h + b_k mod 2^32` with
odd `a_k` drawn from `numpy.random.RandomState(seed)`. datasketch 2.0 made "affine32" its default,
replacing the "legacy" Mersenne-prime scheme whose fold to 32 bits biases Jaccard estimates upward
on large sets; the scheme is still named explicitly here because its values are not comparable with
another scheme's. "affine32" stores signatures as uint32 (half the size of "affine64" and "legacy")
and its permutations are bijections; 32-bit shingle hashes only saturate on sets of ~10^8 elements,
far beyond any document. A datasketch `MinHash` built with `hashfunc=shingle_hash` and the same
`num_perm`, `seed` and scheme, updated with `shingles(text, lang, cfg)`, holds the same hash values
as a row of `signatures` (the tests check this).

Shingle hashes are deterministic across processes and machines (no Python `hash()`): a unit (word
or character) hashes to 64 bits from its code points, and an n-gram is a fixed linear combination
of its units' hashes, finalised and cut to 32 bits. This lets a whole batch be hashed with a few
numpy operations instead of one Python call per shingle.

A document with no units left after normalisation gets the all-ones sentinel signature, the value
of an empty datasketch `MinHash`; `empty_signatures` flags such rows. A document with fewer units
than n is one shingle holding all of them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lm_assets.text import is_cjk_lang, mix64, normalized_units, unit_hash, unit_hashes
from lm_assets.training.primitives import fmix64

SCHEMES = ("affine32", "affine64", "legacy")
SIGNATURE_DTYPE = np.uint32
EMPTY_HASH = np.uint32(0xFFFFFFFF)

_MASK64 = (1 << 64) - 1
# Odd 64-bit constants: a MurmurHash3 finalizer multiplier and the golden ratio.
_GOLDEN = 0x9E3779B97F4A7C15
_MIX2 = 0xC4CEB9FE1A85EC53
_FMIX32_1 = 0x85EBCA6B
_FMIX32_2 = 0xC2B2AE35
_MAX_NGRAM = 16
# One odd multiplier per position inside an n-gram, so that n-grams are order-sensitive.
_POSITION_MULTIPLIERS = tuple(((_GOLDEN * (2 * j + 3)) ^ (_MIX2 >> j)) & _MASK64 | 1 for j in range(_MAX_NGRAM))
_BAND_SEED = 0x6A09E667F3BCC909
# `signatures` hashes documents in groups of about this many characters, so that its per-character
# arrays stay in the CPU cache; whole batches at once run at half the speed.
GROUP_CHARS = 65536

@dataclass(frozen=True)
class MinHashConfig:
    """How documents are shingled and sketched, and how signatures are cut into LSH bands.

    `char_ngram` is the n for zh/ja/ko documents, whose units are mostly single characters; a
    character carries less than a word, yet 4 beat 5 and 6 on the benchmark crawl (more near
    duplicates found, no more false matches). `threshold` is the Jaccard similarity the band/row
    split is designed around, and the weights favour recall: a pair missed by LSH is lost for good,
    while a false candidate only costs one signature comparison at verification. With the defaults
    that is 24 bands of 4 rows, which finds a pair at Jaccard 0.6 with probability 0.96.
    """

    num_perm: int = 128
    seed: int = 1
    threshold: float = 0.6
    scheme: str = "affine32"
    word_ngram: int = 5
    char_ngram: int = 4
    false_positive_weight: float = 0.05
    false_negative_weight: float = 0.95

    def __post_init__(self):
        if self.scheme != "affine32":
            raise ValueError(f"only scheme='affine32' is implemented, got {self.scheme!r} (known: {SCHEMES})")
        if not 1 <= self.word_ngram <= _MAX_NGRAM or not 1 <= self.char_ngram <= _MAX_NGRAM:
            raise ValueError(f"n-gram sizes must be within 1..{_MAX_NGRAM}")
        if self.num_perm < 2:
            raise ValueError("num_perm must be at least 2")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("threshold must be within (0, 1)")

    def ngram_size(self, lang: str | None) -> int:
        return self.char_ngram if is_cjk_lang(lang) else self.word_ngram


def lsh_params(cfg: MinHashConfig) -> tuple[int, int]:
    """(bands, rows) for the configured threshold and num_perm, as datasketch's MinHashLSH picks them."""
    return _optimal_bands_rows(cfg.threshold, cfg.num_perm, cfg.false_positive_weight, cfg.false_negative_weight)


# datasketch's choice for the default settings, known in advance: the code location names the dedup
# band-range partitions when it loads, and importing datasketch (with scipy) would cost seconds there.
# tests/corpus/dedup/test_minhash.py checks it against datasketch.
KNOWN_BANDS_ROWS = {(0.6, 128, 0.05, 0.95): (24, 4)}


@functools.lru_cache(maxsize=64)
def _optimal_bands_rows(threshold: float, num_perm: int, fp_weight: float, fn_weight: float) -> tuple[int, int]:
    if (threshold, num_perm, fp_weight, fn_weight) in KNOWN_BANDS_ROWS:
        return KNOWN_BANDS_ROWS[threshold, num_perm, fp_weight, fn_weight]
    # Private in datasketch 2.0 (datasketch.lsh._optimal_param), and slow: a few hundred integrals.
    from datasketch.lsh import _optimal_param

    bands, rows = _optimal_param(threshold, num_perm, fp_weight, fn_weight)
    return int(bands), int(rows)


@functools.lru_cache(maxsize=16)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) uint32 parameters of datasketch 2.0's affine32 permutations."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    a.flags.writeable = False
    b.flags.writeable = False
    return a, b


# ---------------------------------------------------------------------------------------------
# Normalisation and shingles
# ---------------------------------------------------------------------------------------------


def shingles(text: str | None, lang: str | None, cfg: MinHashConfig) -> list[tuple[str, ...]]:
    """The document's n-grams of units, in order (repeats included); a short document is one shingle."""
    units = normalized_units(text).split()
    if not units:
        return []
    n = cfg.ngram_size(lang)
    if len(units) < n:
        return [tuple(units)]
    return [tuple(units[i : i + n]) for i in range(len(units) - n + 1)]


def shingle_hash(shingle: Sequence[str]) -> int:
    """32-bit hash of one shingle (a tuple of units); usable as datasketch's `hashfunc`."""
    total = 0
    for position, unit in enumerate(shingle):
        total += unit_hash(unit) * _POSITION_MULTIPLIERS[position]
    return mix64(total & _MASK64) >> 32


def shingle_hashes(text: str | None, lang: str | None, cfg: MinHashConfig) -> np.ndarray:
    """uint32 hashes of the document's shingles, in order; equal to `map(shingle_hash, shingles(...))`."""
    hashes, _ = _batch_shingle_hashes([text], np.array([cfg.ngram_size(lang)]))
    return hashes


# ---------------------------------------------------------------------------------------------
# Vectorised hashing
# ---------------------------------------------------------------------------------------------


def _fmix32_array(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint32(16))
    x *= np.uint32(_FMIX32_1)
    x ^= x >> np.uint32(13)
    x *= np.uint32(_FMIX32_2)
    x ^= x >> np.uint32(16)
    return x


def _batch_shingle_hashes(texts: Sequence[str | None], n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint32 shingle hashes of every document, concatenated, and how many each document has."""
    units, unit_counts = unit_hashes(texts)
    shingle_counts = np.where(unit_counts > 0, np.maximum(unit_counts - n + 1, 1), 0)
    if not shingle_counts.sum():
        return np.empty(0, dtype=SIGNATURE_DTYPE), shingle_counts

    # Zero units after each document keep n-grams from spanning two documents, and make the one
    # shingle of a short document the combination of just its own units.
    gap = int(n.max()) - 1
    doc_of_unit = np.repeat(np.arange(len(texts)), unit_counts)
    padded = np.zeros(len(units) + gap * len(texts) + gap, dtype=np.uint64)
    padded[np.arange(len(units)) + doc_of_unit * gap] = units

    first_unit = np.concatenate(([0], np.cumsum(unit_counts + gap)[:-1]))
    doc_of_shingle = np.repeat(np.arange(len(texts)), shingle_counts)
    first_shingle = np.concatenate(([0], np.cumsum(shingle_counts)[:-1]))
    start = first_unit[doc_of_shingle] + np.arange(len(doc_of_shingle)) - first_shingle[doc_of_shingle]

    sizes = np.unique(n[shingle_counts > 0])
    if len(sizes) == 1:
        return _finish(_combine_windows(padded, int(sizes[0]))[start]), shingle_counts
    hashes = np.empty(len(start), dtype=SIGNATURE_DTYPE)
    for size in sizes:
        of_size = n[doc_of_shingle] == size
        hashes[of_size] = _finish(_combine_windows(padded, int(size))[start[of_size]])
    return hashes, shingle_counts


def _finish(combined: np.ndarray) -> np.ndarray:
    return (fmix64(combined) >> np.uint64(32)).astype(SIGNATURE_DTYPE)


def _combine_windows(padded: np.ndarray, size: int) -> np.ndarray:
    """For every start position, the position-weighted sum of `size` consecutive unit hashes."""
    length = len(padded) - size + 1
    total = padded[:length] * np.uint64(_POSITION_MULTIPLIERS[0])
    for position in range(1, size):
        total += padded[position : position + length] * np.uint64(_POSITION_MULTIPLIERS[position])
    return total


def signatures(
    texts: Sequence[str | None],
    langs: Sequence[str | None] | None,
    cfg: MinHashConfig,
    chunk_shingles: int = 16384,
) -> np.ndarray:
    """MinHash signatures, uint32 of shape (documents, num_perm); empty documents get all ones.

    Documents are hashed in consecutive groups of about `GROUP_CHARS` characters. The permutations
    run as a (num_perm x shingles) product over at most `chunk_shingles` shingles at a time, so
    memory stays at `chunk_shingles * num_perm * 4` bytes whatever the batch holds.
    """
    langs = list(langs) if langs is not None else [None] * len(texts)
    if len(langs) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(langs)} langs")
    texts = list(texts)
    n = np.array([cfg.ngram_size(lang) for lang in langs], dtype=np.int64)
    out = np.empty((len(texts), cfg.num_perm), dtype=SIGNATURE_DTYPE)
    for lo, hi in _text_groups(texts, GROUP_CHARS):
        hashes, shingle_counts = _batch_shingle_hashes(texts[lo:hi], n[lo:hi])
        out[lo:hi] = _min_permuted(hashes, shingle_counts, cfg, chunk_shingles)
    return out


def _text_groups(texts: list[str | None], chars: int) -> list[tuple[int, int]]:
    """Consecutive (lo, hi) ranges of texts holding about `chars` characters each, at least one text."""
    groups, lo, size = [], 0, 0
    for i, text in enumerate(texts):
        size += len(text) if text else 0
        if size >= chars:
            groups.append((lo, i + 1))
            lo, size = i + 1, 0
    if lo < len(texts):
        groups.append((lo, len(texts)))
    return groups


def _min_permuted(hashes: np.ndarray, shingle_counts: np.ndarray, cfg: MinHashConfig, chunk: int) -> np.ndarray:
    a, b = permutations(cfg.num_perm, cfg.seed)
    a, b = a[:, None], b[:, None]
    out = np.full((len(shingle_counts), cfg.num_perm), EMPTY_HASH, dtype=SIGNATURE_DTYPE)
    mixed = _fmix32_array(hashes)
    doc_of_shingle = np.repeat(np.arange(len(shingle_counts)), shingle_counts)
    doc_first_shingle = np.concatenate(([0], np.cumsum(shingle_counts)[:-1]))[shingle_counts > 0]
    # Permutations along rows: numpy reduces contiguous segments of a row far faster than of a column.
    buffer = np.empty((cfg.num_perm, min(chunk, len(mixed))), dtype=SIGNATURE_DTYPE)
    for lo in range(0, len(mixed), chunk):
        hi = min(lo + chunk, len(mixed))
        block = buffer[:, : hi - lo]
        np.multiply(a, mixed[lo:hi], out=block)
        np.add(block, b, out=block)
        # Segments start at the chunk's first shingle and at each document that begins inside it.
        inner = doc_first_shingle[(doc_first_shingle > lo) & (doc_first_shingle < hi)] - lo
        segment_start = np.concatenate(([0], inner))
        docs = doc_of_shingle[lo + segment_start]
        out[docs] = np.minimum(out[docs], np.minimum.reduceat(block, segment_start, axis=1).T)
    return out


def empty_signatures(sigs: np.ndarray) -> np.ndarray:
    """Boolean mask of rows holding the sentinel of a document without shingles."""
    return (sigs == EMPTY_HASH).all(axis=1)


def signature_similarity(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-wise estimated Jaccard similarity: the fraction of equal signature values."""
    return (left == right).mean(axis=1)


def band_hashes(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """uint64 hash of each band's `rows` signature values, shape (documents, bands).

    Band i covers columns [i * rows, (i + 1) * rows), as in datasketch's MinHashLSH.
    """
    if bands * rows > sigs.shape[1]:
        raise ValueError(f"{bands} bands x {rows} rows exceed the signature length {sigs.shape[1]}")
    values = sigs[:, : bands * rows].reshape(len(sigs), bands, rows).astype(np.uint64)
    total = np.full((len(sigs), bands), _BAND_SEED, dtype=np.uint64)
    for row in range(rows):
        total = fmix64(total ^ values[:, :, row]) * np.uint64(_POSITION_MULTIPLIERS[row % _MAX_NGRAM])
    return fmix64(total)


