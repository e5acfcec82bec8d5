"""The Dagster layer on small shards: materialize, sensor, schedule logic, S3 and the real CLI."""

import json
import logging
import os
import time
import subprocess
import sys
from pathlib import Path

import boto3
import dagster as dg
import polars as pl
from dagster._core.instance.ref import InstanceRef

from lm_assets.defs.automation import landing_sensor, shard_run_requests, stale_shards
from lm_assets.defs.common.reporting import config_hash
from lm_assets.defs.common.resources import LandingResource, StorageResource, s3_resource_from_env
from lm_assets.defs.common.toxicity import ToxicityResource
from lm_assets.defs.curation.assets import (
    CuratedShardConfig,
    ExtractedShardConfig,
    curated_config_hash,
    curated_shard,
    extracted_shard,
)
from lm_assets.defs.curation.expectations import curated_expectations, validate_frame
from lm_assets.defs.ingest.assets import RawShardConfig, raw_shard
from lm_assets.storage.store import Storage
from tests.support.warc_builder import WarcBuilder, page

RULES_ONLY = {"ops": {"curated_shard": {"config": {"quality_policy": "rules"}}}}
# The offline toxicity model: Detoxify would download its release model.
OFFLINE_TOXICITY = ToxicityResource(backend="profanity_check")
EN = (
    "The old lighthouse stands at the edge of the harbour, and its keeper climbs the stairs every evening. "
    "In winter the storms come from the north, and the ships wait in the bay until the sea is calm again. "
    "Visitors walk along the pier to watch the fishing boats return with their catch in the late afternoon. "
    "The town has kept its narrow streets, its stone houses and a small museum about the history of the port. "
    "Each summer a festival fills the square with music, and families from the valley come down to dance. "
    "Fishermen still mend their nets by hand on the quay, a skill that their grandparents taught them long ago. "
    "A narrow railway once linked the harbour with the mines in the hills, but only its bridges remain today."
)
ZH = (
    "老城的东边有一座古老的石桥，桥下的河水一年四季缓缓流淌。每天清晨，附近的居民都会来到河边散步、打太极拳。"
    "到了傍晚，孩子们在桥头追逐嬉戏，老人们坐在树荫下聊天。这座桥已经有三百多年的历史，见证了小城的变迁。"
    "当地政府近年来对石桥进行了修缮，并在两岸种植了柳树和桃花，使这里成为游客喜爱的景点。"
    "春天桃花盛开的时候，摄影爱好者从各地赶来，只为拍下晨雾中的石桥。桥边的茶馆也因此热闹起来。"
    "茶馆的老板说，他的祖父就在这里卖茶，几十年来，来喝茶的人换了一代又一代，可石桥依旧如故。"
)

DE = (
    "Der alte Leuchtturm steht am Rand des Hafens, und sein Wärter steigt jeden Abend die Treppe hinauf. "
    "Im Winter kommen die Stürme aus dem Norden, und die Schiffe warten in der Bucht, bis das Meer wieder ruhig ist. "
    "Besucher gehen am Nachmittag über die Mole und sehen zu, wie die Fischerboote mit ihrem Fang zurückkehren. "
    "Die Stadt hat ihre engen Gassen, ihre Steinhäuser und ein kleines Museum über die Geschichte des Hafens bewahrt. "
    "Jeden Sommer füllt ein Fest den Marktplatz mit Musik, und die Familien aus dem Tal kommen zum Tanzen herunter. "
    "Die Fischer flicken ihre Netze noch immer von Hand am Kai, wie es ihnen ihre Großeltern vor langer Zeit zeigten. "
    "Eine schmale Bahn verband einst den Hafen mit den Bergwerken in den Hügeln, doch heute stehen nur noch ihre Brücken."
)


def write_shard(path: Path) -> Path:
    return (
        WarcBuilder()
        .warcinfo()
        .response("https://en.example/harbour", page("Harbour", f"<p>{EN}</p><p>You can write to the keeper at keeper@harbour.example to book a guided tour of the tower.</p>"))
        .response("https://zh.example/qiao", page("石桥", f"<p>{ZH}</p><p>如需预约参观，请拨打管理处的电话13812345678进行登记。</p>", lang="zh"))
        .response("https://en.example/stub", page("Stub", "<p>Click here to win a prize today. Offer ends soon.</p>"))
        .response("https://en.example/missing", "gone", status="404 Not Found")
        .response("https://en.example/bad", "<p>café, naïve, déjà vu: UTF-8 with a damaged byte ".encode() + b"\xff</p>")
        .write(path)
    )


def resources(storage_root: str, landing_root: str, toxicity: ToxicityResource = OFFLINE_TOXICITY) -> dict:
    s3 = s3_resource_from_env()
    return {"storage": StorageResource(root=storage_root, s3=s3), "landing": LandingResource(root=landing_root, s3=s3),
            "toxicity": toxicity}


def check_results(result) -> dict:
    return {
        (e.asset_key.path[-1], e.check_name): e.passed
        for e in (ev.event_specific_data for ev in result.all_events if ev.event_type_value == "ASSET_CHECK_EVALUATION")
    }


def test_materialize_one_shard_locally(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    write_shard(landing / "s1.warc.gz")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", ["s1.warc.gz"])
    result = dg.materialize(
        [raw_shard, extracted_shard, curated_shard, curated_expectations],
        partition_key="s1.warc.gz",
        instance=instance,
        resources=resources(str(tmp_path / "storage"), str(landing)),
        run_config=RULES_ONLY,
    )
    assert result.success
    checks = check_results(result)
    assert all(checks.values()), checks
    assert ("curated_shard", "curated_expectations") in checks
    curated = pl.read_parquet(tmp_path / "storage/curated/s1.warc.gz/documents.parquet")
    assert sorted(curated["lang"].to_list()) == ["en", "zh"]
    assert "<EMAIL>" in curated.filter(pl.col("lang") == "en")["text"][0]
    assert "<CN_PHONE>" in curated.filter(pl.col("lang") == "zh")["text"][0]
    mat = result.asset_materializations_for_node("curated_shard")[0]
    assert mat.metadata["toxicity_model"].value.startswith("alt-profanity-check")
    assert mat.metadata["pii_redacted"].value["EMAIL"] == 1
    raw_mat = result.asset_materializations_for_node("raw_shard")[0]
    assert (raw_mat.metadata["records_in"].value, raw_mat.metadata["quarantined"].value) == (6, 1)
    # Every rule's cost, as numbers that plot across runs, and the pages it dropped, to read.
    # A reason is spelled stage:reason in the keys, the tables and the line of idle rules alike.
    assert mat.metadata["dropped/gopher_quality:min_doc_words"].value == 1
    assert not any("min_prose_share" in key for key in mat.metadata)  # a rule that dropped nothing is named, not zero
    assert "prose:min_prose_share" in mat.metadata["rules_that_dropped_nothing"].value.split(", ")
    assert mat.metadata["quality_preset"].value == "lm_assets"
    examples = mat.metadata["drop_examples"].value
    assert "https://en.example/stub" in examples and "Click here to win a prize today" in examples
    # The stub was dropped with the score that dropped it: 10 words against the minimum of 50.
    assert "| gopher_quality:min_doc_words | 10 | https://en.example/stub |" in examples
    # Documents to read: the kept ones whole, paragraphs as stored, and a table of their openings.
    full = mat.metadata["full_text"].value
    # Long lines are hard-wrapped, a continuation marked ↪ (English breaks at a space, Chinese between characters).
    assert EN in full.replace("\n↪ ", " ") and "\n\nYou can write to the keeper at <EMAIL>" in full
    assert ZH in full.replace("\n↪ ", "")
    assert "https://en.example/harbour" in mat.metadata["preview"].value
    raw_preview = raw_mat.metadata["preview"].value
    assert "Click here to win a prize today." in raw_preview and "<p>" not in raw_preview
    # The stop-word lists show as counts; the whole config is a file next to the shard.
    effective = mat.metadata["effective_config"].value
    whole = json.loads(Path(mat.metadata["effective_config_path"].value).read_text())
    assert effective["quality"]["stop_words"]["en"] == f"{len(whole['quality']['stop_words']['en'])} words"
    assert effective["langid"] == whole["langid"] and effective["langid"]["allowed"] == ["en", "zh"]
    # Dagster's standard keys: the rows and the columns of what was stored.
    assert mat.metadata["dagster/row_count"].value == curated.height == 2
    columns = {c.name: c.type for c in mat.metadata["dagster/column_schema"].value.columns}
    assert columns == {name: str(dtype) for name, dtype in curated.schema.items()}


def test_each_shard_keeps_its_own_check_status(tmp_path):
    """Checks on per-shard assets are partitioned: a shard that passes later does not hide one that failed."""
    landing = tmp_path / "landing"
    landing.mkdir()
    write_shard(landing / "both.warc.gz")
    WarcBuilder().warcinfo().response("https://en.example/harbour", page("Harbour", f"<p>{EN}</p>")).write(
        landing / "english.warc.gz"
    )
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", ["english.warc.gz", "both.warc.gz"])
    for shard in ("english.warc.gz", "both.warc.gz"):
        assert dg.materialize(
            [raw_shard, extracted_shard, curated_shard], partition_key=shard, instance=instance,
            resources=resources(str(tmp_path / "storage"), str(landing)), run_config=RULES_ONLY,
        ).success
    assert all(spec.partitions_def is not None for spec in curated_shard.check_specs)

    def status(check: str) -> dict:
        key = dg.AssetCheckKey(curated_shard.key, check)
        history = instance.event_log_storage.get_asset_check_execution_history(key, limit=10)
        return {record.partition: record.evaluation.passed for record in history}

    # No Chinese page in one shard: its share (0) is below the 5% floor there, and only there.
    assert status("language_share") == {"english.warc.gz": False, "both.warc.gz": True}
    assert status("conservation") == {"english.warc.gz": True, "both.warc.gz": True}


def test_expectations_check_the_languages_the_run_was_configured_with(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    WarcBuilder().warcinfo().response(
        "https://de.example/hafen", page("Hafen", f"<p>{DE}</p>", lang="de")
    ).response("https://en.example/harbour", page("Harbour", f"<p>{EN}</p>")).write(landing / "s1.warc.gz")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", ["s1.warc.gz"])
    curated_config = RULES_ONLY["ops"]["curated_shard"]["config"] | {
        "langid": {"allowed": ["en", "de"]}, "language_share_bounds": {"en": [0.05, 1.0], "de": [0.05, 1.0]}
    }
    result = dg.materialize(
        [raw_shard, extracted_shard, curated_shard, curated_expectations],
        partition_key="s1.warc.gz",
        instance=instance,
        resources=resources(str(tmp_path / "storage"), str(landing)),
        run_config={"ops": {"curated_shard": {"config": curated_config}}},
    )
    assert result.success
    curated = pl.read_parquet(tmp_path / "storage/curated/s1.warc.gz/documents.parquet")
    assert sorted(curated["lang"].to_list()) == ["de", "en"]
    # The default config allows en and zh only: a check that read it would reject the German page.
    assert not validate_frame(curated.select("doc_id", "text", "lang", "lang_score", "tox_frac").to_pandas(),
                              CuratedShardConfig().langid.allowed)["success"]
    assert check_results(result)[("curated_shard", "curated_expectations")]


def test_unloadable_toxicity_model_fails_the_run_with_its_reason(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    write_shard(landing / "s1.warc.gz")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", ["s1.warc.gz"])
    unloadable = ToxicityResource(backend="detoxify", detoxify_checkpoint="/no/such.ckpt")
    result = dg.materialize(
        [raw_shard, extracted_shard, curated_shard],
        partition_key="s1.warc.gz",
        instance=instance,
        resources=resources(str(tmp_path / "storage"), str(landing), unloadable),
        run_config=RULES_ONLY,
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "detoxify checkpoint not found: /no/such.ckpt" in failure.event_specific_data.error.to_string()
    curated = tmp_path / "storage/curated"
    assert not curated.exists() or list(curated.iterdir()) == []  # nothing published, no work folder left


def test_hostile_partition_keys_fail_clearly_and_write_nothing(tmp_path):
    landing, storage = tmp_path / "deep/landing", tmp_path / "deep/storage"
    landing.mkdir(parents=True)
    (tmp_path / "escape").mkdir()
    write_shard(tmp_path / "escape/x.warc.gz")
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"text": "a private note that must never be copied into storage"}\n')
    before = sorted(p for p in tmp_path.rglob("*"))
    instance = dg.DagsterInstance.ephemeral()
    for key in ("../../escape/x.warc.gz", "../../../escape/x.warc.gz", str(secret), "..", "a\nb.warc.gz"):
        instance.add_dynamic_partitions("shards", [key])
        result = dg.materialize(
            [raw_shard], partition_key=key, instance=instance, resources=resources(str(storage), str(landing)),
            raise_on_error=False,
        )
        assert not result.success
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        assert f"shard key {key!r} is refused" in failure.event_specific_data.error.to_string()
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_symlinks_out_of_the_landing_root_are_skipped_and_refused_unless_allowed(tmp_path):
    landing, storage = tmp_path / "landing", tmp_path / "storage"
    landing.mkdir()
    write_shard(landing / "inside.warc.gz")
    outside = write_shard(tmp_path / "elsewhere.warc.gz")
    (landing / "out.warc.gz").symlink_to(outside)
    (landing / "alias.warc.gz").symlink_to(landing / "inside.warc.gz")  # a link that stays inside is a file
    instance = dg.DagsterInstance.ephemeral()
    now = LandingResource(root=str(landing), settle_s=0)
    with dg.build_sensor_context(instance=instance, resources={"landing": now}) as context:
        result = landing_sensor(context)
    assert result.dynamic_partitions_requests[0].partition_keys == ["alias.warc.gz", "inside.warc.gz"]
    instance.add_dynamic_partitions("shards", ["out.warc.gz"])
    refused = dg.materialize([raw_shard], partition_key="out.warc.gz", instance=instance,
                             resources=resources(str(storage), str(landing)), raise_on_error=False)
    assert not refused.success
    failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
    assert f"is a symlink to {outside}, outside the root" in failure.event_specific_data.error.to_string()
    assert not (storage / "raw" / "out.warc.gz").exists()
    allowed = LandingResource(root=str(landing), follow_links_outside=True, settle_s=0)
    with dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), resources={"landing": allowed}) as context:
        assert "out.warc.gz" in landing_sensor(context).dynamic_partitions_requests[0].partition_keys


def test_sensor_adds_new_shards_once(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    for name in ("a.warc.gz", "b.jsonl"):
        (landing / name).write_bytes(b"x")
    (landing / "notes.txt").write_text("not a shard")
    (landing / ".partial.warc.gz").write_bytes(b"x")
    (landing / "nested").mkdir()
    (landing / "nested/d.warc.gz").write_bytes(b"x")
    instance = dg.DagsterInstance.ephemeral()
    landing_resource = LandingResource(root=str(landing), s3=s3_resource_from_env(), settle_s=0)
    with dg.build_sensor_context(instance=instance, resources={"landing": landing_resource}) as context:
        result = landing_sensor(context)
        assert [(r.partition_key, r.partition_key_range) for r in result.run_requests] == [
            (None, dg.PartitionKeyRange("a.warc.gz", "b.jsonl"))]
        assert result.dynamic_partitions_requests[0].partition_keys == ["a.warc.gz", "b.jsonl"]
        instance.add_dynamic_partitions("shards", ["a.warc.gz", "b.jsonl"])
        # Re-adding known files is a no-op; the hidden file, the folder and the text file are skipped.
        assert landing_sensor(context).skip_reason.skip_message == "no new shard files (2 known, 3 other files skipped)"
        (landing / "c.warc.gz").write_bytes(b"x")
        assert [r.partition_key for r in landing_sensor(context).run_requests] == ["c.warc.gz"]


def test_the_sensor_runs_new_shards_in_ranges_of_at_most_shards_per_run():
    new = [f"s{i:02d}.warc.gz" for i in range(7)]
    requests = shard_run_requests(new, 3)
    assert [r.partition_key_range for r in requests[:2]] == [
        dg.PartitionKeyRange("s00.warc.gz", "s02.warc.gz"), dg.PartitionKeyRange("s03.warc.gz", "s05.warc.gz")]
    assert (requests[2].partition_key, requests[2].partition_key_range, requests[2].run_key) == (
        "s06.warc.gz", None, "shard:s06.warc.gz")
    assert len({r.run_key for r in requests}) == 3


def test_schedule_finds_shards_whose_config_changed(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    write_shard(landing / "s1.warc.gz")
    write_shard(landing / "s2.warc.gz")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", ["s1.warc.gz", "s2.warc.gz"])
    common = dict(instance=instance, resources=resources(str(tmp_path / "storage"), str(landing)))
    assets = [raw_shard, extracted_shard, curated_shard]
    current = {
        raw_shard.key: config_hash(RawShardConfig()),
        extracted_shard.key: config_hash(ExtractedShardConfig()),
        curated_shard.key: curated_config_hash(CuratedShardConfig(quality_policy="rules"), OFFLINE_TOXICITY),
    }
    dg.materialize(assets, partition_key="s1.warc.gz", run_config=RULES_ONLY, **common)
    assert stale_shards(instance, ["s1.warc.gz", "s2.warc.gz"], current) == ["s2.warc.gz"]  # s2 never ran
    changed = {"ops": {"curated_shard": {"config": {"langid": {"min_score": 0.6}, "quality_policy": "rules"}}}}
    dg.materialize(assets, partition_key="s2.warc.gz", run_config=changed, **common)
    assert stale_shards(instance, ["s1.warc.gz", "s2.warc.gz"], current) == ["s2.warc.gz"]
    dg.materialize(assets, partition_key="s2.warc.gz", run_config=RULES_ONLY, **common)
    assert stale_shards(instance, ["s1.warc.gz", "s2.warc.gz"], current) == []
    # Scored by another toxicity model, both are stale.
    other_model = ToxicityResource(backend="detoxify")
    current[curated_shard.key] = curated_config_hash(CuratedShardConfig(quality_policy="rules"), other_model)
    assert stale_shards(instance, ["s1.warc.gz", "s2.warc.gz"], current) == ["s1.warc.gz", "s2.warc.gz"]


def test_materialize_raw_to_curated_on_s3(tmp_path, s3_server):
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1")
    shard = write_shard(tmp_path / "s3shard.warc.gz")
    client.upload_file(str(shard), s3_server.bucket, "landing/s3shard.warc.gz")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", ["s3shard.warc.gz"])
    result = dg.materialize(
        [raw_shard, extracted_shard, curated_shard],
        partition_key="s3shard.warc.gz",
        instance=instance,
        resources=resources(f"s3://{s3_server.bucket}/out", f"s3://{s3_server.bucket}/landing"),
        run_config=RULES_ONLY,
    )
    assert result.success and all(check_results(result).values())
    store = Storage(f"s3://{s3_server.bucket}/out", s3_client=client)
    assert store.list("curated") == [
        "curated/s3shard.warc.gz/curation.json",
        "curated/s3shard.warc.gz/documents.parquet",
        "curated/s3shard.warc.gz/dropped.parquet",
        "curated/s3shard.warc.gz/effective_config.json",
        "curated/s3shard.warc.gz/quality_histograms.json",
        "curated/s3shard.warc.gz/quality_histograms.png",
    ]
    assert store.read_parquet("curated/s3shard.warc.gz/documents.parquet").height == 2
    assert json.loads(store.read_bytes("raw/s3shard.warc.gz/summary.json"))["records"] == 6
    assert not (tmp_path / "storage").exists()


def test_real_cli_materializes_a_partition(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    written = write_shard(landing / "cli.warc.gz")
    os.utime(written, (time.time() - 120,) * 2)  # complete: unchanged for longer than settle_s
    (landing / "old-crawl.arc.bz2").write_bytes(b"x")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LM_ASSETS_LANDING_ROOT": str(landing),
        "LM_ASSETS_STORAGE_ROOT": str(tmp_path / "storage"),
        "LM_ASSETS_TOXICITY_BACKEND": "profanity_check",
        "LM_ASSETS_QUALITY_POLICY": "rules",
    }
    bin_dir = Path(sys.executable).parent
    added = subprocess.run([bin_dir / "lm-assets", "add-shards"], env=env, capture_output=True, text=True, check=True)
    assert "1 new shard partitions added" in added.stdout
    assert "1 files skipped:\n  'old-crawl.arc.bz2': not a shard format (" in added.stdout
    run = subprocess.run(
        [
            bin_dir / "lm-assets", "materialize",
            "--select", "raw_shard,extracted_shard,curated_shard", "--partition", "cli.warc.gz",
        ],
        env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "RUN_SUCCESS" in run.stderr + run.stdout
    assert pl.read_parquet(tmp_path / "storage/curated/cli.warc.gz/documents.parquet").height == 2
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("curated_shard"), asset_partitions=["cli.warc.gz"]), limit=1
    ).records
    assert records[0].asset_materialization.metadata["documents_out"].value == 2


def materialize_dedup(instance, resources, **kwargs):
    """dedup_edges for every band range, then dedup_clusters; the last result."""
    from lm_assets.defs.dedup.assets import DedupSettings, dedup_clusters, dedup_edges

    for band in DedupSettings().band_keys():
        edges = dg.materialize([dedup_edges], partition_key=band, instance=instance, resources=resources, **kwargs)
        if not edges.success:
            return edges
    return dg.materialize([dedup_clusters], instance=instance, resources=resources, **kwargs)


def one_shard(tmp_path, dedup):
    """An instance with shard s1.warc.gz registered in its landing folder, and resources with `dedup`."""
    landing = tmp_path / "landing"
    landing.mkdir()
    write_shard(landing / "s1.warc.gz")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", ["s1.warc.gz"])
    return instance, resources(str(tmp_path / "storage"), str(landing)) | {"dedup": dedup}


def sketch(instance, res) -> None:
    """s1.warc.gz read, extracted, curated and sketched."""
    from lm_assets.defs.dedup.assets import minhash_signatures

    dg.materialize(
        [raw_shard, extracted_shard, curated_shard, minhash_signatures],
        partition_key="s1.warc.gz", instance=instance, resources=res, run_config=RULES_ONLY,
    )


def test_dedup_refuses_mismatched_settings_and_missing_clusters(tmp_path):
    from lm_assets.defs.dedup.assets import DedupSettings, dedup_clusters, deduplicated_shard

    instance, res = one_shard(tmp_path, DedupSettings())
    sketch(instance, res)
    missing = dg.materialize(
        [deduplicated_shard], partition_key="s1.warc.gz", instance=instance, resources=res, raise_on_error=False
    )
    assert not missing.success
    failure = next(e for e in missing.all_events if e.event_type_value == "STEP_FAILURE")
    assert "no dedup clusters yet" in failure.event_specific_data.error.to_string()
    other = res | {"dedup": DedupSettings(num_perm=64)}
    mismatch = materialize_dedup(instance, other, raise_on_error=False)
    assert not mismatch.success
    failure = next(e for e in mismatch.all_events if e.event_type_value == "STEP_FAILURE")
    assert "made with other MinHash settings" in failure.event_specific_data.error.to_string()
    no_edges = dg.materialize([dedup_clusters], instance=instance, resources=res, raise_on_error=False)
    assert not no_edges.success
    failure = next(e for e in no_edges.all_events if e.event_type_value == "STEP_FAILURE")
    assert "materialize dedup_edges for every band range" in failure.event_specific_data.error.to_string()
    assert materialize_dedup(instance, res).success
    assert dg.materialize([deduplicated_shard], partition_key="s1.warc.gz", instance=instance, resources=res).success
    # A shard registered but not sketched yet is named, in the metadata and as a warning.
    instance.add_dynamic_partitions("shards", ["s2.warc.gz"])
    partial = materialize_dedup(instance, res)
    metadata = partial.asset_materializations_for_node("dedup_clusters")[0].metadata
    assert metadata["shards_registered_without_sketches"].value == ["s2.warc.gz"]
    assert metadata["shards_in_index"].value == 1
    logged = [entry for entry in instance.all_logs(partial.run_id) if entry.level == logging.WARNING]
    assert any("1 registered shards have no sketches yet" in entry.user_message for entry in logged)


def test_band_partitions_follow_the_dedup_resource_a_deployment_gives(tmp_path):
    from lm_assets.defs.dedup.assets import DedupSettings, dedup_edges

    instance, two_parts = one_shard(tmp_path, DedupSettings(band_parts=2))
    assert instance.get_dynamic_partitions("dedup_bands") == []
    sketch(instance, two_parts)
    assert instance.get_dynamic_partitions("dedup_bands") == ["bands-000-012", "bands-012-024"]
    assert DedupSettings(band_parts=2).band_keys() == ["bands-000-012", "bands-012-024"]
    # A range registered under other settings is refused by name.
    four_parts = two_parts | {"dedup": DedupSettings()}
    instance.add_dynamic_partitions("dedup_bands", ["bands-000-006"])
    refused = dg.materialize([dedup_edges], partition_key="bands-000-006", instance=instance, resources=two_parts,
                             raise_on_error=False)  # fmt: skip
    failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
    assert "bands-000-006 is not a band range of the dedup resource's settings (bands-000-012, bands-012-024)" in (
        failure.event_specific_data.error.to_string()
    )
    assert dg.materialize([dedup_edges], partition_key="bands-000-006", instance=instance, resources=four_parts).success


def test_the_shard_graph_through_packing_on_s3(s3_server):
    """Every stage through packed_dataset on an S3 storage root and landing location: the tokenized
    shards reach packing through Storage.local_dir, and nothing is written to local disk by the assets."""
    from lm_assets.app.local_run import DEMO_RUN_CONFIG, OFFLINE_RUN_CONFIG, run_shard_graph
    from lm_assets.definitions import defs

    client = boto3.client("s3", endpoint_url=s3_server.endpoint, region_name="us-east-1")
    shard = "crawl-00000.warc.gz"
    client.upload_file(str(Path(__file__).resolve().parents[2] / "data/sample-crawl" / shard), s3_server.bucket, f"landing/{shard}")
    on_s3 = dg.Definitions(
        assets=defs.assets, asset_checks=defs.asset_checks, jobs=defs.jobs, executor=defs.executor,
        resources={**defs.resources, **resources(f"s3://{s3_server.bucket}/out", f"s3://{s3_server.bucket}/landing")},
    )
    ops = {**DEMO_RUN_CONFIG["ops"], **OFFLINE_RUN_CONFIG["ops"], "tokenizer": {"config": {"vocab_size": 2000}}}
    results = run_shard_graph(on_s3, dg.DagsterInstance.ephemeral(), [shard], {"ops": ops}, through_packing=True)
    assert all(r.success for r in results)
    store = Storage(f"s3://{s3_server.bucket}/out", s3_client=client)
    manifest = json.loads(store.read_bytes("packed/manifest.json"))
    assert manifest["seq_len"] == 257 and manifest["splits"]["train"]["sequences"] > 0
    segments = store.read_parquet("packed/train_segments.parquet")
    documents = store.read_parquet(f"decontaminated/{shard}/documents.parquet")
    assert set(segments["shard"]) == {shard}
    assert set(segments["doc_id"]) <= set(documents["doc_id"])
    # A training sequence that holds a document boundary, decoded: a marker opens each of its pieces.
    packed = next(m for r in results for m in r.asset_materializations_for_node("packed_dataset"))
    shown = packed.metadata["train_sequence"].value
    index = int(shown.split(":")[0].removeprefix("Sequence "))
    pieces = segments.filter(pl.col("seq_index") == index)
    assert pieces.height > 1 and shown.count("⟦document ") == pieces.height
    assert all(f"⟦document {doc_id}, its tokens" in shown for doc_id in pieces["doc_id"]) and "⟦EOS⟧" in shown


def test_the_cli_makes_a_missing_dagster_home_and_explains_an_unset_one(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    write_shard(landing / "one.warc.gz")
    cli = [Path(sys.executable).parent / "lm-assets", "add-shards", "--landing", str(landing), "--settle-s", "0"]
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    unset = subprocess.run(cli, env=env, capture_output=True, text=True)
    assert unset.returncode != 0 and "DAGSTER_HOME is not set" in unset.stderr and "Traceback" not in unset.stderr
    home = tmp_path / "new" / "home"
    made = subprocess.run(cli, env={**env, "DAGSTER_HOME": str(home)}, capture_output=True, text=True, check=True)
    assert f"created DAGSTER_HOME {home}" in made.stdout and "1 new shard partitions added" in made.stdout
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    assert instance.get_dynamic_partitions("shards") == ["one.warc.gz"]


def test_a_landing_file_is_taken_only_once_complete(tmp_path):
    from lm_assets.corpus.ingest.readers import landing_shards
    from lm_assets.storage.store import Storage

    landing = tmp_path / "landing"
    landing.mkdir()
    for name in ("growing.warc.gz", "settled.warc.gz", "marked.warc.gz"):
        (landing / name).write_bytes(b"x")
    os.utime(landing / "settled.warc.gz", (time.time() - 61,) * 2)
    (landing / "marked.warc.gz.done").write_text("")
    shards, skipped = landing_shards(Storage(str(landing)), settle_s=60)
    assert shards == ["marked.warc.gz", "settled.warc.gz"]
    assert skipped["growing.warc.gz"].startswith("changed 0 s ago, maybe still being written: taken once unchanged")
    assert "marked.warc.gz.done" not in skipped  # a marker is no file to skip
    assert landing_shards(Storage(str(landing)), settle_s=0)[0] == ["growing.warc.gz", "marked.warc.gz", "settled.warc.gz"]
    instance = dg.DagsterInstance.ephemeral()
    with dg.build_sensor_context(instance=instance, resources={"landing": LandingResource(root=str(landing))}) as context:
        assert landing_sensor(context).dynamic_partitions_requests[0].partition_keys == ["marked.warc.gz", "settled.warc.gz"]


def test_a_landing_file_that_changes_while_read_publishes_nothing(tmp_path, monkeypatch):
    import lm_assets.defs.ingest.assets as ingest

    landing, storage = tmp_path / "landing", tmp_path / "storage"
    landing.mkdir()
    shard = write_shard(landing / "growing.warc.gz")
    first_read = ingest.ShardReading.batches

    def batches_while_the_writer_appends(self):
        for batch in first_read(self):
            with open(shard, "ab") as writer:  # the crawler is still writing the file
                writer.write(shard.read_bytes()[:200])
            yield batch

    monkeypatch.setattr(ingest.ShardReading, "batches", batches_while_the_writer_appends)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shards", ["growing.warc.gz"])
    result = dg.materialize([raw_shard], partition_key="growing.warc.gz", instance=instance,
                            resources=resources(str(storage), str(landing)), raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "landing file growing.warc.gz changed while it was read" in failure.event_specific_data.error.to_string()
    assert not (storage / "raw" / "growing.warc.gz").exists()


def test_dangling_and_folder_symlinks_in_the_landing_folder_are_listed_as_skipped(tmp_path):
    from lm_assets.corpus.ingest.readers import landing_shards
    from lm_assets.storage.store import Storage

    landing = tmp_path / "landing"
    landing.mkdir()
    write_shard(landing / "real.warc.gz")
    (landing / "gone.warc.gz").symlink_to(tmp_path / "deleted.warc.gz")
    (tmp_path / "more").mkdir()
    (landing / "more").symlink_to(tmp_path / "more")
    shards, skipped = landing_shards(Storage(str(landing)))
    assert shards == ["real.warc.gz"]
    assert skipped["gone.warc.gz"] == f"a symlink to {tmp_path / 'deleted.warc.gz'}, which does not exist"
    assert skipped["more/"].startswith("a symlink to the folder")


def test_only_new_landing_files_are_waited_for(tmp_path):
    from lm_assets.corpus.ingest.readers import landing_shards
    from lm_assets.storage.store import Storage

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "registered.warc.gz").write_bytes(b"x")  # rewritten just now, but already a partition
    shards, skipped = landing_shards(Storage(str(landing)), settle_s=60, known={"registered.warc.gz"})
    assert shards == ["registered.warc.gz"] and skipped == {}


def test_a_fifo_in_the_landing_folder_is_skipped_with_its_reason_and_never_opened(tmp_path):
    import threading

    landing, storage = tmp_path / "landing", tmp_path / "storage"
    landing.mkdir()
    write_shard(landing / "real.warc.gz")
    fifo = landing / "pipe.warc.gz"
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer():  # waits until something opens the FIFO for reading, then closes it (an empty file)
        os.close(os.open(fifo, os.O_WRONLY))
        opened.set()

    waiting = threading.Thread(target=writer, daemon=True)
    waiting.start()
    try:
        instance = dg.DagsterInstance.ephemeral()
        with dg.build_sensor_context(instance=instance, resources={"landing": LandingResource(root=str(landing), settle_s=0)}) as context:
            assert landing_sensor(context).dynamic_partitions_requests[0].partition_keys == ["real.warc.gz"]
            instance.add_dynamic_partitions("shards", ["real.warc.gz"])
            skipped = landing_sensor(context).skip_reason.skip_message
        assert skipped == "no new shard files (1 known, 1 other files skipped)"
        cli = [Path(sys.executable).parent / "lm-assets", "add-shards", "--landing", str(landing), "--settle-s", "0"]
        added = subprocess.run(cli, env={**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}, capture_output=True,
                               text=True, check=True)  # fmt: skip
        assert "1 new shard partitions added" in added.stdout
        assert "'pipe.warc.gz': a FIFO (named pipe), not a regular file: never opened" in added.stdout

        instance.add_dynamic_partitions("shards", ["pipe.warc.gz"])  # a partition added by hand
        refused = dg.materialize([raw_shard], partition_key="pipe.warc.gz", instance=instance,
                                 resources=resources(str(storage), str(landing)), raise_on_error=False)  # fmt: skip
        assert not refused.success
        failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
        assert "'pipe.warc.gz' is refused: a FIFO" in failure.event_specific_data.error.to_string()
        assert not opened.is_set()
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer go
        waiting.join()
