"""The spam and listing signals read from a document's classifier tokens."""

import numpy as np
import pytest

from lm_assets.corpus.quality.classifier import token_ids
from lm_assets.corpus.quality.token_signals import SIGNALS, token_signal_matrix, token_signals

PROSE = (
    "The write-ahead log records every change before it reaches the database file. When a transaction commits, "
    "its pages are appended to the log and the database file is left untouched, so that readers keep seeing a "
    "consistent snapshot of it."
)
CHINESE_PROSE = "预写日志在修改写入数据库文件之前记录每一次变更。事务提交时，它的页面被追加到日志中，数据库文件保持不变。"


def signals(text: str) -> dict:
    return token_signals(token_ids(text, 3000))


def test_symbols_that_cut_chinese_sentences_apart_are_counted_between_characters():
    noisy = signals("今天★上午♀市政府№召开∝会议，讨论★城市♀建设。")
    clean = signals(CHINESE_PROSE)
    assert clean["q_tok_symbols"] == 0 and clean["q_tok_symbol_breaks"] == 0
    # 6 symbols among 25 tokens, each between two Chinese characters (17 of them).
    assert noisy["q_tok_symbols"] == pytest.approx(100 * 6 / 25)
    assert noisy["q_tok_symbol_breaks"] == pytest.approx(100 * 6 / 17)
    # Prose symbols (degrees, times, copyright) are not decoration.
    assert signals("Bake at 180° for 20 × 2 minutes. © 2024")["q_tok_symbols"] == 0


def test_keyword_lists_have_few_function_words_and_many_separators():
    keywords = signals("cheap shoes, running shoes, shoes sale, best shoes, shoes online, men shoes, women shoes")
    prose = signals(PROSE)
    assert prose["q_tok_function_words"] > 0.3 > 0.05 > keywords["q_tok_function_words"]
    assert keywords["q_tok_separators"] == pytest.approx(100 * 6 / 14)
    assert prose["q_tok_separators"] < 10
    listing = signals("钢管、钢板、钢材、铁丝、铝材、铜材、型材、管件、阀门")
    assert listing["q_tok_function_words"] == 0 and listing["q_tok_separators"] > 20
    assert signals(CHINESE_PROSE)["q_tok_function_words"] > 0.1


def test_a_phrase_inserted_again_and_again_is_counted():
    inserted = " ".join(f"Sentence number {n} says something new here. buy cheap pills online now." for n in range(10))
    repeated = signals(inserted)
    # "buy cheap pills online now ." is a phrase of 6 tokens, 10 times among 140 tokens.
    assert repeated["q_tok_phrase_repeats"] == pytest.approx(1000 * 10 / 140)
    assert signals(PROSE)["q_tok_phrase_repeats"] == 0


def test_spam_terms_are_counted_in_english_and_chinese_as_whole_words_and_character_runs():
    assert signals("Play casino poker online, free keygen here")["q_tok_spam_terms"] == pytest.approx(1000 * 3 / 8)
    assert signals("欢迎来到娱乐城，时时彩开奖结果，破解版下载")["q_tok_spam_terms"] == pytest.approx(1000 * 4 / 21)
    # Traditional spelling too; and a word only inside another does not count.
    assert signals("娛樂城")["q_tok_spam_terms"] > 0
    assert signals("casinos are not casinoville")["q_tok_spam_terms"] == pytest.approx(1000 / 4)
    assert signals(PROSE)["q_tok_spam_terms"] == signals(CHINESE_PROSE)["q_tok_spam_terms"] == 0


def test_a_batch_gives_each_document_the_signals_it_has_alone():
    texts = [PROSE, "", CHINESE_PROSE, "今天★上午♀市政府", "casino casino"]
    ids = [token_ids(text, 3000) for text in texts]
    batch = token_signal_matrix(ids)
    alone = np.vstack([token_signal_matrix([row]) for row in ids])
    assert batch.shape == (5, len(SIGNALS)) and np.array_equal(batch, alone)
    assert np.all(batch[1] == 0) and np.isfinite(batch).all()
    assert token_signal_matrix(ids, ()).shape == (5, 0)
