import json

import polars as pl
import pytest

from lm_assets.corpus.audit.agreement import decision_figures, decisions, outcomes, read_labels
from lm_assets.storage.accounting import drop_examples, reason_totals


def test_drop_examples_show_a_few_pages_per_reason_with_their_opening_text():
    docs = pl.DataFrame({
        "doc_id": [f"d{i}" for i in range(6)],
        "url": [f"https://a.example/{i}" for i in range(6)],
        "text": ["x" * 500, "short one", "y", "z", "w", "kept"],
    })
    dropped = pl.DataFrame({
        "doc_id": ["d0", "d1", "d2", "d3", "d4"],
        "stage": ["rules"] * 4 + ["langid"],
        "reason": ["prose:min_sentences"] * 4 + ["lang:de"],
    })
    examples = drop_examples(dropped, docs, per_reason=3, chars=300)
    assert examples.columns == ["stage", "reason", "score", "url", "text"]
    assert examples["score"].is_null().all()  # this stage recorded no scores
    assert examples.filter(pl.col("reason") == "prose:min_sentences")["url"].to_list() == [
        "https://a.example/0", "https://a.example/1", "https://a.example/2"
    ]
    assert examples["text"].str.len_chars().max() == 300
    assert reason_totals(dropped, ["rules:prose:min_sentences", "rules:c4:lorem_ipsum"]) == {
        "langid:lang:de": 1, "rules:c4:lorem_ipsum": 0, "rules:prose:min_sentences": 4
    }
    assert drop_examples(dropped.clear(), docs).height == 0
    scored = drop_examples(dropped.with_columns(pl.Series("score", [1.0, 2.0, 0.0, 1.0, 0.3])), docs)
    assert scored.filter(pl.col("reason") == "lang:de")["score"].to_list() == [0.3]


def test_labels_are_validated_and_scored(tmp_path):
    path = tmp_path / "labels.jsonl"
    rows = [
        {"url": "https://a.example/keep", "package": "p", "lang": "en", "label": "KEEP", "confidence": "high", "reason": "r"},
        {"url": "https://a.example/junk", "package": "p", "lang": "en", "label": "DROP", "confidence": "low", "reason": "r"},
        {"url": "https://a.example/lost", "package": "p", "lang": "zh", "label": "KEEP", "confidence": "high", "reason": "r"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    labels = read_labels(path)
    raw = pl.DataFrame({"doc_id": ["k", "j", "l"], "url": [r["url"] for r in rows]})
    dropped = pl.DataFrame({"doc_id": ["l"], "stage": ["rules"], "reason": ["prose:min_sentences"]})
    quarantine = pl.DataFrame(schema={"url": pl.String, "reason": pl.String})
    curated = pl.DataFrame({"doc_id": ["k", "j"]})
    clusters = pl.DataFrame({"doc_id": ["k", "j"], "kept": [True, True]})
    figures = decision_figures(decisions(labels, outcomes(raw, dropped, quarantine, curated, clusters)))
    assert (figures["good_retention"], figures["junk_rejection"], figures["balanced_accuracy"]) == (0.5, 0.0, 0.25)
    assert figures["keep_survived_dedup"] == 1.0
    assert figures["keep_dropped_by"] == {"rules:prose:min_sentences": 1}

    path.write_text(json.dumps({**rows[0], "label": "MAYBE"}))
    with pytest.raises(ValueError, match="label"):
        read_labels(path)
