"""What a checkpoint writes: greedy and sampled continuations of a few fixed prompts.

    result = sample_continuations(em)                  # SAMPLE_PROMPTS, SampleSettings()
    result["samples"][0]["greedy"]                     # the text after "The capital of France is"

Prompts are encoded without BOS, as in training and in the benchmarks; a fine-tuned checkpoint's
(one whose export has a chat template) are user turns in that template, and its continuations end at
its end-of-turn piece. Both decodings run as one
left-padded batch each (`generate`); the sampled one draws from one generator seeded with
`settings.seed`, so the same checkpoint, prompts and settings give the same text on the same device.
A continuation's text is the decoded prompt-and-continuation with the decoded prompt removed, so a
word split across the boundary reads as it would in the whole text. Bytes the model wrote that form no
UTF-8 character (a lone byte piece, say) are shown as `⟨0x91⟩`, never as a bare "\ufffd" that would
look like a bug of the page.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch: the settings and prompts import without it
    from lm_assets.evaluation.checkpoint import EvalModel
    from lm_assets.evaluation.generation import Generation

# English first, then Chinese: the two languages the corpus keeps.
SAMPLE_PROMPTS: tuple[str, ...] = (
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "The best way to learn a new language is",
    "中国的首都是",
    "很久很久以前，在一个海边的小村庄里，",
    "学习一门新语言最好的方法是",
)


@dataclass(frozen=True)
class SampleSettings:
    """The decoding of the sampled continuations (the greedy ones share `max_new_tokens`)."""

    max_new_tokens: int = 40
    temperature: float = 0.8
    top_p: float | None = 0.95
    top_k: int | None = None
    seed: int = 0


def _show_invalid_bytes(error: UnicodeDecodeError) -> tuple[str, int]:
    return "".join(f"⟨0x{b:02X}⟩" for b in error.object[error.start : error.end]), error.end


codecs.register_error("lm_assets_show_bytes", _show_invalid_bytes)


def shown_text(sp, ids: list[int]) -> str:
    """`ids` decoded over their whole byte sequence, as SentencePiece decodes them, except that bytes
    the model wrote that form no UTF-8 character read `⟨0x91⟩` instead of a bare "\ufffd"."""
    text = sp.decode(ids)
    if "\ufffd" not in text:
        return text
    parts = []
    for i in ids:
        if sp.is_control(i):
            continue
        piece = sp.id_to_piece(i)
        parts.append(bytes([int(piece[3:5], 16)]) if sp.is_byte(i) else
                     sp.decode([i]).encode() if sp.is_unknown(i) else piece.replace("\u2581", " ").encode())  # fmt: skip
    raw = b"".join(parts)
    if raw.startswith(b" ") and not text.startswith(" "):  # a dummy-prefix tokenizer drops its leading space
        raw = raw[1:]
    return raw.decode("utf-8", errors="lm_assets_show_bytes")


def continuation_texts(em: EvalModel, prompt_ids: list[list[int]], generation: Generation) -> list[str]:
    texts = []
    for ids, length, tokens in zip(prompt_ids, generation.prompt_lengths, generation.tokens):
        seen = ids[len(ids) - length:]
        prompt, whole = shown_text(em.tokenizer, seen), shown_text(em.tokenizer, seen + tokens)
        texts.append(whole[len(prompt):] if whole.startswith(prompt) else shown_text(em.tokenizer, tokens))
    return texts


def sample_continuations(
    em: EvalModel, prompts: Sequence[str] = SAMPLE_PROMPTS, settings: SampleSettings = SampleSettings()
) -> dict:
    """One row per prompt (`samples`): the prompt, its greedy and sampled continuations (text, ids, and
    whether each stopped at EOS or at max_new_tokens), its token count and whether it was cut to fit
    the context; plus the settings, the tokens generated and the seconds taken."""
    from lm_assets.evaluation.generation import generate

    started = time.perf_counter()
    prompt_ids = [em.encode(em.chat_prompt(p) if em.chat_template else p) for p in prompts]
    common = {"max_new_tokens": settings.max_new_tokens, "eos_id": em.stop_id,
              "pad_id": max(em.tokenizer.pad_id(), 0)}  # fmt: skip
    greedy = generate(em.model, prompt_ids, **common)
    sampled = generate(em.model, prompt_ids, do_sample=True, temperature=settings.temperature, top_k=settings.top_k,
                       top_p=settings.top_p, seed=settings.seed, **common)  # fmt: skip
    greedy_texts, sampled_texts = continuation_texts(em, prompt_ids, greedy), continuation_texts(em, prompt_ids, sampled)
    rows = [
        {
            "prompt": prompt,
            "greedy": greedy_texts[i],
            "sampled": sampled_texts[i],
            "prompt_tokens": greedy.prompt_lengths[i],
            "prompt_truncated": greedy.truncated[i],
            "greedy_ids": greedy.tokens[i],
            "sampled_ids": sampled.tokens[i],
            "greedy_stop": "eos" if greedy.stopped_at_eos[i] else "length",
            "sampled_stop": "eos" if sampled.stopped_at_eos[i] else "length",
        }
        for i, prompt in enumerate(prompts)
    ]
    return {
        "samples": rows,
        "settings": asdict(settings),
        "new_tokens": sum(len(t) for t in greedy.tokens + sampled.tokens),
        "seconds": time.perf_counter() - started,
    }


__all__ = ["SAMPLE_PROMPTS", "SampleSettings", "continuation_texts", "sample_continuations", "shown_text"]
