"""MMLU per question: lm-evaluation-harness against our scoring, on the HF export of the demo checkpoint.

Usage::

    .venv/bin/python bench/eval_agreement.py [--hf-dir DIR] [--subjects a,b,c | all] [--limit N]
                                             [--batch-size 32] [--ours lm_assets|auto|reference] [--smoke]

Both sides score the same questions from `data/eval/mmlu.zip` with the same model and tokenizer:

- lm-eval: `lm_eval.simple_evaluate(model="hf", model_args="pretrained=<hf_dir>,dtype=float32", ...)`
  with `log_samples=True`, on local tasks `mmlu_local_<subject>` that read the original CSVs (`dataset_path:
  csv`) and use lm-eval's own `mmlu` default template (description, `doc_to_text`, `doc_to_choice`,
  `doc_to_target`, `fewshot_split: dev`, `sampler: first_n`, 5 shots). The task files are written by
  this script on every run, beside a copy of `bench/lm_eval_tasks/utils.py`. Before it runs, every field
  of them that shapes a prompt is checked against the installed lm-eval's `mmlu_<subject>` configs.
  Runs fully offline (`HF_HUB_OFFLINE=1`, `HF_DATASETS_OFFLINE=1`).
- ours: `lm_assets.evaluation` once it provides an MMLU scorer (see `score_ours_lm_assets`); until
  then, and with `--ours reference`, an independent re-implementation of lm-eval's formulas in this
  file: the CSVs read from the zip with `csv`, the prompt built by hand, `_encode_pair` (trailing
  spaces of the context moved into the continuation; the continuation is what `encode(context +
  continuation)` has beyond `encode(context)`), left truncation of context + continuation to the
  model's maximum length + 1 (`max_position_embeddings`, as lm-eval's `resolve_max_length`), one
  forward pass and the sum of the continuation tokens' log-softmax.

Per question the predicted choice is the argmax of the four log-likelihoods (lm-eval's from the logged
samples' `filtered_resps`). Printed: questions, agreement of predictions (goal >= 99%), acc and acc_norm
of both sides (acc_norm divides by the choice's length in characters, all 1 here, so it equals acc),
the largest absolute difference of a per-choice log-likelihood, how many prompts were identical
(where ours exposes its prompts) and how many were left-truncated. The last line is one JSON object.

Without `--hf-dir`, the model is the HF export of the demo checkpoint: the one `make demo` made in
`storage/`, else one built as `make demo` builds it (`python -m lm_assets.app.demo` with the Makefile's
environment, about 30 s) with its storage and Dagster instance under the output folder.

Everything is written under the output folder `$OUT/eval_agreement/` (else `bench/out/eval_agreement/`):
the CSVs extracted from the zip (`mmlu/`), the task files (`lm_eval_tasks/`), the datasets cache, the
demo run and `--perturb` copies. `--smoke` runs in seconds: a tiny random model with a small
tokenizer trained on the zip's dev questions, exported there (`smoke-hf/`), scores 2 questions of one
subject.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from benchlib.paths import REPO, out_dir

DEMO_HF = Path("checkpoints/main/step_00000040/hf")  # in the demo's storage root
MMLU_ZIP = REPO / "data" / "eval" / "mmlu.zip"
TASK_UTILS = REPO / "bench" / "lm_eval_tasks" / "utils.py"  # copied beside the generated task files
TASK_PREFIX = "mmlu_local_"
GROUP = "mmlu_local"
DEFAULT_SUBJECTS = ["abstract_algebra", "anatomy", "college_physics", "high_school_geography"]
LETTERS = ["A", "B", "C", "D"]
NUM_FEWSHOT = 5
DESCRIPTION = "The following are multiple choice questions (with answers) about {}.\n\n"
TARGET_DELIMITER = " "
FEWSHOT_DELIMITER = "\n\n"


# --------------------------------------------------------------------------------------------------
# Data and checkpoint
# --------------------------------------------------------------------------------------------------


def zip_subjects(zip_path: Path = MMLU_ZIP) -> list[str]:
    with zipfile.ZipFile(zip_path) as zf:
        names = [n for n in zf.namelist() if n.startswith("data/test/") and n.endswith("_test.csv")]
    return sorted(Path(n).name[: -len("_test.csv")] for n in names)


def read_split(zf: zipfile.ZipFile, subject: str, split: str) -> list[list[str]]:
    with zf.open(f"data/{split}/{subject}_{split}.csv") as f:
        return list(csv.reader(io.TextIOWrapper(f, encoding="utf-8", newline="")))


def extract_csvs(root: Path, zip_path: Path = MMLU_ZIP) -> None:
    """Extract the zip into `root`: `root/data/{dev,val,test}/<subject>_<split>.csv` (once per zip content;
    a stamp file holds its sha256)."""
    digest = hashlib.sha256(zip_path.read_bytes()).hexdigest()
    stamp = root / ".sha256"
    if stamp.exists() and stamp.read_text().strip() == digest and (root / "data" / "test").is_dir():
        return
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root)
    stamp.write_text(digest + "\n")


def is_export(hf_dir: Path) -> bool:
    return (hf_dir / "model.safetensors").exists() and (hf_dir / "config.json").exists()


def demo_checkpoint(out: Path) -> Path:
    """The HF export of the demo checkpoint: the one `make demo` made in storage/, else one the demo
    builds with its storage root and Dagster instance in `out/demo/`."""
    made = REPO / "storage" / DEMO_HF
    if is_export(made):
        return made
    demo = out / "demo"
    hf_dir = demo / "storage" / DEMO_HF
    if is_export(hf_dir):
        return hf_dir
    print(f"no demo checkpoint: building one in {demo} as `make demo` does ...", flush=True)
    env = dict(os.environ, DAGSTER_HOME=str(demo / "dagster_home"), LM_ASSETS_STORAGE_ROOT=str(demo / "storage"))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("LM_ASSETS_TOXICITY_BACKEND", "profanity_check")
    (demo / "dagster_home").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "deploy" / "dagster.yaml", demo / "dagster_home" / "dagster.yaml")
    subprocess.run([sys.executable, "-m", "lm_assets.app.demo"], cwd=REPO, env=env, check=True)
    if not is_export(hf_dir):
        sys.exit(f"`python -m lm_assets.app.demo` finished but {hf_dir} is still missing")
    return hf_dir


def smoke_checkpoint(out: Path) -> Path:
    """A tiny random model (the `tiny` preset) and a small tokenizer trained on the dev questions of the
    zip, exported to `out/smoke-hf/`: something both sides can score in seconds."""
    from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
    from lm_assets.training.config import from_preset
    from lm_assets.training.export import export_hf
    from lm_assets.training.model import Transformer

    hf_dir = out / "smoke-hf"
    if is_export(hf_dir):
        return hf_dir
    with zipfile.ZipFile(MMLU_ZIP) as zf:
        texts = [" ".join(row) for s in zip_subjects() for row in read_split(zf, s, "dev")]
    vocab = 400
    trained = train_tokenizer(texts, TokenizerConfig(vocab_size=vocab, num_threads=1), out / "smoke-tokenizer")
    cfg = from_preset("tiny", vocab)
    return export_hf(Transformer(cfg, seed=0).eval(), cfg, hf_dir, tokenizer_model_path=trained.path)


def perturbed_copy(hf_dir: Path, out: Path, scale: float, seed: int = 0) -> Path:
    """A copy of the export in `out` with Gaussian noise (std = scale x the tensor's std, seeded) added to
    every matrix: a model whose answers depend on the question, where the demo checkpoint answers one letter."""
    import torch
    from safetensors.torch import load_file, save_file

    dst = out / f"perturbed_{scale:g}_seed{seed}"
    if (dst / "model.safetensors").exists():
        return dst
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(hf_dir, tmp)
    g = torch.Generator().manual_seed(seed)
    state = load_file(hf_dir / "model.safetensors")
    noisy = {k: (v + scale * v.float().std() * torch.randn(v.shape, generator=g)).to(v.dtype) if v.dim() > 1 else v
             for k, v in sorted(state.items())}
    save_file(noisy, tmp / "model.safetensors", metadata={"format": "pt"})
    tmp.rename(dst)
    return dst


# --------------------------------------------------------------------------------------------------
# lm-eval task files
# --------------------------------------------------------------------------------------------------

TEMPLATE_NAME = "_mmlu_local_template_yaml"
TEMPLATE_YAML = """\
# Shared by every mmlu_local_<subject>.yaml: lm-eval's `mmlu` default template
# (lm_eval/tasks/mmlu/default/_default_template_yaml) with the dataset read from local CSVs.
# Generated by bench/eval_agreement.py; the bench checks it against the installed lm-eval.
dataset_path: csv
dataset_name: null
process_docs: !function utils.process_docs
test_split: test
fewshot_split: dev
fewshot_config:
  sampler: first_n
num_fewshot: 5
output_type: multiple_choice
doc_to_text: "{{question.strip()}}\\nA. {{choices[0]}}\\nB. {{choices[1]}}\\nC. {{choices[2]}}\\nD. {{choices[3]}}\\nAnswer:"
doc_to_choice: ["A", "B", "C", "D"]
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def subject_yaml(subject: str, csv_root: Path) -> str:
    files = {split: (csv_root / "data" / d / f"{subject}_{d}.csv").as_posix()
             for split, d in (("test", "test"), ("validation", "val"), ("dev", "dev"))}
    desc = json.dumps(DESCRIPTION.format(subject.replace("_", " ")))
    conv = ", ".join(f"{c}: !function builtins.str" for c in ["question", *LETTERS, "answer"])
    return (
        f"task: {TASK_PREFIX}{subject}\n"
        f"task_alias: {subject}\n"
        f"tag: {GROUP}_tasks\n"
        f"include: {TEMPLATE_NAME}\n"
        f"description: {desc}\n"
        "dataset_kwargs:\n"
        "  column_names: [question, A, B, C, D, answer]\n"
        "  keep_default_na: false\n"
        "  na_filter: false\n"
        f"  converters: {{{conv}}}\n"
        "  data_files:\n"
        + "".join(f"    {split}: {path}\n" for split, path in files.items())
    )


GROUP_YAML = f"""\
group: {GROUP}
task:
  - {GROUP}_tasks
aggregate_metric_list:
  - metric: acc
    weight_by_size: true
  - metric: acc_norm
    weight_by_size: true
metadata:
  version: 1.0
"""


def write_tasks(task_dir: Path, subjects: list[str], csv_root: Path) -> None:
    """The local task files of `subjects` (reading the CSVs under `csv_root`), in `task_dir` with `utils.py`."""
    files = {TEMPLATE_NAME: TEMPLATE_YAML, f"_{GROUP}.yaml": GROUP_YAML}
    files.update({f"{TASK_PREFIX}{s}.yaml": subject_yaml(s, csv_root) for s in subjects})
    task_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (task_dir / name).write_text(text)
    shutil.copyfile(TASK_UTILS, task_dir / "utils.py")


class _TaggedLoader:
    """yaml.SafeLoader that reads `!function x.y` as the string "!function x.y" (no import)."""

    @staticmethod
    def load(text: str) -> dict:
        import yaml

        class Loader(yaml.SafeLoader):
            pass

        Loader.add_constructor("!function", lambda loader, node: "!function " + loader.construct_scalar(node))
        return yaml.load(text, Loader=Loader)


def check_against_upstream(subjects: list[str]) -> None:
    """Every field that shapes prompts, targets or few-shot choice must equal lm-eval's mmlu default task."""
    import lm_eval

    up_dir = Path(lm_eval.__file__).parent / "tasks" / "mmlu" / "default"
    upstream_tpl = _TaggedLoader.load((up_dir / "_default_template_yaml").read_text())
    ours_tpl = _TaggedLoader.load(TEMPLATE_YAML)
    keys = ["test_split", "fewshot_split", "fewshot_config", "output_type",
            "doc_to_text", "doc_to_choice", "doc_to_target"]
    diffs = [k for k in keys if upstream_tpl.get(k) != ours_tpl.get(k)]
    for s in subjects:
        up = _TaggedLoader.load((up_dir / f"mmlu_{s}.yaml").read_text())
        if up.get("description") != DESCRIPTION.format(s.replace("_", " ")):
            diffs.append(f"description of {s}")
    for k in ("target_delimiter", "fewshot_delimiter"):
        if k in upstream_tpl:
            diffs.append(f"{k} set upstream")  # upstream relies on lm-eval's defaults " " and "\n\n"
    from lm_eval.api.task import TaskConfig

    defaults = TaskConfig()
    if (defaults.target_delimiter, defaults.fewshot_delimiter) != (TARGET_DELIMITER, FEWSHOT_DELIMITER):
        diffs.append("lm-eval's default delimiters")
    if diffs:
        sys.exit(f"local task files differ from lm-eval {lm_eval.__version__}'s mmlu default in: {', '.join(diffs)}")


# --------------------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------------------


@dataclass
class Scored:
    """One side's scores: per (subject, test row index) the four log-likelihoods and the gold index."""

    name: str
    lls: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    gold: dict[tuple[str, int], int] = field(default_factory=dict)
    contexts: dict[tuple[str, int], str] = field(default_factory=dict)  # when the side exposes its prompts
    truncated: int | None = None
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def run_lm_eval(
    hf_dir: Path, task_dir: Path, subjects: list[str], batch_size: int, limit: int | None, shots: int
) -> Scored:
    import logging

    import lm_eval
    from lm_eval.tasks import TaskManager

    # One warning per truncated request otherwise (here: all of them); the summary counts them.
    logging.getLogger("lm_eval.models.huggingface").setLevel(logging.ERROR)
    tasks = [f"{TASK_PREFIX}{s}" for s in subjects]
    tm = TaskManager(include_path=str(task_dir), include_defaults=False)
    started = time.perf_counter()
    res = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={hf_dir},dtype=float32",
        tasks=tasks,
        num_fewshot=shots,
        batch_size=batch_size,
        device="cpu",
        limit=limit,
        log_samples=True,
        bootstrap_iters=0,
        task_manager=tm,
    )
    out = Scored("lm-eval", seconds=time.perf_counter() - started)
    metric_mismatch = 0
    for s, task in zip(subjects, tasks):
        for sample in res["samples"][task]:
            key = (s, int(sample["doc_id"]))
            lls = [float(r[0]) for r in sample["filtered_resps"]]
            out.lls[key] = lls
            out.gold[key] = int(sample["doc"]["answer"])
            out.contexts[key] = sample["arguments"][0][0]
            # lm-eval's own per-sample acc must be what the argmax of its log-likelihoods gives
            metric_mismatch += float(sample["acc"]) != float(argmax(lls) == out.gold[key])
    out.extra = {
        "version": lm_eval.__version__,
        "results": {t: {k: v for k, v in res["results"][t].items() if k in ("acc,none", "acc_norm,none")}
                    for t in tasks},
        "per_sample_acc_mismatches": int(metric_mismatch),
    }
    return out


def argmax(values: list[float]) -> int:
    # first maximum, as np.argmax
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def format_question(row: list[str]) -> str:
    question, a, b, c, d = row[:5]
    return f"{question.strip()}\nA. {a}\nB. {b}\nC. {c}\nD. {d}\nAnswer:"


def build_context(subject: str, dev: list[list[str]], row: list[str], k: int = NUM_FEWSHOT) -> str:
    shots = [format_question(r) + TARGET_DELIMITER + r[5].strip() for r in dev[:k]]
    description = DESCRIPTION.format(subject.replace("_", " "))
    return description + "".join(s + FEWSHOT_DELIMITER for s in shots) + format_question(row)


def score_reference(hf_dir: Path, subjects: list[str], batch_size: int, limit: int | None, shots: int) -> Scored:
    """Independent re-implementation of lm-eval's `hf` loglikelihood for MMLU (see the module docstring)."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoTokenizer, LlamaForCausalLM

    started = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(hf_dir)
    model = LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    cfg = model.config
    max_length = next((int(getattr(cfg, a)) for a in ("n_positions", "max_position_embeddings", "n_ctx")
                       if getattr(cfg, a, None) is not None), None)
    if max_length is None:
        mml = getattr(tok, "model_max_length", None)
        max_length = int(mml) if mml and mml < int(1e30) else 2048


    out = Scored("reference")
    requests = []  # (key, choice index, input ids, continuation ids)
    truncated = 0
    with zipfile.ZipFile(MMLU_ZIP) as zf:
        for s in subjects:
            dev, test = read_split(zf, s, "dev"), read_split(zf, s, "test")
            for i, row in enumerate(test[:limit] if limit else test):
                key = (s, i)
                context = build_context(s, dev, row, shots)
                out.contexts[key] = context
                out.gold[key] = LETTERS.index(row[5].strip())
                was_truncated = False
                for j, letter in enumerate(LETTERS):
                    ctx, cont = hf_encode_pair(tok, context, TARGET_DELIMITER + letter)
                    whole = ctx + cont
                    was_truncated |= len(whole) > max_length + 1
                    requests.append((key, j, whole[-(max_length + 1):][:-1], cont))
                truncated += was_truncated
    out.truncated = truncated

    # Requests with the same input row share one forward pass (a question's four one-token answers
    # all read the same row), as lm-eval's logits cache does.
    rows: dict[tuple[int, ...], list[tuple[tuple[str, int], int, list[int]]]] = {}
    for key, j, ids, cont in requests:
        rows.setdefault(tuple(ids), []).append((key, j, cont))
    lls: dict[tuple[str, int], list[float]] = {k: [0.0] * 4 for k in out.gold}
    order = sorted(rows, key=len, reverse=True)
    with torch.inference_mode():
        for b in range(0, len(order), batch_size):
            batch = order[b:b + batch_size]
            width = len(batch[0])
            inp = torch.zeros((len(batch), width), dtype=torch.long)  # right padding, no mask: causal
            for n, ids in enumerate(batch):
                inp[n, : len(ids)] = torch.tensor(ids)
            logprobs = F.log_softmax(model(inp).logits.float(), dim=-1)
            for n, ids in enumerate(batch):
                for key, j, cont in rows[ids]:
                    pos = torch.arange(len(ids) - len(cont), len(ids))
                    lls[key][j] = float(logprobs[n, pos, torch.tensor(cont)].sum())
    out.lls = lls
    out.seconds = time.perf_counter() - started
    out.extra = {"max_length": max_length}
    return out


def score_ours_lm_assets(hf_dir: Path, subjects: list[str], batch_size: int, limit: int | None, shots: int) -> Scored:
    """Our scorer: `lm_assets.evaluation` (our `Transformer` and the SentencePiece model of the export).

    `load_model(hf_dir)`, `mmlu_questions(zip, "test", 5, subjects)` (the first `limit` per subject, as
    `evaluate_mmlu`'s `limit` takes them) and `score_questions(em, questions)`: one dict per question
    with its `loglikelihoods`, `gold` and `truncated`; the prompts are the questions' `context`.
    Raises ImportError where that API is missing.
    """
    try:
        from lm_assets.evaluation import load_model, mmlu_questions, score_questions
    except ImportError as e:
        raise ImportError(f"lm_assets.evaluation is not usable here ({e})") from e

    started = time.perf_counter()
    em = load_model(hf_dir)
    questions = mmlu_questions(MMLU_ZIP, "test", shots, subjects)
    if limit is not None:
        questions = [q for q in questions if q.index < limit]
    scored = score_questions(em, questions, max_batch_size=max(batch_size, 1))
    out = Scored("lm_assets.evaluation")
    for q, r in zip(questions, scored, strict=True):
        key = (q.subject, q.index)
        out.lls[key] = [float(x) for x in r["loglikelihoods"]]
        out.gold[key] = int(r["gold"])
        out.contexts[key] = q.context
    out.truncated = sum(bool(r["truncated"]) for r in scored)
    out.seconds = time.perf_counter() - started
    out.extra = {
        "max_length": em.max_length,
        "shots_below_k": sum(q.shots != shots for q in questions),
        # The model reads only the last max_length tokens, so equal log-likelihoods do not show that the
        # whole prompt is tokenized alike: compare our token ids with those of the HF tokenizer lm-eval uses.
        "token_mismatches": token_mismatches(em, hf_dir, questions),
    }
    return out


def token_mismatches(em, hf_dir: Path, questions) -> int:
    """Questions where our `(context_enc, continuation_enc)` pairs differ from lm-eval's (HF tokenizer)."""
    from transformers import AutoTokenizer

    from lm_assets.evaluation.scoring import encode_many

    tok = AutoTokenizer.from_pretrained(hf_dir)
    ours = encode_many(em, [(q.context, q.continuations) for q in questions])
    bad = 0
    for q, pairs in zip(questions, ours, strict=True):
        theirs = [hf_encode_pair(tok, q.context, c) for c in q.continuations]
        bad += [(list(a), list(b)) for a, b in pairs] != theirs
    return bad


def hf_encode_pair(tok, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's `_encode_pair` with `tok_encode` = `tokenizer.encode(s)` (add_bos_token unset)."""
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    whole = tok.encode(context + continuation)
    ctx = tok.encode(context)
    return ctx, whole[len(ctx):]


def score_ours(mode: str, hf_dir: Path, subjects: list[str], batch_size: int, limit: int | None, shots: int) -> Scored:
    if mode in ("auto", "lm_assets"):
        try:
            return score_ours_lm_assets(hf_dir, subjects, batch_size, limit, shots)
        except ImportError as e:
            if mode == "lm_assets":
                raise
            print(f"ours: {e}; using the reference re-implementation in this file", flush=True)
    return score_reference(hf_dir, subjects, batch_size, limit, shots)


# --------------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------------


def accuracies(side: Scored, keys: list[tuple[str, int]]) -> tuple[float, float]:
    acc = sum(argmax(side.lls[k]) == side.gold[k] for k in keys) / len(keys)
    lens = [float(len(c)) for c in LETTERS]  # lm-eval: len(choice) in characters, without the delimiter
    acc_norm = sum(argmax([ll / n for ll, n in zip(side.lls[k], lens)]) == side.gold[k] for k in keys) / len(keys)
    return acc, acc_norm


def compare(ref: Scored, ours: Scored, subjects: list[str]) -> dict:
    keys = sorted(ref.lls)
    missing = sorted(set(keys) ^ set(ours.lls))
    keys = [k for k in keys if k in ours.lls]
    agree = sum(argmax(ref.lls[k]) == argmax(ours.lls[k]) for k in keys)
    gold_diff = sum(ref.gold[k] != ours.gold[k] for k in keys)
    max_abs = max((abs(a - b) for k in keys for a, b in zip(ref.lls[k], ours.lls[k])), default=float("nan"))
    prompts = [k for k in keys if k in ref.contexts and k in ours.contexts]
    same_prompt = sum(ref.contexts[k] == ours.contexts[k] for k in prompts)
    acc_ref, accn_ref = accuracies(ref, keys)
    acc_ours, accn_ours = accuracies(ours, keys)
    per_subject = {}
    for s in subjects:
        ks = [k for k in keys if k[0] == s]
        if ks:
            per_subject[s] = {
                "questions": len(ks),
                "agreement": sum(argmax(ref.lls[k]) == argmax(ours.lls[k]) for k in ks) / len(ks),
                "acc_lm_eval": accuracies(ref, ks)[0],
                "acc_ours": accuracies(ours, ks)[0],
            }
    # How decisive the predictions are: a model that always picks one letter agrees trivially.
    picks = [0, 0, 0, 0]
    margins = []
    for k in keys:
        picks[argmax(ref.lls[k])] += 1
        top = sorted(ref.lls[k], reverse=True)
        margins.append(top[0] - top[1])
    margins.sort()
    return {
        "questions": len(keys),
        "lm_eval_predicted_letters": dict(zip(LETTERS, picks)),
        "lm_eval_min_top2_margin": margins[0] if margins else float("nan"),
        "lm_eval_median_top2_margin": margins[len(margins) // 2] if margins else float("nan"),
        "missing_on_one_side": len(missing),
        "agreement": agree / len(keys) if keys else float("nan"),
        "disagreements": len(keys) - agree,
        "gold_mismatches": gold_diff,
        "lm_eval": {"acc": acc_ref, "acc_norm": accn_ref},
        "ours": {"acc": acc_ours, "acc_norm": accn_ours, "scorer": ours.name},
        "max_abs_loglik_diff": max_abs,
        "prompts_compared": len(prompts),
        "prompts_identical": same_prompt,
        "left_truncated_questions": ours.truncated,
        "per_subject": per_subject,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hf-dir", type=Path, help="an HF export (default: the demo checkpoint's)")
    p.add_argument("--subjects", default=",".join(DEFAULT_SUBJECTS), help="comma-separated, or 'all' (57 subjects)")
    p.add_argument("--limit", type=int, default=None, help="at most N test questions per subject")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-fewshot", type=int, default=None, help="shots (MMLU: from dev, default 5, as the task files "
                   "say; --tasks: default 0)")
    p.add_argument("--ours", choices=["auto", "lm_assets", "reference"], default="lm_assets")
    p.add_argument("--perturb", type=float, default=None, metavar="SCALE",
                   help="score a seeded noisy copy of the export instead (noise std = SCALE x each matrix's std)")
    p.add_argument("--write-tasks", action="store_true", help="only write the task files (into the output folder)")
    p.add_argument("--smoke", action="store_true", help="seconds: a tiny random model, 2 questions of one subject")
    p.add_argument("--tasks", default=None, help="the task suite instead of MMLU: comma-separated names of "
                   "lm_assets.evaluation.tasks (or 'all'), each read from --task-data/<name> folders or the shipped "
                   "samples; --num-fewshot then defaults to 0")  # fmt: skip
    p.add_argument("--bias-data", type=Path, default=None, help="folder with crows_pairs/, bbq/ and cbbq/ as the releases "
                   "ship them (default: the shipped samples, data/eval/bias)")
    p.add_argument("--task-data", type=Path, default=None,
                   help="a folder holding each task's release in a folder named as the shipped samples are")
    args = p.parse_args(argv)
    if args.tasks is not None:
        return suite_main(args)
    args.num_fewshot = NUM_FEWSHOT if args.num_fewshot is None else args.num_fewshot
    if args.smoke:
        args.subjects, args.limit = DEFAULT_SUBJECTS[0], 2

    out = out_dir("eval_agreement")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_DATASETS_CACHE", str(out / "hf_datasets"))

    every = zip_subjects()
    task_dir, csv_root = out / "lm_eval_tasks", out / "mmlu"
    write_tasks(task_dir, every, csv_root)
    if args.write_tasks:
        print(f"wrote the task files of {len(every)} subjects in {task_dir}")
        return 0
    subjects = every if args.subjects == "all" else [s.strip() for s in args.subjects.split(",") if s.strip()]
    unknown = sorted(set(subjects) - set(every))
    if unknown:
        sys.exit(f"unknown subjects: {', '.join(unknown)}")

    check_against_upstream(subjects)
    extract_csvs(csv_root)
    if args.hf_dir is None:
        args.hf_dir = smoke_checkpoint(out) if args.smoke else demo_checkpoint(out)
    elif not is_export(args.hf_dir):
        sys.exit(f"no HF export at {args.hf_dir} (expected model.safetensors and config.json)")
    if args.perturb is not None:
        args.hf_dir = perturbed_copy(args.hf_dir, out, args.perturb)
        print(f"scoring {args.hf_dir}: the export with noise of {args.perturb:g} x each matrix's std", flush=True)

    theirs = run_lm_eval(args.hf_dir, task_dir, subjects, args.batch_size, args.limit, args.num_fewshot)
    ours = score_ours(args.ours, args.hf_dir, subjects, args.batch_size, args.limit, args.num_fewshot)
    report = compare(theirs, ours, subjects)
    report.update({
        "hf_dir": str(args.hf_dir),
        "subjects": subjects,
        "num_fewshot": args.num_fewshot,
        "lm_eval_version": theirs.extra["version"],
        "lm_eval_reported": theirs.extra["results"],
        "lm_eval_per_sample_acc_mismatches": theirs.extra["per_sample_acc_mismatches"],
        "seconds": {"lm_eval": round(theirs.seconds, 1), "ours": round(ours.seconds, 1)},
        **({"ours_" + k: v for k, v in ours.extra.items()}),
    })

    print()
    print(f"MMLU {args.num_fewshot}-shot, {len(subjects)} subjects, {report['questions']} questions, "
          f"model {args.hf_dir}")
    print(f"{'subject':<40} {'n':>5} {'agree':>7} {'acc lm-eval':>12} {'acc ours':>9}")
    for s, r in report["per_subject"].items():
        print(f"{s:<40} {r['questions']:>5} {r['agreement']:>7.2%} {r['acc_lm_eval']:>12.4f} {r['acc_ours']:>9.4f}")
    print(f"agreement (identical predicted choice): {report['agreement']:.2%} "
          f"({report['disagreements']} of {report['questions']} differ; goal >= 99%)")
    print(f"acc       lm-eval {report['lm_eval']['acc']:.4f}   ours ({ours.name}) {report['ours']['acc']:.4f}")
    print(f"acc_norm  lm-eval {report['lm_eval']['acc_norm']:.4f}   "
          f"ours ({ours.name}) {report['ours']['acc_norm']:.4f}")
    print(f"max |loglikelihood difference| per choice: {report['max_abs_loglik_diff']:.3g}")
    print(f"lm-eval's predicted letters: {report['lm_eval_predicted_letters']}; top-2 log-likelihood margin: "
          f"min {report['lm_eval_min_top2_margin']:.3g}, median {report['lm_eval_median_top2_margin']:.3g}")
    if report["prompts_compared"]:
        print(f"identical prompts: {report['prompts_identical']} of {report['prompts_compared']}")
    if report["left_truncated_questions"] is not None:
        print(f"questions whose prompt + answer exceeds the model's {ours.extra.get('max_length', '?')} positions "
              f"(left-truncated by both sides): {report['left_truncated_questions']}")
    if "ours_token_mismatches" in report:
        print(f"questions whose token ids (whole prompt and answers) differ from lm-eval's HF tokenizer: "
              f"{report['ours_token_mismatches']}")
    print(f"gold answers differing: {report['gold_mismatches']}; lm-eval per-sample acc vs. argmax of its "
          f"log-likelihoods: {report['lm_eval_per_sample_acc_mismatches']} mismatches; "
          f"time lm-eval {report['seconds']['lm_eval']} s, ours {report['seconds']['ours']} s")
    print(json.dumps(report, sort_keys=True))
    return 0


def suite_checkpoint(out: Path) -> Path:
    """A tiny random model with a byte-fallback tokenizer trained on the shipped task samples (English and
    Chinese), exported to `out/suite-hf/`."""
    from lm_assets.corpus.tokens.tokenizer import TokenizerConfig, train_tokenizer
    from lm_assets.training.config import from_preset
    from lm_assets.training.export import export_hf
    from lm_assets.training.model import Transformer

    hf_dir = out / "suite-hf"
    if is_export(hf_dir):
        return hf_dir
    texts = [p.read_text(encoding="utf-8") for p in sorted((REPO / "data/eval/tasks").rglob("*")) if p.suffix in
             (".jsonl", ".csv", ".tsv")]  # fmt: skip
    trained = train_tokenizer(texts * 3, TokenizerConfig(vocab_size=1500, num_threads=1, hard_vocab_limit=False),
                              out / "suite-tokenizer")  # fmt: skip
    cfg = from_preset("tiny", trained.vocab_size, max_seq_len=2048)
    return export_hf(Transformer(cfg, seed=0).eval(), cfg, hf_dir, tokenizer_model_path=trained.path)


def suite_main(args) -> int:
    """The task suite, lm-eval against ours (bench/benchlib/task_agreement.py)."""
    from benchlib.task_agreement import BIAS_FOLDERS, BIAS_TASKS, agreement, bias_agreement

    from lm_assets.defs.evaluation.tasks import SAMPLE_FOLDERS
    from lm_assets.evaluation.tasks import TASK_NAMES

    out = out_dir("eval_agreement") / "suite"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_DATASETS_CACHE", str(out / "hf_datasets"))
    every = (*TASK_NAMES, *BIAS_TASKS)
    tasks = list(every) if args.tasks == "all" else [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = sorted(set(tasks) - set(every))
    if unknown:
        sys.exit(f"unknown tasks: {', '.join(unknown)}; the suite: {', '.join(every)}")
    suite, bias = [t for t in tasks if t in TASK_NAMES], [t for t in tasks if t in BIAS_TASKS]
    root = args.task_data or REPO / "data/eval/tasks"
    bias_root = args.bias_data or REPO / "data/eval/bias"
    shots = args.num_fewshot or 0
    limit = 2 if args.smoke and args.limit is None else args.limit
    hf_dir = args.hf_dir or suite_checkpoint(out)
    if args.perturb is not None:  # answers that depend on the question, so that the bias scores are not all 0
        hf_dir = perturbed_copy(hf_dir, out, args.perturb)
    rows = agreement(hf_dir, suite, {t: root / SAMPLE_FOLDERS[t] for t in suite}, out, shots, limit, args.batch_size) if suite else []
    if bias:
        rows += bias_agreement(hf_dir, bias, {t: bias_root / BIAS_FOLDERS[t] for t in bias}, out / "bias", limit, args.batch_size)
    print(f"\nThe task suite {shots}-shot (bias sets 0-shot), lm-eval against ours, model {hf_dir}, data {root}, {bias_root}")
    print(f"{'task':<20} {'questions':>9} {'prompts identical':>18} {'predictions agree':>18} {'max |Δ loglik|':>15} {'max |Δ metric|':>15}")
    for r in rows:
        metric = f"{r['max_abs_metric_diff']:>15.3g}" if "max_abs_metric_diff" in r else f"{'':>15}"
        print(f"{r['task']:<20} {r['questions']:>9} {r['prompts_identical']:>18} {r['predictions_agree']:>18} "
              f"{r['max_abs_loglikelihood_diff']:>15.3g} {metric}")
    for r in rows:
        for metric, (lm_eval_value, ours) in r.get("metrics", {}).items():
            print(f"  {r['task']} {metric}: lm-eval {lm_eval_value} ours {ours}")
    print(json.dumps({"shots": shots, "hf_dir": str(hf_dir), "data": str(root), "bias_data": str(bias_root), "tasks": rows},
                     sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
