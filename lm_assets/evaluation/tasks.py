"""The zero- and few-shot suite teams report: each task as lm-evaluation-harness 0.4.13 defines it, read
from the user's copy of its public release.

A `Task` is lm-eval's task of the same name: its `doc_to_text`, `doc_to_choice` and `doc_to_target`, the
split it is scored on, where its few-shot examples come from, and the metrics lm-eval reports for it.
Readers turn a release's files (the layout its authors ship, or the Hugging Face copy lm-eval loads:
JSONL, CSV/TSV or Parquet) into documents in the Hugging Face layout those functions read. Each row is
checked against its release's layout first (the fields read, their types, non-empty choices, a gold that is
one of the choices); the first bad row stops the reading with a `TaskFileError` naming the file and line.

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
import reprlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import polars as pl

from lm_assets import jsonl
from lm_assets.evaluation.prompts import FEWSHOT_DELIMITER, TARGET_DELIMITER, MCQuestion

FEWSHOT_SEED = 1234  # lm-eval's default fewshot_random_seed
T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Reading a release
# ---------------------------------------------------------------------------------------------


class TaskFileError(ValueError):
    """A task, bias or safety file that breaks its release's layout: the file, the line (or Parquet row), and why."""

    def __init__(self, path: Path, where: str, problem: str):
        super().__init__(f"{path}, {where}: {problem}" if where else f"{path}: {problem}")


class BadRow(ValueError):
    """What is wrong with one row; the reader that met it adds the file and line (`TaskFileError`)."""


def _text_of(path: Path) -> str:
    data = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TaskFileError(path, f"line {line}", "not UTF-8") from None


def _json_object(line: str) -> dict:
    try:
        row = jsonl.loads(line)
    except json.JSONDecodeError as exc:
        raise BadRow(f"not JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        kind = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}.get(type(row), "a number")
        raise BadRow(f"{kind}, not a JSON object")
    return row


def _table_rows(path: Path, content: str) -> list[tuple[str, dict]]:
    """A CSV or TSV table's rows, each as wide as its header; in a TSV, each on one line."""
    tabs = "\t" in content.split("\n", 1)[0]
    reader = csv.reader(io.StringIO(content, newline=""), delimiter="\t" if tabs else ",")
    rows, header, last = [], None, 0
    try:
        for fields in reader:
            first, last = last + 1, reader.line_num
            if not fields:
                continue
            if header is None:
                header = fields
            elif len(fields) != len(header):
                raise TaskFileError(path, f"line {first}", f"{len(fields)} fields; the header has {len(header)}")
            elif tabs and last != first:
                raise TaskFileError(path, f"line {first}", f"a quote opened here runs on to line {last}")
            else:
                rows.append((f"line {first}", dict(zip(header, fields))))
    except csv.Error as exc:
        raise TaskFileError(path, f"line {reader.line_num}", str(exc)) from None
    return rows


def numbered_rows(path: Path) -> list[tuple[str, dict]]:
    """A table's rows, each with where it is ("line 3", "row 3" in Parquet; from 1): JSONL (one object a line),
    CSV or TSV (a header line), or Parquet."""
    if path.suffix == ".parquet":
        try:
            rows = pl.read_parquet(path).to_dicts()
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise TaskFileError(path, "", f"not a readable Parquet file ({exc})") from None
        return [(f"row {n}", row) for n, row in enumerate(rows, 1)]
    if path.suffix in (".jsonl", ".json"):
        rows = []
        for n, line in enumerate(_text_of(path).split("\n"), 1):
            if line.strip():
                try:
                    rows.append((f"line {n}", _json_object(line)))
                except BadRow as exc:
                    raise TaskFileError(path, f"line {n}", str(exc)) from None
        return rows
    if path.suffix in (".csv", ".tsv"):
        return _table_rows(path, _text_of(path))
    raise ValueError(f"{path}: read JSONL, CSV, TSV or Parquet, not {path.suffix or 'a file without a suffix'}")


def read_rows(path: Path) -> list[dict]:
    """A table's rows (see `numbered_rows`)."""
    return [row for _, row in numbered_rows(path)]


def checked_rows(path: Path, check: Callable[[dict], T], rows: list[tuple[str, dict]] | None = None) -> list[T]:
    """`check(row)` of every row of `path` (or of `rows`, read from it), in order; a row it refuses (`BadRow`)
    stops the reading with the file and line."""
    out = []
    for where, row in numbered_rows(path) if rows is None else rows:
        try:
            out.append(check(row))
        except BadRow as exc:
            raise TaskFileError(path, where, str(exc)) from None
    return out


def _shown(row: dict, key: str) -> str:
    return reprlib.repr(row[key]) if key in row else "missing"


def text(row: dict, key: str, empty: bool = False) -> str:
    """`row[key]`, a string, not blank unless `empty`."""
    value = row.get(key)
    if not isinstance(value, str):
        raise BadRow(f"{key} is {_shown(row, key)}, not text")
    if not empty and not value.strip():
        raise BadRow(f"{key} is empty")
    return value


def texts(row: dict, key: str, count: int | None = None) -> list[str]:
    """`row[key]`, a list of non-blank strings: `count` of them, or at least two."""
    value = row.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise BadRow(f"{key} is {_shown(row, key)}, not a list of non-empty texts")
    if (count and len(value) != count) or len(value) < 2:
        raise BadRow(f"{key} lists {len(value)}, not {count or 'two or more'}")
    return value


def one_of(row: dict, key: str, allowed: tuple[str, ...]) -> str:
    """`row[key]`, one of the strings `allowed`."""
    value = row.get(key)
    if not isinstance(value, str) or value not in allowed:
        raise BadRow(f"{key} is {_shown(row, key)}, not one of {', '.join(allowed)}")
    return value


def choice_number(row: dict, key: str, count: int, first: int = 0) -> int:
    """`row[key]` as the number of one of `count` choices numbered from `first`: an int or a string of digits,
    never a bool or a float."""
    value = row.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch("[0-9]+", value):
        number = int(value)
    else:
        raise BadRow(f"{key} is {_shown(row, key)}, not a whole number")
    if not first <= number < first + count:
        raise BadRow(f"{key} is {number}, not one of the {count} choices ({first} to {first + count - 1})")
    return number


def find(folder: Path, names: tuple[str, ...], what: str) -> Path:
    """The first of `names` (glob patterns) under `folder`, searched recursively."""
    for pattern in names:
        hits = sorted(folder.rglob(pattern)) if folder.is_dir() else ([folder] if folder.match(pattern) else [])
        if hits:
            return hits[0]
    raise FileNotFoundError(f"{folder}: no {what} ({', '.join(names)})")


def _hellaswag(row: dict) -> dict:
    for key in ("activity_label", "ctx_a"):
        text(row, key)
    text(row, "ctx_b", empty=True)
    return row | {"label": choice_number(row, "label", len(texts(row, "endings", 4)))}


def _arc(row: dict) -> dict:
    """AI2's layout (`question: {stem, choices: [{text, label}]}`) or Hugging Face's (`question`, `choices:
    {text, label}`)."""
    question = row.get("question")
    if isinstance(question, dict):
        listed = question.get("choices")
        if not isinstance(listed, list) or not all(isinstance(c, dict) for c in listed):
            raise BadRow(f"question.choices is {_shown(question, 'choices')}, not a list of {{text, label}}")
        choices = {"text": [c.get("text") for c in listed], "label": [c.get("label") for c in listed]}
        row = {"id": row.get("id"), "question": question.get("stem"), "answerKey": row.get("answerKey"), "choices": choices}
    text(row, "question")
    choices = row.get("choices")
    if not isinstance(choices, dict):
        raise BadRow(f"choices is {_shown(row, 'choices')}, not {{text, label}}")
    named = {"choices.text": choices.get("text"), "choices.label": choices.get("label")}
    labels = texts(named, "choices.label", len(texts(named, "choices.text")))
    if len(set(labels)) != len(labels):
        raise BadRow(f"the choices' labels {labels} repeat")
    if text(row, "answerKey") not in labels:
        raise BadRow(f"answerKey {row['answerKey']!r} is not one of the choices' labels {labels}")
    return row


def _boolq(row: dict) -> dict:
    """The release's `answer` (a JSON true or false) or super_glue's `label` (0 or 1)."""
    if "label" in row:
        label = choice_number(row, "label", 2)
    elif isinstance(row.get("answer"), bool):
        label = int(row["answer"])
    else:
        raise BadRow(f"answer is {_shown(row, 'answer')}, not true or false")
    return {"question": text(row, "question"), "passage": text(row, "passage"), "label": label}


def _xstorycloze(row: dict) -> dict:
    """The release's TSV columns (InputSentence1, ..., AnswerRightEnding) or Hugging Face's."""
    if "InputSentence1" in row:
        row = {**{f"input_sentence_{i}": row.get(f"InputSentence{i}") for i in range(1, 5)},
               "sentence_quiz1": row.get("RandomFifthSentenceQuiz1"),
               "sentence_quiz2": row.get("RandomFifthSentenceQuiz2"),
               "answer_right_ending": row.get("AnswerRightEnding")}  # fmt: skip
    for key in (*(f"input_sentence_{i}" for i in range(1, 5)), "sentence_quiz1", "sentence_quiz2"):
        text(row, key)
    return row | {"answer_right_ending": choice_number(row, "answer_right_ending", 2, first=1)}


def _piqa_question(row: dict) -> dict:
    return {"goal": text(row, "goal"), "sol1": text(row, "sol1"), "sol2": text(row, "sol2"),
            "label": choice_number(row, "label", 2)}  # fmt: skip


def _piqa(path: Path) -> list[dict]:
    """The release's `<split>.jsonl` with its labels in `<split>-labels.lst` beside it, or rows with `label`."""
    rows = numbered_rows(path)
    labels = path.with_name(f"{path.stem}-labels.lst")
    if labels.exists():
        lines = enumerate(_text_of(labels).split("\n"), 1)
        values = [(f"line {n}", {"label": v.strip()}) for n, v in lines if v.strip()]
        if len(values) != len(rows):
            raise TaskFileError(labels, "", f"{len(values)} labels for {len(rows)} questions in {path.name}")
        numbers = checked_rows(labels, lambda v: choice_number(v, "label", 2), values)
        rows = [(where, row | {"label": n}) for (where, row), n in zip(rows, numbers)]
    return checked_rows(path, _piqa_question, rows)


def _winogrande(row: dict) -> dict:
    if "_" not in text(row, "sentence"):
        raise BadRow("sentence has no blank (_)")
    for key in ("option1", "option2"):
        text(row, key)
    return row | {"answer": str(choice_number(row, "answer", 2, first=1))}


def _cmmlu(row: dict) -> dict:
    for key in ("Question", "A", "B", "C", "D"):
        text(row, key)
    answer = text(row, "Answer").strip()
    if answer not in ("A", "B", "C", "D"):
        raise BadRow(f"Answer is {answer!r}, not A, B, C or D")
    return row | {"Answer": answer}


def _xcopa(row: dict) -> dict:
    for key in ("premise", "choice1", "choice2"):
        text(row, key)
    one_of(row, "question", ("cause", "effect"))
    return row | {"label": choice_number(row, "label", 2)}


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
    reader: Callable[[dict], dict] = lambda row: row  # checks a row (raising BadRow) and makes it a document
    file_reader: Callable[[Path], list[dict]] | None = None
    release: str = ""
    draws_one_extra: bool = False  # lm-eval's task has no test_split (see the module docstring)

    def read(self, path: Path) -> list[dict]:
        return self.file_reader(path) if self.file_reader else checked_rows(path, self.reader)

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
             multiple_input=True, reader=_winogrande, release="github.com/allenai/winogrande (CC-BY)", draws_one_extra=True),
        Task("boolq", "en", lambda d: f"{d['passage']}\nQuestion: {d['question']}?\nAnswer:", lambda d: ["no", "yes"],
             lambda d: int(d["label"]), ("acc",), ("dev.jsonl", "*validation*.parquet", "*val*"), ("train.jsonl", "*train*"),
             reader=_boolq, release="github.com/google-research-datasets/boolean-questions (CC BY-SA 3.0)", draws_one_extra=True),
        Task("cmmlu", "zh", _cmmlu_text, lambda d: ["A", "B", "C", "D"], lambda d: "ABCD".index(d["Answer"]),
             ("acc", "acc_norm"), ("test/*.csv",), ("dev/*.csv",), sampler="first_n", reader=_cmmlu,
             release="github.com/haonan-li/CMMLU (CC BY-NC 4.0)"),
        Task("xstorycloze_zh", "zh",
             lambda d: " ".join(d[f"input_sentence_{i}"] for i in range(1, 5)),
             lambda d: [d["sentence_quiz1"], d["sentence_quiz2"]], lambda d: int(d["answer_right_ending"]) - 1, ("acc",),
             ("*zh*split_20_80_eval.tsv", "*zh*eval*", "*eval*"), ("*zh*split_20_80_train.tsv", "*zh*train*", "*train*"),
             reader=_xstorycloze, release="github.com/facebookresearch/fairseq/tree/main/examples/xglm (CC BY-SA 4.0)", draws_one_extra=True),
        Task("xcopa_zh", "zh", _xcopa_zh_text, lambda d: [_lower_first(d["choice1"]), _lower_first(d["choice2"])],
             lambda d: int(d["label"]), ("acc",), ("test.zh.jsonl", "*test*"), ("val.zh.jsonl", "*val*"), reader=_xcopa,
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
        choices, gold = task.doc_to_choice(doc), task.gold(doc)
        if not 0 <= gold < len(choices):
            raise ValueError(f"{task.name} question {index}: answer {gold} is not one of its {len(choices)} choices")
        common = {"benchmark": task.name, "task": task.name, "subject": subject or task.name, "split": "eval",
                  "index": index, "gold": gold, "shots": len(shots)}  # fmt: skip
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
        fewshot = task.read(dev) if num_fewshot else []
        description = CMMLU_DESCRIPTION.format(CMMLU_SUBJECTS[subject])
        out += questions_of(task, task.read(test), fewshot, num_fewshot, subject, description, limit)
    return out


def chance(task: Task, questions: list[MCQuestion]) -> float:
    return sum(1 / len(q.choices) for q in questions) / len(questions)
