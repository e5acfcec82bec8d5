"""Quality policies: the rules, a classifier, or both decide; every document is accounted for."""

import numpy as np
import polars as pl
import pytest

from lm_assets.corpus.curation.extract import PAGE_COLUMNS, signal_columns
from lm_assets.corpus.curation.pipeline import CurationConfig, curate
from lm_assets.corpus.curation.policy import decide_quality
from lm_assets.corpus.curation.rules import apply_rules, preset
from lm_assets.corpus.curation.toxicity import ToxicityConfig
from lm_assets.corpus.quality.shipped import shipped_classifier

PROSE = (
    "The scheduler assigns each job to the machine with the most free memory, and it checks the queue again "
    "every few seconds. When a machine fails, its jobs return to the queue and start over on another machine. "
    "Operators can pin a job to one machine, which is useful when the data it reads is stored locally. "
    "The log records every decision, so a later reader can see why a job ran where it did and for how long. "
)
MORE = (
    "Each queue has a priority, and a job waits behind every job of a higher priority that arrived before it. "
    "A cluster keeps a small reserve of machines for urgent work, which ordinary jobs may borrow at night. "
    "Billing counts the hours a job held its machines, not the hours it spent waiting in the queue. "
)
LINKS = "\n".join(f"Chapter {i}" for i in range(1, 80))


class KeywordScorer:
    """Scores a document by whether it reads as prose: enough to exercise the policies."""

    hash = "keyword-scorer"
    threshold = 0.5
    thresholds = {"*": 0.5, "zh": 0.7}

    def score_with_models(self, docs: pl.DataFrame) -> tuple[np.ndarray, list[str]]:
        scores = np.array([0.9 if "scheduler" in t else 0.1 if "Chapter" in t else 0.6 for t in docs["text"]])
        return scores, ["html"] * docs.height

    def thresholds_for(self, langs, models=None, kinds=None) -> np.ndarray:
        return np.array([self.thresholds.get(lang, self.thresholds["*"]) for lang in langs])

    def page_kinds(self, docs: pl.DataFrame) -> list[str]:
        return [""] * docs.height

    def cut_for_retention(self, lang, retention, model="html") -> float:
        return 1.0 - retention


def docs() -> pl.DataFrame:
    texts = [PROSE + MORE, LINKS, "Too short.", PROSE.replace("scheduler", "planner") + MORE, "Chapter one. " + PROSE + MORE]
    return pl.DataFrame({"doc_id": [f"d{i}" for i in range(len(texts))], "text": texts, "lang": ["en"] * len(texts)})


def run(policy, classifier=KeywordScorer()):
    config = CurationConfig(order=("quality",), quality=preset(), policy=policy, classifier=classifier,
                            toxicity=ToxicityConfig(backend="profanity_check"))
    return curate(docs(), config)


def test_each_policy_decides_and_accounts_for_every_document():
    for policy in ("rules", "classifier", "both"):
        result = run(policy)
        assert sorted(result.kept["doc_id"].to_list() + result.dropped["doc_id"].to_list()) == [f"d{i}" for i in range(5)]
        assert result.kept["quality_score"].null_count() == 0
    classifier = run("classifier")
    dropped = {r["doc_id"]: r for r in classifier.dropped.iter_rows(named=True)}
    # The hard rules (minimum length) still drop the stub; the classifier drops the list of links, with its score.
    assert dropped["d2"]["stage"] == "rules" and dropped["d2"]["reason"] == "gopher_quality:min_doc_words"
    assert (dropped["d1"]["stage"], dropped["d1"]["reason"], dropped["d1"]["score"]) == ("classifier", "below_threshold", 0.1)
    assert "d4" in classifier.kept["doc_id"].to_list()
    stats = classifier.stats["classifier"]
    assert stats["policy"] == "classifier" and stats["classifier"] == "keyword-scorer" and stats["threshold"] == 0.5
    # d4 opens with a heading-like line the rules may or may not mind; what is counted matches the examples.
    assert stats["rules_drop_classifier_keeps"] + stats["classifier_drops_rules_keep"] == len(stats["disagreement_examples"])


def test_rules_policy_with_a_classifier_only_scores():
    with_scores, without = run("rules"), run("rules", classifier=None)
    assert with_scores.kept["doc_id"].to_list() == without.kept["doc_id"].to_list()
    assert with_scores.dropped.sort("doc_id").equals(without.dropped.sort("doc_id"))
    assert with_scores.kept.height >= 2
    assert without.kept["quality_score"].is_null().all()
    # A rule's drop carries the value of the signal that failed it, with or without a classifier: the stub's
    # two words against Gopher's minimum of 50.
    stub = without.dropped.filter(pl.col("doc_id") == "d2").row(0, named=True)
    assert (stub["reason"], stub["score"]) == ("gopher_quality:min_doc_words", 2.0)
    assert without.dropped["score"].null_count() == 0


def test_both_drops_what_either_drops():
    both, rules, classifier = run("both"), run("rules"), run("classifier")
    assert set(both.kept["doc_id"]) == set(rules.kept["doc_id"]) & set(classifier.kept["doc_id"])


def test_curation_without_a_classifier_is_decided_by_the_shipped_one():
    assert CurationConfig().policy == "classifier"
    # Documents as extraction makes them from text rather than HTML: page signals null.
    config = CurationConfig(order=("quality",), toxicity=ToxicityConfig(backend="profanity_check"))
    plain = docs().with_columns(signal_columns([dict.fromkeys(PAGE_COLUMNS)] * docs().height))
    result = curate(plain, config)
    shipped, _ = shipped_classifier()
    scored = pl.concat([result.kept.select("doc_id", "quality_score"),
                        result.dropped.filter(pl.col("stage") == "classifier")
                        .select("doc_id", pl.col("score").alias("quality_score"))]).sort("doc_id")
    quality = apply_rules(plain, preset(), defer=True).kept
    quality = quality.filter(pl.col("doc_id").is_in(scored["doc_id"].to_list())).sort("doc_id")
    assert scored.height == quality.height == 4 and scored["quality_score"].null_count() == 0
    assert np.allclose(scored["quality_score"].to_numpy(), shipped.score(quality))
    # Without HTML the text model scores them (and says so): the prose is kept, the list of chapters is not.
    assert result.kept["quality_model"].to_list() == ["text"] * result.kept.height
    assert result.stats["classifier"]["scored_by"] == {"text": 4}
    assert sorted(result.kept["doc_id"]) == ["d0", "d3", "d4"]
    assert result.dropped.filter(pl.col("stage") == "classifier")["doc_id"].to_list() == ["d1"]


def test_pages_with_html_and_documents_from_text_are_cut_by_their_own_models():
    """The shipped classifier's HTML stacker decides pages with page signals, its text model documents without
    them, each at its own cuts; the stats count both and name every cut applied."""
    shipped, _ = shipped_classifier()
    assert shipped.text_model is not None
    plain = docs().with_columns(signal_columns([dict.fromkeys(PAGE_COLUMNS)] * docs().height))
    page = {**dict.fromkeys(PAGE_COLUMNS, 0), "q_html_text_ratio": 0.3, "q_html_link_share": 0.05}
    pages = docs().with_columns(signal_columns([page] * docs().height)).with_columns(pl.col("doc_id") + "-page")
    quality = apply_rules(pl.concat([plain, pages]), preset(), defer=True).kept
    result = decide_quality(quality, "classifier", shipped)
    scored = pl.concat([result.kept.select("doc_id", "quality_model"), result.dropped.select("doc_id")], how="diagonal")
    assert result.stats["scored_by"] == {"html": 4, "text": 4}
    assert set(result.kept.filter(pl.col("doc_id").str.ends_with("-page"))["quality_model"]) <= {"html"}
    assert set(result.kept.filter(~pl.col("doc_id").str.ends_with("-page"))["quality_model"]) <= {"text"}
    assert scored.height == 8
    # Pages with few links are cut at their language's cut for that kind; documents from text at the text model's.
    assert result.stats["cuts_applied"] == pytest.approx({
        "en few-links": shipped.thresholds["en|few-links"], "en (text)": shipped.text_model["thresholds"]["en"]}, abs=1e-6)


def test_stats_of_many_batches_keep_the_cuts_and_sum_the_counts():
    from lm_assets.corpus.curation.pipeline import merged_stats

    batch = {"classifier": {"threshold": 0.4, "thresholds": {"en": 0.4}, "cuts_applied": {"en": 0.4},
                            "scored_by": {"html": 2, "text": 1}, "docs_in": 3}}
    merged = merged_stats([batch, batch])["classifier"]
    assert merged["thresholds"] == {"en": 0.4} and merged["cuts_applied"] == {"en": 0.4} and merged["threshold"] == 0.4
    assert merged["scored_by"] == {"html": 4, "text": 2} and merged["docs_in"] == 6


def test_a_classifier_policy_without_a_classifier_is_refused():
    with pytest.raises(ValueError, match="needs a classifier: pass the shipped one"):
        decide_quality(docs().with_columns(pl.lit(None, pl.String).alias("rules_reason")), "classifier", None)
    with pytest.raises(ValueError, match="unknown quality policy"):
        decide_quality(docs().with_columns(pl.lit(None, pl.String).alias("rules_reason")), "vote", None)


def test_each_language_is_cut_at_its_own_threshold_unless_one_is_given():
    frame = docs().with_columns(pl.Series("lang", ["en", "en", "en", "zh", "en"]))
    quality = apply_rules(frame, preset(), defer=True).kept
    scorer = KeywordScorer()
    # The planner page scores 0.6: above English's 0.5, below Chinese's 0.7.
    as_zh = decide_quality(quality, "classifier", scorer)
    assert "d3" in as_zh.dropped["doc_id"].to_list() and as_zh.stats["thresholds"] == {"*": 0.5, "zh": 0.7}
    given = decide_quality(quality, "classifier", scorer, threshold=0.55)
    assert "d3" in given.kept["doc_id"].to_list() and given.stats["thresholds"] == {"*": 0.55}


def test_the_cut_can_be_a_share_of_good_pages_or_of_documents_to_keep_per_language():
    frame = docs().with_columns(pl.Series("lang", ["en", "en", "en", "zh", "en"]))
    quality = apply_rules(frame, preset(), defer=True).kept  # d0 0.9, d1 0.1, d4 0.9 (en); d3 0.6 (zh)
    scorer = KeywordScorer()
    # Keep 20 % of English good pages: the cut 0.8; Chinese keeps its trained 0.7, and drops d3.
    by_retention = decide_quality(quality, "classifier", scorer, retention={"en": 0.2})
    assert sorted(by_retention.kept["doc_id"]) == ["d0", "d4"]
    assert by_retention.stats["cuts_applied"] == {"en": 0.8, "zh": 0.7}
    # Keep the best half of the English documents (the cut is their median, 0.9), and every Chinese one.
    by_rate = decide_quality(quality, "classifier", scorer, keep_rate={"en": 0.5, "*": 1.0})
    assert sorted(by_rate.kept["doc_id"]) == ["d0", "d3", "d4"] and by_rate.stats["cut_by"].startswith("keep_rate")
    assert by_rate.stats["cuts_applied"] == {"en": 0.9, "zh": 0.0}
    with pytest.raises(ValueError, match="one way, not by threshold and retention"):
        decide_quality(quality, "classifier", scorer, threshold=0.5, retention={"en": 0.9})
    with pytest.raises(ValueError, match=r"keep_rate zh: a share in \(0, 1\]"):
        decide_quality(quality, "classifier", scorer, keep_rate={"zh": 1.5})


@pytest.mark.parametrize("policy", ["rules", "classifier", "both"])
def test_curation_in_batches_keeps_and_drops_what_curation_of_the_whole_does(policy):
    from lm_assets.corpus.curation.extract import ExtractConfig, extract_documents
    from lm_assets.corpus.curation.pipeline import CurationConfig, curate, curate_batches
    from lm_assets.corpus.curation.toxicity import ToxicityConfig
    from lm_assets.corpus.ingest.readers import read_shard
    from tests.support.dedup_crawl import SAMPLE_CRAWL

    shards = sorted(SAMPLE_CRAWL.glob("crawl-*.warc.gz"))
    docs = pl.concat([extract_documents(read_shard(s).documents, ExtractConfig()).kept for s in shards])
    config = CurationConfig(toxicity=ToxicityConfig(backend="profanity_check"), policy=policy)
    whole = curate(docs, config)
    batched = curate_batches((docs.slice(i, 23) for i in range(0, docs.height, 23)), config)
    assert batched.kept.equals(whole.kept) and batched.dropped.equals(whole.dropped)
    assert whole.dropped["stage"].n_unique() >= 2 and whole.kept.height > 100
    for step, stats in whole.stats.items():
        assert batched.stats[step]["docs_in"] == stats["docs_in"] and batched.stats[step]["docs_out"] == stats["docs_out"]
    assert dict(batched.stats["langid"]["languages_seen"]) == dict(whole.stats["langid"]["languages_seen"])
    assert batched.stats["quality"].get("dropped_by_reason") == whole.stats["quality"].get("dropped_by_reason")
