import os
import subprocess
import sys

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH

from lm_assets.corpus.dedup import minhash
from lm_assets.corpus.dedup.minhash import (
    EMPTY_HASH,
    KNOWN_BANDS_ROWS,
    MinHashConfig,
    band_hashes,
    empty_signatures,
    lsh_params,
    normalized_units,
    permutations,
    shingle_hash,
    shingle_hashes,
    shingles,
    signature_similarity,
    signatures,
)

ENGLISH = (
    "The old harbour town wakes slowly in winter. Fishing boats stay tied to the quay until the fog "
    "lifts, and the bakery on the corner is the only shop with its lights on before seven. Visitors who "
    "arrive by the early train usually walk down the hill to the water, where the tide leaves long "
    "ribbons of seaweed across the stones. By noon the market square fills with stalls selling smoked "
    "fish, wool jumpers and jars of honey from the farms inland."
)
CHINESE = (
    "清晨的湖面上笼罩着一层薄雾，远处的山峦若隐若现。村里的老人习惯在天亮之前起床，沿着湖边的小路慢慢散步，"
    "一边呼吸新鲜的空气，一边和遇到的邻居打招呼。等到太阳升起，雾气渐渐散去，渔民们便划着小船出湖，"
    "开始一天的劳作。"
)
MIXED = "LibreOffice 7.4 的「格式」菜单中可以设置段落样式，also available from the sidebar in Writer。"
CFG = MinHashConfig()


def datasketch_minhash(text, lang, cfg=CFG):
    sketch = MinHash(num_perm=cfg.num_perm, seed=cfg.seed, hashfunc=shingle_hash, scheme=cfg.scheme)
    for shingle in shingles(text, lang, cfg):
        sketch.update(shingle)
    return sketch


CASES = [
    pytest.param(ENGLISH, "en", id="english"),
    pytest.param(CHINESE, "zh", id="chinese"),
    pytest.param(MIXED, "zh", id="mixed-script-zh"),
    pytest.param(MIXED, "en", id="mixed-script-en"),
    pytest.param("Ｆｕｌｌｗｉｄｔｈ ﬁne CAFÉ Straße", "de", id="nfkc-casefold"),
    pytest.param("Hello", "en", id="one-word"),
    pytest.param("just three words", "en", id="shorter-than-n"),
    pytest.param("好", "zh", id="one-character"),
    pytest.param("", "en", id="empty"),
    pytest.param(" ... !!! — ", "en", id="punctuation-only"),
    pytest.param(None, "zh", id="none"),
    pytest.param("broken\ud800text 好\udfff字 here", "en", id="lone-surrogates"),
]


@pytest.mark.parametrize("text, lang", CASES)
def test_signature_equals_datasketch_minhash(text, lang):
    ours = signatures([text], [lang], CFG)
    expected = datasketch_minhash(text, lang)
    assert ours.dtype == np.uint32 and ours.shape == (1, 128)
    assert np.array_equal(ours[0], expected.hashvalues)


@pytest.mark.parametrize("config", [MinHashConfig(num_perm=64, seed=7, word_ngram=3, char_ngram=2), CFG])
def test_batch_with_tiny_chunks_equals_datasketch(config):
    texts = [case.values[0] for case in CASES]
    langs = [case.values[1] for case in CASES]
    # Chunks of 7 shingles split documents across chunks and put several documents in one chunk.
    batch = signatures(texts, langs, config, chunk_shingles=7)
    for row, text, lang in zip(batch, texts, langs):
        assert np.array_equal(row, datasketch_minhash(text, lang, config).hashvalues)


def test_batch_cut_into_many_groups_equals_datasketch(monkeypatch):
    # Groups of a few characters: most documents are a group of their own, and a group holds several
    # of the short ones.
    monkeypatch.setattr(minhash, "GROUP_CHARS", 40)
    texts = [case.values[0] for case in CASES] * 2
    langs = [case.values[1] for case in CASES] * 2
    for row, text, lang in zip(signatures(texts, langs, CFG), texts, langs):
        assert np.array_equal(row, datasketch_minhash(text, lang).hashvalues)


def test_permutations_are_datasketch_affine32():
    a, b = permutations(128, 1)
    sketch = MinHash(num_perm=128, seed=1, scheme="affine32")
    assert np.array_equal(a, sketch.permutations[0]) and np.array_equal(b, sketch.permutations[1])


def test_vectorised_shingle_hashes_equal_reference():
    for text, lang in [(ENGLISH, "en"), (CHINESE, "zh"), (MIXED, "ja"), ("one", "en")]:
        reference = np.array([shingle_hash(s) for s in shingles(text, lang, CFG)], dtype=np.uint32)
        assert np.array_equal(shingle_hashes(text, lang, CFG), reference)


def test_word_shingles_are_normalised_five_grams():
    grams = shingles("Hello, WORLD! It's a fine_day.", "en", CFG)
    assert grams == [
        ("hello", "world", "it", "s", "a"),
        ("world", "it", "s", "a", "fine"),
        ("it", "s", "a", "fine", "day"),
    ]


def test_cjk_shingles_are_character_ngrams_without_punctuation():
    grams = shingles("我们今天，去公园。", "zh", CFG)
    assert CFG.char_ngram == 4
    assert ["".join(gram) for gram in grams] == ["我们今天", "们今天去", "今天去公", "天去公园"]
    assert all(len(gram) == 4 for gram in grams)
    # Latin words and numbers inside CJK text stay whole units.
    assert normalized_units("版本 7.4 的 LibreOffice") == "版 本 7 4 的 libreoffice"


def test_short_and_empty_documents():
    assert shingles("Hello", "en", CFG) == [("hello",)]
    assert shingles("just three words", "en", CFG) == [("just", "three", "words")]
    assert shingles("", "en", CFG) == [] and shingles(" .,;! ", "zh", CFG) == [] and shingles(None, None, CFG) == []
    sigs = signatures(["Hello", "", " .,;! ", "just three words"], ["en", "en", "zh", "en"], CFG)
    assert empty_signatures(sigs).tolist() == [False, True, True, False]
    assert (sigs[1] == EMPTY_HASH).all()
    assert signatures([], [], CFG).shape == (0, 128)


def test_shingle_hash_is_pinned_and_independent_of_the_process():
    # Persisted signatures depend on these values: a change here invalidates stored dedup state.
    assert shingle_hash(("the", "quick", "brown", "fox", "jumps")) == 1971908583
    assert shingle_hash(("我", "们", "今", "天")) == 2098492841
    code = (
        "from lm_assets.corpus.dedup.minhash import MinHashConfig, signatures;"
        f"print(signatures([{ENGLISH!r}], ['en'], MinHashConfig())[0, :4].tolist())"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(signatures([ENGLISH], ["en"], CFG)[0, :4].tolist())


def test_lsh_params_match_datasketch():
    for config in [CFG, MinHashConfig(threshold=0.8, false_positive_weight=0.5, false_negative_weight=0.5)]:
        lsh = MinHashLSH(
            threshold=config.threshold,
            num_perm=config.num_perm,
            weights=(config.false_positive_weight, config.false_negative_weight),
        )
        assert lsh_params(config) == (lsh.b, lsh.r)
    assert lsh_params(CFG) == (24, 4)
    assert lsh_params(MinHashConfig(threshold=0.8, false_positive_weight=0.5, false_negative_weight=0.5)) == (9, 13)
    for (threshold, num_perm, fp_weight, fn_weight), known in KNOWN_BANDS_ROWS.items():
        lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, weights=(fp_weight, fn_weight))
        assert known == (lsh.b, lsh.r)


def test_band_hashes_follow_band_rows():
    sigs = signatures([ENGLISH, CHINESE], ["en", "zh"], CFG)
    bands, rows = lsh_params(CFG)
    hashes = band_hashes(sigs, bands, rows)
    assert hashes.shape == (2, 24) and hashes.dtype == np.uint64
    assert np.array_equal(hashes, band_hashes(sigs.copy(), bands, rows))
    changed = sigs[:1].copy()
    changed[0, 2 * rows] ^= 1  # first row of band 2
    differs = band_hashes(changed, bands, rows)[0] != hashes[0]
    assert np.flatnonzero(differs).tolist() == [2]
    with pytest.raises(ValueError):
        band_hashes(sigs, 40, 4)


def test_similarity_estimates_jaccard():
    edited = ENGLISH.replace("winter", "summer").replace("honey", "jam")
    sigs = signatures([ENGLISH, edited, CHINESE], ["en", "en", "zh"], CFG)
    a, b = set(shingle_hashes(ENGLISH, "en", CFG).tolist()), set(shingle_hashes(edited, "en", CFG).tolist())
    true_jaccard = len(a & b) / len(a | b)
    estimate = signature_similarity(sigs[:1], sigs[1:2])[0]
    assert 0.7 < true_jaccard < 0.9
    assert abs(estimate - true_jaccard) < 0.15
    assert signature_similarity(sigs[:1], sigs[2:3])[0] < 0.05


def test_config_rejects_other_schemes_and_bad_sizes():
    with pytest.raises(ValueError, match="affine32"):
        MinHashConfig(scheme="legacy")
    with pytest.raises(ValueError):
        MinHashConfig(word_ngram=0)
    with pytest.raises(ValueError):
        signatures(["a", "b"], ["en"], CFG)
