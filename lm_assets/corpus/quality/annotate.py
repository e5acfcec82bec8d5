"""Pages to label for the quality classifier: a seeded sample to label by hand, and a local LM that scores them.

Labels are JSON lines: `doc_id`, `url`, `label` (KEEP, DROP or an integer score 0-5, null while unlabelled),
`confidence` (high or low), `source` (`human` or the annotating model), optional `lang` and `reason`.

`LMAnnotator` scores a page with a local Hugging Face causal LM and `PROMPT`, the FineWeb-Edu annotation prompt
adapted to the project's rubric (docs/labelling-rubric.md): an additive 0-5 score whose third point is the
rubric's KEEP, so 3-5 describe KEEP pages and 0-2 DROP pages. Instead of letting the model write a justification
and then a score, it reads the next-token distribution after "Score:" over the digits 0-5: one forward pass per
page, deterministic. The label is the most probable score.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import random
from collections.abc import Callable
from pathlib import Path

import polars as pl

from lm_assets.storage.store import atomic_path

SAMPLE_COLUMNS = ("doc_id", "url", "lang_hint", "title", "text")
TEXT_CAP = 20_000
SCORES = "012345"
KEEP_FROM = 3
CONFIDENT = 0.8
ANSWER = "Score:"

PROMPT = """\
Below is an extract from a web page. Evaluate whether the page is good text for pretraining a language model: \
coherent natural-language prose or technical documentation that a reader learns from. Use the additive 5-point \
scoring system described below. Points are accumulated based on the satisfaction of each criterion:

- Add 1 point if the extract contains some readable natural-language text, even if most of it is navigation, \
links, boilerplate or markup.
- Add another point if the extract has at least about three informative sentences that belong together (or the \
same amount of Chinese or Japanese text), rather than only a table of contents, an index, a list of links, licence \
or copyright boilerplate, a stub of one or two sentences, or an auto-generated listing without prose such as a raw \
source-code listing, an API index without descriptions or a bare keyboard-shortcut table.
- Award a third point if the extract is coherent prose or technical documentation that a reader learns from: an \
explanation, a tutorial, a how-to, a FAQ, a reference page whose sentences describe behaviour, or release notes \
with prose. Code examples and tables count when explanatory text comes with them.
- Grant a fourth point if the explanatory content is substantial and focused, clearly written, with little \
navigation, boilerplate or unexplained listing mixed in.
- Bestow a fifth point if the extract is outstanding: a thorough, well-organized explanation, like a good chapter \
of a manual or a textbook, from which a reader learns a great deal.

Ignore the site chrome that a text extractor is expected to remove: menus, breadcrumbs, "Prev / Up / Next" bars, \
footers. Garbled, empty or mostly-markup extracts get 0 points. The language does not change the score: a Chinese \
page and an English page with the same content get the same points.

The extract:
{text}

After examining the extract, answer with the total points only, using the format: "Score: <total points>"
"""


class AnnotatorLoadError(RuntimeError):
    """The annotator model or its tokenizer could not be loaded from local files."""


def sample_for_labelling(docs: pl.DataFrame, n: int, seed: int = 0) -> list[dict]:
    """`n` documents drawn at random (all of them when there are fewer), as unlabelled label lines.

    The draw depends only on the set of doc_ids and the seed, not on the order of the rows."""
    if n < 1:
        raise ValueError(f"the sample size must be at least 1, got {n}")
    docs = docs.sort("doc_id")
    picked = random.Random(seed).sample(range(docs.height), min(n, docs.height))
    rows = docs.select(pl.col(c).gather(picked) for c in SAMPLE_COLUMNS).rows(named=True)
    return [
        {**{c: row[c] for c in SAMPLE_COLUMNS}, "text": capped(row["text"]), "label": None, "confidence": None,
         "source": "human"}
        for row in rows
    ]  # fmt: skip


def capped(text: str, limit: int = TEXT_CAP) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n\n[… text cut at {limit:,} of {len(text):,} characters]"


def read_label_lines(path: str | Path) -> list[dict]:
    """The lines of a label file; each must be a JSON object with a `text` to score."""
    lines = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc})") from exc
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise ValueError(f"{path}:{number}: a line needs a `text` to score: {line[:120]}")
        lines.append(row)
    return lines


def write_label_lines(path: str | Path, lines: list[dict], force: bool = False) -> None:
    check_writable(path, force)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def check_writable(path: str | Path, force: bool) -> None:
    if Path(path).exists() and not force:
        raise FileExistsError(f"{path} exists; give --force to overwrite it")


def annotated_path(path: str | Path) -> str:
    """`labels-x.jsonl` -> `labels-x.annotated.jsonl`, beside it."""
    path = Path(path)
    return str(path.with_name(f"{path.stem}.annotated.jsonl"))


def confidence(probs: tuple[float, ...]) -> str:
    """high when the scores on the same side of KEEP/DROP as the label hold CONFIDENT of the probability."""
    keep = sum(probs[KEEP_FROM:])
    return "high" if max(keep, 1.0 - keep) >= CONFIDENT else "low"


class LMAnnotator:
    """A local causal LM that scores pages 0-5 with `PROMPT`; `source` names the model and hashes its config
    and the prompt, so labels from another model or another prompt never share a source."""

    def __init__(self, model, tokenizer, name: str, max_chars: int = 4000):
        self.model = model
        self.tokenizer = tokenizer
        self.max_chars = max_chars
        config = model.config.to_dict()
        config = {k: v for k, v in config.items() if not k.startswith("_") and k != "transformers_version"}
        digest = hashlib.sha256((json.dumps(config, sort_keys=True, default=str) + PROMPT).encode()).hexdigest()
        self.source = f"{name}@{digest[:10]}"
        last_only = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._logits_kwargs = {"logits_to_keep": 1} if last_only else {}

    @classmethod
    def load(cls, path_or_name: str, device: str = "cpu", max_chars: int = 4000) -> LMAnnotator:
        """Load from a folder or a name already in the local Hugging Face cache; nothing is downloaded."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(path_or_name, local_files_only=True)
            dtype = torch.float32 if device == "cpu" else "auto"
            model = AutoModelForCausalLM.from_pretrained(path_or_name, local_files_only=True, dtype=dtype)
            model.to(device).eval()
        except Exception as exc:
            raise AnnotatorLoadError(
                f"cannot load the annotator model {path_or_name!r} from local files: {exc}"
            ) from exc
        return cls(model, tokenizer, name=path_or_name, max_chars=max_chars)

    def prompt(self, text: str) -> str:
        """The text the model continues: PROMPT (in the chat template when the tokenizer has one) up to "Score:"."""
        body = PROMPT.format(text=text[: self.max_chars])
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": body}]
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + ANSWER
        return f"{body}\n{ANSWER}"

    def _inputs(self, prompt: str) -> tuple[list[int], list[int]]:
        """The prompt's token ids and the id of each score's token after them.

        Each score is tokenized together with the prompt (`Score: 3`), since a tokenizer may merge the space with
        the digit or keep it apart; the ids all six share come first, and each score must add exactly one token."""
        special = not getattr(self.tokenizer, "chat_template", None)
        options = [self.tokenizer(f"{prompt} {d}", add_special_tokens=special)["input_ids"] for d in SCORES]
        shared = 0
        while all(shared < len(o) for o in options) and len({o[shared] for o in options}) == 1:
            shared += 1
        if any(len(o) != shared + 1 for o in options) or len({o[shared] for o in options}) != len(SCORES):
            raise ValueError("the annotator's tokenizer does not give each score 0-5 a token of its own after 'Score:'")
        return options[0][:shared], [o[shared] for o in options]

    def score(self, texts: list[str]) -> list[tuple[int, tuple[float, ...]]]:
        """Per text: the most probable score and the probabilities of scores 0-5 (renormalized over the six)."""
        import torch

        results = []
        with torch.inference_mode():
            for text in texts:
                ids, score_ids = self._inputs(self.prompt(text))
                input_ids = torch.tensor([ids], device=self.model.device)
                logits = self.model(input_ids=input_ids, **self._logits_kwargs).logits[0, -1].float()
                probs = torch.softmax(logits[score_ids], dim=-1).tolist()
                results.append((probs.index(max(probs)), tuple(probs)))
        return results


def annotate_lines(
    lines: list[dict], annotator: LMAnnotator, progress: Callable[[int, int], None] | None = None
) -> list[dict]:
    """Each line with the annotator's label, confidence, source and the score probabilities as its reason."""
    out = []
    for i, line in enumerate(lines, 1):
        [(score, probs)] = annotator.score([line["text"]])
        reason = "P(score 0-5): " + " ".join(f"{p:.3f}" for p in probs)
        out.append(
            {**line, "label": score, "confidence": confidence(probs), "source": annotator.source, "reason": reason}
        )
        if progress:
            progress(i, len(lines))
    return out
