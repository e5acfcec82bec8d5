"""LoRA adapters (lm_assets/training/lora.py): PEFT loads our adapter on our HF export and gives our logits;
the merged export loads in transformers alone; only the adapter trains."""

import json
import os

import pytest
import torch

from lm_assets.training.config import from_preset
from lm_assets.training.export import export_hf, export_peft_adapter
from lm_assets.training.lora import LoRAConfig, LoRALinear, adapter_state_dict, apply_lora, merged_state_dict
from lm_assets.training.model import Transformer

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


def _tensor_parallel_rank(rank: int, world: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from lm_assets.training.parallel import ColumnParallelLinear, RowParallelLinear

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    w1, w2, b1, b2 = torch.randn(16, 8), torch.randn(8, 16), torch.randn(16, 4), torch.randn(8, 4)
    x = torch.randn(3, 8)
    lora = LoRAConfig(rank=4, alpha=8)

    def pair(first, second):
        first, second = LoRALinear(first, lora, torch.Generator().manual_seed(1)), LoRALinear(second, lora, torch.Generator().manual_seed(2))
        return first, second

    group = dist.new_group(list(range(world)))
    column, row = ColumnParallelLinear(8, 16, group), RowParallelLinear(16, 8, group)
    column.load_full_weight(w1)
    row.load_full_weight(w2)
    column, row = pair(column, row)
    with torch.no_grad():
        column.lora_B.copy_(b1.chunk(world, 0)[rank])
        row.lora_B.copy_(b2)
    y = row(column(x))
    (y * torch.arange(1.0, 9.0)).sum().backward()
    grads = [column.lora_A.grad, column.lora_B.grad, row.lora_A.grad, row.lora_B.grad]
    gathered = [[torch.empty_like(g) for _ in range(world)] for g in grads]
    for g, into in zip(grads, gathered):
        dist.all_gather(into, g.contiguous())
    if rank == 0:
        first, second = pair(torch.nn.Linear(8, 16, bias=False), torch.nn.Linear(16, 8, bias=False))
        with torch.no_grad():
            first.base.weight.copy_(w1)
            second.base.weight.copy_(w2)
            first.lora_B.copy_(b1)
            second.lora_B.copy_(b2)
        ref = second(first(x))
        (ref * torch.arange(1.0, 9.0)).sum().backward()
        whole = [gathered[0][0], torch.cat(gathered[1], 0), torch.cat(gathered[2], 1), gathered[3][0]]
        expected = [first.lora_A.grad, first.lora_B.grad, second.lora_A.grad, second.lora_B.grad]
        torch.save({"output": float((y - ref).detach().abs().max()),
                    "grads": [float((a - b).abs().max() / b.abs().max()) for a, b in zip(whole, expected)],
                    "replicated": [float((g[0] - g[1]).abs().max()) for g in (gathered[0], gathered[3])]}, out)
    dist.destroy_process_group()


def test_adapters_on_tensor_parallel_layers_equal_one_device(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path / "result.pt")
    mp.spawn(_tensor_parallel_rank, args=(2, port, out), nprocs=2, join=True)
    result = torch.load(out)
    assert result["output"] <= 1e-5
    assert max(result["grads"]) <= 1e-6, result["grads"]  # relative to the largest gradient
    assert max(result["replicated"]) == 0.0  # whole A (column) and whole B (row) get the same gradient on every rank
