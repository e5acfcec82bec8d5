"""Dedup accuracy against the known duplicates of a benchmark crawl (the `truth.json` that `bench/build_crawl.py` writes).

Inputs
    `clusters`: the dedup clusters table joined with the sketches, one row per document that reached
    dedup, with at least `doc_id, cluster_id, kept, url, lang` (`cluster_id` names the cluster; the
    cluster's kept document is the row with `kept` true). `texts`: the text each document was
    deduplicated on, as {url: text} or a frame with `url` and `text`. `truth`: the parsed
    `truth.json`, whose `injected` entries give `url, original_url, kind` (exact|near) and
    `edit_rate`, plus `natural_duplicates` (lists of URLs with the same text) and
    `natural_near_pairs` ([url_a, url_b, jaccard]).

Only documents that reached dedup count: the curation stages drop some pages (quality rules,
language ID, toxicity) before any duplicate is looked for, and a group or pair with a member missing
is left out of the recall it would belong to.

Language group: from the `lang` column, "zh" for zh and ja, "en" for everything else. An injected
group or pair counts for its original's language; a removed document for its own.

Exact-duplicate recall
    An injected exact group is an original and its byte-identical copies. Over the groups with at
    least two members in `clusters`: the share whose present members all sit in one cluster with
    exactly one of them kept, or none of them kept for a document whose text duplicates the
    original's (true Jaccard at least the MinHash threshold): a twin page of the source that the
    truth does not list because page navigation told the two apart before extraction (the
    untranslated pages of a manual's other languages, say). The near recall counts such a twin too.

Near-duplicate recall, per edit-rate bin
    Over the injected near copies that reached dedup together with their original: the share that
    sits in the same cluster as its original, with that cluster keeping a member of the injected
    group (the original or one of its copies). For an original with a single copy this is "exactly
    one of the pair is kept"; with several copies, keeping a sibling copy is a success too. Bins by
    `edit_rate`: [0.01, 0.02), [0.02, 0.04), [0.04, 0.06]; a copy outside them is not counted.

False-removal rate
    Removed documents that are not injected copies, whose cluster's kept document is neither a
    member of their own injected group (an original removed for one of its copies) nor their
    natural twin in the truth (same `natural_duplicates` group, or a `natural_near_pairs` pair; an
    injected copy kept in place of its original stands for that original), and whose true Jaccard
    similarity with the kept document is below 0.5. True Jaccard is computed exactly on the shingle
    sets MinHash sketches (`minhash.shingles` with the same `MinHashConfig`: word n-grams, or
    character n-grams for CJK languages). Both documents are shingled by the removed document's
    `lang`, so that a pair that language ID labelled differently (say an untranslated page of a
    Chinese site and its English twin, equal after normalisation) is compared on the same n-grams.
    Divided by the number of documents of the language that reached dedup.

A ratio with nothing to count is None.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from lm_assets.corpus.dedup.minhash import MinHashConfig, shingles
from lm_assets.text import base_lang

LANGUAGE_GROUPS = ("en", "zh")
CHINESE_GROUP_LANGS = frozenset({"zh", "ja"})
EDIT_RATE_BINS = (("0.01-0.02", 0.01, 0.02), ("0.02-0.04", 0.02, 0.04), ("0.04-0.06", 0.04, 0.06))
FALSE_REMOVAL_JACCARD = 0.5
REQUIRED_COLUMNS = ("doc_id", "cluster_id", "kept", "url", "lang")


def language_group(lang: str | None) -> str:
    return "zh" if base_lang(lang) in CHINESE_GROUP_LANGS else "en"


def edit_rate_bin(rate: float) -> str | None:
    """The bin holding `rate`; bins include their lower end, and the last one its upper end too."""
    last = len(EDIT_RATE_BINS) - 1
    for index, (name, low, high) in enumerate(EDIT_RATE_BINS):
        if low <= rate < high or (index == last and rate == high):
            return name
    return None


@dataclass
class Ratio:
    hits: int = 0
    total: int = 0

    def add(self, hit: bool) -> None:
        self.hits += hit
        self.total += 1

    @property
    def value(self) -> float | None:
        return self.hits / self.total if self.total else None


@dataclass(frozen=True)
class FalseRemoval:
    url: str
    kept_url: str
    jaccard: float


@dataclass
class LanguageTally:
    """Counts behind one language's figures, and the documents that missed."""

    docs: int = 0
    exact: Ratio = field(default_factory=Ratio)
    near: dict[str, Ratio] = field(default_factory=lambda: {name: Ratio() for name, _, _ in EDIT_RATE_BINS})
    missed_exact_groups: list[list[str]] = field(default_factory=list)
    missed_near_copies: list[dict] = field(default_factory=list)
    false_removals: list[FalseRemoval] = field(default_factory=list)

    def figures(self) -> dict:
        return {
            "docs": self.docs,
            "exact_recall": self.exact.value,
            "near_recall_by_edit_rate": {name: ratio.value for name, ratio in self.near.items()},
            "false_removal_rate": len(self.false_removals) / self.docs if self.docs else None,
        }


@dataclass(frozen=True)
class Document:
    url: str
    cluster_id: str
    kept: bool
    lang: str | None

    @property
    def language(self) -> str:
        return language_group(self.lang)


class DedupOutcome:
    """Where every document that reached dedup ended up, looked up by URL."""

    def __init__(self, clusters: pl.DataFrame):
        missing = [c for c in REQUIRED_COLUMNS if c not in clusters.columns]
        if missing:
            raise ValueError(f"clusters table lacks {missing}; join the clusters with the sketches' url and lang")
        rows = clusters.select("url", "cluster_id", "kept", "lang").iter_rows()
        self.by_url = {url: Document(url, cluster_id, kept, lang) for url, cluster_id, kept, lang in rows}
        if len(self.by_url) != clusters.height:
            raise ValueError("clusters table has repeated URLs; each document needs its own URL")
        self.kept_url = {doc.cluster_id: doc.url for doc in self.by_url.values() if doc.kept}

    def __contains__(self, url: str) -> bool:
        return url in self.by_url

    def __getitem__(self, url: str) -> Document:
        return self.by_url[url]

    def kept_instead_of(self, url: str) -> str:
        return self.kept_url[self.by_url[url].cluster_id]


class Truth:
    """The injected groups and natural duplicates of a `truth.json`."""

    def __init__(self, truth: Mapping):
        self.injected = list(truth["injected"])
        self.copy_urls = {item["url"] for item in self.injected}
        self.original_of = {item["url"]: item["original_url"] for item in self.injected}
        self.group_members: dict[str, set[str]] = defaultdict(set)
        for item in self.injected:
            self.group_members[item["original_url"]].update((item["original_url"], item["url"]))
        self.group_of = {url: original for original, members in self.group_members.items() for url in members}
        self.natural_group_of = {url: i for i, group in enumerate(truth.get("natural_duplicates", [])) for url in group}
        self.natural_pairs = {frozenset(pair[:2]) for pair in truth.get("natural_near_pairs", [])}

    def exact_groups(self) -> list[list[str]]:
        copies: dict[str, list[str]] = defaultdict(list)
        for item in self.injected:
            if item["kind"] == "exact":
                copies[item["original_url"]].append(item["url"])
        return [[original, *urls] for original, urls in sorted(copies.items())]

    def near_copies(self) -> list[dict]:
        return [item for item in self.injected if item["kind"] == "near"]

    def are_known_duplicates(self, url: str, other: str) -> bool:
        """Members of one injected group, or natural twins."""
        in_one_group = url in self.group_of and self.group_of[url] == self.group_of.get(other)
        return in_one_group or self.are_natural_twins(url, other)

    def are_natural_twins(self, url: str, other: str) -> bool:
        other = self.original_of.get(other, other)
        same_group = url in self.natural_group_of and self.natural_group_of[url] == self.natural_group_of.get(other)
        return same_group or frozenset((url, other)) in self.natural_pairs


def jaccard(a: set, b: set) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def shingle_set(text: str, lang: str | None, config: MinHashConfig) -> set[tuple[str, ...]]:
    return set(shingles(text, lang, config))


def text_lookup(texts: Mapping[str, str] | pl.DataFrame) -> Mapping[str, str]:
    if isinstance(texts, pl.DataFrame):
        return dict(texts.select("url", "text").iter_rows())
    return texts


# ---------------------------------------------------------------------------------------------
# The three measures
# ---------------------------------------------------------------------------------------------


def _unlisted_twin(outcome: DedupOutcome, texts: Mapping[str, str], config: MinHashConfig, original: str) -> bool:
    """The document kept instead of `original` is a duplicate of it that the truth does not list: the
    same text in another page of the source (an untranslated page of another language's manual, whose
    navigation told them apart before extraction). True Jaccard at least the dedup threshold."""
    kept_url = outcome.kept_instead_of(original)
    if kept_url == original or kept_url not in texts or original not in texts:
        return False
    lang = outcome[original].lang
    return jaccard(shingle_set(texts[original], lang, config), shingle_set(texts[kept_url], lang, config)) >= config.threshold


def count_exact_groups(
    outcome: DedupOutcome, truth: Truth, texts: Mapping[str, str], config: MinHashConfig,
    tallies: dict[str, LanguageTally],
) -> None:
    for members in truth.exact_groups():
        present = [url for url in members if url in outcome]
        if len(present) < 2:
            continue
        counts = tallies[outcome[present[0]].language]
        one_cluster = len({outcome[url].cluster_id for url in present}) == 1
        kept = sum(outcome[url].kept for url in present)
        hit = one_cluster and (kept == 1 or (kept == 0 and _unlisted_twin(outcome, texts, config, members[0])))
        counts.exact.add(hit)
        if not hit:
            counts.missed_exact_groups.append(present)


def count_near_copies(
    outcome: DedupOutcome, truth: Truth, texts: Mapping[str, str], config: MinHashConfig,
    tallies: dict[str, LanguageTally],
) -> None:
    for item in truth.near_copies():
        copy, original = item["url"], item["original_url"]
        rate_bin = edit_rate_bin(item["edit_rate"])
        if rate_bin is None or copy not in outcome or original not in outcome:
            continue
        counts = tallies[outcome[original].language]
        same_cluster = outcome[copy].cluster_id == outcome[original].cluster_id
        kept_in_group = outcome.kept_instead_of(original) in truth.group_members[original]
        hit = same_cluster and (kept_in_group or _unlisted_twin(outcome, texts, config, original))
        counts.near[rate_bin].add(hit)
        if not hit:
            counts.missed_near_copies.append(item)


def count_false_removals(
    outcome: DedupOutcome,
    truth: Truth,
    texts: Mapping[str, str],
    config: MinHashConfig,
    tallies: dict[str, LanguageTally],
) -> None:
    for doc in outcome.by_url.values():
        if doc.kept or doc.url in truth.copy_urls:
            continue
        kept_url = outcome.kept_instead_of(doc.url)
        if truth.are_known_duplicates(doc.url, kept_url):
            continue
        similarity = jaccard(
            shingle_set(texts[doc.url], doc.lang, config), shingle_set(texts[kept_url], doc.lang, config)
        )
        if similarity < FALSE_REMOVAL_JACCARD:
            tallies[doc.language].false_removals.append(FalseRemoval(doc.url, kept_url, similarity))


def count_documents(outcome: DedupOutcome, tallies: dict[str, LanguageTally]) -> None:
    for doc in outcome.by_url.values():
        tallies[doc.language].docs += 1


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def tally(
    clusters_with_urls: pl.DataFrame,
    texts: Mapping[str, str] | pl.DataFrame,
    truth: Mapping,
    minhash: MinHashConfig | None = None,
) -> dict[str, LanguageTally]:
    """The counts behind `dedup_accuracy`, per language group, with the misses listed."""
    outcome, known = DedupOutcome(clusters_with_urls), Truth(truth)
    texts, config = text_lookup(texts), minhash or MinHashConfig()
    tallies = {group: LanguageTally() for group in LANGUAGE_GROUPS}
    count_documents(outcome, tallies)
    count_exact_groups(outcome, known, texts, config, tallies)
    count_near_copies(outcome, known, texts, config, tallies)
    count_false_removals(outcome, known, texts, config, tallies)
    return tallies


def figures(tallies: Mapping[str, LanguageTally]) -> dict:
    return {group: tallies[group].figures() for group in LANGUAGE_GROUPS}


def dedup_accuracy(
    clusters_with_urls: pl.DataFrame,
    texts: Mapping[str, str] | pl.DataFrame,
    truth: Mapping,
    minhash: MinHashConfig | None = None,
) -> dict:
    """`{"en": {...}, "zh": {...}}`, each `{"docs", "exact_recall", "near_recall_by_edit_rate":
    {"0.01-0.02", "0.02-0.04", "0.04-0.06"}, "false_removal_rate"}`; see the module docstring."""
    return figures(tally(clusters_with_urls, texts, truth, minhash))
