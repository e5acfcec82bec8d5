"""dpo_run as an asset: a fine-tuned checkpoint aligned on the shipped preference pairs through the training
program and Pipes, in full and with a LoRA adapter; its checkpoints become `dpo-step_N` partitions, exported
for HF with the chat template, and evaluation's export of any of them is the model the run trained."""

import json
import os

import dagster as dg
import pytest
import torch

from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
from lm_assets.defs.common.partitions import checkpoint_partitions
from lm_assets.defs.common.resources import LandingResource, StorageResource, s3_resource_from_env
from lm_assets.defs.sft.assets import SHIPPED_PREFERENCES, dpo_run_and_checkpoint, preference_data, preference_dataset
from lm_assets.defs.training.assets import TrainingLauncher
from lm_assets.sft.chat import CHAT_TEMPLATE, chat_tokenizer
from lm_assets.storage.layout import SFT_KEYS, checkpoint_key, checkpoint_run_folder
from lm_assets.storage.store import Storage
from lm_assets.training.config import from_preset
from lm_assets.training.export import export_hf
from lm_assets.training.model import Transformer

pytestmark = pytest.mark.slow
os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture
def aligned_inputs(tmp_path):
    """An instance with one fine-tuned checkpoint (`sft-step_00000001`) and the shipped pairs packed."""
    shipped = [json.loads(line) for line in open(SHIPPED_PREFERENCES, encoding="utf-8")]
    root = tmp_path / "storage"
    store = Storage(str(root))
    tok = train_tokenizer([json.dumps(r, ensure_ascii=False) for r in shipped] * 4,
                          TokenizerConfig(vocab_size=1200, num_threads=1, hard_vocab_limit=False), tmp_path / "tok")  # fmt: skip
    store.write_bytes("tokenizer/tokenizer.model", tok.model)
    chat_model, _ = chat_tokenizer(tok.model)
    store.write_bytes(SFT_KEYS["tokenizer"], chat_model)  # what sft_dataset leaves: the tokenizer and its template
    store.write_bytes(SFT_KEYS["chat_template"], CHAT_TEMPLATE.encode())
    from lm_assets.corpus.tokens.tokenizer import load_tokenizer

    cfg = from_preset("tiny", load_tokenizer(chat_model).get_piece_size(), max_seq_len=320)
    export_hf(Transformer(cfg, seed=3).eval(), cfg, root / checkpoint_run_folder("sft") / "step_00000001" / "hf",
              tokenizer_model_path=store.local_path(SFT_KEYS["tokenizer"]))  # fmt: skip
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(checkpoint_partitions.name, [checkpoint_key("sft", "step_00000001")])
    storage = StorageResource(root=str(root), s3=s3_resource_from_env())
    landing = LandingResource(root=str(tmp_path / "landing"), s3=s3_resource_from_env())
    assert dg.materialize([preference_data], instance=instance, resources={"storage": storage, "landing": landing}).success
    assert dg.materialize([preference_dataset], instance=instance, resources={"storage": storage},
                          run_config={"ops": {"preference_dataset": {"config": {"seq_len": 320}}}}).success  # fmt: skip
    return instance, storage, store


def align(instance, storage, config: dict) -> dict:
    run = dg.materialize([dpo_run_and_checkpoint], instance=instance, resources={
        "storage": storage, "training_launcher": TrainingLauncher(s3=s3_resource_from_env()),
        "pipes_subprocess_client": dg.PipesSubprocessClient()}, run_config={"ops": {"dpo_run": {"config": config}}})  # fmt: skip
    assert run.success
    return {m.asset_key.path[-1]: m.metadata for m in run.asset_materializations_for_node("dpo_run")}


def test_dpo_aligns_the_fine_tuned_checkpoint_and_reports_the_held_back_pairs(aligned_inputs):
    from transformers import AutoTokenizer

    instance, storage, store = aligned_inputs
    meta = align(instance, storage, {"steps": 12, "lr": 3e-3, "micro_batch_size": 4, "warmup_steps": 2, "save_every": 6})
    run, ckpt = meta["dpo_run"], meta["dpo_checkpoint"]
    assert run["objective"].value == "dpo" and run["dpo"].value["beta"] == 0.1
    assert run["init_from"].value["vocab_rows_added"] == 0  # the fine-tuned checkpoint has the chat markers
    assert run["val_reward_accuracy_start"].value == 0.0 and run["val_kl_start"].value == pytest.approx(0, abs=1e-4)
    assert run["val_reward_accuracy"].value > run["val_reward_accuracy_start"].value
    assert run["val_reward_margin"].value > 0 and run["val_kl"].value > 0
    assert "| end |" in run["dpo_validation"].value and "reward margin" in run["reward_curve"].value
    partitions = instance.get_dynamic_partitions(checkpoint_partitions.name)
    assert {checkpoint_key("dpo", "step_00000006"), checkpoint_key("dpo", "step_00000012")} <= set(partitions)
    hf = AutoTokenizer.from_pretrained(ckpt["hf_export"].value)
    assert hf.chat_template == CHAT_TEMPLATE

    from lm_assets.defs.evaluation.common import hf_export

    earlier = hf_export(store, checkpoint_key("dpo", "step_00000006"))  # made now, as evaluation makes it
    assert (earlier / "model.safetensors").exists() and json.loads((earlier / "config.json").read_text())["vocab_size"] == hf.vocab_size


def test_dpo_with_a_lora_adapter_trains_and_saves_the_adapter_only(aligned_inputs):
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    instance, storage, store = aligned_inputs
    meta = align(instance, storage, {"run_name": "dpo-lora", "steps": 8, "lr": 2e-2, "micro_batch_size": 4,
                                     "warmup_steps": 2, "adapter": "lora", "reference": "adapter-disabled"})  # fmt: skip
    run, ckpt = meta["dpo_run"], meta["dpo_checkpoint"]
    assert run["adapter"].value["type"] == "lora" and run["trained_share"].value < 0.05
    assert run["trained_parameters"].value == f"{run['adapter'].value['trained_parameters']:,}"
    assert run["memory_saved_mib"].value > 0
    assert run["min_loss"].value < 0.65 and run["val_kl"].value > 0  # the adapter learns, and moves off its base
    base = store.local_path(checkpoint_run_folder("sft")) / "step_00000001" / "hf"
    peft = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base), ckpt["peft_adapter"].value).eval()
    merged = LlamaForCausalLM.from_pretrained(ckpt["hf_export"].value).eval()
    ids = torch.arange(5, 60).view(1, -1)
    with torch.no_grad():
        assert torch.allclose(peft(ids).logits, merged(ids).logits, atol=1e-5)
