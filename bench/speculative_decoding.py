"""Speculative decoding of a checkpoint's HF export with transformers: plain greedy decoding against a draft
model's proposals (assisted generation) and against prompt lookup (n-gram proposals from the prompt).

Usage::

    .venv/bin/python bench/speculative_decoding.py --target DIR --draft DIR [--prompts FILE] [--new-tokens 64]
        [--draft-tokens N] [--lookup-tokens 10] [--repeats 3] [--threads N] [--json-out FILE]
    .venv/bin/python bench/speculative_decoding.py --storage DIR --target-checkpoint dpo-step_00000030
        --draft-checkpoint distill-step_00000100 [...]
    .venv/bin/python bench/speculative_decoding.py --smoke

It prints figures; it checks nothing. `--target` and `--draft` are HF export folders (config.json,
safetensors, the tokenizer); `--storage` with checkpoint keys finds the exports of those `checkpoints`
partitions in a storage root (`<storage>/checkpoints/<run>/<tag>/hf`, as `lm-assets vllm-manifest`
mounts them). Each prompt is decoded one at a time (assisted generation takes one sequence), greedily, up
to `--new-tokens` new tokens (fewer where the model stops: EOS, or the chat turn's end marker), with
`model.generate` three ways:

- plain: greedy decoding, one target forward pass per token;
- draft: `generate(..., assistant_model=draft)`, transformers' `AssistedCandidateGenerator` (with
  `--draft-tokens`, the draft's `num_assistant_tokens`; otherwise transformers' defaults, which the report
  records);
- lookup: `generate(..., prompt_lookup_num_tokens=k)`, `PromptLookupCandidateGenerator`: the tokens that
  followed the last n-gram's earlier occurrence in the sequence, no model at all.

For each: tokens/s (new tokens over the best of `--repeats` wall-clock times per prompt, after a warm-up),
the speed-up over plain, and whether every output equals plain greedy's token for token (verification by
the target keeps it so, up to float rounding between a forward pass over several tokens and one over
one). The acceptance rate is counted from the real runs: the bench wraps the candidate generator that
`generate` builds (`GenerationMixin._get_candidate_generator`), adding up the tokens each
`get_candidates` proposed and the `num_matches` each `update_candidate_strategy` got back (the proposals
the target accepted, as `generate` passes it: cut at EOS and at the token budget). Accepted / proposed is
the acceptance rate; (accepted + rounds) / rounds the tokens each target forward pass yields.

A draft must share the target's tokenizer, token for token: assisted generation hands the draft's ids to
the target as they are. transformers itself only compares the two vocabulary sizes (equal sizes pass
whatever the tokens are; different sizes ask for both tokenizers and re-tokenize text between them,
"universal assisted decoding", which is not what a served draft does: vLLM's speculative decoding needs
one vocabulary). The bench compares the two tokenizers' vocabularies and refuses a draft whose differ,
naming the difference: a pretraining checkpoint (4,000 pieces in the demo) is no draft for a fine-tuned
one (4,004: the chat markers). A student distilled from the target (`distill-step_N`) shares its
tokenizer.

Prompts: built in, drawn from the sample crawl's original prose (`data/sample-crawl/originals/`, the
demo's training text): chat questions, chat requests to summarise and to repeat a paragraph, plain
continuations of an English and a Chinese article, and a paragraph followed by its own opening, whose
continuation copies the prompt (where prompt lookup shines). `--prompts FILE` reads JSON Lines instead:
`{"prompt": "...", "chat": true|false, "name": "..."}` (`chat` default false). Chat prompts are rendered
with the target's chat template (a target without one gets them as plain text).

`--smoke` builds a tiny random target and a draft (the target's weights with noise) with a small chat
tokenizer in the output folder, checks the refusal of a mismatched draft, and decodes three prompts:
seconds. The report is written to `$OUT/speculative_decoding.json` (else `bench/out/`), to `--json-out`
if given, and printed as the last line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from benchlib.paths import REPO, command_line, out_dir, write_report

ORIGINALS = REPO / "data" / "sample-crawl" / "originals"
METHODS = ("plain", "draft", "lookup")


class DraftMismatch(ValueError):
    """The draft cannot propose tokens to the target: their tokenizers differ."""


@dataclass
class Prompt:
    name: str
    prompt: str
    chat: bool = False


# --------------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------------


def articles(path: Path) -> dict[str, list[str]]:
    """The sample crawl's original pieces of kind `article`: slug -> paragraphs (sub-headings left out)."""
    pieces: dict[str, list[str]] = {}
    current = None
    for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
        block = block.strip()
        if block.startswith("=== "):
            slug, kind, _ = (part.strip() for part in block[4:].split("\n")[0].split("|", 2))
            current = pieces.setdefault(slug, []) if kind == "article" else None
        elif current is not None and block and not block.startswith(("#", "## ")):
            current.append(block)
    return pieces


def opening(text: str, words: int) -> str:
    """The first `words` words (for Chinese, which has no spaces, 2 x `words` characters)."""
    split = text.split()
    return " ".join(split[:words]) if len(split) > words else text[: 2 * words]


def builtin_prompts() -> list[Prompt]:
    en, zh = articles(ORIGINALS / "en.txt"), articles(ORIGINALS / "zh.txt")
    cards, fjords, tides = en["punched-cards"][0], en["fjords"][0], en["tide-pools"][0]
    return [
        Prompt("chat-question", "What did Joseph Marie Jacquard attach to his loom?", chat=True),
        Prompt("chat-howto", "How do I keep a sourdough starter alive through the winter?", chat=True),
        Prompt("chat-summarise", f"Summarise this text in two sentences.\n\n{fjords}", chat=True),
        Prompt("chat-repeat", f"Repeat the following text word for word.\n\n{tides}", chat=True),
        Prompt("text-en", opening(en["lighthouses"][0], 30)),
        Prompt("text-en-2", opening(en["balcony-tomatoes"][0], 30)),
        Prompt("text-zh", opening(zh["sanxia"][0], 30)),
        Prompt("text-copy", f"{cards}\n\n{opening(cards, 25)}"),
    ]


def file_prompts(path: Path) -> list[Prompt]:
    prompts = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if line.strip():
            row = json.loads(line)
            prompts.append(Prompt(row.get("name", f"prompt-{i}"), row["prompt"], bool(row.get("chat", False))))
    return prompts


# --------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------


def load_export(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (folder / "config.json").exists():
        raise SystemExit(f"{folder}: no config.json, not an HF export")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(folder)


def check_draft(target, target_tok, draft, draft_tok) -> None:
    """Refuse (DraftMismatch) a draft whose tokenizer or vocabulary size differs from the target's."""
    tv, dv = target_tok.get_vocab(), draft_tok.get_vocab()
    t_size, d_size = target.config.get_text_config().vocab_size, draft.config.get_text_config().vocab_size
    if tv == dv and t_size == d_size:
        return
    only_target = sorted(set(tv) - set(dv), key=tv.get)
    only_draft = sorted(set(dv) - set(tv), key=dv.get)
    moved = sorted((t for t in set(tv) & set(dv) if tv[t] != dv[t]), key=tv.get)
    said = [f"target {len(tv)} tokens (embedding {t_size}), draft {len(dv)} (embedding {d_size})"]
    said += [f"{len(only_target)} only in the target's, e.g. {only_target[:6]}"] if only_target else []
    said += [f"{len(only_draft)} only in the draft's, e.g. {only_draft[:6]}"] if only_draft else []
    said += [f"{len(moved)} with other ids, e.g. {moved[:6]}"] if moved else []
    raise DraftMismatch(
        "the draft's tokenizer is not the target's (" + "; ".join(said) + "). Assisted generation hands the "
        "draft's token ids to the target as they are, so a draft must share the target's tokenizer: a student "
        "distilled from the target does; a pretraining checkpoint is no draft for a fine-tuned one, whose "
        "tokenizer adds the chat markers. (transformers would re-tokenize text between two tokenizers, "
        "universal assisted decoding, which vLLM's speculative decoding does not do; this bench does not measure it.)"
    )


def export_of(storage: Path, key: str) -> Path:
    from lm_assets.serving.vllm import checkpoint_path
    from lm_assets.storage.layout import CHECKPOINTS_FOLDER

    folder = Path(checkpoint_path(key, mount=str(storage / CHECKPOINTS_FOLDER)))
    if not (folder / "config.json").exists():
        raise SystemExit(f"no export of {key} at {folder}: materialize its checkpoint (or any evaluation of it) first")
    return folder


def encode(tok, prompt: Prompt) -> torch.Tensor:
    if prompt.chat and tok.chat_template:
        ids = tok.apply_chat_template([{"role": "user", "content": prompt.prompt}], add_generation_prompt=True,
                                      tokenize=True, return_dict=False)  # fmt: skip
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
    else:
        ids = tok(prompt.prompt)["input_ids"]
    return torch.tensor([list(ids)])


def stop_ids(tok, model) -> list[int]:
    """EOS, and the chat turn's end marker where the tokenizer has one (as our evaluation stops)."""
    stops = [model.generation_config.eos_token_id or tok.eos_token_id]
    end = tok.get_vocab().get("<|end|>")
    return [s for s in stops if s is not None] + ([end] if end is not None else [])


# --------------------------------------------------------------------------------------------------
# Counting what the candidate generator proposes and what the target accepts
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def counted_candidates(counts: dict):
    """Wrap every candidate generator `generate` builds meanwhile: its proposals and accepted tokens are added
    to `counts` (rounds, proposed, accepted), its class and draft settings recorded."""
    from transformers.generation.utils import GenerationMixin

    original = GenerationMixin._get_candidate_generator

    def wrapped(self, *args, **kwargs):
        generator = original(self, *args, **kwargs)
        get, update = generator.get_candidates, generator.update_candidate_strategy

        def get_candidates(input_ids, **kw):
            candidate_ids, logits = get(input_ids, **kw)
            counts["rounds"] += 1
            counts["proposed"] += candidate_ids.shape[1] - input_ids.shape[1]
            return candidate_ids, logits

        def update_candidate_strategy(input_ids, scores, num_matches):
            counts["accepted"] += int(num_matches)
            return update(input_ids, scores, num_matches)

        generator.get_candidates, generator.update_candidate_strategy = get_candidates, update_candidate_strategy
        counts["generator"] = type(generator).__name__
        for name in ("num_assistant_tokens", "assistant_confidence_threshold", "num_output_tokens",
                     "max_matching_ngram_size"):  # fmt: skip
            if getattr(generator, name, None) is not None:
                counts.setdefault("settings", {})[name] = getattr(generator, name)
        if hasattr(generator, "assistant_generation_config"):
            counts.setdefault("settings", {})["schedule"] = generator.assistant_generation_config.num_assistant_tokens_schedule
        return generator

    GenerationMixin._get_candidate_generator = wrapped
    try:
        yield counts
    finally:
        GenerationMixin._get_candidate_generator = original


# --------------------------------------------------------------------------------------------------
# The runs
# --------------------------------------------------------------------------------------------------


def generate(target, ids: torch.Tensor, method: str, args, draft, stops: list[int], pad: int) -> list[int]:
    extra = {"plain": {}, "draft": {"assistant_model": draft},
             "lookup": {"prompt_lookup_num_tokens": args.lookup_tokens}}[method]  # fmt: skip
    with torch.inference_mode():
        out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens,
                              do_sample=False, temperature=None, top_p=None, top_k=None, eos_token_id=stops,
                              pad_token_id=pad, **extra)  # fmt: skip
    return out[0, ids.shape[1] :].tolist()


def run(target, target_tok, draft, prompts: list[Prompt], args) -> dict:
    if args.draft_tokens:
        draft.generation_config.num_assistant_tokens = args.draft_tokens
    stops = stop_ids(target_tok, target)
    pad = target.generation_config.pad_token_id
    pad = pad if pad is not None else stops[0]
    encoded = [encode(target_tok, p) for p in prompts]
    for method in METHODS:  # warm-up: first-call costs out of the timings
        generate(target, encoded[0], method, args, draft, stops, pad)
    per_prompt, totals = [], {}
    for method in METHODS:
        counts = {"rounds": 0, "proposed": 0, "accepted": 0}
        rows = []
        for prompt, ids in zip(prompts, encoded, strict=True):
            best, tokens = float("inf"), None
            for repeat in range(args.repeats):
                before = dict(counts)
                with counted_candidates(counts):
                    t0 = time.perf_counter()
                    out = generate(target, ids, method, args, draft, stops, pad)
                    elapsed = time.perf_counter() - t0
                if repeat:  # count each prompt's proposals once: the repeats propose the same
                    counts.update({k: before[k] for k in ("rounds", "proposed", "accepted")})
                else:
                    tokens = out
                best = min(best, elapsed)
            rows.append({"prompt": prompt.name, "method": method, "prompt_tokens": ids.shape[1],
                         "tokens": len(tokens), "seconds": best, "output": tokens})  # fmt: skip
        seconds = sum(r["seconds"] for r in rows)
        tokens = sum(r["tokens"] for r in rows)
        totals[method] = {"tokens": tokens, "seconds": round(seconds, 4), "tokens_per_s": round(tokens / seconds, 1),
                          **counts}  # fmt: skip
        per_prompt += rows
    plain = {r["prompt"]: r for r in per_prompt if r["method"] == "plain"}
    for row in per_prompt:
        ref = plain[row["prompt"]]["output"]
        row["identical"] = row["output"] == ref
        row["first_difference"] = next((i for i, (a, b) in enumerate(zip(row["output"], ref)) if a != b),
                                       None if len(row["output"]) == len(ref) else min(len(ref), len(row["output"])))  # fmt: skip
        row["speed_up"] = round(plain[row["prompt"]]["seconds"] / row["seconds"], 3)
        row["seconds"] = round(row["seconds"], 4)
    for method, total in totals.items():
        total["speed_up"] = round(totals["plain"]["seconds"] / total["seconds"], 3)
        rows = [r for r in per_prompt if r["method"] == method]
        total["identical_prompts"] = sum(r["identical"] for r in rows)
        if method != "plain":
            total["acceptance"] = round(total["accepted"] / total["proposed"], 4) if total["proposed"] else None
            total["tokens_per_target_pass"] = round((total["accepted"] + total["rounds"]) / total["rounds"], 3)
    for row in per_prompt:
        row["output"] = target_tok.decode(row["output"])
    return {"totals": totals, "per_prompt": per_prompt}


def show(report: dict, prompts: list[Prompt]) -> None:
    totals = report["totals"]
    print(f"\n{'method':8} {'tokens':>6} {'s':>7} {'tok/s':>7} {'speed-up':>8} {'proposed':>8} {'accepted':>8} "
          f"{'accept.':>7} {'tok/pass':>8} {'identical':>9}")  # fmt: skip
    for method, t in totals.items():
        accept = f"{t['acceptance']:.1%}" if t.get("acceptance") is not None else "-"
        print(f"{method:8} {t['tokens']:6} {t['seconds']:7.2f} {t['tokens_per_s']:7.1f} {t['speed_up']:8.2f} "
              f"{t['proposed'] if method != 'plain' else '-':>8} {t['accepted'] if method != 'plain' else '-':>8} "
              f"{accept:>7} {t.get('tokens_per_target_pass', 1.0):8.2f} {t['identical_prompts']:>4}/{len(prompts)}")  # fmt: skip
    for method, t in totals.items():
        if t.get("generator"):
            print(f"{method}: {t['generator']} {t.get('settings', {})}, {t['rounds']} target passes")
    print(f"\nper prompt, speed-up over plain (tokens):\n{'prompt':16} {'plain':>12} {'draft':>12} {'lookup':>12}")
    for p in prompts:
        rows = {r["method"]: r for r in report["per_prompt"] if r["prompt"] == p.name}
        cells = [f"{rows[m]['speed_up']:.2f}x ({rows[m]['tokens']})" + ("" if rows[m]["identical"] else "!")
                 for m in METHODS]  # fmt: skip
        print(f"{p.name:16} " + " ".join(f"{c:>12}" for c in cells))
    print("(! = output differs from plain greedy)")


# --------------------------------------------------------------------------------------------------
# Smoke
# --------------------------------------------------------------------------------------------------


def smoke_exports(out: Path) -> tuple[Path, Path, Path]:
    """A tiny random chat target, a draft (the target's weights with noise: it agrees often, not always) and a
    model with the plain tokenizer (no chat markers): the mismatch the bench must refuse."""
    from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
    from lm_assets.sft.chat import CHAT_TEMPLATE, chat_tokenizer
    from lm_assets.training.config import from_preset
    from lm_assets.training.export import CHAT_TEMPLATE_NAME, export_hf
    from lm_assets.training.model import Transformer

    texts = [p.prompt for p in builtin_prompts()] * 20
    vocab = 600  # the prompts' characters (Chinese among them) and some merges
    tok = train_tokenizer(texts, TokenizerConfig(vocab_size=vocab, num_threads=1), out / "tokenizer")
    chat = out / "chat-tokenizer" / "tokenizer.model"
    chat.parent.mkdir(parents=True, exist_ok=True)
    chat.write_bytes(chat_tokenizer(tok.path.read_bytes())[0])
    (chat.parent / CHAT_TEMPLATE_NAME).write_text(CHAT_TEMPLATE)
    cfg = from_preset("tiny", vocab + len(chat_tokenizer(tok.path.read_bytes())[1]), max_seq_len=512)
    target = Transformer(cfg, seed=0).eval()
    with torch.no_grad():
        for p in target.parameters():
            p.normal_(0, 0.1)
        state = {k: v + 0.02 * torch.randn_like(v) for k, v in target.state_dict().items()}
    draft = Transformer(cfg, seed=1).eval()
    draft.load_state_dict(state)
    plain_cfg = from_preset("tiny", vocab, max_seq_len=512)
    return (export_hf(target, cfg, out / "target", tokenizer_model_path=chat),
            export_hf(draft, cfg, out / "draft", tokenizer_model_path=chat),
            export_hf(Transformer(plain_cfg, seed=2).eval(), plain_cfg, out / "base", tokenizer_model_path=tok.path))  # fmt: skip


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", type=Path, help="the target's HF export folder")
    p.add_argument("--draft", type=Path, help="the draft's HF export folder (the same tokenizer)")
    p.add_argument("--storage", type=Path, help="a storage root: find the exports of the checkpoint keys there")
    p.add_argument("--target-checkpoint", help="with --storage: the target's checkpoints partition")
    p.add_argument("--draft-checkpoint", help="with --storage: the draft's checkpoints partition")
    p.add_argument("--prompts", type=Path, help="JSON Lines of {prompt, chat, name} (default: built in)")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--draft-tokens", type=int, help="the draft's num_assistant_tokens (default: transformers')")
    p.add_argument("--lookup-tokens", type=int, default=10, help="prompt_lookup_num_tokens")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per prompt and method; the best counts")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    p.add_argument("--json-out", type=Path, help="also write the report here")
    p.add_argument("--smoke", action="store_true", help="seconds: tiny random exports built here, three prompts")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts = file_prompts(args.prompts) if args.prompts else builtin_prompts()
    if args.smoke:
        target_dir, draft_dir, base_dir = smoke_exports(out_dir("speculative_decoding"))
        target, target_tok = load_export(target_dir)
        base, base_tok = load_export(base_dir)
        try:
            check_draft(target, target_tok, base, base_tok)
            raise AssertionError("a draft without the chat markers was not refused")
        except DraftMismatch as exc:
            print(f"mismatched draft refused: {str(exc)[:160]}...")
        prompts = [prompts[0], prompts[4], prompts[-1]]
        args.new_tokens, args.repeats = min(args.new_tokens, 16), 1
    else:
        if args.storage:
            if not (args.target_checkpoint and args.draft_checkpoint):
                p.error("--storage needs --target-checkpoint and --draft-checkpoint")
            target_dir, draft_dir = export_of(args.storage, args.target_checkpoint), export_of(args.storage, args.draft_checkpoint)
        elif args.target and args.draft:
            target_dir, draft_dir = args.target, args.draft
        else:
            p.error("give --target and --draft, or --storage with --target-checkpoint and --draft-checkpoint, or --smoke")
        target, target_tok = load_export(target_dir)
    draft, draft_tok = load_export(draft_dir)
    try:
        check_draft(target, target_tok, draft, draft_tok)
    except DraftMismatch as exc:
        print(f"speculative_decoding: {draft_dir} is no draft for {target_dir}: {exc}", file=sys.stderr)
        return 2
    params = {name: sum(x.numel() for x in m.parameters()) for name, m in (("target", target), ("draft", draft))}
    print(f"target {target_dir} ({params['target'] / 1e6:.2f} M parameters), draft {draft_dir} "
          f"({params['draft'] / 1e6:.2f} M); {len(prompts)} prompts, up to {args.new_tokens} new tokens, "
          f"best of {args.repeats}, {torch.get_num_threads()} torch threads")  # fmt: skip
    report = run(target, target_tok, draft, prompts, args)
    show(report, prompts)
    import transformers

    report = {"command": command_line(), "target": str(target_dir), "draft": str(draft_dir), "parameters": params,
              "new_tokens": args.new_tokens, "repeats": args.repeats, "lookup_tokens": args.lookup_tokens,
              "threads": torch.get_num_threads(), "transformers": transformers.__version__,
              "torch": torch.__version__, **report}  # fmt: skip
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    write_report("speculative_decoding.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
