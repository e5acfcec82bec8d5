"""SentencePiece BPE tokenizer: sampling the training text, training, loading, hashing and measuring.

Normalization. The model uses SentencePiece's `identity` normalization rule with
`remove_extra_whitespaces=False` and `add_dummy_prefix=False`, so the text reaching the model is the
text given to it: no NFKC (extraction already wrote NFC, and NFKC would fold full-width forms,
ligatures and compatibility characters irreversibly), no collapsing of runs of spaces (code
indentation survives), no space added in front. Spaces are escaped to "▁" as usual and split words
(`split_by_whitespace=True`); pieces made only of spaces are allowed (`allow_whitespace_only_pieces`)
so indentation costs few tokens. "\n" is a user-defined symbol: it is always one token of its own
(id 4, right after the four special ids), never merged with neighbouring text, and decodes to itself.
Training reads the sample one line at a time, so no learned piece spans a line break. Characters
outside the vocabulary (rare CJK, emoji, controls) become UTF-8 byte pieces `<0x..>` through
`byte_fallback`, so nothing maps to `<unk>`.

With these settings `decode(encode(x)) == x` for every string, with one documented exception: the
character U+2581 "▁" itself, which SentencePiece uses as its space marker, decodes to a space.
`roundtrip_failures` finds such texts.

Vocabulary size. `hard_vocab_limit=True` (the default) makes the model have exactly `vocab_size`
pieces, which the token dtype, the embedding table and the training config all rely on; a sample too
small to supply that many pieces is an error (`VocabSizeError`) that says how many pieces it does
support. With `hard_vocab_limit=False` the model gets at most `vocab_size` pieces, and
`TrainedTokenizer.vocab_size` holds the real count.

Tokenizer hash. The sha256 of the model file. The file records the trainer options, so the hash
changes with any option or with the sample; `train_tokenizer` drops the one option that says nothing
about the tokenizer, the trainer's thread count, from the file it writes, so machines with different
core counts train byte-identical files from the same sample and config.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from dataclasses import field as dataclass_field
from pathlib import Path

import numpy as np
import polars as pl
import sentencepiece as spm

from lm_assets.storage.store import atomic_path
from lm_assets.text import CJK_CHAR, base_lang
from lm_assets.training.primitives import read_varint

MODEL_FILENAME = "tokenizer.model"
NEWLINE = "\n"
_PER_CHAR_LANGS = ("zh", "ja")
_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
_TOO_LOW = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


class VocabSizeError(ValueError):
    """The requested vocabulary size does not fit the training sample."""


@dataclass(frozen=True)
class TokenizerConfig:
    """How the tokenizer is trained.

    `vocab_size` is 32,000 for real runs (small values, 2,000-4,000, suit tests and the demo; with
    Chinese in the sample it must exceed the number of distinct characters that
    `character_coverage` keeps, plus 256 byte pieces and the special pieces). `character_coverage`
    0.9995 is SentencePiece's recommendation for languages with large character sets such as
    Chinese: the rarest 0.05% of character occurrences are left to byte fallback. Digits are split
    (`split_digits`) so numbers tokenize uniformly, one token per digit. The special ids are fixed:
    pad 0, unk 1, bos 2, eos 3.

    `sample_docs` caps the documents drawn by `sample_documents` (seeded by `sample_seed`);
    `max_sentence_length` is in bytes: longer lines are cut into pieces of at most that size before
    training (SentencePiece would skip them). `num_threads` (default: the machine's CPUs) only affects
    training speed: the model file and its hash leave it out (`canonical_model_bytes`).

    The normalization fields keep `decode(encode(x)) == x` (see the module docstring); changing them
    gives up that guarantee.
    """

    vocab_size: int = 32_000
    model_type: str = "bpe"
    character_coverage: float = 0.9995
    byte_fallback: bool = True
    split_digits: bool = True
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3
    sample_docs: int = 100_000
    sample_seed: int = 0
    max_sentence_length: int = 16_384
    num_threads: int = dataclass_field(default_factory=lambda: os.cpu_count() or 1)
    hard_vocab_limit: bool = True
    max_sentencepiece_length: int = 16
    normalization_rule_name: str = "identity"
    remove_extra_whitespaces: bool = False
    add_dummy_prefix: bool = False
    allow_whitespace_only_pieces: bool = True
    split_by_whitespace: bool = True
    user_defined_symbols: tuple[str, ...] = (NEWLINE,)

    def __post_init__(self):
        if self.model_type not in ("bpe", "unigram"):
            raise ValueError(f"model_type must be 'bpe' or 'unigram', got {self.model_type!r}")
        if sorted((self.pad_id, self.unk_id, self.bos_id, self.eos_id)) != [0, 1, 2, 3]:
            raise ValueError("pad_id, unk_id, bos_id and eos_id must be 0, 1, 2 and 3 in some order")
        if not 0.0 < self.character_coverage <= 1.0:
            raise ValueError("character_coverage must be within (0, 1]")
        if self.sample_docs < 1 or self.max_sentence_length < 16 or self.num_threads < 1:
            raise ValueError("sample_docs and num_threads must be positive and max_sentence_length at least 16")

    def trainer_options(self) -> dict:
        """The keyword arguments given to `SentencePieceTrainer.train`."""
        return {
            "vocab_size": self.vocab_size,
            "model_type": self.model_type,
            "character_coverage": self.character_coverage,
            "byte_fallback": self.byte_fallback,
            "split_digits": self.split_digits,
            "pad_id": self.pad_id,
            "unk_id": self.unk_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "max_sentence_length": self.max_sentence_length,
            "max_sentencepiece_length": self.max_sentencepiece_length,
            "num_threads": self.num_threads,
            "hard_vocab_limit": self.hard_vocab_limit,
            "normalization_rule_name": self.normalization_rule_name,
            "remove_extra_whitespaces": self.remove_extra_whitespaces,
            "add_dummy_prefix": self.add_dummy_prefix,
            "allow_whitespace_only_pieces": self.allow_whitespace_only_pieces,
            "split_by_whitespace": self.split_by_whitespace,
            "user_defined_symbols": list(self.user_defined_symbols),
            # The sample is already drawn by `sample_documents`: train on every line of it.
            "input_sentence_size": 0,
            "shuffle_input_sentence": False,
            "minloglevel": 2,
        }


class _TokenizerFile:
    """What a tokenizer the pipeline writes has, trained or adopted: its model bytes, hash and size."""

    def processor(self) -> spm.SentencePieceProcessor:
        return load_tokenizer(self.model)

    def _metadata(self, **rest) -> dict:
        return {"tokenizer_hash": self.hash, "vocab_size": self.vocab_size, "model_bytes": len(self.model), **rest}


@dataclass(frozen=True)
class TrainedTokenizer(_TokenizerFile):
    """A trained model: its file, bytes, real vocabulary size, hash, and what it was trained on."""

    path: Path
    model: bytes
    vocab_size: int
    hash: str
    config: TokenizerConfig
    sample_docs: int
    sample_lines: int
    sample_chars: int

    def metadata(self) -> dict:
        return self._metadata(
            sample_docs=self.sample_docs, sample_lines=self.sample_lines, sample_chars=self.sample_chars,
            config={k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.config).items()},
        )


# ---------------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------------


def _shard_texts(shard) -> list[str]:
    if isinstance(shard, pl.DataFrame):
        shard = shard["text"]
    if isinstance(shard, pl.Series):
        shard = shard.to_list()
    return [t for t in shard if t]


def _as_shards(frames_or_texts) -> list[list[str]]:
    if isinstance(frames_or_texts, (pl.DataFrame, pl.Series)):
        return [_shard_texts(frames_or_texts)]
    items = list(frames_or_texts)
    if items and all(t is None or isinstance(t, str) for t in items):
        return [_shard_texts(items)]
    return [_shard_texts(s) for s in items]


def _quotas(sizes: np.ndarray, total: int) -> np.ndarray:
    """Largest-remainder split of `total` proportional to `sizes`, never above a shard's size."""
    if sizes.sum() <= total:
        return sizes.copy()
    exact = sizes * (total / sizes.sum())
    quotas = np.floor(exact).astype(np.int64)
    # Ties go to the earlier shard (stable sort), so the split is deterministic.
    order = np.argsort(-(exact - quotas), kind="stable")
    quotas[order[: total - quotas.sum()]] += 1
    return np.minimum(quotas, sizes)


def sample_documents(frames_or_texts, cfg: TokenizerConfig | None = None) -> list[str]:
    """A seeded sample of at most `cfg.sample_docs` non-empty texts, drawn across shards.

    `frames_or_texts` is a sequence of shards, each a frame with a `text` column, a Series or a list
    of strings (a single frame or list of strings counts as one shard). Each shard contributes in
    proportion to its number of non-empty texts (largest remainder, so the quotas add up exactly);
    within a shard the documents are drawn without replacement by a generator seeded with
    `(sample_seed, shard position)`, and kept in shard order. The same shards, order and config
    always give the same sample.
    """
    cfg = cfg or TokenizerConfig()
    shards = _as_shards(frames_or_texts)
    sizes = np.array([len(s) for s in shards], dtype=np.int64)
    if not len(shards):
        return []
    quotas = _quotas(sizes, cfg.sample_docs)
    sample: list[str] = []
    for position, (texts, quota) in enumerate(zip(shards, quotas)):
        if quota == len(texts):
            sample.extend(texts)
        elif quota:
            rng = np.random.default_rng([cfg.sample_seed, position])
            picked = np.sort(rng.choice(len(texts), size=int(quota), replace=False))
            sample.extend(texts[i] for i in picked)
    return sample


# ---------------------------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------------------------


def training_lines(texts: Iterable[str], max_bytes: int) -> Iterator[str]:
    """The non-empty lines of `texts`, each cut to at most `max_bytes` UTF-8 bytes."""
    max_chars = max(1, max_bytes // 4)  # a UTF-8 character takes at most 4 bytes
    for text in texts:
        if not text:
            continue
        for line in text.split(NEWLINE):
            if not line:
                continue
            if len(line) * 4 <= max_bytes or len(line.encode()) <= max_bytes:
                yield line
            else:
                for start in range(0, len(line), max_chars):
                    yield line[start : start + max_chars]


class _Counted:
    """Counts what passes through an iterator (SentencePiece consumes it inside C++)."""

    def __init__(self, lines: Iterator[str]):
        self._lines = lines
        self.lines = 0
        self.chars = 0

    def __iter__(self):
        for line in self._lines:
            self.lines += 1
            self.chars += len(line)
            yield line


def _vocab_error(err: RuntimeError, cfg: TokenizerConfig, docs: int, counted: _Counted) -> Exception:
    message = str(err)
    high = _TOO_HIGH.search(message)
    if high:
        supported = int(high.group(2))
        return VocabSizeError(
            f"vocab_size={cfg.vocab_size} is more than the training sample supports: {docs} documents "
            f"({counted.lines} lines, {counted.chars} characters) yield at most {supported} pieces. "
            f"Train on more text or set vocab_size <= {supported}."
        )
    low = _TOO_LOW.search(message)
    if low:
        needed = int(low.group(2))
        return VocabSizeError(
            f"vocab_size={cfg.vocab_size} is too small for the sample: the special pieces, byte pieces and "
            f"the characters covering {cfg.character_coverage} of it take {needed} pieces. Set vocab_size "
            f">= {needed} (well above, to leave room for merges) or lower character_coverage."
        )
    return err


def train_tokenizer(texts: Iterable[str], cfg: TokenizerConfig | None, out_dir: str | Path) -> TrainedTokenizer:
    """Train a SentencePiece model on `texts` (e.g. `sample_documents(...)`) and write it atomically.

    The texts stream into the trainer line by line (`sentence_iterator`); nothing is written but
    `<out_dir>/tokenizer.model`. Raises `VocabSizeError` when `vocab_size` does not fit the sample
    and `ValueError` when there is no text at all.
    """
    cfg = cfg or TokenizerConfig()
    texts = list(texts)
    counted = _Counted(training_lines(texts, cfg.max_sentence_length))
    sink = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(sentence_iterator=iter(counted), model_writer=sink, **cfg.trainer_options())
    except RuntimeError as err:
        if counted.lines == 0:
            raise ValueError("no training text: every document is empty") from err
        raise _vocab_error(err, cfg, len(texts), counted) from err
    model = canonical_model_bytes(sink.getvalue())
    sp = load_tokenizer(model)
    _check_special_ids(sp, cfg)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / MODEL_FILENAME
    atomic_write_bytes(path, model)
    return TrainedTokenizer(
        path=path,
        model=model,
        vocab_size=sp.get_piece_size(),
        hash=tokenizer_hash(model),
        config=cfg,
        sample_docs=len(texts),
        sample_lines=counted.lines,
        sample_chars=counted.chars,
    )


def _check_special_ids(sp: spm.SentencePieceProcessor, cfg: TokenizerConfig) -> None:
    got = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
    if got != (cfg.pad_id, cfg.unk_id, cfg.bos_id, cfg.eos_id):
        raise RuntimeError(f"trained model has special ids {got}, expected pad/unk/bos/eos {cfg.pad_id}..{cfg.eos_id}")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to a temporary file next to `path`, then rename it into place."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


# ---------------------------------------------------------------------------------------------
# The model file
# ---------------------------------------------------------------------------------------------

# Field numbers in sentencepiece_model.proto: ModelProto.trainer_spec = 2, TrainerSpec.num_threads = 16.
_TRAINER_SPEC_FIELD = 2
_NUM_THREADS_FIELD = 16


def _write_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, start, end) of each top-level field of a protobuf message."""
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = read_varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            length, pos = read_varint(data, pos)
            pos += length
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if pos > len(data):
            raise ValueError("truncated protobuf message")
        yield field, wire, start, pos


def canonical_model_bytes(model: bytes) -> bytes:
    """The model with the trainer's thread count removed from its recorded trainer spec.

    The thread count is the one trainer option that does not change the tokenizer; dropping it
    makes the file, and so the hash, the same on every machine. Loading is unaffected.
    """
    out = bytearray()
    for field, wire, start, end in _fields(model):
        if field == _TRAINER_SPEC_FIELD and wire == 2:
            # Key varint, length varint, then the TrainerSpec message itself.
            _, after_key = read_varint(model, start)
            length, body_start = read_varint(model, after_key)
            body = model[body_start : body_start + length]
            kept = b"".join(body[s:e] for f, _, s, e in _fields(body) if f != _NUM_THREADS_FIELD)
            out += model[start:after_key] + _write_varint(len(kept)) + kept
        else:
            out += model[start:end]
    return bytes(out)


def load_tokenizer(path_or_bytes: str | Path | bytes) -> spm.SentencePieceProcessor:
    """A SentencePiece processor from a model file or its bytes."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return spm.SentencePieceProcessor(model_proto=bytes(path_or_bytes))
    return spm.SentencePieceProcessor(model_file=str(path_or_bytes))


def tokenizer_hash(path_or_bytes: str | Path | bytes) -> str:
    """sha256 (hex) of the model file: the "tokenizer hash" that token shards record."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return hashlib.sha256(path_or_bytes).hexdigest()
    digest = hashlib.sha256()
    with open(path_or_bytes, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------
# A checkpoint's tokenizer, adopted and extended
# ---------------------------------------------------------------------------------------------

_PIECES_FIELD = 1  # ModelProto.pieces: repeated SentencePiece {piece = 1, score = 2, type = 3}
_USER_DEFINED = 4


def special_ids(sp: spm.SentencePieceProcessor) -> dict[str, int]:
    """The ids the pipeline writes: EOS between documents, PAD in padding. A tokenizer without a pad
    piece (Llama's) pads with its unk piece, which byte fallback never emits, so padding never
    collides with a token the model must learn; a tokenizer without EOS cannot separate documents."""
    from lm_assets.training.export import tokenizer_special_ids

    ids = tokenizer_special_ids(sp)
    if ids["eos"] < 0:
        raise ValueError("the tokenizer has no EOS piece, which the pipeline puts between documents")
    if ids["pad"] < 0:
        raise ValueError("the tokenizer has neither a pad nor an unk piece to pad sequences with")
    return {**ids, "unk": sp.unk_id()}


def add_pieces(model: bytes, pieces: Sequence[str]) -> tuple[bytes, list[str], list[str]]:
    """`model` with each of `pieces` appended as a user-defined piece (always one token, never split),
    and which were added and which the vocabulary already held. Appended pieces take the ids after
    the last one, so every existing id keeps its meaning."""
    sp = load_tokenizer(model)
    have = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    added, present, extra = [], [], bytearray()
    for piece in pieces:
        if not piece or any(c.isspace() for c in piece) or "\u2581" in piece:
            raise ValueError(f"a vocabulary piece must be non-empty and hold no whitespace: {piece!r}")
        if piece in have:
            present.append(piece)
            continue
        have.add(piece)
        added.append(piece)
        text = piece.encode("utf-8")
        body = b"\x0a" + _write_varint(len(text)) + text + b"\x15\x00\x00\x00\x00" + b"\x18" + _write_varint(_USER_DEFINED)
        extra += _write_varint(_PIECES_FIELD << 3 | 2) + _write_varint(len(body)) + body
    return model + bytes(extra), added, present


@dataclass(frozen=True)
class AdoptedTokenizer(_TokenizerFile):
    """A Hugging Face checkpoint's SentencePiece model, taken as the corpus tokenizer, with `added`
    pieces appended (ids `base_vocab_size` onwards)."""

    model: bytes
    source: str
    base_hash: str
    base_vocab_size: int
    added: tuple[str, ...]
    already_present: tuple[str, ...]

    @property
    def hash(self) -> str:
        return tokenizer_hash(self.model)

    @property
    def vocab_size(self) -> int:
        return self.base_vocab_size + len(self.added)

    def metadata(self) -> dict:
        return self._metadata(adopted_from=self.source, base_hash=self.base_hash, base_vocab_size=self.base_vocab_size,
                              added_pieces=list(self.added), special_ids=special_ids(self.processor()))


def adopt_tokenizer(folder: str | Path, extra_pieces: Sequence[str] = ()) -> AdoptedTokenizer:
    """The tokenizer of the Hugging Face checkpoint in `folder` (its SentencePiece `tokenizer.model`),
    extended by `extra_pieces`. Refuses what the pipeline could not tokenize with or export again."""
    from lm_assets.training.export import CONFIG_NAME, build_hf_tokenizer, read_hf_config

    folder = Path(folder)
    path = folder / MODEL_FILENAME
    if not path.exists():
        held = "only tokenizer.json (a Hugging Face tokenizers file)" if (folder / "tokenizer.json").exists() else "no tokenizer"
        raise ValueError(f"{folder} holds {held}: adopting takes the SentencePiece {MODEL_FILENAME} that Llama 1/2, "
                         "Mistral and similar checkpoints ship")  # fmt: skip
    base = path.read_bytes()
    try:
        sp = load_tokenizer(base)
    except RuntimeError as err:
        raise ValueError(f"{path} is not a SentencePiece model: {err}") from err
    special_ids(sp)
    model, added, present = add_pieces(base, extra_pieces)
    build_hf_tokenizer(model)  # the export must be able to write it back as a HF tokenizer
    if (folder / CONFIG_NAME).exists():
        model_vocab = read_hf_config(folder, complete=False).get("vocab_size")
        if model_vocab is not None and model_vocab < sp.get_piece_size():
            raise ValueError(f"{folder}: the tokenizer has {sp.get_piece_size()} pieces, the model only {model_vocab}")
    return AdoptedTokenizer(model=model, source=str(folder), base_hash=tokenizer_hash(base),
                            base_vocab_size=sp.get_piece_size(), added=tuple(added), already_present=tuple(present))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Encoding and metrics
# ---------------------------------------------------------------------------------------------


def encode_batch(sp: spm.SentencePieceProcessor, texts: Sequence[str | None], num_threads: int = 1) -> list[np.ndarray]:
    """int32 token ids of each text (no BOS/EOS), encoded by SentencePiece's thread pool."""
    batch = [t or "" for t in texts]
    if not batch:
        return []
    try:
        return sp.encode(batch, num_threads=num_threads, return_type="numpy")
    except (TypeError, ValueError):  # SentencePiece without numpy output
        return [np.asarray(ids, dtype=np.int32) for ids in sp.encode(batch, num_threads=num_threads)]


def _per_char(lang: str) -> bool:
    return lang in _PER_CHAR_LANGS


def _fertility(ids: list[np.ndarray], texts: Sequence[str | None], langs: Sequence[str | None]) -> dict[str, float]:
    tokens: dict[str, int] = {}
    units: dict[str, int] = {}
    for doc_ids, text, lang in zip(ids, texts, langs):
        code = base_lang(lang)
        if not code or not text:
            continue
        count = len(CJK_CHAR.findall(text)) if _per_char(code) else len(text.split())
        tokens[code] = tokens.get(code, 0) + len(doc_ids)
        units[code] = units.get(code, 0) + count
    return {code: tokens[code] / units[code] for code in sorted(tokens) if units[code]}


def fertility(
    sp: spm.SentencePieceProcessor, texts: Sequence[str | None], langs: Sequence[str | None], num_threads: int = 1
) -> dict[str, float]:
    """Tokens per unit, by base language: per CJK character for zh/ja, per whitespace word otherwise.

    Gives e.g. `{"en": 1.4, "zh": 0.8}` ("zh-cn" counts as "zh"); documents without a language, and
    languages with no units, are left out.
    """
    return _fertility(encode_batch(sp, texts, num_threads), texts, langs)


def _byte_share(sp: spm.SentencePieceProcessor, ids: list[np.ndarray]) -> float:
    nonempty = [a for a in ids if len(a)]
    if not nonempty:
        return 0.0
    is_byte = np.array([sp.is_byte(i) for i in range(sp.get_piece_size())], dtype=bool)
    return float(is_byte[np.concatenate(nonempty)].mean())


def byte_fallback_share(sp: spm.SentencePieceProcessor, texts: Sequence[str | None], num_threads: int = 1) -> float:
    """Share of all tokens that are byte pieces `<0x..>` (0.0 for no tokens)."""
    return _byte_share(sp, encode_batch(sp, texts, num_threads))


def _unk_count(sp: spm.SentencePieceProcessor, ids: list[np.ndarray]) -> int:
    return int(sum(int((a == sp.unk_id()).sum()) for a in ids))


def unk_count(sp: spm.SentencePieceProcessor, texts: Sequence[str | None], num_threads: int = 1) -> int:
    """How many tokens are `<unk>` (0 with byte fallback)."""
    return _unk_count(sp, encode_batch(sp, texts, num_threads))


def first_difference(a: str, b: str) -> int:
    """Index of the first character where `a` and `b` differ (the shorter length if one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _roundtrip_failures(
    sp: spm.SentencePieceProcessor, ids: list[np.ndarray], texts: Sequence[str | None], num_threads: int
) -> list[tuple[int, int]]:
    if not ids:
        return []
    decoded = sp.decode([a.tolist() for a in ids], num_threads=num_threads)
    return [
        (i, first_difference(text or "", back))
        for i, (text, back) in enumerate(zip(texts, decoded))
        if back != (text or "")
    ]


def roundtrip_failures(
    sp: spm.SentencePieceProcessor, texts: Sequence[str | None], num_threads: int = 1
) -> list[tuple[int, int]]:
    """`(index, first differing character position)` for each text that `decode(encode(x))` changes."""
    return _roundtrip_failures(sp, encode_batch(sp, texts, num_threads), texts, num_threads)


def tokenizer_report(
    sp: spm.SentencePieceProcessor, texts: Sequence[str | None], langs: Sequence[str | None], num_threads: int = 1
) -> dict:
    """The metrics above in one dict (texts encoded once), for materialization metadata and checks."""
    ids = encode_batch(sp, texts, num_threads)
    failures = _roundtrip_failures(sp, ids, texts, num_threads)
    return {
        "vocab_size": sp.get_piece_size(),
        "docs": len(texts),
        "tokens": int(sum(len(a) for a in ids)),
        "fertility": _fertility(ids, texts, langs),
        "byte_fallback_share": _byte_share(sp, ids),
        "unk_count": _unk_count(sp, ids),
        "roundtrip_failures": len(failures),
        "first_roundtrip_failures": failures[:10],
    }
