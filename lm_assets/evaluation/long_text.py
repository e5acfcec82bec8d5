"""Held-out documents read whole: perplexity by position, and continuations scored against the text.

    docs = validation_documents(segments, tokens_of, langs, min_tokens=512, max_documents=32)
    position_perplexity(em, docs)        # {"0-256": {...}, "256-1k": {...}, ...}
    continuation_scores(em, docs)        # ROUGE-L, BLEU per language, one row per document

The documents are the packed val split's (never trained on), each taken whole from its tokenized
shard, in a fixed order (by doc_id), the longest first among those at least `min_tokens` long.

Perplexity by position. Each document is scored as one row from its first token, cut at the model's
context; a target at position p (the number of tokens before it) falls in the bucket [lo, hi) holding
p. A model that uses its context scores lower perplexity in the later buckets; one that never saw
long rows in training (positions past its training length) scores higher there. Buckets past the
context are reported with no tokens.

Continuations. The first `prompt_tokens` of a document are the prompt; the model continues it greedily
by `new_tokens`, and the continuation is scored against the document's true next `new_tokens` tokens,
both decoded: ROUGE-L F1 (rouge-score's LCS F-measure, per document, averaged) and BLEU (sacrebleu's
corpus BLEU). English is tokenized by rouge-score's default tokenizer and sacrebleu's `13a`; Chinese,
which rouge-score's tokenizer would erase, by character for ROUGE-L and by sacrebleu's `zh`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from lm_assets.evaluation.checkpoint import EvalModel

BUCKETS: tuple[tuple[int, int | None], ...] = ((0, 256), (256, 1024), (1024, 4096), (4096, None))
HEAD_CHUNK = 4096


@dataclass(frozen=True)
class Document:
    doc_id: str
    lang: str
    tokens: np.ndarray


def bucket_name(lo: int, hi: int | None) -> str:
    def short(n: int) -> str:
        return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)

    return f"{short(lo)}-{short(hi)}" if hi is not None else f"{short(lo)}+"


def validation_documents(segments: pl.DataFrame, tokens_of: Callable[[str], tuple[np.ndarray, pl.DataFrame]],
                         langs: Mapping[str, str], min_tokens: int = 512, max_documents: int = 32) -> list[Document]:  # fmt: skip
    """The val split's documents (`segments`: its segment table) of at least `min_tokens` tokens, longest
    first (ties by doc_id), at most `max_documents`; `tokens_of(shard)` gives a shard's token array and
    index (doc_id, offset, length), `langs` each doc_id's language."""
    wanted = segments.select("doc_id", "shard").unique().sort("doc_id")
    found = []
    for (shard,), group in wanted.group_by(["shard"], maintain_order=True):
        tokens, index = tokens_of(shard)
        rows = index.join(group.select("doc_id"), on="doc_id").filter(pl.col("length") >= min_tokens)
        found += [(int(r["length"]), r["doc_id"], tokens, int(r["offset"])) for r in rows.iter_rows(named=True)]
    found.sort(key=lambda f: (-f[0], f[1]))
    return [Document(doc_id, langs.get(doc_id, ""), np.asarray(tokens[offset : offset + length], dtype=np.int64))
            for length, doc_id, tokens, offset in found[:max_documents]]  # fmt: skip


def position_perplexity(em: EvalModel, docs: Sequence[Document], buckets=BUCKETS) -> dict[str, dict]:
    """Per bucket: scored tokens, summed NLL (nats), nll_per_token and perplexity (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    from lm_assets.evaluation.scoring import hidden_states

    nll = np.zeros(len(buckets))
    count = np.zeros(len(buckets), dtype=np.int64)
    edges = np.array([lo for lo, _ in buckets] + [math.inf])
    with torch.inference_mode():
        for doc in docs:
            ids = torch.from_numpy(doc.tokens[: em.max_length + 1])
            if len(ids) < 2:
                continue
            hidden = hidden_states(em.model, ids[None, :-1].to(em.device))[0]
            losses = []
            for s in range(0, hidden.shape[0], HEAD_CHUNK):
                logits = em.model.head(hidden[s : s + HEAD_CHUNK]).float()
                losses.append(F.cross_entropy(logits, ids[1:][s : s + HEAD_CHUNK].to(logits.device), reduction="none").cpu())
            loss = torch.cat(losses).double().numpy()
            which = np.searchsorted(edges, np.arange(1, len(ids)), side="right") - 1  # target position = tokens before it
            nll += np.bincount(which, weights=loss, minlength=len(buckets))[: len(buckets)]
            count += np.bincount(which, minlength=len(buckets))[: len(buckets)]
    out = {}
    for i, (lo, hi) in enumerate(buckets):
        n = int(count[i])
        out[bucket_name(lo, hi)] = {"tokens": n, "nll": float(nll[i]),
                                    "nll_per_token": nll[i] / n if n else math.nan,
                                    "perplexity": math.exp(nll[i] / n) if n else math.nan}  # fmt: skip
    return out


class _Characters:
    """rouge-score's tokenizer interface, one token per non-space character (for Chinese)."""

    def tokenize(self, text: str) -> list[str]:
        return [c for c in text if not c.isspace()]


def _is_chinese(lang: str) -> bool:
    return lang.split("-")[0] in ("zh", "ja")


def continuation_scores(em: EvalModel, docs: Sequence[Document], prompt_tokens: int = 128, new_tokens: int = 64,
                        batch_size: int = 8) -> dict:  # fmt: skip
    """Each document's greedy continuation against its true one: rows, and ROUGE-L and BLEU by language."""
    import sacrebleu
    from rouge_score import rouge_scorer

    from lm_assets.evaluation.generation import generate

    usable = [d for d in docs if len(d.tokens) >= prompt_tokens + new_tokens]
    rows = []
    eos, pad = em.tokenizer.eos_id(), max(em.tokenizer.pad_id(), 0)
    for lo in range(0, len(usable), batch_size):
        batch = usable[lo : lo + batch_size]
        prompts = [d.tokens[:prompt_tokens].tolist() for d in batch]
        made = generate(em.model, prompts, new_tokens, eos_id=eos, pad_id=pad)
        for doc, prompt, tokens in zip(batch, prompts, made.tokens):
            truth = doc.tokens[prompt_tokens : prompt_tokens + new_tokens].tolist()
            rows.append({"doc_id": doc.doc_id, "lang": doc.lang, "prompt": em.tokenizer.decode(prompt),
                         "reference": em.tokenizer.decode(truth), "continuation": em.tokenizer.decode(tokens)})  # fmt: skip
    scorers = {False: rouge_scorer.RougeScorer(["rougeL"]), True: rouge_scorer.RougeScorer(["rougeL"], tokenizer=_Characters())}
    for row in rows:
        zh = _is_chinese(row["lang"])
        row["rouge_l_f1"] = scorers[zh].score(row["reference"], row["continuation"])["rougeL"].fmeasure
        row["bleu"] = sacrebleu.sentence_bleu(row["continuation"], [row["reference"]], tokenize="zh" if zh else "13a").score
    by_lang = {}
    for lang in sorted({r["lang"] for r in rows}):
        mine = [r for r in rows if r["lang"] == lang]
        zh = _is_chinese(lang)
        corpus = sacrebleu.corpus_bleu([r["continuation"] for r in mine], [[r["reference"] for r in mine]],
                                       tokenize="zh" if zh else "13a")  # fmt: skip
        by_lang[lang or "unknown"] = {"documents": len(mine), "rouge_l_f1": float(np.mean([r["rouge_l_f1"] for r in mine])),
                                      "bleu": corpus.score}  # fmt: skip
    return {"rows": rows, "by_lang": by_lang, "documents": len(rows), "skipped_short": len(docs) - len(usable),
            "prompt_tokens": prompt_tokens, "new_tokens": new_tokens}  # fmt: skip


__all__ = ["BUCKETS", "Document", "bucket_name", "continuation_scores", "position_perplexity", "validation_documents"]
