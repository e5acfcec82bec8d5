"""Materialize the partitioned graph on the shipped sample crawl and check it against expected.json."""

import json
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from lm_assets.corpus.curation.pii import find_pii
from lm_assets.defs.common.resources import LandingResource, StorageResource, s3_resource_from_env
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.defs.curation.assets import curated_shard, extracted_shard
from lm_assets.defs.curation.expectations import curated_expectations
from lm_assets.defs.dedup.assets import (
    DedupSettings,
    dedup_clusters,
    dedup_edges,
    deduplicated_shard,
    minhash_signatures,
)
from lm_assets.defs.decontam.assets import decontaminated_shard
from lm_assets.defs.ingest.assets import raw_shard
from lm_assets.defs.tokens.assets import (
    packed_dataset,
    tokenized_shard,
    tokenized_with_current_tokenizer,
    tokenizer,
)

CRAWL = Path(__file__).resolve().parents[2] / "data" / "sample-crawl"
EXPECTED = json.loads((CRAWL / "expected.json").read_text())
SHARDS = sorted(EXPECTED["shards"])
RUN_CONFIG = {"ops": {"curated_shard": {"config": {"quality_policy": "rules"}}}}


@pytest.fixture(scope="module")
def materialized(tmp_path_factory):
    """The first two shards go through dedup together, the third arrives later and is deduplicated
    incrementally against them."""
    root = tmp_path_factory.mktemp("storage")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", SHARDS[:2])
    s3 = s3_resource_from_env()
    resources = {
        "storage": StorageResource(root=str(root), s3=s3),
        "landing": LandingResource(root=str(CRAWL), s3=s3),
        "dedup": DedupSettings(),
        "toxicity": ToxicityResource(backend="profanity_check"),
    }
    shard_assets = [raw_shard, extracted_shard, curated_shard, curated_expectations, minhash_signatures]

    def curate(shard):
        return dg.materialize(shard_assets, partition_key=shard, instance=instance, resources=resources, run_config=RUN_CONFIG)

    def cluster():
        for band in DedupSettings().band_keys():
            dg.materialize([dedup_edges], partition_key=band, instance=instance, resources=resources)
        return dg.materialize([dedup_clusters], instance=instance, resources=resources, selection=[dedup_clusters])

    results = {shard: curate(shard) for shard in SHARDS[:2]}
    first = cluster()
    first_clusters = pl.read_parquet(root / "dedup" / "clusters.parquet")
    instance.add_dynamic_partitions("shards", SHARDS[2:])
    results[SHARDS[2]] = curate(SHARDS[2])
    second = cluster()
    dedup_results = {
        shard: dg.materialize(
            [deduplicated_shard, decontaminated_shard], partition_key=shard, instance=instance, resources=resources
        )
        for shard in SHARDS
    }
    token_config = {"ops": {"tokenizer": {"config": {"vocab_size": 3000}}}}
    tokens = {"tokenizer": dg.materialize([tokenizer], instance=instance, resources=resources, run_config=token_config)}
    for shard in SHARDS:
        tokens[shard] = dg.materialize([tokenized_shard], partition_key=shard, instance=instance, resources=resources)
    pack_config = {"ops": {"packed_dataset": {"config": {"seq_len": 129, "val_fraction": 0.1, "mixture": {"lang:zh": 2.0}}}}}
    tokens["packed"] = dg.materialize([packed_dataset], instance=instance, resources=resources, run_config=pack_config)
    return root, results, {
        "first": first, "second": second, "first_clusters": first_clusters, "shards": dedup_results, "tokens": tokens,
        "instance": instance, "resources": resources,
    }


def table(root: Path, stage: str, name: str) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(root / stage / shard / f"{name}.parquet") for shard in SHARDS])


def urls(category) -> list[str]:
    items = EXPECTED["categories"][category]
    return [i if isinstance(i, str) else i["url"] for i in items]


def test_every_run_succeeds_and_every_check_passes(materialized):
    _, results, dedup = materialized
    tokens = dedup["tokens"]
    runs = [*results.values(), dedup["first"], dedup["second"], *dedup["shards"].values(), *tokens.values()]
    expected_checks = [3 + 4 + 6 + 1 + 1] * 3 + [2, 2] + [4 + 4] * 3 + [2] + [1] * 3 + [1]
    for result, n_checks in zip(runs, expected_checks):
        assert result.success
        evaluations = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert len(evaluations) == n_checks
        failed = [(e.asset_key.path[-1], e.check_name) for e in evaluations if not e.passed]
        assert failed == []


@pytest.mark.parametrize("shard", SHARDS)
def test_raw_counts_match_the_crawl(materialized, shard):
    root, _, _ = materialized
    expected = EXPECTED["shards"][shard]
    summary = json.loads((root / "raw" / shard / "summary.json").read_text())
    assert summary["records"] == expected["records"]
    dropped = pl.read_parquet(root / "raw" / shard / "dropped.parquet")
    reasons = dict(dropped.group_by("reason").len().iter_rows())
    assert reasons.pop("not_a_document:warcinfo") == 1
    assert reasons.pop("not_a_document:request") == len(expected["requests"])
    assert reasons.pop("http_status:404") == 1 and reasons.pop("http_status:301") == 1
    assert sum(v for k, v in reasons.items() if k.startswith("content_type:")) == len(expected["non_html"])
    quarantine = pl.read_parquet(root / "raw" / shard / "quarantine.parquet")
    docs = pl.read_parquet(root / "raw" / shard / "documents.parquet")
    # A page with a few invalid UTF-8 bytes is kept with U+FFFD in their place, as browsers show it.
    assert docs.height == expected["counts"]["html_ok"]
    damaged = docs.filter(pl.col("replaced_chars") > 0)
    assert sorted(damaged["url"].to_list()) == sorted(expected["invalid_utf8"])
    assert sorted(quarantine["url"].drop_nulls().to_list()) == ([expected["corrupt"]["url"]] if expected["corrupt"] else [])
    if expected["corrupt"]:
        corrupt = quarantine.filter(pl.col("reason") == "truncated_record")
        assert corrupt["byte_offset"].to_list() == [expected["corrupt"]["offset"]]


def test_gbk_page_declared_as_utf8_is_decoded(materialized):
    root, _, _ = materialized
    extracted = table(root, "extracted", "documents")
    (gbk,) = EXPECTED["categories"]["encodings"]["gbk"]
    assert gbk["declared_charset"] == "utf-8"
    row = extracted.filter(pl.col("url") == gbk["url"]).row(0, named=True)
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in row["text"]) > 100
    assert (row["charset"], row["charset_detected"]) == ("gb18030", True)
    detected = table(root, "raw", "documents").filter(pl.col("charset_detected"))
    assert detected["url"].to_list() == [gbk["url"]]


def test_curation_outcomes(materialized):
    root, _, _ = materialized
    curated = table(root, "curated", "documents")
    kept = set(curated["url"])
    assert not kept & set(urls("low_quality"))
    mostly_toxic_en = [t["url"] for t in EXPECTED["categories"]["toxic"] if t["severity"] == "mostly" and t["lang"] == "en"]
    assert mostly_toxic_en and not kept & set(mostly_toxic_en)
    assert set(curated["lang"].unique()) == {"en", "zh"}
    assert curated.filter(pl.col("lang") == "zh").height > 50 and curated.filter(pl.col("lang") == "en").height > 50


def test_pii_is_redacted_and_negatives_are_kept(materialized):
    root, _, _ = materialized
    curated = table(root, "curated", "documents").select("url", "text")
    text_by_url = dict(curated.iter_rows())
    pages = [p for p in EXPECTED["categories"]["pii"] if p["url"] in text_by_url]
    assert pages, "some PII pages survive curation"
    for page in pages:
        text = text_by_url[page["url"]]
        for item in page["items"]:
            assert item["value"] not in text
        for negative in page.get("negatives", []):
            assert negative["value"] in text, negative
    assert all(not find_pii(t) for t in curated["text"].to_list())


def test_every_record_is_accounted_for(materialized):
    root, _, _ = materialized
    records = sum(json.loads((root / "raw" / s / "summary.json").read_text())["records"] for s in SHARDS)
    kept = table(root, "decontaminated", "documents").height
    stages = ("raw", "extracted", "curated", "deduplicated", "decontaminated")
    dropped = sum(table(root, stage, "dropped").height for stage in stages)
    quarantined = table(root, "raw", "quarantine").height
    assert records == EXPECTED["totals"]["warcinfo"] + EXPECTED["totals"]["request"] + 376 + 12 + 3 + 3 + 1
    assert records == kept + dropped + quarantined


def test_dedup_keeps_one_document_per_injected_group(materialized):
    root, _, _ = materialized
    clusters = pl.read_parquet(root / "dedup" / "clusters.parquet").join(
        table(root, "minhash", "sketches").select("doc_id", "url"), on="doc_id"
    )
    kept = dict(zip(clusters["url"], clusters["kept"]))
    cluster_of = dict(zip(clusters["url"], clusters["cluster_id"]))
    checked = 0
    for kind in ("exact_dup_groups", "near_dup_groups"):
        for group in EXPECTED["categories"][kind]:
            present = [u for u in group if u in kept]
            if len(present) < 2:
                continue  # the quality rules removed the page before dedup
            checked += 1
            assert sum(kept[u] for u in present) == 1, (kind, present)
            assert len({cluster_of[u] for u in present}) == 1, (kind, present)
    assert checked >= 12
    dropped = table(root, "deduplicated", "dropped")
    assert set(dropped["reason"]) == {"exact_duplicate", "near_duplicate"}
    assert dropped["kept_doc_id"].is_in(table(root, "deduplicated", "documents")["doc_id"].implode()).all()


def test_the_third_shard_is_deduplicated_incrementally(materialized):
    root, _, dedup = materialized
    first_meta = dedup["first"].asset_materializations_for_node("dedup_clusters")[0].metadata
    second_meta = dedup["second"].asset_materializations_for_node("dedup_clusters")[0].metadata
    assert first_meta["mode"].value == "full: no earlier index"
    assert second_meta["mode"].value == "incremental"
    assert second_meta["shards_processed"].value == [SHARDS[2]]
    before = dedup["first_clusters"]
    after = pl.read_parquet(root / "dedup" / "clusters.parquet")
    unchanged = before.join(after, on="doc_id", suffix="_after")
    assert unchanged.height == before.height
    assert (unchanged["kept"] == unchanged["kept_after"]).all()
    assert (unchanged["kept_doc_id"] == unchanged["kept_doc_id_after"]).all()
    new_removed = after.join(before, on="doc_id", how="anti").filter(~pl.col("kept"))
    assert new_removed.height > 0
    assert new_removed["kept_doc_id"].is_in(before["doc_id"].implode()).any()  # new copies of old documents


def test_tokenizer_and_tokenized_shards(materialized):
    root, _, runs = materialized
    meta = runs["tokens"]["tokenizer"].asset_materializations_for_node("tokenizer")[0].metadata
    assert meta["vocab_size"].value == 3000
    assert 1.0 < meta["fertility_en_tokens_per_word"].value < 3.0
    assert 0.3 < meta["fertility_zh_tokens_per_char"].value < 1.5
    info = json.loads((root / "tokenizer" / "info.json").read_text())
    for shard in SHARDS:
        sidecar = json.loads((root / "tokenized" / shard / "tokens.json").read_text())
        index = pl.read_parquet(root / "tokenized" / shard / "index.parquet")
        tokens = (root / "tokenized" / shard / "tokens.bin").read_bytes()
        assert sidecar["dtype"] == "uint16" and sidecar["tokenizer_hash"] == info["tokenizer_hash"]
        assert len(tokens) == 2 * sidecar["token_count"] == 2 * int(index["length"].sum())
        docs = pl.read_parquet(root / "decontaminated" / shard / "documents.parquet")
        assert index["doc_id"].to_list() == docs["doc_id"].to_list()


def test_retrained_tokenizer_makes_tokenized_shards_stale(materialized, tmp_path):
    root, _, runs = materialized
    instance, resources = runs["instance"], runs["resources"]
    other = {"ops": {"tokenizer": {"config": {"vocab_size": 2500}}}}
    info_before = (root / "tokenizer" / "info.json").read_bytes()
    model_before = (root / "tokenizer" / "tokenizer.model").read_bytes()
    try:
        job = dg.define_asset_job("staleness", selection=dg.AssetSelection.checks(tokenized_with_current_tokenizer))
        defs = dg.Definitions(
            assets=[tokenized_shard], asset_checks=[tokenized_with_current_tokenizer], jobs=[job], resources=resources
        )
        before = defs.resolve_job_def("staleness").execute_in_process(instance=instance)
        assert dg.materialize([tokenizer], instance=instance, resources=resources, run_config=other).success
        after = defs.resolve_job_def("staleness").execute_in_process(instance=instance)
        evaluations = [
            next(e.event_specific_data for e in run.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION")
            for run in (before, after)
        ]
        assert [e.passed for e in evaluations] == [True, False]
        assert evaluations[1].metadata["stale"].value == SHARDS
    finally:
        (root / "tokenizer" / "info.json").write_bytes(info_before)
        (root / "tokenizer" / "tokenizer.model").write_bytes(model_before)


def test_packed_dataset_traces_back_to_the_warc_record(materialized):
    from lm_assets.corpus.audit.lineage import trace_sequence
    from lm_assets.corpus.ingest.readers import read_shard
    from lm_assets.corpus.tokens.tokenizer import load_tokenizer
    from lm_assets.storage.store import Storage
    from lm_assets.training.data import PackedDataset

    root, _, runs = materialized
    manifest = json.loads((root / "packed" / "manifest.json").read_text())
    assert manifest["seq_len"] == 129 and manifest["dtype"] == "uint16"
    assert {i["shard"] for i in manifest["inputs"]} == set(SHARDS)
    zh = manifest["mixture"]["by_lang"]["zh"]
    assert zh["realized_share"] > zh["natural_share"]
    train = pl.read_parquet(root / "packed" / "train_segments.parquet")
    val = pl.read_parquet(root / "packed" / "val_segments.parquet")
    assert not set(train["doc_id"]) & set(val["doc_id"])

    store = Storage(str(root))
    pieces = trace_sequence(store, "train", 3)
    assert pieces["length"].sum() <= 129
    sp = load_tokenizer((root / "tokenizer" / "tokenizer.model").read_bytes())
    sequence = PackedDataset(root / "packed", "train")[3]
    for piece in pieces.iter_rows(named=True):
        raw = read_shard(CRAWL / piece["shard"])
        record = raw.documents.filter(pl.col("record_index") == piece["record_index"])
        assert record["url"].to_list() == [piece["url"]]
        text = table(root, "decontaminated", "documents").filter(pl.col("doc_id") == piece["doc_id"])["text"][0]
        ids = sp.encode(text)
        span = ids[piece["doc_token_start"] : piece["doc_token_start"] + piece["length"]]
        assert sequence[piece["seq_offset"] : piece["seq_offset"] + piece["length"]].tolist() == span


def test_a_spiked_steps_sequences_are_joined_to_their_documents_and_warc_records(materialized):
    from lm_assets.corpus.audit.lineage import spike_documents, trace_sequence
    from lm_assets.storage.store import Storage

    root, _, _ = materialized
    store = Storage(str(root))
    spikes = [{"step": 7, "reason": "loss nan is not finite", "split": "train", "seq_index": index, "dp_rank": 0,
               "micro_batch": 0, "degenerate": index == 5} for index in (3, 5)]
    documents = spike_documents(store, spikes)
    for index in (3, 5):
        expected = trace_sequence(store, "train", index)
        got = documents.filter(pl.col("seq_index") == index)
        assert got.select(expected.columns).equals(expected)
        assert set(got["step"]) == {7} and set(got["degenerate"]) == {index == 5}
    assert documents["url"].null_count() == 0 and documents["record_index"].null_count() == 0


@pytest.mark.slow
def test_training_on_the_packed_sample_crawl(materialized):
    from lm_assets.defs.common.partitions import checkpoint_partitions
    from lm_assets.defs.training.assets import TrainingLauncher, training_run_and_checkpoint

    root, _, runs = materialized
    instance = runs["instance"]
    resources = runs["resources"] | {
        "training_launcher": TrainingLauncher(s3=s3_resource_from_env()),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    }
    config = {"ops": {"training_run": {"config": {"steps": 12, "save_every": 6, "pp": 2, "micro_batch_size": 2, "lr": 3e-3, "warmup_steps": 4}}}}
    result = dg.materialize([training_run_and_checkpoint], instance=instance, resources=resources, run_config=config)
    assert result.success
    meta = {m.asset_key.path[-1]: m.metadata for m in result.asset_materializations_for_node("training_run")}
    assert meta["training_run"]["steps"].value == 12
    assert meta["training_run"]["final_loss"].value < 8.0  # ln(3000) = 8.0 at the start
    assert "dp=1 tp=1 pp=2 ZeRO-0" in meta["training_run"]["training_plan"].value  # the planner's estimate of it
    assert meta["training_run"]["data_wait_s_mean"].value is not None
    assert meta["checkpoint"]["tags"].value == ["step_00000006", "step_00000012"]
    assert instance.get_dynamic_partitions(checkpoint_partitions.name) == ["main-step_00000006", "main-step_00000012"]
    hf = Path(meta["checkpoint"]["hf_export"].value)
    assert {"model.safetensors", "config.json", "tokenizer.model"} <= {p.name for p in hf.iterdir()}


@pytest.mark.slow
def test_benchmark_scores_for_a_checkpoint(materialized):
    from lm_assets.defs.evaluation.assets import ceval_score, checkpoint_evaluation_sensor, mmlu_score, perplexity
    from lm_assets.defs.training.assets import TrainingLauncher, training_run_and_checkpoint

    root, _, runs = materialized
    instance = runs["instance"]
    resources = runs["resources"] | {
        "training_launcher": TrainingLauncher(s3=s3_resource_from_env()),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    }
    if "main-step_00000012" not in instance.get_dynamic_partitions("checkpoints"):
        config = {"ops": {"training_run": {"config": {"steps": 12, "save_every": 6, "pp": 2, "micro_batch_size": 2, "lr": 3e-3, "warmup_steps": 4}}}}
        assert dg.materialize([training_run_and_checkpoint], instance=instance, resources=resources, run_config=config).success
    with dg.build_sensor_context(instance=instance) as context:
        requested = [r.partition_key for r in checkpoint_evaluation_sensor(context).run_requests]
    assert requested == ["main-step_00000006", "main-step_00000012"]

    subjects = ["abstract_algebra", "world_religions"]
    config = {"ops": {"mmlu_score": {"config": {"subjects": subjects, "limit": 20}}, "perplexity": {"config": {"max_sequences": 8}}}}
    result = dg.materialize(
        [perplexity, mmlu_score, ceval_score], partition_key="main-step_00000006", instance=instance,
        resources=resources, run_config=config,
    )
    assert result.success
    checks = {(e.asset_key.path[-1], e.check_name): e.passed for e in (
        ev.event_specific_data for ev in result.all_events if ev.event_type_value == "ASSET_CHECK_EVALUATION")}
    meta = {m.asset_key.path[-1]: m.metadata for m in result.get_asset_materialization_events() and
            [e.materialization for e in result.get_asset_materialization_events()]}
    # This checkpoint's context is the packed length, so 5-shot prompts are cut: the check says so.
    fits = {name: int(meta[name]["truncated_prompts"].value) / int(meta[name]["questions"].value) <= 0.05 for name in ("mmlu_score", "ceval_score")}
    assert {name: checks.pop((name, "prompts_fit_the_context")) for name in fits} == fits
    assert checks and all(checks.values()), checks
    assert meta["mmlu_score"]["questions"].value == "40"  # a constant across checkpoints: text, not a plotted number
    assert 0.0 <= meta["mmlu_score"]["main/acc"].value <= 1.0
    assert "chance_low" not in meta["mmlu_score"]
    assert {name: (meta[name]["device"].value, meta[name]["dtype"].value) for name in meta} == {
        name: ("cpu", "float32") for name in ("perplexity", "mmlu_score", "ceval_score")}

    # Per-question results: an audit of the score, question by question.
    questions = pl.read_parquet(meta["mmlu_score"]["questions_parquet"].value)
    assert questions.height == 40 and questions["truncated"].sum() == int(meta["mmlu_score"]["truncated_prompts"].value)
    lls = questions.select(pl.concat_list("loglikelihood_A", "loglikelihood_B", "loglikelihood_C", "loglikelihood_D")).to_series()
    assert questions["prediction"].to_list() == [max(range(4), key=lambda i, row=row: row[i]) for row in lls.to_list()]
    assert (questions["prediction"] == questions["gold"]).mean() == pytest.approx(meta["mmlu_score"]["main/acc"].value, abs=5e-5)
    for subject in subjects:  # numeric per subject, so the UI plots them across checkpoints
        rows = questions.filter(pl.col("subject") == subject)
        accuracy = (rows["prediction"] == rows["gold"]).mean()
        assert meta["mmlu_score"][f"main/mmlu/{subject}"].value == pytest.approx(accuracy, abs=5e-5)
    assert meta["mmlu_score"]["trend"].value.startswith("| group | main 6 |")
    # One evaluated checkpoint: no chart of one point, its acc said instead (two or more draw acc over the band).
    chart = meta["mmlu_score"]["acc_by_checkpoint"].value
    acc = meta["mmlu_score"]["main/acc"].value
    assert "1 evaluated checkpoint" in chart and f"acc {acc:.4f} at step 6" in chart and "svg" not in chart
    assert int(meta["ceval_score"]["questions"].value) > 0
    assert 1.0 < meta["perplexity"]["main/perplexity"].value < 3000 * 1.5
    assert "perplexity" not in meta["perplexity"]  # each run's checkpoints on a series of their own
    assert (root / "checkpoints" / "main" / "step_00000006" / "hf" / "config.json").exists()  # exported on demand
