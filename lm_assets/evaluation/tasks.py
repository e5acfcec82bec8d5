"""The zero- and few-shot suite teams report: each task as lm-evaluation-harness 0.4.13 defines it, read
from the user's copy of its public release.

A `Task` is lm-eval's task of the same name: its `doc_to_text`, `doc_to_choice` and `doc_to_target`, the
split it is scored on, where its few-shot examples come from, and the metrics lm-eval reports for it.
Readers turn a release's files (the layout its authors ship, or the Hugging Face copy lm-eval loads:
JSONL, CSV/TSV or Parquet) into documents in the Hugging Face layout those functions read.

Prompts, as lm-eval builds them (`ConfigurableTask.fewshot_context`): the description, then each
few-shot example as `doc_to_text + " " + answer + "\\n\\n"`, then the question's `doc_to_text`; each
choice is scored as the continuation `" " + choice`. A multiple-input task (WinoGrande) instead makes
one context per choice (the sentence up to the blank, filled with that option) and scores the same
continuation, the rest of the sentence, after each.

Few-shot examples: `first_n` takes the first n documents of the few-shot split in file order (CMMLU,
from `dev`); `random` draws them as lm-eval's `ContextSampler` does, one `random.Random(1234)` for the
whole task, `rnd.sample(docs, n)` for each question in order. Where lm-eval's task names no test split
(HellaSwag, PIQA, WinoGrande, BoolQ, XStoryCloze), lm-eval takes the few-shot split for the scored one
(both unset compare equal) and draws n + 1, drops the question itself, and keeps the first n.

Chance is one over the number of choices (HellaSwag, ARC and CMMLU 1/4, the rest 1/2).
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from lm_assets.evaluation.prompts import FEWSHOT_DELIMITER, TARGET_DELIMITER, MCQuestion

FEWSHOT_SEED = 1234  # lm-eval's default fewshot_random_seed


# ---------------------------------------------------------------------------------------------
# Reading a release
# ---------------------------------------------------------------------------------------------


def read_rows(path: Path) -> list[dict]:
    """A table's rows: JSONL (one object a line), CSV or TSV (a header line), or Parquet."""
    if path.suffix == ".parquet":
        return pl.read_parquet(path).to_dicts()
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix in (".jsonl", ".json"):
        return [json.loads(line) for line in text.split("\n") if line.strip()]
    if path.suffix in (".csv", ".tsv"):
        delimiter = "\t" if "\t" in text.split("\n", 1)[0] else ","
        return list(csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter))
    raise ValueError(f"{path}: read JSONL, CSV, TSV or Parquet, not {path.suffix or 'a file without a suffix'}")


def find(folder: Path, names: tuple[str, ...], what: str) -> Path:
    """The first of `names` (glob patterns) under `folder`, searched recursively."""
    for pattern in names:
        hits = sorted(folder.rglob(pattern)) if folder.is_dir() else ([folder] if folder.match(pattern) else [])
        if hits:
            return hits[0]
    raise FileNotFoundError(f"{folder}: no {what} ({', '.join(names)})")


def _hellaswag(row: dict) -> dict:
    return row | {"label": int(row["label"])}


def _arc(row: dict) -> dict:
    """AI2's layout (`question: {stem, choices: [{text, label}]}`) or Hugging Face's (`question`, `choices:
    {text, label}`)."""
    question = row["question"]
    if isinstance(question, dict):
        choices = question["choices"]
        return {"id": row["id"], "question": question["stem"], "answerKey": row["answerKey"],
                "choices": {"text": [c["text"] for c in choices], "label": [c["label"] for c in choices]}}  # fmt: skip
    return row


def _boolq(row: dict) -> dict:
    """The release's `answer` (true/false) or super_glue's `label` (0/1)."""
    label = row["label"] if "label" in row else int(bool(row["answer"]))
    return {"question": row["question"], "passage": row["passage"], "label": int(label)}


def _xstorycloze(row: dict) -> dict:
    """The release's TSV columns (InputSentence1, ..., AnswerRightEnding) or Hugging Face's."""
    if "InputSentence1" in row:
        return {**{f"input_sentence_{i}": row[f"InputSentence{i}"] for i in range(1, 5)},
                "sentence_quiz1": row["RandomFifthSentenceQuiz1"], "sentence_quiz2": row["RandomFifthSentenceQuiz2"],
                "answer_right_ending": int(row["AnswerRightEnding"])}  # fmt: skip
    return row | {"answer_right_ending": int(row["answer_right_ending"])}


def _piqa(path: Path) -> list[dict]:
    """The release's `<split>.jsonl` with its labels in `<split>-labels.lst` beside it, or rows with `label`."""
    rows = read_rows(path)
    labels = path.with_name(f"{path.stem}-labels.lst")
    if labels.exists():
        values = [int(v) for v in labels.read_text().split()]
        if len(values) != len(rows):
            raise ValueError(f"{labels}: {len(values)} labels for {len(rows)} questions in {path.name}")
        rows = [r | {"label": v} for r, v in zip(rows, values)]
    return [{"goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"], "label": int(r["label"])} for r in rows]


# ---------------------------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------------------------


def hellaswag_preprocess(text: str) -> str:
    """lm-eval's `hellaswag/utils.py` `preprocess` (WikiHow's bracketed markers removed)."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def _hellaswag_query(doc: dict) -> str:
    ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
    return hellaswag_preprocess(doc["activity_label"] + ": " + ctx)


def _winogrande_choices(doc: dict) -> list[str]:
    blank = doc["sentence"].index("_")
    return [doc["sentence"][:blank] + option for option in (doc["option1"], doc["option2"])]


def _winogrande_target(doc: dict) -> str:
    return doc["sentence"][doc["sentence"].index("_") + 1 :].strip()


def _xcopa_zh_text(doc: dict) -> str:
    connector = {"cause": "因为", "effect": "所以"}[doc["question"]]
    return doc["premise"].strip()[:-1] + f" {connector}"


def _lower_first(choice: str) -> str:
    return choice[0].lower() + choice[1:]


def _cmmlu_text(doc: dict) -> str:
    return f"{doc['Question'].strip()}\nA. {doc['A']}\nB. {doc['B']}\nC. {doc['C']}\nD. {doc['D']}\n答案："


@dataclass(frozen=True)
class Task:
    """lm-eval's task `name` (see the module docstring)."""

    name: str
    language: str
    doc_to_text: Callable[[dict], str]
    doc_to_choice: Callable[[dict], list[str]]
    doc_to_target: Callable[[dict], int | str]  # a choice's index, or (multiple input) the shared continuation
    metrics: tuple[str, ...]
    eval_files: tuple[str, ...]  # glob patterns of the scored split's file, the release's names first
    fewshot_files: tuple[str, ...] = ()
    sampler: str = "random"  # random | first_n
    multiple_input: bool = False
    reader: Callable[[dict], dict] = lambda row: row
    file_reader: Callable[[Path], list[dict]] | None = None
    release: str = ""
    draws_one_extra: bool = False  # lm-eval's task has no test_split (see the module docstring)

    def read(self, path: Path) -> list[dict]:
        return self.file_reader(path) if self.file_reader else [self.reader(r) for r in read_rows(path)]

    def gold(self, doc: dict) -> int:
        """The right choice's index (for a multiple-input task, lm-eval's `doc_to_text`: the option's)."""
        return int(self.doc_to_target(doc)) if not self.multiple_input else {"1": 0, "2": 1}[str(doc["answer"])]


ARC_TEXT = lambda doc: f"Question: {doc['question']}\nAnswer:"  # noqa: E731
ARC_TARGET = lambda doc: doc["choices"]["label"].index(doc["answerKey"])  # noqa: E731

TASKS: dict[str, Task] = {
    t.name: t
    for t in [
        Task("hellaswag", "en", _hellaswag_query, lambda d: [hellaswag_preprocess(e) for e in d["endings"]],
             lambda d: int(d["label"]), ("acc", "acc_norm"), ("hellaswag_val.jsonl", "*validation*.parquet", "*val*"),
             ("hellaswag_train.jsonl", "*train*"), reader=_hellaswag, release="github.com/rowanz/hellaswag (MIT)", draws_one_extra=True),
        Task("arc_easy", "en", ARC_TEXT, lambda d: list(d["choices"]["text"]), ARC_TARGET, ("acc", "acc_norm"),
             ("ARC-Easy-Test.jsonl", "*test*"), ("ARC-Easy-Train.jsonl", "*train*"), reader=_arc,
             release="allenai.org/data/arc (CC BY-SA 4.0)"),
        Task("arc_challenge", "en", ARC_TEXT, lambda d: list(d["choices"]["text"]), ARC_TARGET, ("acc", "acc_norm"),
             ("ARC-Challenge-Test.jsonl", "*test*"), ("ARC-Challenge-Train.jsonl", "*train*"), reader=_arc,
             release="allenai.org/data/arc (CC BY-SA 4.0)"),
        Task("piqa", "en", lambda d: f"Question: {d['goal']}\nAnswer:", lambda d: [d["sol1"], d["sol2"]],
             lambda d: int(d["label"]), ("acc", "acc_norm"), ("valid.jsonl", "*validation*.parquet", "*valid*"),
             ("train.jsonl", "*train*"), file_reader=_piqa, release="yonatanbisk.com/piqa (AFL-3.0)", draws_one_extra=True),
        Task("winogrande", "en", lambda d: {"1": 0, "2": 1}[str(d["answer"])], _winogrande_choices, _winogrande_target,
             ("acc",), ("dev.jsonl", "*validation*.parquet", "*dev*"), ("train_xs.jsonl", "train*.jsonl", "*train*"),
             multiple_input=True, release="github.com/allenai/winogrande (CC-BY)", draws_one_extra=True),
        Task("boolq", "en", lambda d: f"{d['passage']}\nQuestion: {d['question']}?\nAnswer:", lambda d: ["no", "yes"],
             lambda d: int(d["label"]), ("acc",), ("dev.jsonl", "*validation*.parquet", "*val*"), ("train.jsonl", "*train*"),
             reader=_boolq, release="github.com/google-research-datasets/boolean-questions (CC BY-SA 3.0)", draws_one_extra=True),
        Task("cmmlu", "zh", _cmmlu_text, lambda d: ["A", "B", "C", "D"], lambda d: "ABCD".index(d["Answer"]),
             ("acc", "acc_norm"), ("test/*.csv",), ("dev/*.csv",), sampler="first_n",
             release="github.com/haonan-li/CMMLU (CC BY-NC 4.0)"),
        Task("xstorycloze_zh", "zh",
             lambda d: " ".join(d[f"input_sentence_{i}"] for i in range(1, 5)),
             lambda d: [d["sentence_quiz1"], d["sentence_quiz2"]], lambda d: int(d["answer_right_ending"]) - 1, ("acc",),
             ("*zh*split_20_80_eval.tsv", "*zh*eval*", "*eval*"), ("*zh*split_20_80_train.tsv", "*zh*train*", "*train*"),
             reader=_xstorycloze, release="github.com/facebookresearch/fairseq/tree/main/examples/xglm (CC BY-SA 4.0)", draws_one_extra=True),
        Task("xcopa_zh", "zh", _xcopa_zh_text, lambda d: [_lower_first(d["choice1"]), _lower_first(d["choice2"])],
             lambda d: int(d["label"]), ("acc",), ("test.zh.jsonl", "*test*"), ("val.zh.jsonl", "*val*"),
             release="github.com/cambridgeltl/xcopa (CC BY 4.0)"),
    ]
}
TASK_NAMES = tuple(TASKS)


# ---------------------------------------------------------------------------------------------
# Questions
# ---------------------------------------------------------------------------------------------


def shot_text(task: Task, doc: dict) -> str:
    """A worked example as lm-eval writes it: the question, the delimiter, the right answer."""
    choices = task.doc_to_choice(doc)
    if task.multiple_input:
        return choices[task.gold(doc)] + TARGET_DELIMITER + task.doc_to_target(doc)
    return task.doc_to_text(doc) + TARGET_DELIMITER + choices[task.gold(doc)]


def questions_of(task: Task, docs: list[dict], fewshot_docs: list[dict], num_fewshot: int, subject: str = "",
                 description: str = "", limit: int | None = None) -> list[MCQuestion]:  # fmt: skip
    """The task's questions, the first `limit` of `docs` in order, each with `num_fewshot` examples drawn as
    lm-eval draws them."""
    needed = num_fewshot + (task.draws_one_extra and task.sampler == "random")
    if num_fewshot and len(fewshot_docs) < needed:
        raise ValueError(f"{task.name}: {num_fewshot}-shot needs {needed} examples (as lm-eval draws them); the "
                         f"few-shot split has {len(fewshot_docs)}")  # fmt: skip
    rnd = random.Random(FEWSHOT_SEED)
    out = []
    for index, doc in enumerate(docs[:limit] if limit is not None else docs):
        shots = []
        if num_fewshot:
            if task.sampler == "first_n":
                shots = fewshot_docs[:num_fewshot]
            elif task.draws_one_extra:
                shots = [d for d in rnd.sample(fewshot_docs, num_fewshot + 1) if d != doc][:num_fewshot]
            else:
                shots = rnd.sample(fewshot_docs, num_fewshot)
        prefix = description + "".join(shot_text(task, s) + FEWSHOT_DELIMITER for s in shots)
        choices = task.doc_to_choice(doc)
        common = dict(benchmark=task.name, task=task.name, subject=subject or task.name, split="eval", index=index,
                      gold=task.gold(doc), shots=len(shots))  # fmt: skip
        if task.multiple_input:
            contexts = tuple(prefix + c for c in choices)
            out.append(MCQuestion(context=contexts[0], choices=tuple(choices), contexts=contexts,
                                  target=task.doc_to_target(doc), **common))  # fmt: skip
        else:
            out.append(MCQuestion(context=prefix + task.doc_to_text(doc), choices=tuple(choices), **common))
    return out


CMMLU_DESCRIPTION = "以下是关于{}的单项选择题，请直接给出正确答案的选项。\n\n"


def load_task(task: Task, path: str | Path, num_fewshot: int = 0, limit: int | None = None) -> list[MCQuestion]:
    """The questions of `task` from the release at `path` (a folder, or the scored split's file)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{task.name}: no data at {path} (the release: {task.release})")
    if task.name == "cmmlu":
        return _cmmlu_questions(task, path, num_fewshot, limit)
    docs = task.read(find(path, task.eval_files, f"{task.name} questions"))
    fewshot = task.read(find(path.parent if path.is_file() else path, task.fewshot_files, f"{task.name} examples")) \
        if num_fewshot else []  # fmt: skip
    return questions_of(task, docs, fewshot, num_fewshot, limit=limit)


def _cmmlu_questions(task: Task, path: Path, num_fewshot: int, limit: int | None) -> list[MCQuestion]:
    """CMMLU's subjects, each `test/<subject>.csv` with its own `dev/<subject>.csv` examples and description,
    in subject order (lm-eval's `cmmlu` group); `limit` per subject."""
    from lm_assets.evaluation.subjects import CMMLU_SUBJECTS

    tests = sorted((path / "test").glob("*.csv"))
    if not tests:
        raise FileNotFoundError(f"cmmlu: no test/<subject>.csv under {path}")
    out = []
    for test in tests:
        subject = test.stem
        if subject not in CMMLU_SUBJECTS:
            raise ValueError(f"cmmlu: {test} is not one of CMMLU's 67 subjects")
        dev = path / "dev" / test.name
        fewshot = read_rows(dev) if num_fewshot else []
        description = CMMLU_DESCRIPTION.format(CMMLU_SUBJECTS[subject])
        out += questions_of(task, read_rows(test), fewshot, num_fewshot, subject, description, limit)
    return out


def chance(task: Task, questions: list[MCQuestion]) -> float:
    return sum(1 / len(q.choices) for q in questions) / len(questions)
