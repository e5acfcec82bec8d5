"""model_card materialized for a checkpoint: the README.md it writes into the HF export shows the metadata the
instance holds for the checkpoint's lineage, and says which assets were never materialized."""

import dagster as dg
import pytest
import yaml

from lm_assets.defs.common.partitions import checkpoint_partitions, shard_partitions
from lm_assets.defs.common.resources import StorageResource
from lm_assets.defs.compression.model_card import model_card

CHECKPOINT = "sft-step_00000004"


def report(instance, asset: str, metadata: dict, partition: str | None = None) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(asset, partition=partition, metadata=metadata))


def saved(run: str, tag: str, step: int, loss: float, root) -> dict:
    return {"checkpoint_dir": dg.MetadataValue.path(str(root / "checkpoints" / run)), "tags": dg.MetadataValue.json([tag]),
            "parameters": "604,992", "layout": "pp=1 tp=1 dp=1 (ZeRO-0, fp32)",
            "checkpoints": dg.MetadataValue.md("| checkpoint | step | train loss | val loss | size |\n|---|---|---|---|---|\n"
                                               f"| {tag} | {step} | {loss} | – | 7.0 MiB |")}  # fmt: skip


@pytest.fixture
def instance_with_lineage(tmp_path):
    storage = tmp_path / "storage"
    (storage / "checkpoints" / "sft" / "step_00000004" / "hf").mkdir(parents=True)
    (storage / "checkpoints" / "sft" / "step_00000004" / "hf" / "config.json").write_text("{}")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, ["main-step_00000008", CHECKPOINT])
    instance.add_dynamic_partitions(shard_partitions.name, ["a.warc.gz", "b.warc.gz"])
    report(instance, "curation_summary", {"shards": 2, "documents": 250, "drop_reasons": dg.MetadataValue.md(
        "| reason | docs |\n|---|---|\n| gopher_repetition:dup_line_frac | 17 |\n| langid:lang:fr | 4 |")})
    for shard, dropped in (("a.warc.gz", 2), ("b.warc.gz", 5)):
        report(instance, "decontaminated_shard", {"documents_in": 100, "documents_out": 100 - dropped,
                                                  "dropped_per_benchmark": dg.MetadataValue.json({"mmlu": dropped})}, shard)  # fmt: skip
    report(instance, "instruction_data", {"examples": 36, "rows_read": 38, "dropped": 2,
                                          "by_language": dg.MetadataValue.json({"en": 18, "zh": 18})})  # fmt: skip
    # The pretraining run the fine-tuning started from, then the fine-tuning run itself.
    report(instance, "checkpoint", saved("main", "step_00000008", 8, 6.9, storage))
    report(instance, "training_run", {"objective": "lm", "steps": 8, "final_loss": 6.9123, "min_loss": 6.85, "min_loss_step": 7})
    report(instance, "sft_checkpoint", saved("sft", "step_00000004", 4, 5.4321, storage))
    report(instance, "sft_run", {"objective": "lm", "steps": 4, "tokens": "4,096", "final_loss": 5.4321, "min_loss": 5.40,
                                 "min_loss_step": 3, "curves": dg.MetadataValue.md("![l](x)\n\nloss (blue) 7.777 → 5.432"),
                                 "init_from": dg.MetadataValue.json({"folder": str(storage / "checkpoints/main/step_00000008/hf")})})  # fmt: skip
    report(instance, "arc_easy_score", {"sft/acc": 0.3125, "sft/acc_norm": 0.375, "chance": "0.2500",
                                        "chance_band": "0.05–0.45", "questions": "16", "num_fewshot": "0"}, CHECKPOINT)  # fmt: skip
    report(instance, "arc_easy_score", {"main/acc": 0.9999, "chance": "0.2500"}, "main-step_00000008")  # another checkpoint's
    report(instance, "compressed_checkpoint", {"export_bytes": 2_000_000, "export_perplexity": 812.5, "costs": dg.MetadataValue.json(
        [{"kind": "gguf-q8_0", "bytes": 600_000, "size_share": 0.3, "tokens_per_s": None, "perplexity": 813.0,
          "perplexity_change": 0.0006, "changed_share": 0.0125}])}, CHECKPOINT)  # fmt: skip
    return instance, storage


def materialize(instance, storage, config=None):
    return dg.materialize([model_card], partition_key=CHECKPOINT, instance=instance, raise_on_error=False,
                          resources={"storage": StorageResource(root=str(storage))},
                          run_config={"ops": {"model_card": {"config": config or {}}}})  # fmt: skip


def test_the_card_in_the_export_shows_the_lineages_metadata(instance_with_lineage, tmp_path):
    instance, storage = instance_with_lineage
    licences = tmp_path / "licences.yaml"
    licences.write_text("license: apache-2.0\nsources:\n  our crawl: CC-BY-4.0\n")
    result = materialize(instance, storage, {"data_licences_file": str(licences), "data_licences": {"forum dump": "MIT"}})
    assert result.success
    card = (storage / "checkpoints" / "sft" / "step_00000004" / "hf" / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["license"] == "apache-2.0" and "sft" in front["tags"]
    assert [r["metrics"][0]["value"] for r in front["model-index"][0]["results"]] == [0.3125]
    text = set(card.splitlines())
    assert "| gopher_repetition:dup_line_frac | 17 |" in text
    assert "Decontamination (`decontaminated_shard`, 2 shards): 193 of 200 documents kept; dropped for sharing n-grams " \
           "with a benchmark:" in text and "| mmlu | 7 | – |" in text
    assert "Fine-tuning data (`instruction_data`): 36 examples (en 18, zh 18) of 38 rows read, 2 dropped (–), " \
           "checked against –." in text
    # The fine-tuning run, then the pretraining run it started from.
    assert "### `sft-step_00000004` (`sft_run`)" in text and "### `main-step_00000008` (`training_run`)" in text
    assert "| started from | main-step_00000008 |" in text and "| first loss | 7.777 |" in text
    assert "Saved at step 4: train loss 5.4321, val loss –, 7.0 MiB; 604,992 parameters, layout pp=1 tp=1 dp=1 (ZeRO-0, fp32)." in text
    assert "| last loss | 6.912 |" in text
    assert "| ARC-Easy | 0.3125 | 0.375 | 0.2500 | 0.05–0.45 | 16 | 0 | – |" in text and "0.9999" not in card
    assert "| gguf-q8_0 | 600,000 | 0.3 | not measured | 813 | 0.0006 | 0.0125 |" in text
    assert "| our crawl | CC-BY-4.0 |" in text and "| forum dump | MIT |" in text
    for asset in ("dedup_clusters", "packed_dataset", "perplexity", "safety_score", "bbq_score"):
        assert f"_`{asset}`: not materialized._" in text, asset
    meta = result.get_asset_materialization_events()[0].materialization.metadata
    assert meta["path"].value.endswith("checkpoints/sft/step_00000004/hf/README.md")
    assert meta["sections"].value["Data licences"] == "complete" and meta["sections"].value["Evaluation"] == "with gaps"
    assert "| our crawl | CC-BY-4.0 |" in meta["card"].value and "license: \"apache-2.0\"" in meta["front_matter"].value


def test_no_checkpoint_no_card(instance_with_lineage):
    instance, storage = instance_with_lineage
    instance.add_dynamic_partitions(checkpoint_partitions.name, ["main-step_00000009"])
    result = dg.materialize([model_card], partition_key="main-step_00000009", instance=instance, raise_on_error=False,
                            resources={"storage": StorageResource(root=str(storage))})  # fmt: skip
    assert not result.success
    assert not (storage / "checkpoints" / "main" / "step_00000009").exists()


def test_the_sensor_asks_a_card_once_evaluated_and_again_once_compressed():
    from lm_assets.defs.compression.model_card import model_card_sensor
    from lm_assets.defs.evaluation.assets import EVALUATION_KEYS

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, ["main-step_00000008", CHECKPOINT])

    def due():
        result = model_card_sensor(dg.build_sensor_context(instance=instance))
        return [(r.partition_key, r.run_key) for r in result.run_requests]

    assert due() == []
    for key in EVALUATION_KEYS[:-1]:
        report(instance, key.to_user_string(), {}, CHECKPOINT)
    assert due() == []  # one evaluation asset still missing
    report(instance, EVALUATION_KEYS[-1].to_user_string(), {}, CHECKPOINT)
    assert due() == [(CHECKPOINT, f"model_card:{CHECKPOINT}")]
    report(instance, "compressed_checkpoint", {}, CHECKPOINT)
    assert due() == [(CHECKPOINT, f"model_card:{CHECKPOINT}:compressed")]
