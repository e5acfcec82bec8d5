"""What a compressed variant costs against the checkpoint it came from: size, speed and quality.

    costs = variant_costs(base_em, variant, variant_em, packed_dir, questions, prompts)

- `bytes`: its size on disk, and the share of the uncompressed export's;
- `tokens_per_s`: greedy generation on this machine's CPU, through the engine that runs the variant: our
  model for int8 (torchao's kernels), llama.cpp for a GGUF where `llama-cpp-python` is installed (else
  not measured: the GGUF read back here runs as float32, which says nothing of its speed);
- `perplexity` on the packed val split, and its change from the checkpoint's (`perplexity_change`);
- for each benchmark given (MMLU, the suite's tasks), the accuracy of both and the share of questions
  whose answer (`pred`) changed, question by question.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from lm_assets.compression.variants import Variant


def greedy_tokens_per_s(em, prompts: Sequence[str], new_tokens: int) -> float:
    """Tokens per second of greedy generation, `new_tokens` for each prompt, one prompt at a time."""
    from lm_assets.evaluation.generation import generate

    made, started = 0, time.perf_counter()
    for prompt in prompts:
        out = generate(em.model, [em.encode(prompt)], new_tokens, eos_id=None)
        made += sum(len(tokens) for tokens in out.tokens)
    return made / (time.perf_counter() - started)


def gguf_tokens_per_s(path, prompts: Sequence[str], new_tokens: int) -> float | None:
    """llama.cpp's greedy tokens per second on the GGUF, or None where `llama-cpp-python` is not installed."""
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=str(path), n_ctx=512, n_threads=None, verbose=False)
    made, started = 0, time.perf_counter()
    for prompt in prompts:
        out = llm.create_completion(prompt, max_tokens=new_tokens, temperature=0.0, top_k=1)
        made += out["usage"]["completion_tokens"]
    return made / (time.perf_counter() - started)


def answers(em, questions) -> tuple[list[int], float]:
    """Each question's predicted choice, and the accuracy."""
    from lm_assets.evaluation.scoring import score_questions

    scored = score_questions(em, questions)
    return [row["pred"] for row in scored], sum(row["acc"] for row in scored) / len(scored)


def variant_costs(base, variant: Variant, em, packed_dir, questions: Mapping[str, list], prompts: Sequence[str], *,
                  base_bytes: int, max_sequences: int | None = 64, new_tokens: int = 32,
                  baseline: dict | None = None) -> dict:  # fmt: skip
    """The costs of `variant` (loaded as `em`) against `base`; `baseline` is `baseline_figures(base, ...)`,
    computed once for all variants."""
    from lm_assets.evaluation.perplexity import packed_perplexity

    baseline = baseline or baseline_figures(base, packed_dir, questions, prompts, max_sequences=max_sequences,
                                            new_tokens=new_tokens)  # fmt: skip
    perplexity = packed_perplexity(em, packed_dir, "val", max_sequences=max_sequences)["perplexity"]
    if variant.kind.startswith("gguf-"):
        speed = gguf_tokens_per_s(variant.path, prompts, new_tokens)
    else:
        speed = greedy_tokens_per_s(em, prompts, new_tokens)
    benchmarks = {}
    for name, items in questions.items():
        preds, accuracy = answers(em, items)
        base_preds, base_accuracy = baseline["answers"][name]
        changed = sum(a != b for a, b in zip(preds, base_preds))
        benchmarks[name] = {"questions": len(items), "changed": changed, "changed_share": changed / len(items),
                            "accuracy": accuracy, "base_accuracy": base_accuracy}  # fmt: skip
    total = sum(b["questions"] for b in benchmarks.values())
    return {
        "kind": variant.kind, "path": str(variant.path), "note": variant.note,
        "bytes": variant.bytes, "size_share": variant.bytes / base_bytes,
        "tokens_per_s": speed, "base_tokens_per_s": baseline["tokens_per_s"],
        "perplexity": perplexity, "base_perplexity": baseline["perplexity"],
        "perplexity_change": perplexity / baseline["perplexity"] - 1.0,
        "benchmarks": benchmarks,
        "changed_share": sum(b["changed"] for b in benchmarks.values()) / total if total else 0.0,
    }  # fmt: skip


def baseline_figures(base, packed_dir, questions: Mapping[str, list], prompts: Sequence[str], *,
                     max_sequences: int | None = 64, new_tokens: int = 32) -> dict:  # fmt: skip
    from lm_assets.evaluation.perplexity import packed_perplexity

    return {
        "perplexity": packed_perplexity(base, packed_dir, "val", max_sequences=max_sequences)["perplexity"],
        "tokens_per_s": greedy_tokens_per_s(base, prompts, new_tokens),
        "answers": {name: answers(base, items) for name, items in questions.items()},
    }


__all__ = ["baseline_figures", "greedy_tokens_per_s", "variant_costs"]
