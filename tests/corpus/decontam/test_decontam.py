"""Decontamination against MMLU (the real set, from the shared zip) and C-Eval (a small set in the official layout)."""

import csv
import time
import zipfile
from pathlib import Path

import polars as pl
import pytest

from lm_assets.corpus.decontam.contamination import (
    ContaminationIndex,
    DecontamConfig,
    evaluation_texts,
    find_contamination,
    load_ceval,
    load_mmlu,
    match_counts,
    normalize_units,
)

MMLU_ZIP = Path("/work/shared/data/mmlu.zip")
pytestmark = pytest.mark.skipif(not MMLU_ZIP.exists(), reason="needs the shared MMLU archive")

PLANTED_MMLU = (
    "You’ve made a scientific theory that there is an attractive force between all objects. "
    "When will your theory be proven to be correct?"
)

CEVAL_HEADER = ["id", "question", "A", "B", "C", "D", "answer", "explanation"]
CEVAL_ROWS = {
    "dev": [
        [
            0,
            "唐朝时期，中国与西亚、欧洲之间的陆上贸易主要经由哪条通道进行？",
            "海上丝绸之路",
            "茶马古道",
            "陆上丝绸之路",
            "京杭大运河",
            "C",
            "1. 丝绸之路自汉代开辟，唐朝时经河西走廊通往西亚和欧洲，是当时最重要的陆上贸易通道，\n所以答案是C。",
        ]
    ],
    "val": [
        [0, "北宋时期出现的世界上最早的纸币是下列哪一种？", "交子", "会子", "宝钞", "关子", "A"],
        [1, "明朝郑和七次下西洋，船队最远到达了哪里？", "日本列岛", "非洲东海岸", "澳大利亚", "美洲西海岸", "B"],
    ],
    "test": [
        [0, "秦始皇统一六国后，在全国范围内推行的统一文字是下列哪一种字体？", "甲骨文", "金文", "小篆", "楷书"],
        [1, "鸦片战争后，清政府被迫签订的第一个不平等条约是哪一个？", "《南京条约》", "《马关条约》", "《辛丑条约》", "《北京条约》"],
    ],
}

ENGLISH_PAGE = (
    "Physics for curious readers\n\n"
    "Gravity was the first force to be described mathematically. Newton's law says that every mass "
    "attracts every other mass, and the pull weakens with the square of the distance.\n\n"
)
CHINESE_PAGE = (
    "今年暑假，我和同学一起去博物馆参观了古代货币展。\n"
    "讲解员先请大家思考一个问题：北宋时期出现的世界上最早的纸币是下列哪一种？答案是交子。\n"
    "展厅里还陈列着许多铜钱和银锭，让我们对古代经济有了更直观的认识。"
)


def write_ceval(root: Path, subject: str = "high_school_history") -> Path:
    for split, rows in CEVAL_ROWS.items():
        folder = root / split
        folder.mkdir(parents=True, exist_ok=True)
        header = CEVAL_HEADER if split == "dev" else CEVAL_HEADER[:7] if split == "val" else CEVAL_HEADER[:6]
        with open(folder / f"{subject}_{split}.csv", "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(rows)
    return root


def zip_folder(folder: Path, archive: Path, prefix: str = "") -> Path:
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted(folder.rglob("*.csv")):
            z.write(path, prefix + path.relative_to(folder).as_posix())
    return archive


@pytest.fixture(scope="module")
def mmlu() -> pl.DataFrame:
    return load_mmlu(MMLU_ZIP)


@pytest.fixture(scope="module")
def ceval(tmp_path_factory) -> pl.DataFrame:
    return load_ceval(write_ceval(tmp_path_factory.mktemp("ceval")))


@pytest.fixture(scope="module")
def index(mmlu, ceval) -> ContaminationIndex:
    return ContaminationIndex.build({"mmlu": evaluation_texts(mmlu), "ceval": evaluation_texts(ceval)})


def docs_frame(*texts: str) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "doc_id": [f"d{i}" for i in range(len(texts))],
            "url": [f"https://example.org/{i}" for i in range(len(texts))],
            "text": list(texts),
            "lang": ["zh" if any("\u4e00" <= c <= "\u9fff" for c in t) else "en" for t in texts],
        }
    )


# ---------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------


def test_load_mmlu_from_the_zip(mmlu):
    assert mmlu.columns == ["subject", "split", "question", "A", "B", "C", "D", "answer"]
    counts = dict(mmlu.group_by("split").len().iter_rows())
    assert counts == {"dev": 285, "val": 1531, "test": 14042}
    assert mmlu["subject"].n_unique() == 57
    assert set(mmlu["answer"].unique()) == {"A", "B", "C", "D"}
    # Fields holding commas, quotes and newlines come through whole.
    assert mmlu.filter(pl.col("question").str.contains("\n")).height > 100
    assert mmlu.filter(pl.col("question") == PLANTED_MMLU)["subject"].to_list() == ["astronomy"]
    first = mmlu.row(0, named=True)
    assert (first["subject"], first["split"]) == ("abstract_algebra", "dev")


@pytest.mark.parametrize("layout", ["data/", ""])
def test_load_mmlu_from_extracted_folders(mmlu, tmp_path, layout):
    subjects = ("astronomy", "virology")
    with zipfile.ZipFile(MMLU_ZIP) as z:
        for name in z.namelist():
            if any(f"/{s}_" in name for s in subjects):
                target = tmp_path / (layout + name.removeprefix("data/"))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(name))
    got = load_mmlu(tmp_path)
    expected = mmlu.filter(pl.col("subject").is_in(subjects))
    assert got.equals(expected)


def test_load_ceval_folder_and_zip(ceval, tmp_path):
    assert ceval.columns == ["subject", "split", "id", "question", "A", "B", "C", "D", "answer", "explanation"]
    assert ceval["split"].to_list() == ["dev", "val", "val", "test", "test"]
    assert ceval["subject"].unique().to_list() == ["high_school_history"]
    assert ceval.filter(pl.col("split") == "test")["answer"].is_null().all()
    assert ceval.filter(pl.col("split") != "test")["answer"].to_list() == ["C", "A", "B"]
    assert ceval["explanation"][0].endswith("所以答案是C。") and "\n" in ceval["explanation"][0]
    assert ceval["explanation"][1:].is_null().all()
    assert ceval["id"].to_list() == [0, 0, 1, 0, 1]

    folder = write_ceval(tmp_path / "ceval-exam")
    assert load_ceval(zip_folder(folder, tmp_path / "ceval-exam.zip")).equals(ceval)
    assert load_ceval(zip_folder(folder, tmp_path / "nested.zip", prefix="ceval-exam/")).equals(ceval)


def test_readers_refuse_what_they_cannot_read(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_ceval(tmp_path)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "x_dev.csv").write_text("q,1,2,3\n")
    with pytest.raises(ValueError, match="expected 6 fields"):
        load_mmlu(tmp_path)


# ---------------------------------------------------------------------------------------------
# Units and the index
# ---------------------------------------------------------------------------------------------


def test_units_mix_words_and_cjk_characters():
    assert normalize_units("Hello, World! 你好世界 ＡＢＣ-123 Straße") == [
        "hello", "world", "你", "好", "世", "界", "abc", "123", "strasse",
    ]
    assert normalize_units("You’ve") == normalize_units("YOU'VE") == ["you", "ve"]
    assert normalize_units("") == normalize_units(None) == []


def test_index_contents(index, mmlu, ceval):
    stats = index.stats()
    assert stats["benchmarks"] == ["mmlu", "ceval"]
    assert stats["ngrams_indexed"]["mmlu"] > 500_000
    assert 0 < stats["ngrams_indexed"]["ceval"] < 100
    assert stats["texts_indexed"]["mmlu"] + stats["texts_skipped_too_short"]["mmlu"] == 2 * mmlu.height
    assert stats["texts_indexed"]["ceval"] == 2 * ceval.height
    assert {13, 20} <= set(stats["gram_lengths"])


def test_short_texts_are_indexed_whole_or_skipped():
    tiny = ContaminationIndex.build(
        {"tiny": ["What is the capital city of the country France today", "Is it true?"]}
    )
    assert tiny.texts_indexed == {"tiny": 1} and tiny.texts_skipped == {"tiny": 1}
    assert tiny.lengths == (10,) and tiny.ngrams == {"tiny": 1}
    result = find_contamination(
        docs_frame("Quiz night! What is the capital city of the country France today? Paris.", "Is it true? Yes."),
        tiny,
    )
    assert result.dropped["doc_id"].to_list() == ["d0"]
    assert result.dropped["reason"].to_list() == ["contamination:tiny"]


def test_index_save_and_load(index, tmp_path):
    path = tmp_path / "index.npz"
    index.save(path)
    again = ContaminationIndex.load(path)
    assert again.fingerprint() == index.fingerprint()
    assert again.stats() == index.stats()


# ---------------------------------------------------------------------------------------------
# Finding contaminated documents
# ---------------------------------------------------------------------------------------------


def test_planted_mmlu_question_is_dropped_and_near_miss_kept(index):
    # Upper-cased, with a straight apostrophe: normalization still matches it.
    question = PLANTED_MMLU.upper().replace("’", "'")
    planted = ENGLISH_PAGE + "A quiz question we liked:\n" + question + "\nThink about it."
    near_miss = ENGLISH_PAGE + "You've made a scientific theory? Tell us when it will be proven correct."
    ten_words = ENGLISH_PAGE + "You've made a scientific theory that there is an attractive force, or so you said."
    clean = ENGLISH_PAGE + "Gravity keeps the planets in their orbits."
    docs = docs_frame(planted, near_miss, ten_words, clean)
    result = find_contamination(docs, index)
    assert result.dropped.to_dicts() == [{"doc_id": "d0", "stage": "decontaminated", "reason": "contamination:mmlu"}]
    assert result.kept.equals(docs.filter(pl.col("doc_id") != "d0"))
    stats = result.stats
    assert stats["docs_checked"] == 4 and stats["docs_dropped"] == 1
    assert stats["dropped_per_benchmark"] == {"mmlu": 1, "ceval": 0}
    assert stats["ngrams_indexed"] == index.ngrams


def test_planted_ceval_question_in_chinese_page_is_dropped(index):
    near_miss = "北宋时期的纸币叫交子，它是世界上出现最早的纸币之一。博物馆的讲解非常生动。"
    docs = docs_frame(CHINESE_PAGE, near_miss, ENGLISH_PAGE + "原题：" + CEVAL_ROWS["test"][1][1])
    result = find_contamination(docs, index)
    assert result.dropped["doc_id"].to_list() == ["d0", "d2"]
    assert set(result.dropped["reason"]) == {"contamination:ceval"}
    assert result.kept["doc_id"].to_list() == ["d1"]
    assert result.stats["dropped_per_benchmark"] == {"mmlu": 0, "ceval": 2}


def test_min_matches(index):
    # Exactly 13 units of the question: one shared 13-gram.
    one_gram = ENGLISH_PAGE + " ".join(normalize_units(PLANTED_MMLU)[:13]) + " and more words after."
    docs = docs_frame(one_gram, ENGLISH_PAGE + PLANTED_MMLU)
    assert match_counts(docs["text"].to_list(), index)[:, 0].tolist()[0] == 1
    strict = find_contamination(docs, index, DecontamConfig(min_matches=2))
    assert strict.dropped["doc_id"].to_list() == ["d1"]
    assert find_contamination(docs, index).dropped["doc_id"].to_list() == ["d0", "d1"]
    with pytest.raises(ValueError, match="differ from the index"):
        find_contamination(docs, index, DecontamConfig(word_ngram=8))


def test_grams_do_not_span_documents(index):
    units = normalize_units(PLANTED_MMLU)
    assert len(units) == 24
    # Neither half holds 13 units of the question, but the two together would.
    docs = docs_frame(ENGLISH_PAGE + " ".join(units[:12]), " ".join(units[12:]) + " " + ENGLISH_PAGE)
    result = find_contamination(docs, index, DecontamConfig(batch_units=10_000_000))
    assert result.dropped.height == 0
    assert result.kept.height == 2


def test_batches_do_not_change_results(index):
    texts = [ENGLISH_PAGE * (i % 3 + 1) for i in range(30)]
    texts[17] += PLANTED_MMLU
    texts[5] += CHINESE_PAGE
    docs = docs_frame(*texts)
    whole = find_contamination(docs, index)
    small = find_contamination(docs, index, DecontamConfig(batch_units=50))
    assert whole.dropped.equals(small.dropped)
    assert sorted(whole.dropped["doc_id"]) == ["d17", "d5"]


def test_long_documents_are_linear(index):
    rng_words = (ENGLISH_PAGE.split() * 200)[:2_000]
    docs = docs_frame(*[" ".join(rng_words[i:] + rng_words[:i]) for i in range(200)])  # 400k words
    start = time.perf_counter()
    result = find_contamination(docs, index)
    elapsed = time.perf_counter() - start
    assert result.dropped.height == 0
    assert elapsed < 5.0
    huge = docs_frame(" ".join((ENGLISH_PAGE.split() * 2_000)[:100_000]) + " " + PLANTED_MMLU)
    assert find_contamination(huge, index).dropped.height == 1


def test_empty_and_null_texts(index):
    docs = pl.DataFrame({"doc_id": ["a", "b", "c"], "text": ["", None, "short"]})
    result = find_contamination(docs, index)
    assert result.kept.height == 3 and result.dropped.height == 0
    empty = find_contamination(docs.head(0), index)
    assert empty.kept.height == 0 and empty.stats["docs_checked"] == 0
