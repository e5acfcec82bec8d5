"""Decontamination: drop training documents that share n-grams with evaluation sets (MMLU, C-Eval).

Units are the project's (`lm_assets.text`): after NFKC normalisation and case folding, one CJK
character or a run of other letters and digits (a word). English thus becomes a stream of words,
Chinese a stream of characters, and mixed text one stream with both, so one function serves every
language and a Chinese question pasted into an English page is still found.

N-grams. A benchmark text whose units are mostly words is cut into `word_ngram`-unit grams (13, the
size used by GPT-3's and later decontamination studies); one whose units are mostly CJK characters
into `cjk_ngram`-unit grams. The default 20 is the "character equivalent" of 13 words: a Chinese word
averages about 1.5 characters (13 x 1.5 = 19.5), and 20 characters is still far longer than any
phrase that recurs by chance, while most C-Eval questions plus their choices are longer than that.
A text shorter than its n is indexed whole, as one gram of its own length, when it has at least
`min_word_units` (8) or `min_cjk_units` (12, again 8 x 1.5) units; shorter texts are skipped as too
weak to be evidence.

What is indexed. For each question of MMLU or C-Eval: the question alone, and the question followed by
its four choices (`evaluation_texts`). The second catches a page that copies a whole item; the first
matters when the question is too short for a full gram but still long enough to be indexed whole.

Matching. A document is checked against every gram length present in the index, so whatever its
language it is compared at the lengths the benchmark texts were cut to. Grams are 64-bit hashes: a
unit hashes from its code points, and a window of units is a polynomial hash computed from prefix
sums (`O(units)` per length, whatever the window size), then mixed with its length. A document that
shares at least `min_matches` distinct grams with a benchmark is dropped with reason
`contamination:<benchmark>` (the benchmark with the most shared grams when there are several).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from lm_assets.corpus.stage import DROPPED_SCHEMA, StageResult
from lm_assets.text import CJK_CHAR, joined_unit_hashes, normalized_units
from lm_assets.training.primitives import fmix64

DECONTAMINATED = "decontaminated"  # the stage, and the `stage` of its drops
BENCHMARK_SPLITS = ("dev", "val", "test")  # the folders of a C-Eval-style benchmark, as it ships them
CHOICES = ("A", "B", "C", "D")
MMLU_SCHEMA = {
    "subject": pl.String,
    "split": pl.String,
    "question": pl.String,
    "A": pl.String,
    "B": pl.String,
    "C": pl.String,
    "D": pl.String,
    "answer": pl.String,
}
CEVAL_SCHEMA = {
    "subject": pl.String,
    "split": pl.String,
    "id": pl.Int64,
    "question": pl.String,
    "A": pl.String,
    "B": pl.String,
    "C": pl.String,
    "D": pl.String,
    "answer": pl.String,
    "explanation": pl.String,
}
MAX_BENCHMARKS = 64  # one bit each in the owner mask

_BENCHMARK_FILE = re.compile(r"(?:^|/)(dev|val|test)/([^/]+)_(dev|val|test)\.csv$")

_MASK64 = (1 << 64) - 1
_LENGTH_SALT = np.uint64(0x13198A2E03707344)
_BASE = 0xA0761D6478BD642F  # odd, so invertible modulo 2**64
_BASE_INV = pow(_BASE, -1, 1 << 64)


@dataclass(frozen=True)
class DecontamConfig:
    """N-gram sizes, minimum lengths and the match threshold (see the module docstring)."""

    word_ngram: int = 13
    cjk_ngram: int = 20
    min_word_units: int = 8
    min_cjk_units: int = 12
    min_matches: int = 1
    # Units hashed at once in `find_contamination`; bounds memory (~100 bytes per unit).
    batch_units: int = 2_000_000

    def __post_init__(self):
        if not 1 <= self.min_word_units <= self.word_ngram or not 1 <= self.min_cjk_units <= self.cjk_ngram:
            raise ValueError("need 1 <= min_word_units <= word_ngram and 1 <= min_cjk_units <= cjk_ngram")
        if self.min_matches < 1 or self.batch_units < 1:
            raise ValueError("min_matches and batch_units must be positive")

    def grams(self) -> dict:
        """The fields that decide which grams are indexed (an index is only valid for these)."""
        return {k: v for k, v in asdict(self).items() if k not in ("min_matches", "batch_units")}


# ---------------------------------------------------------------------------------------------
# Benchmark readers
# ---------------------------------------------------------------------------------------------


def _benchmark_csvs(path: str | Path) -> list[tuple[str, str, str, str]]:
    """`(split, subject, name, text)` of every `<split>/<subject>_<split>.csv` in a zip or a folder.

    Any prefix before `<split>/` is accepted (`data/`, `ceval-exam/`, none), as are zips made on macOS
    (their `__MACOSX/` copies are skipped). Sorted by split (dev, val, test), then subject.
    """
    path = Path(path)
    found = []

    def wanted(name: str) -> tuple[str, str] | None:
        match = _BENCHMARK_FILE.search(name)
        if not match or "__MACOSX" in name or name.rsplit("/", 1)[-1].startswith("._"):
            return None
        split, subject, suffix = match.groups()
        return (split, subject) if split == suffix else None

    if path.is_dir():
        for file in path.rglob("*.csv"):
            name = file.relative_to(path).as_posix()
            if key := wanted(name):
                found.append((*key, name, file.read_bytes().decode("utf-8-sig")))
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if key := wanted(name):
                    found.append((*key, name, archive.read(name).decode("utf-8-sig")))
    else:
        raise FileNotFoundError(f"{path} is neither a folder nor a zip archive")
    if not found:
        raise FileNotFoundError(f"no <split>/<subject>_<split>.csv files (split in {BENCHMARK_SPLITS}) under {path}")
    found.sort(key=lambda f: (BENCHMARK_SPLITS.index(f[0]), f[1]))
    return found


def load_mmlu(path: str | Path) -> pl.DataFrame:
    """MMLU as `subject, split, question, A, B, C, D, answer`, from the zip or an extracted folder.

    The layout is `[data/]{dev,val,test}/<subject>_<split>.csv`: no header, six columns. Rows are in
    split order (dev, val, test), then subject, then file order.
    """
    rows = []
    for split, subject, name, text in _benchmark_csvs(path):
        for line, record in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
            if not record:
                continue
            if len(record) != 6:
                raise ValueError(f"{name}, record {line}: expected 6 fields, found {len(record)}")
            rows.append((subject, split, *record))
    return pl.DataFrame(rows, schema=MMLU_SCHEMA, orient="row")


def load_ceval(path: str | Path) -> pl.DataFrame:
    """C-Eval as `subject, split, id, question, A, B, C, D, answer, explanation`, from a zip or folder.

    The official layout is `{dev,val,test}/<subject>_<split>.csv` with header
    `id,question,A,B,C,D,answer[,explanation]`; test files have no answers and only dev files have
    explanations, so those columns are null where absent.
    """
    rows = []
    for split, subject, name, text in _benchmark_csvs(path):
        reader = csv.DictReader(io.StringIO(text, newline=""))
        missing = {"question", *CHOICES} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{name}: header lacks {sorted(missing)}")
        for record in reader:
            raw_id = (record.get("id") or "").strip()
            rows.append(
                (
                    subject,
                    split,
                    int(raw_id) if raw_id.lstrip("-").isdigit() else None,
                    record["question"],
                    *(record[c] for c in CHOICES),
                    record.get("answer") or None,
                    record.get("explanation") or None,
                )
            )
    return pl.DataFrame(rows, schema=CEVAL_SCHEMA, orient="row")


def evaluation_texts(questions: pl.DataFrame) -> list[str]:
    """What is indexed for each item: the question, and the question followed by its choices."""
    texts = []
    for row in questions.select("question", *CHOICES).iter_rows():
        question, choices = row[0] or "", [c or "" for c in row[1:]]
        texts.append(question)
        texts.append("\n".join([question, *choices]))
    return texts


# ---------------------------------------------------------------------------------------------
# Units and hashing
# ---------------------------------------------------------------------------------------------


def normalize_units(text: str | None) -> list[str]:
    """The text's units: NFKC, case-folded, CJK characters one by one, other letters/digits as words."""
    return normalized_units(text).split()


class _Windows:
    """Hashes of every window of consecutive units, any length, in O(1) per window.

    With b odd and `S[k] = sum_{j<k} u[j] * b^-j (mod 2^64)`, the window `[i, i+L)` hashes to
    `(S[i+L] - S[i]) * b^(i+L-1) = sum_j u[j] * b^(i+L-1-j)`, the same for equal windows anywhere.
    """

    def __init__(self, units: np.ndarray):
        n = len(units)
        self.n = n
        powers = np.cumprod(np.full(n, _BASE, dtype=np.uint64))  # b^1 .. b^n
        inverse = np.cumprod(np.full(n, _BASE_INV, dtype=np.uint64))
        self.powers = np.concatenate(([np.uint64(1)], powers[:-1])) if n else powers  # b^0 .. b^(n-1)
        scaled = units * (np.concatenate(([np.uint64(1)], inverse[:-1])) if n else inverse)
        self.prefix = np.concatenate(([np.uint64(0)], np.cumsum(scaled, dtype=np.uint64)))

    def hashes(self, starts: np.ndarray, length: int) -> np.ndarray:
        ends = starts + length
        raw = (self.prefix[ends] - self.prefix[starts]) * self.powers[ends - 1]
        return fmix64(raw ^ np.uint64((length * int(_LENGTH_SALT)) & _MASK64))


def _units_of(texts: Sequence[str | None]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Joined units of each text, unit counts, and how many units are CJK characters."""
    joined = [normalized_units(t) for t in texts]
    counts = np.array([s.count(" ") + 1 if s else 0 for s in joined], dtype=np.int64)
    cjk = np.array([len(CJK_CHAR.findall(s)) if s and not s.isascii() else 0 for s in joined], dtype=np.int64)
    return joined, counts, cjk


def _batch_windows(joined: list[str], counts: np.ndarray) -> tuple[_Windows, np.ndarray, np.ndarray]:
    """Window hasher over all texts' units, each text's first unit, and each unit's text end."""
    units = joined_unit_hashes(" ".join(s for s in joined if s))
    firsts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    end_of_unit = np.repeat(firsts + counts, counts)
    return _Windows(units), firsts, end_of_unit


# ---------------------------------------------------------------------------------------------
# The index
# ---------------------------------------------------------------------------------------------


@dataclass
class ContaminationIndex:
    """Sorted unique 64-bit gram hashes of all benchmarks, each with a bit mask of the benchmarks holding it."""

    benchmarks: tuple[str, ...]
    hashes: np.ndarray
    owners: np.ndarray
    lengths: tuple[int, ...]
    cfg: DecontamConfig = field(default_factory=DecontamConfig)
    ngrams: dict[str, int] = field(default_factory=dict)
    texts_indexed: dict[str, int] = field(default_factory=dict)
    texts_skipped: dict[str, int] = field(default_factory=dict)
    _bitmap: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _bits: int = field(default=0, init=False, repr=False, compare=False)

    @classmethod
    def build(cls, texts_by_benchmark: Mapping[str, Sequence[str]], cfg: DecontamConfig | None = None):
        """Index `{benchmark: texts}`; use `evaluation_texts(load_mmlu(...))` etc. for the texts."""
        cfg = cfg or DecontamConfig()
        names = tuple(texts_by_benchmark)
        if len(names) > MAX_BENCHMARKS:
            raise ValueError(f"at most {MAX_BENCHMARKS} benchmarks per index")
        all_hashes, all_owners, lengths = [], [], set()
        ngrams, indexed, skipped = {}, {}, {}
        for bit, name in enumerate(names):
            hashes, used, n_indexed, n_skipped = _benchmark_grams(list(texts_by_benchmark[name]), cfg)
            unique = _sorted_unique(hashes)
            all_hashes.append(unique)
            all_owners.append(np.full(len(unique), np.uint64(1) << np.uint64(bit), dtype=np.uint64))
            lengths |= used
            ngrams[name], indexed[name], skipped[name] = len(unique), n_indexed, n_skipped
        hashes = np.concatenate(all_hashes) if all_hashes else np.empty(0, dtype=np.uint64)
        owners = np.concatenate(all_owners) if all_owners else np.empty(0, dtype=np.uint64)
        order = np.argsort(hashes, kind="stable")
        hashes, owners = hashes[order], owners[order]
        if len(hashes):
            first = np.concatenate(([True], hashes[1:] != hashes[:-1]))
            starts = np.flatnonzero(first)
            owners = np.bitwise_or.reduceat(owners, starts)
            hashes = hashes[starts]
        return cls(names, hashes, owners, tuple(sorted(lengths)), cfg, ngrams, indexed, skipped)

    def _filter(self) -> tuple[np.ndarray, int]:
        """A bitmap over the top bits of the hashes (~32 bits per gram): most windows miss it."""
        if self._bitmap is None:
            bits = int(min(max(np.ceil(np.log2(max(len(self.hashes), 1) * 32)), 10), 32))
            top = (self.hashes >> np.uint64(64 - bits)).astype(np.int64)
            bitmap = np.zeros(1 << (bits - 3), dtype=np.uint8)
            np.bitwise_or.at(bitmap, top >> 3, (1 << (top & 7)).astype(np.uint8))
            self._bitmap, self._bits = bitmap, bits
        return self._bitmap, self._bits

    def lookup(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions in `hashes` of the grams that are in the index, and their owner masks."""
        bitmap, bits = self._filter()
        top = (hashes >> np.uint64(64 - bits)).astype(np.int64)
        maybe = np.flatnonzero((bitmap[top >> 3] >> (top & 7).astype(np.uint8)) & 1)
        if not len(maybe):
            return maybe, np.empty(0, dtype=np.uint64)
        candidates = hashes[maybe]
        pos = np.minimum(np.searchsorted(self.hashes, candidates), len(self.hashes) - 1)
        hit = self.hashes[pos] == candidates
        return maybe[hit], self.owners[pos[hit]]

    def fingerprint(self) -> str:
        """sha256 of the index content (benchmarks, settings, hashes and owners)."""
        digest = hashlib.sha256(json.dumps([self.benchmarks, self.cfg.grams(), self.lengths]).encode())
        digest.update(np.ascontiguousarray(self.hashes, dtype="<u8").tobytes())
        digest.update(np.ascontiguousarray(self.owners, dtype="<u8").tobytes())
        return digest.hexdigest()

    def stats(self) -> dict:
        return {
            "benchmarks": list(self.benchmarks),
            "ngrams_indexed": dict(self.ngrams),
            "texts_indexed": dict(self.texts_indexed),
            "texts_skipped_too_short": dict(self.texts_skipped),
            "gram_lengths": list(self.lengths),
            "index_fingerprint": self.fingerprint(),
        }

    def save(self, path: str | Path) -> None:
        meta = {
            "benchmarks": list(self.benchmarks),
            "lengths": list(self.lengths),
            "cfg": asdict(self.cfg),
            "ngrams": self.ngrams,
            "texts_indexed": self.texts_indexed,
            "texts_skipped": self.texts_skipped,
        }
        with open(path, "wb") as f:
            np.savez(f, hashes=self.hashes.astype("<u8"), owners=self.owners.astype("<u8"), meta=json.dumps(meta))

    @classmethod
    def load(cls, path: str | Path) -> ContaminationIndex:
        with np.load(path) as data:
            meta = json.loads(str(data["meta"]))
            hashes, owners = data["hashes"].astype(np.uint64), data["owners"].astype(np.uint64)
        return cls(
            tuple(meta["benchmarks"]),
            hashes,
            owners,
            tuple(meta["lengths"]),
            DecontamConfig(**meta["cfg"]),
            meta["ngrams"],
            meta["texts_indexed"],
            meta["texts_skipped"],
        )


def _benchmark_grams(texts: list[str], cfg: DecontamConfig) -> tuple[np.ndarray, set[int], int, int]:
    """All gram hashes of one benchmark's texts, the gram lengths used, texts indexed and skipped."""
    joined, counts, cjk = _units_of(texts)
    is_cjk = cjk * 2 > counts
    n = np.where(is_cjk, cfg.cjk_ngram, cfg.word_ngram)
    minimum = np.where(is_cjk, cfg.min_cjk_units, cfg.min_word_units)
    gram = np.where(counts >= n, n, np.where(counts >= minimum, counts, 0))
    windows, firsts, _ = _batch_windows(joined, counts)
    parts, used = [], set()
    for length in np.unique(gram[gram > 0]):
        texts_of_length = np.flatnonzero(gram == length)
        per_text = counts[texts_of_length] - length + 1
        starts = np.repeat(firsts[texts_of_length], per_text) + _ranges(per_text)
        parts.append(windows.hashes(starts, int(length)))
        used.add(int(length))
    hashes = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
    indexed = int((gram > 0).sum())
    return hashes, used, indexed, len(texts) - indexed


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values


def _ranges(sizes: np.ndarray) -> np.ndarray:
    """`concat(arange(s) for s in sizes)`."""
    total = int(sizes.sum())
    if not total:
        return np.empty(0, dtype=np.int64)
    firsts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return np.arange(total, dtype=np.int64) - np.repeat(firsts, sizes)


# ---------------------------------------------------------------------------------------------
# Checking documents
# ---------------------------------------------------------------------------------------------


def _doc_batches(texts: Sequence[str | None], batch_units: int) -> Iterator[tuple[int, list[str], np.ndarray]]:
    """`(first doc position, joined units, unit counts)` for batches of about `batch_units` units."""
    start, joined, total = 0, [], 0
    for position, text in enumerate(texts):
        units = normalized_units(text)
        joined.append(units)
        total += units.count(" ") + 1 if units else 0
        if total >= batch_units:
            yield start, joined, _counts(joined)
            start, joined, total = position + 1, [], 0
    if joined:
        yield start, joined, _counts(joined)


def _counts(joined: list[str]) -> np.ndarray:
    return np.array([s.count(" ") + 1 if s else 0 for s in joined], dtype=np.int64)


def match_counts(texts: Sequence[str | None], index: ContaminationIndex, batch_units: int | None = None) -> np.ndarray:
    """`(docs, benchmarks)` int64 matrix: distinct benchmark grams each document contains."""
    batch_units = batch_units or index.cfg.batch_units
    matrix = np.zeros((len(texts), len(index.benchmarks)), dtype=np.int64)
    if not len(index.hashes):
        return matrix
    for offset, joined, counts in _doc_batches(texts, batch_units):
        windows, firsts, end_of_unit = _batch_windows(joined, counts)
        doc_of_unit = np.repeat(np.arange(len(joined)), counts)
        hit_docs, hit_hashes, hit_owners = [], [], []
        for length in index.lengths:
            starts = np.flatnonzero(np.arange(windows.n) + length <= end_of_unit)
            if not len(starts):
                continue
            hashes = windows.hashes(starts, length)
            hit, owners = index.lookup(hashes)
            if len(hit):
                hit_docs.append(doc_of_unit[starts[hit]])
                hit_hashes.append(hashes[hit])
                hit_owners.append(owners)
        if not hit_docs:
            continue
        docs, hashes, owners = (np.concatenate(x) for x in (hit_docs, hit_hashes, hit_owners))
        # Distinct (document, gram) pairs: a gram repeated in a document counts once.
        pairs = np.unique(np.stack([docs.astype(np.uint64), hashes]), axis=1, return_index=True)[1]
        docs, owners = docs[pairs], owners[pairs]
        for bit in range(len(index.benchmarks)):
            mine = (owners >> np.uint64(bit)) & np.uint64(1) == 1
            matrix[offset : offset + len(joined), bit] += np.bincount(docs[mine], minlength=len(joined))
    return matrix


def find_contamination(
    docs: pl.DataFrame, index: ContaminationIndex, cfg: DecontamConfig | None = None
) -> StageResult:
    """Drop documents sharing at least `min_matches` distinct grams with a benchmark of `index`.

    Dropped rows get reason `contamination:<benchmark>`; kept rows are returned unchanged. `cfg`
    (default: the index's) supplies `min_matches` and `batch_units`; its gram settings must be the
    index's. Stats: docs checked and dropped, dropped and matching docs per benchmark, and the
    index's own stats (grams indexed per benchmark, gram lengths, fingerprint).
    """
    cfg = cfg or index.cfg
    if cfg.grams() != index.cfg.grams():
        raise ValueError(f"config gram settings {cfg.grams()} differ from the index's {index.cfg.grams()}")
    counts = match_counts(docs["text"].to_list(), index, cfg.batch_units)
    qualifying = np.where(counts >= cfg.min_matches, counts, 0)
    dropped_mask = qualifying.max(axis=1, initial=0) > 0
    # The benchmark with the most shared grams; ties go to the first in index order.
    winner = qualifying.argmax(axis=1) if len(index.benchmarks) else np.zeros(len(docs), dtype=np.int64)
    reasons = [f"contamination:{index.benchmarks[w]}" for w in winner[dropped_mask]]
    kept = docs.filter(pl.Series(~dropped_mask))
    dropped = pl.DataFrame(
        {"doc_id": docs["doc_id"].filter(pl.Series(dropped_mask)), "stage": DECONTAMINATED, "reason": reasons},
        schema=DROPPED_SCHEMA,
    )
    per_benchmark = {
        name: int(((winner == i) & dropped_mask).sum()) for i, name in enumerate(index.benchmarks)
    }
    matching = {name: int((qualifying[:, i] > 0).sum()) for i, name in enumerate(index.benchmarks)}
    stats = {
        "docs_checked": docs.height,
        "docs_kept": kept.height,
        "docs_dropped": dropped.height,
        "dropped_per_benchmark": per_benchmark,
        "docs_matching_per_benchmark": matching,
        "min_matches": cfg.min_matches,
        **index.stats(),
    }
    return StageResult(kept=kept, dropped=dropped, stats=stats)
