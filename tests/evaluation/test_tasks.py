"""The task suite's prompts, as lm-evaluation-harness 0.4.13 writes them, from each release's own layout.

`bench/eval_agreement.py --tasks all` checks the same against lm-eval itself (it is a bench dependency);
these pin the strings, the readers of each release layout, and the few-shot draws."""

import json
import random

import pytest

from lm_assets.evaluation.tasks import TASKS, hellaswag_preprocess, load_task, questions_of, read_rows

SAMPLES = "data/eval/tasks"


def test_hellaswag_removes_wikihow_markers_and_scores_each_ending():
    doc = {"activity_label": "Home and Garden", "ctx_a": "[header] How to water a cactus [title] Check the soil.",
           "ctx_b": "you should", "endings": ["wait [step] a week.", "pour", "x", "y"], "label": "0"}
    (q,) = questions_of(TASKS["hellaswag"], [TASKS["hellaswag"].reader(doc)], [], 0)
    assert q.context == "Home and Garden: How to water a cactus. Check the soil. You should"
    assert q.continuations == [" wait a week.", " pour", " x", " y"] and q.gold == 0
    assert hellaswag_preprocess("  a [title] b  [x]c ") == "a. b c"


def test_arc_reads_ai2s_layout_and_huggingfaces_alike(tmp_path):
    ai2 = {"id": "x", "question": {"stem": "What melts ice?", "choices": [{"text": "Heat", "label": "1"},
           {"text": "Cold", "label": "2"}, {"text": "Dark", "label": "3"}]}, "answerKey": "1"}  # fmt: skip
    hf = {"id": "x", "question": "What melts ice?", "choices": {"text": ["Heat", "Cold", "Dark"], "label": ["1", "2", "3"]},
          "answerKey": "1"}
    (tmp_path / "ARC-Easy-Test.jsonl").write_text(json.dumps(ai2) + "\n")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "ARC-Easy-Test.jsonl").write_text(json.dumps(hf) + "\n")
    a = load_task(TASKS["arc_easy"], tmp_path / "ARC-Easy-Test.jsonl")
    b = load_task(TASKS["arc_easy"], tmp_path / "hf")
    assert a == b and a[0].context == "Question: What melts ice?\nAnswer:" and a[0].choices == ("Heat", "Cold", "Dark")
    assert a[0].gold == 0 and len(a[0].continuations) == 3


def test_piqa_takes_its_labels_from_the_list_beside_the_questions(tmp_path):
    (tmp_path / "valid.jsonl").write_text(json.dumps({"goal": "Dry a shirt", "sol1": "hang it", "sol2": "wet it"}) + "\n")
    (tmp_path / "valid-labels.lst").write_text("0\n")
    (q,) = load_task(TASKS["piqa"], tmp_path)
    assert q.context == "Question: Dry a shirt\nAnswer:" and q.choices == ("hang it", "wet it") and q.gold == 0
    (tmp_path / "valid-labels.lst").write_text("0\n1\n")
    with pytest.raises(ValueError, match="2 labels for 1 questions"):
        load_task(TASKS["piqa"], tmp_path)


def test_winogrande_is_one_context_per_option_with_the_rest_of_the_sentence_scored():
    doc = {"sentence": "The cup fell off the table because _ was too close to the edge.", "option1": "the cup",
           "option2": "the table", "answer": "1"}
    shot = {"sentence": "Ann thanked Bea because _ had helped her.", "option1": "Ann", "option2": "Bea", "answer": "2"}
    (q,) = questions_of(TASKS["winogrande"], [doc], [shot, doc], 1)  # the question itself is never a shot
    assert q.contexts == ("Ann thanked Bea because Bea had helped her.\n\nThe cup fell off the table because the cup",
                          "Ann thanked Bea because Bea had helped her.\n\nThe cup fell off the table because the table")
    assert q.items == [(q.contexts[0], [" was too close to the edge."]), (q.contexts[1], [" was too close to the edge."])]
    assert q.gold == 0 and q.shots == 1


def test_boolq_reads_the_releases_true_and_false():
    doc = TASKS["boolq"].reader({"question": "is ice cold", "title": "Ice", "answer": True, "passage": "Ice is frozen."})
    (q,) = questions_of(TASKS["boolq"], [doc], [], 0)
    assert q.context == "Ice is frozen.\nQuestion: is ice cold?\nAnswer:" and q.choices == ("no", "yes") and q.gold == 1


def test_chinese_tasks_read_their_releases(tmp_path):
    story = {"InputStoryid": "s", **{f"InputSentence{i}": f"第{i}句。" for i in range(1, 5)},
             "RandomFifthSentenceQuiz1": "好。", "RandomFifthSentenceQuiz2": "坏。", "AnswerRightEnding": "2"}
    tsv = tmp_path / "spring2016.val.zh.tsv.split_20_80_eval.tsv"
    tsv.write_text("\t".join(story) + "\n" + "\t".join(story.values()) + "\n", encoding="utf-8")
    (q,) = load_task(TASKS["xstorycloze_zh"], tmp_path)
    assert q.context == "第1句。 第2句。 第3句。 第4句。" and q.choices == ("好。", "坏。") and q.gold == 1
    copa = {"premise": "我的身体投下了阴影。", "choice1": "Sun rose.", "choice2": "草被割了。", "question": "cause", "label": 0,
            "idx": 1, "changed": False}
    (q,) = questions_of(TASKS["xcopa_zh"], [copa], [], 0)
    assert q.context == "我的身体投下了阴影 因为" and q.choices == ("sun rose.", "草被割了。")


def test_cmmlu_is_each_subjects_questions_after_its_description_and_first_dev_examples(tmp_path):
    header = ",Question,A,B,C,D,Answer\n"
    for split, rows in (("dev", ["0,一加一？,1,2,3,4,B", "1,二加二？,4,5,6,7,A"]), ("test", ["0,三加三？,5,6,7,8,B"])):
        (tmp_path / split).mkdir()
        (tmp_path / split / "elementary_mathematics.csv").write_text(header + "\n".join(rows) + "\n", encoding="utf-8")
    (q,) = load_task(TASKS["cmmlu"], tmp_path, num_fewshot=2)
    assert q.context == ("以下是关于初等数学的单项选择题，请直接给出正确答案的选项。\n\n"
                         "一加一？\nA. 1\nB. 2\nC. 3\nD. 4\n答案： B\n\n二加二？\nA. 4\nB. 5\nC. 6\nD. 7\n答案： A\n\n"
                         "三加三？\nA. 5\nB. 6\nC. 7\nD. 8\n答案：")
    assert q.subject == "elementary_mathematics" and q.gold == 1 and q.continuations == [" A", " B", " C", " D"]


def test_random_shots_are_drawn_as_lm_evals_sampler_draws_them():
    """One Random(1234) for the task, `sample(pool, n)` per question in order; where lm-eval's task has no
    test split (BoolQ), `sample(pool, n + 1)` with the question itself dropped and the first n kept."""
    pool = [{"passage": f"p{i}", "question": f"q{i}", "label": i % 2} for i in range(10)]
    docs = [{"passage": "P", "question": f"Q{i}", "label": 1} for i in range(3)] + [pool[4]]
    questions = questions_of(TASKS["boolq"], docs, pool, 2)
    rnd = random.Random(1234)
    for q, doc in zip(questions, docs):
        shots = [s for s in rnd.sample(pool, 3) if s != doc][:2]
        expected = "".join(f"{s['passage']}\nQuestion: {s['question']}?\nAnswer: {['no', 'yes'][s['label']]}\n\n" for s in shots)
        assert q.context.startswith(expected) and q.shots == 2
    with pytest.raises(ValueError, match="3-shot needs 4 examples"):
        questions_of(TASKS["boolq"], docs, pool[:2], 3)

    arc_pool = [{"question": f"q{i}", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"} for i in range(6)]
    rnd = random.Random(1234)
    for q in questions_of(TASKS["arc_easy"], arc_pool[:3], arc_pool, 2):
        assert q.context.startswith("".join(f"Question: {s['question']}\nAnswer: a\n\n" for s in rnd.sample(arc_pool, 2)))


def test_every_shipped_sample_loads_zero_and_few_shot():
    from lm_assets.defs.evaluation.tasks import SAMPLE_FOLDERS

    for name, task in TASKS.items():
        path = f"{SAMPLES}/{SAMPLE_FOLDERS[name]}"
        zero, few = load_task(task, path), load_task(task, path, num_fewshot=2)
        assert len(zero) >= 6 and len(few) == len(zero), name
        assert all(0 <= q.gold < len(q.choices) for q in zero), name
        assert all(q.shots == 2 and len(q.context) > len(z.context) for q, z in zip(few, zero)), name
    assert read_rows(__import__("pathlib").Path(f"{SAMPLES}/piqa/valid.jsonl"))[0].keys() == {"goal", "sol1", "sol2"}


def test_the_hugging_face_parquet_copies_load_as_the_releases_do(tmp_path):
    """The copies lm-eval loads (`validation-*.parquet`): HellaSwag's fields, BoolQ's super_glue `label`."""
    import polars as pl

    (tmp_path / "hellaswag").mkdir()
    pl.DataFrame([{"ind": 1, "activity_label": "Cooking", "ctx_a": "A man cracks an egg.", "ctx_b": "he", "ctx": "",
                   "endings": ["whisks it.", "eats the shell.", "sings.", "sleeps."], "source_id": "x", "split": "val",
                   "split_type": "indomain", "label": "0"}]).write_parquet(tmp_path / "hellaswag" / "validation-00000-of-00001.parquet")
    (q,) = load_task(TASKS["hellaswag"], tmp_path / "hellaswag")
    assert q.context == "Cooking: A man cracks an egg. He" and q.gold == 0 and q.choices[0] == "whisks it."
    (tmp_path / "boolq").mkdir()
    pl.DataFrame([{"question": "is ice cold", "passage": "Ice is frozen water.", "idx": 0, "label": 1}]).write_parquet(
        tmp_path / "boolq" / "validation-00000-of-00001.parquet")
    (q,) = load_task(TASKS["boolq"], tmp_path / "boolq")
    assert q.context == "Ice is frozen water.\nQuestion: is ice cold?\nAnswer:" and q.gold == 1
