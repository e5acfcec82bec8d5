"""Text generation from a checkpoint with a key/value cache, on our own `lm_assets.training.model.Transformer`.

    gen = generate(em.model, [em.encode("The capital of France is")], max_new_tokens=32,
                   eos_id=em.tokenizer.eos_id())
    gen.tokens[0]                                      # the continuation's ids

The prompts are prefilled in one forward pass, then each new token costs one forward pass of one
position. Each layer keeps its keys and values (after RoPE) in tensors preallocated to
`[batch, kv_heads, slots, head_dim]`; a query head h reads kv head h // group, as in the model. The
layers' own weights and the model's ops do the work (`q/k/v/o_proj`, `kernels.rope` on the layer's
RoPE tables, `kernels.attention`, the norms, `mlp`, `head`), so the logits are those of `model(ids)` on the whole sequence.

Batches: prompts of different lengths are left-padded. Every row has its own RoPE positions (a
prompt's first token is at position 0 whatever its padding) and its queries attend only to its own
tokens, so a prompt's continuation does not depend on the rest of the batch, except that sampling
draws from one generator for the whole batch in row order.

Decoding: greedy (argmax, the first on ties) or sampling with `temperature`, then `top_k`, then
`top_p` (the smallest set of most likely tokens whose probability reaches `top_p`), the order of
transformers' logits processors. A continuation stops after `max_new_tokens` or at its first
`eos_id`, which it includes, as `transformers.generate` does.

Context: prompt and continuation together stay within the model's `max_seq_len`. A prompt longer
than `max_seq_len - max_new_tokens` keeps its last tokens (lm-evaluation-harness's `generate_until`
cuts its contexts from the left the same way); `Generation.truncated` says which were cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from lm_assets.training import kernels
from lm_assets.training.model import Attention, Transformer


@dataclass
class Generation:
    """What `generate` made, one entry per prompt in the order given."""

    tokens: list[list[int]]  # the continuation's ids, ending with EOS when it stopped there
    stopped_at_eos: list[bool]
    prompt_lengths: list[int]  # tokens of each prompt the model saw, after any truncation
    truncated: list[bool]
    # With output_logits: the fp32 logits `[batch, vocab]` each new token was chosen from, one per step
    # (before temperature or filtering; rows that had stopped hold logits of a padding token).
    logits: list[torch.Tensor] = field(default_factory=list)


class KVCache:
    """Every layer's keys and values, `[batch, kv_heads, slots, head_dim]`, filled left to right."""

    def __init__(self, model: Transformer, batch: int, slots: int):
        weight = model.embed.weight
        kv_heads = model.cfg.n_kv_heads
        shape = (batch, kv_heads, slots, model.cfg.head_dim)
        self.keys = [weight.new_zeros(shape) for _ in model.layers]
        self.values = [weight.new_zeros(shape) for _ in model.layers]
        self.attendable = torch.zeros(batch, slots, dtype=torch.bool, device=weight.device)
        self.length = 0

    @property
    def slots(self) -> int:
        return self.attendable.size(1)


def cached_attention(attn: Attention, x: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor,
                     values: torch.Tensor, start: int, mask: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """`attn` on `x [B, T, dim]` at RoPE `positions [B, T]`: its keys and values go into the cache at
    slots `start .. start + T - 1`, and its queries attend to the slots `mask [B, 1, T, start + T]` allows."""
    B, T, _ = x.shape
    q = attn.q_proj(x).view(B, T, -1, attn.head_dim).transpose(1, 2)
    k = attn.k_proj(x).view(B, T, -1, attn.head_dim).transpose(1, 2)
    v = attn.v_proj(x).view(B, T, -1, attn.head_dim).transpose(1, 2)
    cos, sin = attn.rope_cos[positions].to(q.dtype), attn.rope_sin[positions].to(q.dtype)
    q, k = kernels.rope(q, k, cos, sin, attn.kernels.rope)
    end = start + T
    keys[:, :, start:end], values[:, :, start:end] = k, v
    y = kernels.attention(q, keys[:, :, :end], values[:, :, :end], mask, attn.kernels.attention)
    return attn.o_proj(y.transpose(1, 2).reshape(B, T, -1))


def cached_forward(model: Transformer, cache: KVCache, ids: torch.Tensor, positions: torch.Tensor,
                   real: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """Logits `[B, T, vocab]` of `ids [B, T]` placed after what `cache` holds, at RoPE `positions [B, T]`.

    `real [B, T]` is False at padding: no later query attends to a padding token. A padding query
    attends to itself only, which keeps its softmax finite; its output is never read."""
    B, T = ids.shape
    start, end = cache.length, cache.length + T
    if end > cache.slots:
        raise ValueError(f"the cache holds {cache.slots} tokens, {end} asked")
    cache.attendable[:, start:end] = real
    query_slots = torch.arange(start, end, device=ids.device)[:, None]
    key_slots = torch.arange(end, device=ids.device)[None, :]
    mask = ((key_slots <= query_slots) & cache.attendable[:, None, :end]) | (key_slots == query_slots)
    mask = mask[:, None]  # [B, 1, T, end], broadcast over heads
    h = model.embed(ids)
    for layer, keys, values in zip(model.layers, cache.keys, cache.values, strict=True):
        h = h + cached_attention(layer.attn, layer.attn_norm(h), positions, keys, values, start, mask)
        h = h + layer.mlp(layer.mlp_norm(h))
    cache.length = end
    return model.head(h)


def next_token_scores(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """`logits [B, vocab]` divided by `temperature`, with the tokens outside top-k and top-p set to -inf."""
    scores = logits.float() / temperature
    if top_k is not None and top_k < scores.size(-1):
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        probs = sorted_scores.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # probability of the more likely tokens
        drop = before >= top_p
        drop[:, 0] = False
        scores = scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return scores


def check_settings(max_new_tokens: int, max_seq_len: int, do_sample: bool, temperature: float, top_k: int | None,
                   top_p: float | None) -> None:  # fmt: skip
    if not 1 <= max_new_tokens < max_seq_len:
        raise ValueError(f"max_new_tokens must be in [1, {max_seq_len - 1}] for a context of {max_seq_len}, got {max_new_tokens}")
    if do_sample and temperature <= 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature} (greedy: do_sample=False)")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


@torch.inference_mode()
def generate(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    eos_id: int | None = None,
    pad_id: int = 0,
    output_logits: bool = False,
) -> Generation:
    """Continue each prompt (token ids, at least one each) by up to `max_new_tokens` tokens, greedy or
    sampled (see the module docstring). Sampling with the same `seed` gives the same tokens."""
    max_seq_len = model.cfg.max_seq_len
    check_settings(max_new_tokens, max_seq_len, do_sample, temperature, top_k, top_p)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    keep = max_seq_len - max_new_tokens
    rows = [list(p)[-keep:] for p in prompts]
    lengths = [len(r) for r in rows]
    device = model.embed.weight.device
    B, width = len(rows), max(lengths)

    ids = torch.full((B, width), pad_id, dtype=torch.long, device=device)
    real = torch.zeros(B, width, dtype=torch.bool, device=device)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long, device=device)
        real[i, width - len(row):] = True
    positions = (real.long().cumsum(dim=1) - 1).clamp(min=0)
    next_position = torch.tensor(lengths, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(seed) if do_sample else None

    cache = KVCache(model, B, width + max_new_tokens)
    logits = cached_forward(model, cache, ids, positions, real)[:, -1]
    tokens: list[list[int]] = [[] for _ in rows]
    stopped = [False] * B
    step_logits = []
    for step in range(max_new_tokens):
        if output_logits:
            step_logits.append(logits.float().clone())
        if do_sample:
            probs = next_token_scores(logits, temperature, top_k, top_p).softmax(dim=-1)
            chosen = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            chosen = logits.argmax(dim=-1)
        for i, token in enumerate(chosen.tolist()):
            if not stopped[i]:
                tokens[i].append(token)
                stopped[i] = token == eos_id
        if all(stopped) or step == max_new_tokens - 1:
            break
        fed = torch.tensor([pad_id if s else t[-1] for s, t in zip(stopped, tokens)], device=device)[:, None]
        logits = cached_forward(model, cache, fed, next_position[:, None], torch.ones_like(fed, dtype=torch.bool))[:, -1]
        next_position += 1
    return Generation(
        tokens=tokens,
        stopped_at_eos=stopped,
        prompt_lengths=lengths,
        truncated=[len(r) < len(p) for r, p in zip(rows, prompts)],
        logits=step_logits,
    )


__all__ = ["Generation", "KVCache", "cached_forward", "check_settings", "generate", "next_token_scores"]
