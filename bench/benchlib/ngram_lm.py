"""A token-bigram language model with interpolated Kneser-Ney smoothing over the classifier's token ids,
as a page signal: the mean log-probability of a page's tokens under the KEEP pages of other sources (the
CCNet idea, with those pages as the reference text). bench/quality_transfer.py's `ngram-lm` variant."""

from __future__ import annotations

import numpy as np

DISCOUNT = 0.75
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


def _count(values: np.ndarray, keys: np.ndarray, counts: np.ndarray) -> np.ndarray:
    at = np.minimum(np.searchsorted(values, keys), max(len(values) - 1, 0))
    return np.where(len(values) and values[at] == keys, counts[at], 0) if len(values) else np.zeros(len(keys))


class BigramLM:
    def __init__(self, pages: list[list[int]]):
        pages = [np.asarray(p, dtype=np.uint64) for p in pages if len(p) > 1]
        bigrams = np.concatenate([(p[:-1] << _SHIFT) | p[1:] for p in pages]) if pages else np.zeros(0, np.uint64)
        self.bigrams, self.bigram_counts = np.unique(bigrams, return_counts=True)
        self.histories, at = np.unique(self.bigrams >> _SHIFT, return_inverse=True)
        self.history_counts = np.bincount(at, weights=self.bigram_counts)
        self.history_types = np.bincount(at)
        # Kneser-Ney's lower order: in how many contexts a token follows another
        self.words, self.word_contexts = np.unique(self.bigrams & _LOW, return_counts=True)
        self.vocabulary = len(self.words) + 1

    def mean_log_prob(self, page: list[int]) -> float:
        page = np.asarray(page, dtype=np.uint64)
        if len(page) < 2:
            return float("nan")
        lower = (_count(self.words, page[1:], self.word_contexts) + 0.5) / (len(self.bigrams) + 0.5 * self.vocabulary)
        history = page[:-1]
        seen = _count(self.histories, history, self.history_counts).astype(float)
        types = _count(self.histories, history, self.history_types).astype(float)
        pair = _count(self.bigrams, (history << _SHIFT) | page[1:], self.bigram_counts).astype(float)
        total = np.maximum(seen, 1)
        p = np.where(seen > 0, np.maximum(pair - DISCOUNT, 0) / total + DISCOUNT * types / total * lower, lower)
        return float(np.mean(np.log(p)))


def keep_lm_signal(tokens: list, langs: list, keep: np.ndarray, reference: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """Each `scored` page's mean token log-probability under a bigram model of the KEEP pages among
    `reference` in its language (NaN for the others)."""
    out = np.full(len(tokens), np.nan)
    langs = np.asarray(langs)
    for lang in np.unique(langs[scored]):
        model = BigramLM([tokens[i] for i in np.flatnonzero(reference & keep & (langs == lang))])
        for i in np.flatnonzero(scored & (langs == lang)):
            out[i] = model.mean_log_prob(tokens[i])
    return out
