import sys
import unicodedata

import numpy as np

from lm_assets import text
from lm_assets.text import base_lang, is_cjk_lang, joined_unit_hashes, normalized_units, unit_hash, unit_hashes


def test_character_kinds_agree_with_the_unit_pattern():
    kinds = text.char_kinds()
    for code_point in range(sys.maxunicode + 1):
        char = chr(code_point)
        found = text._UNIT.findall("a" + char)
        expected = text.WORD_CHAR if found == ["a" + char] else text.CJK_UNIT_CHAR if len(found) == 2 else text.SEPARATOR
        assert kinds[code_point] == expected, hex(code_point)


def test_folding_shortcut_equals_nfkc_then_casefold():
    texts = [
        "a\u00a0\u0301b，\u0301c … ｄ（Ｅ）；ｆ：ＧＨ？！",
        "版本\u30007.4，the\u2009STRASSE Straße ﬁne…",
        "\u00a0",
        "，\u0308",
        "e\u0301\u00a0e\u0301 ¼ ™",
    ]
    for sample in texts:
        assert text.folded(sample) == unicodedata.normalize("NFKC", sample).casefold()


def test_units_of_every_script():
    assert normalized_units("Hello, World! 你好世界 ＡＢＣ-123 Straße") == "hello world 你 好 世 界 abc 123 strasse"
    assert normalized_units("版本 7.4 的 LibreOffice") == "版 本 7 4 的 libreoffice"
    # Kana, Hangul and an ideograph of the supplementary planes are units of one character each.
    assert normalized_units("カタカナ 한국어 𠀀x") == "カ タ カ ナ 한 국 어 𠀀 x"
    assert normalized_units("You’ve") == normalized_units("YOU'VE") == "you ve"
    assert normalized_units("") == normalized_units(None) == ""


def test_unit_hashes_equal_the_reference_on_texts_and_on_joined_units():
    texts = ["The quick brown fox, 版本 7.4 的 LibreOffice.", "", None, "카타 ｶﾀｶﾅ ＡＢＣ", " .,;! "]
    hashes, counts = unit_hashes(texts)
    units = [normalized_units(t).split() for t in texts]
    assert counts.tolist() == [len(u) for u in units]
    reference = np.array([unit_hash(u) for us in units for u in us], dtype=np.uint64)
    assert np.array_equal(hashes, reference)
    joined = " ".join(normalized_units(t) for t in texts if normalized_units(t))
    assert np.array_equal(joined_unit_hashes(joined), reference)
    assert unit_hash("ab") != unit_hash("ba") and len(joined_unit_hashes("")) == 0


def test_languages_by_base_code():
    assert base_lang("zh-Hant") == base_lang("cmn") == base_lang("ZH_hans") == "zh"
    assert base_lang(None) == base_lang("") == ""
    assert base_lang("eng") == "en"
    assert is_cjk_lang("ja") and is_cjk_lang("kor") and not is_cjk_lang("en") and not is_cjk_lang(None)
