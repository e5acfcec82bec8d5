"""The model card rendered from hand-made metadata: the figures it shows are the ones given, and what was never
materialized says so."""

import yaml

from lm_assets.reporting.model_card import checkpoint_from_export, first_loss, markdown_rows, render_card

CURVES = "![loss](data:image/svg+xml,...)\n\nloss (blue) 8.303 → 6.672, lowest 6.453 at step 36"


def inputs(**changes) -> dict:
    made = {
        "checkpoint": "main-step_00000040",
        "lineage": [{
            "checkpoint": "main-step_00000040", "tag": "step_00000040", "run_asset": "training_run",
            "saved": {"parameters": "604,480", "layout": "pp=2 tp=1 dp=1 (ZeRO-1, fp32)",
                      "checkpoints": "| checkpoint | step | train loss | val loss | size |\n|---|---|---|---|---|\n"
                                     "| step_00000020 | 20 | 6.7996 | 7.2371 | 9.3 MiB |\n"
                                     "| step_00000040 | 40 | 6.6721 | 7.1232 | 9.3 MiB |"},
            "run": {"objective": "lm", "steps": 40, "tokens": "40,960", "final_loss": 6.6721, "min_loss": 6.4527,
                    "min_loss_step": 36, "val_loss": 7.1232, "curves": CURVES},
        }],
        "data": {
            "curation_summary": {"shards": 3, "documents": 376, "drop_reasons":
                                 "| reason | docs |\n|---|---|\n| classifier:below_threshold | 20 |\n| langid:lang:ja | 3 |"},
            "dedup_clusters": {"documents": 343, "kept": 313, "exact_duplicates": 16, "near_duplicates": 14,
                               "dup_rate": 0.0875, "threshold": 0.6},
            "tokenizer": None,
            "packed_dataset": {"tokens": 800812, "train_sequences": 3017, "val_sequences": 99, "seq_len": 257,
                               "mixture_shares": "| key | requested_share | realized_share |\n|---|---|---|\n"
                                                 "| lang:en | 0.843 | 0.843 |\n| lang:zh | 0.157 | 0.157 |"},
        },
        "decontamination": [
            {"documents_in": 104, "documents_out": 101, "dropped_per_benchmark": {"mmlu": 3}, "ngrams_indexed": {"mmlu": 857481}},
            {"documents_in": 209, "documents_out": 207, "dropped_per_benchmark": {"mmlu": 1, "ceval": 1}},
        ],
        "evaluation": {
            "mmlu_score": {"main/acc": 0.2388, "main/acc_norm": 0.2411, "chance_band": "0.1797–0.2979",
                           "questions": "469", "num_fewshot": "5", "subset": "3 of 57 subjects"},
            "hellaswag_score": {"main/acc": 0.125, "main/acc_norm": 0.375, "chance": "0.2500",
                                "chance_band": "-0.2093–0.7093", "questions": "8", "num_fewshot": "0",
                                "data": "data/eval/tasks/hellaswag (the shipped sample: original items, not the release)"},
            "safety_score": {"main/refusal_rate": 0.0625, "main/refusal_rate_en": 0.125, "main/refusal_rate_zh": 0.0,
                             "main/over_refusal_rate": 0.25, "prompts": "32 harmful, 16 benign",
                             "model_kind": "base", "refusal_meaningful": False, "headline": "harmful_toxic_share = 0.0"},
            "crows_pairs_score": {"main/pct_stereotype": 0.57143, "main/likelihood_diff": 4.8747, "pairs": "14",
                                  "no_preference": "pct_stereotype 0.5"},
        },
        "compression": {"export_bytes": 2713646, "export_perplexity": 2422.05, "notes": {"int8": "embeddings kept in float32"},
                        "costs": [{"kind": "gguf-q8_0", "bytes": 750400, "size_share": 0.2765, "tokens_per_s": None,
                                   "perplexity": 2422.2, "perplexity_change": 0.00007, "changed_share": 0.0},
                                  {"kind": "int8", "bytes": 2452436, "size_share": 0.9037, "tokens_per_s": 573.2,
                                   "base_tokens_per_s": 758.36, "perplexity": 2420.9, "perplexity_change": -0.00048,
                                   "changed_share": 0.0175}]},
        "licences": {"model": "apache-2.0", "sources": {"python3.11-doc": "PSF-2.0", "kicad-doc-zh": "CC-BY-3.0"},
                     "declared_in": "data/licences/sample-crawl.yaml"},
    }
    return made | changes


def lines(text: str) -> set[str]:
    return set(text.splitlines())


def test_the_front_matter_is_yaml_hugging_face_reads():
    text, _ = render_card(inputs())
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["license"] == "apache-2.0" and front["language"] == ["en", "zh"]
    assert front["library_name"] == "transformers" and "lm-assets" in front["tags"] and "gguf" in front["tags"]
    results = {r["dataset"]["type"]: r["metrics"][0]["value"] for r in front["model-index"][0]["results"]}
    assert results == {"mmlu": 0.2388, "hellaswag": 0.125}  # only what was scored
    from huggingface_hub import ModelCard  # the hub's own reader of the card

    card = ModelCard(text).data
    assert card.license == "apache-2.0" and card.library_name == "transformers"
    assert [(r.dataset_type, r.metric_value) for r in card.eval_results] == [("mmlu", 0.2388), ("hellaswag", 0.125)]


def test_scores_stand_beside_their_chance_levels():
    text, _ = render_card(inputs())
    assert "| MMLU | 0.2388 | 0.2411 | – | 0.1797–0.2979 | 469 | 5 | 3 of 57 subjects |" in lines(text)
    assert "| HellaSwag | 0.125 | 0.375 | 0.2500 | -0.2093–0.7093 | 8 | 0 | shipped sample, not the release |" in lines(text)
    assert "| ARC-Easy | not materialized |  |  |  |  |  |  |" in lines(text)


def test_data_shows_drops_by_rule_duplicates_decontamination_and_tokens():
    text, _ = render_card(inputs())
    assert "Curation read 376 documents from 3 shards and dropped 23 of them, by rule:" in text
    assert "| classifier:below_threshold | 20 |" in lines(text) and "| langid:lang:ja | 3 |" in lines(text)
    assert "of 343 curated documents 313 kept; 16 exact and 14 near duplicates removed" in text
    assert "2 shards): 308 of 313 documents kept" in text
    assert "| mmlu | 4 | 857,481 |" in lines(text) and "| ceval | 1 | – |" in lines(text)
    assert "800,812 tokens in 3,017 train and 99 val sequences of 257 tokens" in text
    assert "| lang:zh | 0.157 | 0.157 |" in lines(text)
    assert "_`tokenizer`: not materialized._" in lines(text)


def test_training_summarises_the_curves_and_the_saved_checkpoint():
    text, _ = render_card(inputs())
    assert "Saved at step 40: train loss 6.6721, val loss 7.1232, 9.3 MiB; 604,480 parameters" in text
    for row in ("| first loss | 8.303 |", "| last loss | 6.672 |", "| lowest loss | 6.453 at step 36 |",
                "| val loss | 7.123 |", "| steps | 40 |", "| tokens | 40,960 |", "| started from | random initialization |"):
        assert row in lines(text), row


def test_safety_bias_and_variant_costs():
    text, _ = render_card(inputs())
    assert "| refusal of harmful requests | 0.0625 | 0.125 | 0 |" in lines(text)
    assert "Refusal is not meaningful for a base checkpoint" in text
    assert "CrowS-Pairs (14 pairs): pct_stereotype 0.5714 (no preference: pct_stereotype 0.5)" in text
    assert "_`bbq_score`: not materialized._" in lines(text)
    assert "| gguf-q8_0 | 750,400 | 0.2765 | not measured | 2422 | 0.00007 | 0 |" in lines(text)
    assert "| int8 | 2,452,436 | 0.9037 | 573.2 (export 758.4) | 2421 | -0.00048 | 0.0175 |" in lines(text)
    assert "- int8: embeddings kept in float32" in lines(text)


def test_licences_as_declared_and_none_declared_said_so():
    text, states = render_card(inputs())
    assert "As declared in `data/licences/sample-crawl.yaml`:" in text and "| kicad-doc-zh | CC-BY-3.0 |" in lines(text)
    assert states["Data licences"] == "complete"
    text, states = render_card(inputs(licences={}))
    assert "No licences of the data sources were declared" in text and states["Data licences"] == "with gaps"
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["license"] == "other" and front["license_name"] == "undeclared"


def test_nothing_materialized_invents_nothing():
    text, states = render_card({"checkpoint": "sft-step_00000004"})
    assert set(states.values()) == {"with gaps"}
    assert "model-index" not in text
    for asset in ("curation_summary", "dedup_clusters", "decontaminated_shard", "perplexity", "safety_score",
                  "compressed_checkpoint", "humaneval_score"):
        assert f"_`{asset}`: not materialized._" in lines(text), asset
    assert not any(ch.isdigit() for line in text.split("---\n", 2)[2].splitlines()
                   if "not materialized" not in line and not line.startswith("#") for ch in line.replace("sft-step_00000004", ""))


def test_helpers_read_tables_captions_and_export_folders():
    assert markdown_rows("intro\n| a | b |\n|---|---|\n| 1 | x |") == [{"a": "1", "b": "x"}]
    assert first_loss(CURVES) == "8.303" and first_loss("no caption") is None
    assert checkpoint_from_export("/s/checkpoints/sft/step_00000040/hf") == "sft-step_00000040"
    assert checkpoint_from_export(None) is None
