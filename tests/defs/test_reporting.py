"""Metadata that people read: numbers at three significant digits, documents in full and in part."""

import dagster as dg
import polars as pl
import pytest

from lm_assets.defs.common.reporting import (
    FULL_TEXT_DOCS,
    PREVIEW_CHARS,
    PREVIEW_DOCS,
    WRAP_COLUMNS,
    document_previews,
    fenced,
)
from lm_assets.reporting.tables import significant
from lm_assets.text import hard_wrapped


def test_floats_read_at_three_significant_digits():
    assert [significant(v) for v in (0.000123456, 0.25345, 12.345, 12345.6, 2.0, 0.0, -0.5)] == [
        "0.000123", "0.253", "12.3", "12,300", "2", "0", "-0.5"
    ]


def test_previews_show_three_documents_whole_and_ten_openings():
    paragraphs = "First paragraph of document {i}.\n\nSecond paragraph, " + "long " * 200 + "end."
    docs = pl.DataFrame({
        "doc_id": [f"d{i}" for i in range(12)],
        "score": [1 / 3] * 12,
        "text": [paragraphs.format(i=i) for i in range(12)],
    })
    meta = document_previews(docs, ["doc_id", "score", "text"])
    table = meta["preview"].value.splitlines()
    assert len(table) == 2 + PREVIEW_DOCS and "| d9 | 0.333 |" in table[-1]
    assert all(len(line) < PREVIEW_CHARS + 40 for line in table) and " ↵  ↵ Second paragraph" in table[2]
    full = meta["full_text"].value
    # Long lines are hard-wrapped to the dialog's width, each continuation marked, so the text reads whole.
    assert max(len(line) for line in full.splitlines()) <= WRAP_COLUMNS
    for i in range(FULL_TEXT_DOCS):
        assert paragraphs.format(i=i) in full.replace("\n↪ ", " ")
    assert "document 3." not in full


def test_hard_wrapping_breaks_at_spaces_and_between_cjk_characters():
    english = "alpha " * 30 + "omega"
    wrapped = hard_wrapped(english, 40).splitlines()
    assert all(len(line) <= 40 for line in wrapped) and all(line.startswith("↪ alpha") for line in wrapped[1:-1])
    assert wrapped[0] == "alpha " * 5 + "alpha" and wrapped[-1] == "↪ omega"
    assert "\n".join(wrapped).replace("\n↪ ", " ") == english
    chinese = "数据集" * 30
    wrapped = hard_wrapped(chinese, 40).splitlines()
    assert [len(line) for line in wrapped[:2]] == [20, 21]  # 20 wide characters; the mark, a space and 19
    assert "\n".join(wrapped).replace("\n↪ ", "") == chinese
    assert hard_wrapped("short\n\nlines stay", 40) == "short\n\nlines stay"


def test_a_fence_outlasts_the_tildes_inside():
    block = fenced("code\n~~~~\nmore")
    assert block.startswith("~~~~~text\n") and block.endswith("\n~~~~~")


def test_each_document_stage_declares_exactly_the_checks_it_reports():
    from lm_assets.defs.common.stages import CURATED_SCHEMA
    from lm_assets.defs.curation.assets import CURATED_STAGE, EXTRACTED_STAGE
    from lm_assets.defs.decontam.assets import DECONTAMINATED_STAGE
    from lm_assets.defs.dedup.assets import DEDUPLICATED_STAGE
    from lm_assets.defs.ingest.assets import RAW_STAGE
    from lm_assets.storage.accounting import conservation

    kept = pl.DataFrame({name: pl.Series([], dtype=dtype) for name, dtype in CURATED_SCHEMA.items()})
    account = conservation(0, 0, 0)
    facts = {"language_share_bounds": {"en": [0.05, 1.0]}, "control_chars": 0}
    for stage in (RAW_STAGE, EXTRACTED_STAGE, CURATED_STAGE, DEDUPLICATED_STAGE, DECONTAMINATED_STAGE):
        specs = [spec.name for spec in stage.check_specs()]
        results = stage.check_results(kept, account, account, facts)
        assert [r.check_name for r in results] == specs, stage.asset
        assert len(set(specs)) == len(specs)
        blocking = {spec.name: spec.blocking for spec in stage.check_specs()}
        for result in results:
            expected = dg.AssetCheckSeverity.ERROR if blocking[result.check_name] else dg.AssetCheckSeverity.WARN
            assert result.severity == expected, (stage.asset, result.check_name)
    assert [c.name for c in CURATED_STAGE.checks] == ["pii_residue", "language_share"]
    # On an empty shard the language bounds are broken and the scan finds nothing.
    by_name = {r.check_name: r for r in CURATED_STAGE.check_results(kept, account, account, facts)}
    assert not by_name["language_share"].passed and by_name["pii_residue"].passed


def test_each_document_stage_has_one_name_for_asset_folder_and_drops(tmp_path):
    from lm_assets.corpus.curation.pipeline import FILTERS
    from lm_assets.corpus.stage import StageResult
    from lm_assets.defs.common.stages import CURATED_SCHEMA
    from lm_assets.defs.curation.assets import CURATED_STAGE, EXTRACTED_STAGE
    from lm_assets.defs.decontam.assets import DECONTAMINATED_STAGE
    from lm_assets.defs.dedup.assets import DEDUPLICATED_STAGE, deduplicated_shard
    from lm_assets.defs.ingest.assets import RAW_STAGE
    from lm_assets.storage.layout import DOCUMENT_STAGES
    from lm_assets.storage.store import Storage

    stages = (RAW_STAGE, EXTRACTED_STAGE, CURATED_STAGE, DEDUPLICATED_STAGE, DECONTAMINATED_STAGE)
    assert [stage.name for stage in stages] == list(DOCUMENT_STAGES)
    assert [stage.asset for stage in stages] == [f"{name}_shard" for name in DOCUMENT_STAGES]
    assert deduplicated_shard.key == dg.AssetKey("deduplicated_shard")
    assert DEDUPLICATED_STAGE.drop_stages == ("deduplicated",) and CURATED_STAGE.drop_stages == FILTERS
    # a drop under a name the stage does not declare fails before anything is published
    kept = pl.DataFrame({name: pl.Series([], dtype=dtype) for name, dtype in CURATED_SCHEMA.items()})
    stray = pl.DataFrame({"doc_id": ["d0"], "stage": ["dedup"], "reason": ["exact_duplicate"]})
    store = Storage(str(tmp_path))
    with pytest.raises(ValueError, match=r"deduplicated_shard dropped documents under \['dedup'\]"):
        DEDUPLICATED_STAGE.close(store, "s0", 1, StageResult(kept, stray), {})
    assert not list(tmp_path.rglob("*.parquet"))


def test_a_drop_reason_is_spelled_one_way():
    from lm_assets.defs.common.reporting import drop_audit_metadata, drop_metadata

    dropped = pl.DataFrame({"doc_id": ["a", "b", "c"], "stage": ["rules", "classifier", "rules"],
                            "reason": ["gopher_quality:min_doc_words", "below_threshold", "gopher_quality:min_doc_words"]})
    docs = pl.DataFrame({"doc_id": ["a", "b", "c"], "url": ["u1", "u2", "u3"], "text": ["x", "y", "z"]})
    audit = drop_audit_metadata(dropped, docs, ["rules:c4:min_sentences"])
    assert {k: v for k, v in audit.items() if k.startswith("dropped/")} == {
        "dropped/classifier:below_threshold": 1, "dropped/gopher_quality:min_doc_words": 2}
    assert audit["rules_that_dropped_nothing"].value == "c4:min_sentences"
    assert "| gopher_quality:min_doc_words | – | u1 | x |" in audit["drop_examples"].value
    assert "| gopher_quality:min_doc_words | 2 |" in drop_metadata(dropped)["drop_reasons"].value
    assert "| classifier:below_threshold | 1 |" in drop_metadata(dropped)["drop_reasons"].value


def test_each_run_plots_on_a_series_of_its_own():
    from lm_assets.defs.common.reporting import run_series, series_value

    main = run_series("main-step_00000040", {"perplexity": 1096.2345678, "acc": 0.25, "bleu": float("nan")})
    sft = run_series("sft-step_00000040", {"perplexity": 3126.7121338745774})
    assert {k: v.value for k, v in main.items() if k != "series"} == {"main/perplexity": 1096.2, "main/acc": 0.25}
    assert {k: v.value for k, v in sft.items() if k != "series"} == {"sft/perplexity": 3126.7}
    assert main["series"].value.startswith("main:") and not set(main) & set(sft) - {"series"}
    assert series_value(sft, "sft-step_00000040", "perplexity") == 3126.7
    assert series_value(sft, "main-step_00000040", "perplexity") is None and series_value(None, "sft-step_00000001", "x") is None


def test_a_category_of_one_subject_is_not_a_series_of_its_own():
    from lm_assets.defs.evaluation.assets import per_group_accuracy

    result = {
        "categories": {"STEM": {"acc": 0.5, "subjects": 2}, "humanities": {"acc": 0.25, "subjects": 1}},
        "subjects": {"abstract_algebra": {"acc": 0.4}, "astronomy": {"acc": 0.6}, "world_religions": {"acc": 0.25}},
    }
    assert per_group_accuracy(result) == {"stem": 0.5, "abstract_algebra": 0.4, "astronomy": 0.6, "world_religions": 0.25}
