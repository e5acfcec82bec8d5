"""LoRA adapters (training/lora.py): PEFT loads our adapter on our HF export and gives our logits;
the merged export loads in transformers alone; only the adapter trains."""

import json
import os

import pytest
import torch

from training.config import from_preset
from training.export import export_hf, export_peft_adapter
from training.lora import LoRAConfig, LoRALinear, adapter_state_dict, apply_lora, merged_state_dict
from training.model import Transformer

os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(1)
VOCAB = 320
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def adapted(cfg, lora: LoRAConfig):
    model = Transformer(cfg, seed=3)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    counts = apply_lora(model, lora, seed=5)
    with torch.no_grad():  # B starts at zero; give it values so the adapter changes the logits
        g = torch.Generator().manual_seed(11)
        for name, p in model.named_parameters():
            if name.endswith("lora_B"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval(), base, counts


@pytest.fixture(scope="module")
def cfg():
    return from_preset("tiny", VOCAB, rope_theta=5_000.0, norm_eps=1e-6)


def test_a_new_adapter_leaves_the_model_unchanged_and_only_it_trains(cfg):
    model = Transformer(cfg, seed=3).eval()
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    before = model(ids)
    counts = apply_lora(model, LoRAConfig(rank=8, alpha=16, target_modules=ALL))
    assert torch.equal(model(ids), before)
    assert counts["adapted_layers"] == 7 * cfg.n_layers
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all(n.endswith(("lora_A", "lora_B")) for n in trained)
    assert counts["trained_parameters"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    model.train()
    model(ids).sum().backward()
    assert all(p.grad is None for n, p in model.named_parameters() if n not in trained)


def test_rank_8_trains_under_5_percent_of_a_small_model():
    cfg = from_preset("tiny", 4096)
    counts = apply_lora(Transformer(cfg, seed=0), LoRAConfig(rank=8, target_modules=ALL))
    assert counts["trained_share"] < 0.05


def test_peft_loads_our_adapter_on_our_export_and_gives_our_logits(cfg, tmp_path):
    peft = pytest.importorskip("peft")
    from transformers import LlamaForCausalLM

    lora = LoRAConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj", "o_proj", "down_proj", "gate_proj"])
    model, base, _ = adapted(cfg, lora)
    export_hf(base, cfg, tmp_path / "base")
    export_peft_adapter(adapter_state_dict(model), lora.rank, lora.alpha, lora.dropout, lora.target_modules,
                        tmp_path / "adapter", base_model=tmp_path / "base")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4

    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model(ids)
        hf = LlamaForCausalLM.from_pretrained(tmp_path / "base", torch_dtype=torch.float32).eval()
        plain = hf(ids).logits
        theirs = peft.PeftModel.from_pretrained(hf, tmp_path / "adapter").eval()(ids).logits
    assert (ours - plain).abs().max() > 1e-3  # the adapter matters
    assert (ours - theirs).abs().max() <= 1e-5

    export_hf(merged_state_dict(model.state_dict(), lora), cfg, tmp_path / "merged")
    with torch.no_grad():
        merged = LlamaForCausalLM.from_pretrained(tmp_path / "merged", torch_dtype=torch.float32).eval()(ids).logits
    assert (ours - merged).abs().max() <= 1e-5


def test_our_lora_forward_equals_peft_lora_layer_for_the_same_weights():
    from peft import LoraConfig
    from peft.tuners.lora import Linear as PeftLoraLinear

    base = torch.nn.Linear(24, 40, bias=False)
    ours = LoRALinear(base, LoRAConfig(rank=6, alpha=12), torch.Generator().manual_seed(0))
    theirs = PeftLoraLinear(torch.nn.Linear(24, 40, bias=False), "default",
                            LoraConfig(r=6, lora_alpha=12), r=6, lora_alpha=12)
    with torch.no_grad():
        theirs.base_layer.weight.copy_(base.weight)
        ours.lora_B.normal_()
        theirs.lora_A["default"].weight.copy_(ours.lora_A)
        theirs.lora_B["default"].weight.copy_(ours.lora_B)
    x = torch.randn(3, 5, 24)
    assert torch.allclose(ours(x), theirs(x), atol=1e-6, rtol=0)


def test_bad_adapter_settings_are_refused_before_training(cfg):
    for bad, message in ((LoRAConfig(rank=0), "rank"), (LoRAConfig(dropout=1.0), "dropout"),
                         (LoRAConfig(target_modules=["wq"]), "target_modules")):
        with pytest.raises(ValueError, match=message):
            apply_lora(Transformer(cfg, seed=0), bad)
