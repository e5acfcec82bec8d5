"""Multiple-choice prompts for MMLU and C-Eval, exactly as lm-evaluation-harness builds them.

lm-evaluation-harness (`output_type: multiple_choice`) turns a question into one string, the context,

    description + shot_1 + ... + shot_k + doc_to_text(question)

where each shot is `doc_to_text(shot) + target_delimiter + letter + fewshot_delimiter`
(`target_delimiter = " "`, `fewshot_delimiter = "\\n\\n"`), and scores the four continuations
`target_delimiter + choice`, i.e. " A", " B", " C", " D" (`doc_to_choice: ["A", "B", "C", "D"]`).

MMLU (tasks `mmlu_<subject>`, `_default_template_yaml`):

- description: "The following are multiple choice questions (with answers) about {subject}.\\n\\n",
  the subject with underscores replaced by spaces;
- doc_to_text: "{{question.strip()}}\\nA. {{choices[0]}}\\nB. {{choices[1]}}\\nC. {{choices[2]}}\\nD. {{choices[3]}}\\nAnswer:";
- shots: the first k rows of the subject's `dev` split (`sampler: first_n`), k = 5 by default;
  scored on `test`.

C-Eval (tasks `ceval-valid_<subject>`, `_default_ceval_yaml`):

- description: "以下是中国关于{subject_zh}的单项选择题，请选出其中的正确答案。\\n\\n";
- doc_to_text: "{{question.strip()}}\\nA. {{A}}\\nB. {{B}}\\nC. {{C}}\\nD. {{D}}\\n答案：";
- shots: the first k rows of `dev`; scored on `val` (the test split has no answers).

Only the question is stripped; the choices are used as written. As in lm-evaluation-harness's
sampler, a shot that is the very question being asked (all fields equal) is left out, so that
question gets k - 1 shots (it happens once in MMLU: a `college_physics` question that is in both
`dev` and `val`). A subject with fewer than k dev rows is an error, as lm-evaluation-harness's
`first_n` sampler makes it.

The benchmark files are read with `lm_assets.corpus.decontam.contamination.load_mmlu` / `load_ceval` (a zip or a
folder in the official `{dev,val,test}/<subject>_<split>.csv` layout).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from lm_assets.corpus.decontam.contamination import load_ceval, load_mmlu
from lm_assets.evaluation.subjects import ceval_subject_names

CHOICES = ("A", "B", "C", "D")
TARGET_DELIMITER = " "
FEWSHOT_DELIMITER = "\n\n"
DEFAULT_FEWSHOT = 5


@dataclass(frozen=True)
class MCQuestion:
    """One multiple-choice question, ready to score.

    `context` is the whole prompt; the continuations scored are `TARGET_DELIMITER + c` for `c` in
    `choices` (a multiple-input question instead scores `TARGET_DELIMITER + target` after each of
    `contexts`); `gold` is the index of the right choice. `index` is the question's row number within
    its subject's split (file order, from 0). `shots` is the number of worked examples in `context`.
    """

    benchmark: str
    task: str
    subject: str
    split: str
    index: int
    context: str
    choices: tuple[str, ...]
    gold: int
    shots: int
    # A multiple-input question (lm-eval's WinoGrande): each choice is a whole context (few-shot examples and
    # all), every one continued by the same `target`. Empty for the usual one context, several answers.
    contexts: tuple[str, ...] = ()
    target: str = ""
    delimiter: str = TARGET_DELIMITER  # lm-eval's target_delimiter (CrowS-Pairs: "", whole sentences scored)

    @property
    def continuations(self) -> list[str]:
        return [self.delimiter + c for c in self.choices]

    @property
    def items(self) -> list[tuple[str, list[str]]]:
        """`(context, continuations)` to score, in choice order: one item, or one per context."""
        if self.contexts:
            return [(context, [self.delimiter + self.target]) for context in self.contexts]
        return [(self.context, self.continuations)]


def mmlu_description(subject: str) -> str:
    return f"The following are multiple choice questions (with answers) about {' '.join(subject.split('_'))}.\n\n"


def mmlu_doc_to_text(question: str, choices: Sequence[str]) -> str:
    a, b, c, d = choices
    return f"{question.strip()}\nA. {a}\nB. {b}\nC. {c}\nD. {d}\nAnswer:"


def ceval_description(subject_zh: str) -> str:
    return f"以下是中国关于{subject_zh}的单项选择题，请选出其中的正确答案。\n\n"


def ceval_doc_to_text(question: str, choices: Sequence[str]) -> str:
    a, b, c, d = choices
    return f"{question.strip()}\nA. {a}\nB. {b}\nC. {c}\nD. {d}\n答案："


def fewshot_context(description: str, shots: Iterable[tuple[str, str]], doc_text: str) -> str:
    """`description`, then each `(text, answer letter)` shot as lm-evaluation-harness joins them, then
    the question's text."""
    labeled = "".join(text + TARGET_DELIMITER + target + FEWSHOT_DELIMITER for text, target in shots)
    return description + labeled + doc_text


def _frame(source, loader) -> pl.DataFrame:
    if isinstance(source, pl.DataFrame):
        return source
    if isinstance(source, (str, os.PathLike)):
        return loader(Path(source))
    raise TypeError(f"expected a path or a DataFrame, got {type(source).__name__}")


def _questions(
    frame: pl.DataFrame,
    *,
    benchmark: str,
    task_prefix: str,
    split: str,
    num_fewshot: int,
    subjects: Iterable[str] | None,
    describe,
    doc_to_text,
    identity: Sequence[str],
) -> list[MCQuestion]:
    if num_fewshot < 0:
        raise ValueError("num_fewshot must be >= 0")
    available = frame.get_column("subject").unique(maintain_order=True).to_list()
    wanted = sorted(set(available)) if subjects is None else list(dict.fromkeys(subjects))
    unknown = [s for s in wanted if s not in available]
    if unknown:
        raise KeyError(f"subjects not in the data: {unknown}")
    out: list[MCQuestion] = []
    for subject in wanted:
        rows = frame.filter(pl.col("subject") == subject)
        docs = rows.filter(pl.col("split") == split).to_dicts()
        if not docs:
            continue
        # As lm-eval's sampler: when the scored split is the shot split itself, draw one extra shot and
        # leave out the question being asked; otherwise the first n shots as they are.
        same_split = split == "dev"
        pool = rows.filter(pl.col("split") == "dev").to_dicts()[: num_fewshot + same_split] if num_fewshot else []
        if len(pool) < num_fewshot:
            raise ValueError(f"{subject}: {num_fewshot}-shot needs {num_fewshot} dev questions, found {len(pool)}")
        for k, shot in enumerate(pool):
            if (shot["answer"] or "").strip() not in CHOICES:
                raise ValueError(f"{subject} dev row {k}: answer {shot['answer']!r} is not one of {CHOICES}")
        shot_keys = [tuple(d[k] for k in identity) for d in pool]
        description = describe(subject)
        for index, doc in enumerate(docs):
            answer = (doc["answer"] or "").strip()
            if answer not in CHOICES:
                raise ValueError(f"{subject} {split} row {index}: answer {doc['answer']!r} is not one of {CHOICES}")
            key = tuple(doc[k] for k in identity)
            shots = [
                (doc_to_text(s["question"], [s[c] for c in CHOICES]), s["answer"].strip())
                for s, k in zip(pool, shot_keys)
                if not (same_split and k == key)
            ][:num_fewshot]
            context = fewshot_context(description, shots, doc_to_text(doc["question"], [doc[c] for c in CHOICES]))
            out.append(
                MCQuestion(
                    benchmark=benchmark,
                    task=f"{task_prefix}{subject}",
                    subject=subject,
                    split=split,
                    index=index,
                    context=context,
                    choices=CHOICES,
                    gold=CHOICES.index(answer),
                    shots=len(shots),
                )
            )
    return out


def mmlu_questions(
    source: str | os.PathLike | pl.DataFrame,
    split: str = "test",
    num_fewshot: int = DEFAULT_FEWSHOT,
    subjects: Iterable[str] | None = None,
) -> list[MCQuestion]:
    """MMLU questions of `split` (default `test`) with `num_fewshot` dev shots (0 for zero-shot),
    subjects in alphabetical order (or the order of `subjects`), questions in file order.

    `source` is the MMLU zip/folder or a frame from `load_mmlu`.
    """
    return _questions(
        _frame(source, load_mmlu),
        benchmark="mmlu",
        task_prefix="mmlu_",
        split=split,
        num_fewshot=num_fewshot,
        subjects=subjects,
        describe=mmlu_description,
        doc_to_text=mmlu_doc_to_text,
        identity=("question", *CHOICES, "answer"),
    )


def ceval_questions(
    source: str | os.PathLike | pl.DataFrame,
    split: str = "val",
    num_fewshot: int = DEFAULT_FEWSHOT,
    subjects: Iterable[str] | None = None,
    subject_names: str | os.PathLike | Mapping | None = None,
) -> list[MCQuestion]:
    """C-Eval questions of `split` (default `val`) with `num_fewshot` dev shots.

    `source` is a C-Eval zip/folder or a frame from `load_ceval`. `subject_names` overrides the
    built-in Chinese subject names (a dict or a JSON file, see `subjects.ceval_subject_names`); a
    subject with no name is described by its code.
    """
    names, _ = ceval_subject_names(subject_names)
    return _questions(
        _frame(source, load_ceval),
        benchmark="ceval",
        task_prefix="ceval-valid_",
        split=split,
        num_fewshot=num_fewshot,
        subjects=subjects,
        describe=lambda subject: ceval_description(names.get(subject, subject)),
        doc_to_text=ceval_doc_to_text,
        identity=("id", "question", *CHOICES, "answer", "explanation"),
    )


__all__ = [
    "CHOICES",
    "DEFAULT_FEWSHOT",
    "FEWSHOT_DELIMITER",
    "TARGET_DELIMITER",
    "MCQuestion",
    "ceval_description",
    "ceval_doc_to_text",
    "ceval_questions",
    "fewshot_context",
    "mmlu_description",
    "mmlu_doc_to_text",
    "mmlu_questions",
]
