"""Log-likelihood scoring of continuations, as lm-evaluation-harness's HF causal-LM backend does it.

Encoding a request (`encode_pair`, lm-eval's `HFLM._encode_pair`): trailing whitespace of the context
moves to the front of the continuation; then `whole = encode(context + continuation)`,
`context_enc = encode(context)` and `continuation_enc = whole[len(context_enc):]`. An empty context
becomes the single token `prefix_token_id`.

Scoring a request (`HFLM._loglikelihood_tokens`): the model reads
`(context_enc + continuation_enc)[-(max_length + 1):][:-1]`, i.e. a context longer than the model's
`max_length` (its max_seq_len) is cut from the left; the log-softmax of the logits (in the model's
dtype) at the last `len(continuation_enc)` positions is gathered at the continuation tokens and
summed. Also returned, as lm-eval does: whether every continuation token is the argmax.

Multiple choice (`score_questions`): the log-likelihood of each continuation " A" ... " D" given the
prompt; `pred = argmax(ll)`, `pred_norm = argmax(ll / len(choice))` with `len` counting the
characters of the choice string as `doc_to_choice` gives it ("A": 1, so for MMLU and C-Eval
`acc_norm == acc`, as in lm-eval); `acc = [pred == gold]`. Ties go to the first choice (`np.argmax`).

Batching. What the model reads for each request is fixed by the rule above, so requests are first
turned into their input rows and then shared and packed:

- requests with the same input row share it: for a question whose four continuations are one token
  each, the four rows are all equal to the context, so one forward pass scores the question (the
  four answers are read off the last position's distribution);
- within a question (`groups`), a request whose row is a prefix of another's row is read from the
  longer row (causal attention: position t only sees tokens <= t), so multi-token answers cost one
  row per distinct answer, not per request;
- rows are sorted longest first and packed into batches of at most `max_batch_size` rows and
  `max_batch_tokens` (rows x padded length) tokens, right-padded; under causal attention the padding
  cannot reach the real positions;
- the output head and log-softmax run only at the positions that are scored.

Results agree with scoring each request alone with the full model to float rounding (padding and
batching change the matrix shapes the kernels see, hence the last bits); tests check this.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from lm_assets.evaluation.checkpoint import EvalModel
from lm_assets.evaluation.prompts import MCQuestion

DEFAULT_MAX_BATCH_TOKENS = 16_384
DEFAULT_MAX_BATCH_SIZE = 64
HEAD_CHUNK = 4_096  # scored positions per output-head call (bounds the [positions, vocab] logits)


def encode_pair(encode: Callable[[str], list[int]], context: str, continuation: str) -> tuple[list[int], list[int]]:
    """`(context_enc, continuation_enc)` exactly as lm-evaluation-harness's `_encode_pair`."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = encode(context + continuation)
    context_enc = encode(context)
    return context_enc, whole[len(context_enc) :]


def encode_many(
    em: EvalModel, items: Sequence[tuple[str, Sequence[str]]]
) -> list[list[tuple[list[int], list[int]]]]:
    """`encode_pair(context, c)` for each `(context, continuations)` item and each of its
    continuations, the context encoded once per item and all texts in one (multi-threaded) call."""
    texts: list[str] = []
    plans = []
    for context, continuations in items:
        if context == "":
            plans.append((None, len(texts), len(continuations)))
            texts.extend(continuations)
            continue
        n_spaces = len(context) - len(context.rstrip())
        moved = context[len(context) - n_spaces :]
        context = context[: len(context) - n_spaces]
        plans.append((len(texts), len(texts) + 1, len(continuations)))
        texts.append(context)
        texts.extend(context + moved + c for c in continuations)
    ids = em.encode_batch(texts) if texts else []
    out = []
    for ctx_at, first, n in plans:
        if ctx_at is None:  # lm-eval: an empty context is the prefix token alone
            out.append([([em.prefix_token_id], ids[first + k]) for k in range(n)])
        else:
            context_enc = ids[ctx_at]
            out.append([(context_enc, ids[first + k][len(context_enc) :]) for k in range(n)])
    return out


def encode_requests(em: EvalModel, context: str, continuations: Sequence[str]) -> list[tuple[list[int], list[int]]]:
    """`encode_pair` for several continuations of one context (the context encoded once)."""
    return encode_many(em, [(context, continuations)])[0]


@dataclass
class BatchStats:
    """What a `loglikelihood_tokens` call computed."""

    requests: int = 0
    rows: int = 0  # distinct input rows after sharing
    batches: int = 0
    tokens: int = 0  # real (unpadded) tokens the model read
    padded_tokens: int = 0
    seconds: float = 0.0


def hidden_states(model, ids: torch.Tensor) -> torch.Tensor:
    """The last layer's output `[B, T, dim]` (before the output head's norm and projection)."""
    h = model.embed(ids)
    for layer in model.layers:
        h = layer(h)
    return h


def _plan_rows(requests, max_length: int, groups, share: bool):
    """Input row of each request, shared rows, and where each request reads its scores."""
    inputs = []
    for i, (ctx, cont) in enumerate(requests):
        if len(ctx) == 0 or len(cont) == 0:
            raise ValueError(f"request {i}: context and continuation must both have tokens")
        if len(cont) > max_length:
            raise ValueError(f"request {i}: continuation of {len(cont)} tokens exceeds max_length {max_length}")
        full = list(ctx) + list(cont)
        inputs.append(tuple(full[-(max_length + 1) :][:-1]))
    group_of = (lambda i: ("request", i)) if groups is None else (lambda i: ("group", groups[i]))
    order = sorted(range(len(requests)), key=lambda i: -len(inputs[i]))
    rows: list[tuple[int, ...]] = []
    row_of_input: dict[tuple[int, ...], int] = {}
    group_rows: dict[Hashable, list[int]] = {}
    placement = [None] * len(requests)  # (row, first scored position)
    for i in order:
        inp = inputs[i]
        row = row_of_input.get(inp) if share else None
        if row is None and share:
            for r in group_rows.get(group_of(i), ()):
                if rows[r][: len(inp)] == inp:
                    row = r
                    break
        if row is None:
            row = len(rows)
            rows.append(inp)
            row_of_input.setdefault(inp, row)
            group_rows.setdefault(group_of(i), []).append(row)
        placement[i] = (row, len(inp) - len(requests[i][1]))
    return rows, placement


@torch.inference_mode()
def loglikelihood_tokens(
    em: EvalModel,
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    groups: Sequence[Hashable] | None = None,
    *,
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    share: bool = True,
    stats: BatchStats | None = None,
) -> list[tuple[float, bool]]:
    """`(loglikelihood, is_greedy)` of each `(context_enc, continuation_enc)` request.

    `groups` (one key per request, e.g. the question) lets requests of a group share a row when one
    row is a prefix of another; identical rows are shared regardless. `share=False` gives every
    request its own row (the plain, unshared computation).
    """
    start = time.perf_counter()
    model = em.model
    rows, placement = _plan_rows(requests, em.max_length, groups, share)
    by_row: list[list[int]] = [[] for _ in rows]
    for i, (row, _) in enumerate(placement):
        by_row[row].append(i)
    row_order = sorted(range(len(rows)), key=lambda r: (-len(rows[r]), rows[r]))
    results: list[tuple[float, bool] | None] = [None] * len(requests)
    stats = stats if stats is not None else BatchStats()
    stats.requests += len(requests)
    stats.rows += len(rows)

    at = 0
    while at < len(row_order):
        width = len(rows[row_order[at]])
        size = max(1, min(max_batch_size, max_batch_tokens // max(width, 1)))
        batch = row_order[at : at + size]
        at += len(batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        for b, r in enumerate(batch):
            ids[b, : len(rows[r])] = torch.tensor(rows[r], dtype=torch.long)
        hidden = hidden_states(model, ids.to(em.device))

        # Unique scored (batch row, position) pairs, then each request's indices into them.
        slot: dict[tuple[int, int], int] = {}
        flat_slots, flat_tokens, spans, members = [], [], [], []
        for b, r in enumerate(batch):
            for i in by_row[r]:
                first = placement[i][1]
                cont = requests[i][1]
                begin = len(flat_slots)
                for k, token in enumerate(cont):
                    key = (b, first + k)
                    if key not in slot:
                        slot[key] = len(slot)
                    flat_slots.append(slot[key])
                    flat_tokens.append(int(token))
                spans.append((begin, len(flat_slots)))
                members.append(i)
        positions = torch.tensor(list(slot), dtype=torch.long, device=hidden.device)
        selected = hidden[positions[:, 0], positions[:, 1]]
        slots_t = torch.tensor(flat_slots, dtype=torch.long, device=hidden.device)
        tokens_t = torch.tensor(flat_tokens, dtype=torch.long, device=hidden.device)
        values = torch.empty(len(flat_slots), dtype=hidden.dtype, device=hidden.device)
        hits = torch.empty(len(flat_slots), dtype=torch.bool, device=hidden.device)
        for s in range(0, selected.size(0), HEAD_CHUNK):
            logprobs = F.log_softmax(model.head(selected[s : s + HEAD_CHUNK]), dim=-1)
            if s == 0 and selected.size(0) <= HEAD_CHUNK:
                idx = slice(None)
                local = slots_t
            else:
                idx = ((slots_t >= s) & (slots_t < s + HEAD_CHUNK)).nonzero().squeeze(1)
                local = slots_t[idx] - s
            values[idx] = logprobs[local, tokens_t[idx]]
            hits[idx] = logprobs.argmax(dim=-1)[local] == tokens_t[idx]
        hits = hits.cpu()
        values = values.cpu()
        if all(e - b == 1 for b, e in spans):  # one-token continuations: no sums to take
            for (b, _), i, ll, hit in zip(spans, members, values.tolist(), hits.tolist()):
                results[i] = (float(ll), bool(hit))
        else:  # summed as lm-eval sums: a [len(continuation)] tensor's .sum()
            for (b, e), i in zip(spans, members):
                results[i] = (float(values[b:e].sum()), bool(hits[b:e].all()))

        stats.batches += 1
        stats.tokens += sum(len(rows[r]) for r in batch)
        stats.padded_tokens += len(batch) * width
    stats.seconds += time.perf_counter() - start
    return results  # type: ignore[return-value]


def loglikelihood(
    em: EvalModel, requests: Sequence[tuple[str, str]], **kwargs
) -> list[tuple[float, bool]]:
    """`(loglikelihood, is_greedy)` of each `(context, continuation)` string pair (lm-eval's
    `loglikelihood`); requests with the same context are grouped for sharing."""
    encoded = [pairs[0] for pairs in encode_many(em, [(ctx, [cont]) for ctx, cont in requests])]
    return loglikelihood_tokens(em, encoded, groups=[ctx for ctx, _ in requests], **kwargs)


def score_questions(
    em: EvalModel,
    questions: Sequence[MCQuestion],
    *,
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    share: bool = True,
    chunk_questions: int = 512,
    stats: BatchStats | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict]:
    """Score each question's continuations; one dict per question, in input order:

    `{"task", "subject", "index", "gold", "loglikelihoods": [float]*4, "is_greedy": [bool]*4,
      "pred", "pred_norm", "acc", "acc_norm", "context_tokens", "truncated"}`

    `truncated` marks a prompt cut from the left to fit `max_length`. Questions are encoded and
    scored `chunk_questions` at a time (memory stays bounded); `progress(done, total)` is called
    after each chunk.
    """
    stats = stats if stats is not None else BatchStats()
    out: list[dict] = []
    for lo in range(0, len(questions), chunk_questions):
        chunk = questions[lo : lo + chunk_questions]
        items = [q.items for q in chunk]
        flat = encode_many(em, [item for question in items for item in question])
        encoded, at = [], 0
        for question in items:  # each question's pairs, in choice order, whether it has one context or several
            encoded.append([pair for pairs in flat[at : at + len(question)] for pair in pairs])
            at += len(question)
        requests, groups = [], []
        for q_index, pairs in enumerate(encoded):
            requests.extend(pairs)
            groups.extend([q_index] * len(pairs))
        scores = loglikelihood_tokens(em, requests, groups, max_batch_tokens=max_batch_tokens,
                                      max_batch_size=max_batch_size, share=share, stats=stats)  # fmt: skip
        at = 0
        for q, pairs in zip(chunk, encoded):
            part = scores[at : at + len(pairs)]
            at += len(pairs)
            lls = [ll for ll, _ in part]
            lengths = np.array([float(len(c)) for c in q.choices])
            pred = int(np.argmax(lls))
            pred_norm = int(np.argmax(np.array(lls) / lengths))
            longest = max(len(ctx) + len(cont) for ctx, cont in pairs)
            out.append(
                {
                    "task": q.task,
                    "subject": q.subject,
                    "index": q.index,
                    "gold": q.gold,
                    "loglikelihoods": lls,
                    "is_greedy": [g for _, g in part],
                    "pred": pred,
                    "pred_norm": pred_norm,
                    "acc": float(pred == q.gold),
                    "acc_norm": float(pred_norm == q.gold),
                    "context_tokens": max(len(ctx) for ctx, _ in pairs),
                    "truncated": longest > em.max_length + 1,
                }
            )
        if progress is not None:
            progress(len(out), len(questions))
    return out


__all__ = [
    "DEFAULT_MAX_BATCH_SIZE",
    "DEFAULT_MAX_BATCH_TOKENS",
    "BatchStats",
    "encode_many",
    "encode_pair",
    "encode_requests",
    "hidden_states",
    "loglikelihood",
    "loglikelihood_tokens",
    "score_questions",
]
