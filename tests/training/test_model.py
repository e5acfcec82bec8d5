"""The Llama-style model in lm_assets/training/model.py and its config (lm_assets/training/config.py)."""

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lm_assets.training.config import PRESETS, ModelConfig, apply_overrides, from_preset, override, swiglu_hidden
from lm_assets.training.model import (
    IGNORE_INDEX,
    Block,
    Embedding,
    Head,
    Transformer,
    apply_rope,
    cross_entropy,
    flops_per_token,
    num_params,
    rope_tables,
)

torch.set_num_threads(1)
VOCAB = 300


@pytest.fixture(scope="module")
def cfg() -> ModelConfig:
    return from_preset("tiny", VOCAB)


@pytest.fixture(scope="module")
def model(cfg) -> Transformer:
    return Transformer(cfg, seed=0).eval()


def ids(batch: int, seq: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------


def test_presets_and_overrides():
    tiny = from_preset("tiny", 512)
    assert (tiny.dim, tiny.n_heads, tiny.n_kv_heads, tiny.head_dim, tiny.vocab_size) == (64, 4, 2, 16, 512)
    assert from_preset("125m", 32_000).ffn_hidden == swiglu_hidden(768) == 2048
    assert from_preset("350m", 32_000).ffn_hidden == swiglu_hidden(1024) == 2816
    assert from_preset("tiny", 512, n_layers=3).n_layers == 3
    assert from_preset("tiny", 512, dim=128).ffn_hidden == swiglu_hidden(128, 16)  # re-derived
    assert ModelConfig(dim=64, n_heads=4, multiple_of=32).n_kv_heads == 4
    with pytest.raises(KeyError, match="unknown preset"):
        from_preset("7b", 512)
    with pytest.raises(ValueError, match="n_kv_heads"):
        ModelConfig(dim=64, n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="n_heads"):
        ModelConfig(dim=64, n_heads=5)


def test_override_parses_the_declared_types():
    @dataclass
    class Train:
        model: ModelConfig
        lr: float = 3e-4
        stages: tuple[int, ...] = (1,)
        name: str | None = None

    cfg = Train(model=from_preset("tiny", 300))
    cfg = apply_overrides(cfg, ["lr=1e-3", "model.n_layers=3", "model.tie_embeddings=true", "stages=2,4",
                                "name=run-1", "model.rope_theta=500_000"])  # fmt: skip
    assert cfg.lr == 1e-3 and cfg.model.n_layers == 3 and cfg.model.tie_embeddings is True
    assert cfg.stages == (2, 4) and cfg.name == "run-1" and cfg.model.rope_theta == 500_000.0
    assert override(cfg, "name=none").name is None
    assert override(cfg, "model.dim=128").model.ffn_hidden == swiglu_hidden(128, 16)
    assert override(cfg, "model.n_kv_heads=None").model.n_kv_heads == 4
    for bad, err in (("lr", ValueError), ("nope=1", KeyError), ("model.n_layers=x", ValueError),
                     ("model.tie_embeddings=maybe", ValueError), ("lr.x=1", TypeError)):  # fmt: skip
        with pytest.raises(err):
            override(cfg, bad)


# ---------------------------------------------------------------------------------------------
# Forward pass
# ---------------------------------------------------------------------------------------------


def test_shapes_and_building_blocks(cfg, model):
    x = ids(2, 24)
    logits = model(x)
    assert logits.shape == (2, 24, VOCAB) and logits.dtype == torch.float32
    # The model is exactly the stack Embedding -> Blocks -> Head (what a pipeline wrapper builds).
    stack = nn.Sequential(model.embed, *model.layers, model.head)
    assert isinstance(model.embed, Embedding) and isinstance(model.head, Head)
    torch.testing.assert_close(stack(x), logits, rtol=0, atol=0)
    with pytest.raises(ValueError, match="max_seq_len"):
        model(ids(1, cfg.max_seq_len + 1))


def test_causal_masking(model):
    x = ids(2, 32)
    changed = x.clone()
    changed[:, 20] = (changed[:, 20] + 1) % VOCAB
    with torch.no_grad():
        a, b = model(x), model(changed)
    torch.testing.assert_close(a[:, :20], b[:, :20], rtol=0, atol=1e-6)
    assert (a[:, 20:] - b[:, 20:]).abs().amax(dim=-1).min() > 0  # every later position sees the change


def test_grouped_query_attention_shapes_and_equivalence(cfg, model):
    attn = model.layers[0].attn
    hd = cfg.head_dim
    assert attn.q_proj.weight.shape == (cfg.n_heads * hd, cfg.dim)
    assert attn.k_proj.weight.shape == attn.v_proj.weight.shape == (cfg.n_kv_heads * hd, cfg.dim)
    assert attn.o_proj.weight.shape == (cfg.dim, cfg.n_heads * hd)
    # GQA equals multi-head attention whose kv heads are copies: query head h uses kv head h // group.
    mha_cfg = from_preset("tiny", VOCAB, n_kv_heads=cfg.n_heads)
    mha = Transformer(mha_cfg, seed=None).eval()
    group = cfg.n_heads // cfg.n_kv_heads
    state = {}
    for name, tensor in model.state_dict().items():
        if name.endswith(("k_proj.weight", "v_proj.weight")):
            tensor = tensor.view(cfg.n_kv_heads, hd, cfg.dim).repeat_interleave(group, dim=0).reshape(-1, cfg.dim)
        state[name] = tensor
    mha.load_state_dict(state)
    x = ids(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(mha(x), model(x), rtol=1e-5, atol=1e-5)


def test_rope_scores_depend_on_relative_position_only():
    cos, sin = rope_tables(16, 64, 10_000.0)
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(16, generator=gen), torch.randn(16, generator=gen)

    def score(m, n):
        rq = apply_rope(q.view(1, 1, 1, 16), cos[m : m + 1], sin[m : m + 1])
        rk = apply_rope(k.view(1, 1, 1, 16), cos[n : n + 1], sin[n : n + 1])
        return (rq * rk).sum().item()

    assert score(5, 2) == pytest.approx(score(40, 37), rel=1e-5)
    assert score(0, 0) == pytest.approx(float(q @ k), rel=1e-5)  # position 0 is no rotation


# ---------------------------------------------------------------------------------------------
# Initialization and injectable linears
# ---------------------------------------------------------------------------------------------


def test_init_is_deterministic_and_independent_of_the_split(cfg, model):
    again = Transformer(cfg, seed=0)
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), name
    other = Transformer(cfg, seed=1)
    assert not torch.equal(other.layers[0].attn.q_proj.weight, model.layers[0].attn.q_proj.weight)
    # A pipeline stage building layer 1 alone gets the same weights as the whole model.
    block = Block(cfg, layer_id=1)
    block.init_weights(seed=0)
    for name, tensor in block.state_dict().items():
        assert torch.equal(tensor, model.layers[1].state_dict()[name]), name
    # Residual projections are scaled down; norms start at one.
    std = model.layers[0].mlp.down_proj.weight.std().item()
    assert std == pytest.approx(cfg.init_std / math.sqrt(2 * cfg.n_layers), rel=0.1)
    assert torch.equal(model.head.norm.weight, torch.ones(cfg.dim))


class ShardedLinear(nn.Module):
    """A tensor-parallel linear on one of `world` ranks, without communication: "column" keeps a slice
    of the output features, "row" a slice of the input features (its outputs are partial sums)."""

    def __init__(self, in_features, out_features, style, rank, world):
        super().__init__()
        self.style, self.rank, self.world = style, rank, world
        shape = (out_features // world, in_features) if style == "column" else (out_features, in_features // world)
        self.weight = nn.Parameter(torch.empty(shape))

    def load_full_weight(self, full):
        dim = 0 if self.style == "column" else 1
        self.weight.data.copy_(full.chunk(self.world, dim=dim)[self.rank])

    def forward(self, x):  # a row-parallel input is already this rank's slice (its heads, its MLP width)
        return F.linear(x, self.weight)


def test_linear_factory_allows_tensor_parallel_linears(cfg):
    styles = {}

    def recording(in_features, out_features, style):
        styles.setdefault(style, []).append((in_features, out_features))
        return nn.Linear(in_features, out_features, bias=False)

    Block(cfg, 0, linear_factory=recording)
    assert len(styles["column"]) == 5 and len(styles["row"]) == 2  # q, k, v, gate, up | o, down

    full = Block(cfg, 0)
    full.init_weights(seed=3)
    shards = [Block(cfg, 0, lambda i, o, s, r=r: ShardedLinear(i, o, s, r, 2)) for r in range(2)]
    for shard in shards:
        shard.init_weights(seed=3)
    x = torch.randn(2, 12, cfg.dim, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        # Each rank runs half the heads (and half the MLP width); the row-parallel outputs sum to the full one.
        torch.testing.assert_close(sum(s.attn(x) for s in shards), full.attn(x), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(sum(s.mlp(x) for s in shards), full.mlp(x), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Counting and loss
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [{}, {"tie_embeddings": True}, {"n_kv_heads": 4}, {"n_layers": 3}])
def test_num_params_matches_the_model(overrides):
    cfg = from_preset("tiny", VOCAB, **overrides)
    model = Transformer(cfg, seed=None)
    assert num_params(cfg) == sum(p.numel() for p in model.parameters())
    assert num_params(cfg, embedding=False) == num_params(cfg) - (0 if cfg.tie_embeddings else VOCAB * cfg.dim)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_num_params_of_the_presets(preset):
    cfg = from_preset(preset, 32_000)
    with torch.device("meta"):
        model = Transformer(cfg, seed=None)
    assert num_params(cfg) == sum(p.numel() for p in model.parameters())
    # 6N + 12 L H Q T, with N the matmul weights (the output projection, not the embedding lookup).
    n = num_params(cfg) - cfg.vocab_size * cfg.dim - (2 * cfg.n_layers + 1) * cfg.dim
    assert flops_per_token(cfg, 2048) == 6 * n + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * 2048


def test_loss_ignores_padding_targets(model):
    x = ids(2, 16)
    targets = ids(2, 16, seed=1)
    targets[0, 10:] = IGNORE_INDEX
    targets[1, :3] = IGNORE_INDEX
    with torch.no_grad():
        logits = model(x)
        loss = cross_entropy(logits, targets)
        kept = targets != IGNORE_INDEX
        manual = F.cross_entropy(logits[kept], targets[kept])
        torch.testing.assert_close(loss, manual)
        noisy = logits.clone()
        noisy[~kept] = torch.randn_like(noisy[~kept]) * 100  # logits at ignored positions do not matter
        torch.testing.assert_close(cross_entropy(noisy, targets), loss)
        total = cross_entropy(logits, targets, reduction="sum")
        torch.testing.assert_close(total / kept.sum(), loss)
        torch.testing.assert_close(model.loss(x, targets), loss)


def test_a_few_adamw_steps_reduce_the_loss(cfg):
    torch.manual_seed(0)
    model = Transformer(cfg, seed=0)
    x = ids(4, 32, seed=2)
    targets = torch.roll(x, -1, dims=1)
    targets[:, -1] = IGNORE_INDEX
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    losses = []
    for _ in range(25):
        loss = model.loss(x, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(math.log(VOCAB), rel=0.05)  # near-uniform at init
    assert losses[-1] < 0.6 * losses[0]
