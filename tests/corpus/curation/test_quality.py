import random
from collections import Counter

import polars as pl
import pytest

from lm_assets.corpus.curation.rules import (
    FAMILIES,
    PRESETS,
    RulesConfig,
    _ngram_repetitions,
    apply_rules,
    is_structure_line,
    preset,
    rule_signals,
    reasons_from_signals,
    rule_reasons,
)

GOOD_EN = "\n\n".join(
    [
        "The city council met on Tuesday evening to discuss the new budget for public libraries. Several residents "
        "spoke in favor of longer opening hours, and a few asked for more money for children's programs.",
        "After a long debate, the council agreed to increase the library budget by five percent. The mayor said that "
        "the decision reflects the importance of education and community spaces. Two members voted against the plan, "
        "arguing that road repairs should come first.",
        "Library staff welcomed the news and promised to publish a detailed plan before the end of the month. "
        "Volunteers will also help run a reading club for teenagers during the summer.",
    ]
)

GOOD_ZH = """清晨六点，老城区的早市已经热闹起来。卖豆浆的摊主一边招呼熟客，一边把刚炸好的油条码进竹筐里。空气里混着葱花、芝麻和蒸汽的味道，让人一下子就有了胃口。

住在巷子深处的王阿姨每天都会来这里买菜。她说，超市虽然干净方便，可是少了些人情味。在早市上，摊主记得她喜欢哪种青菜，也会顺手多塞给她一把香菜。这种小小的默契，是她多年来舍不得改变的习惯。

近几年，城市改造让不少老街换了模样，早市也搬过两次家。有人担心它迟早会消失，但附近的居民自发组织起来，和街道办一起商量出了新的管理办法：固定摊位、统一清扫、按时收市。如今，早市比以前更整洁，烟火气却一点也没少。

对很多人来说，早市不只是买东西的地方，更是一天生活的开始。在讨价还价和家长里短之间，城市的温度被一点点留了下来。"""

# Every line is a full sentence of 15-22 characters: long for Chinese, "short" by FineWeb's 30-character rule.
SHORT_LINES_ZH = """今天上午，市图书馆新馆正式对外开放。
新馆共有五层，藏书超过八十万册。
一楼设有少儿阅览区和自助借还机。
二楼和三楼是开放式书库，读者可以自由取阅。
四楼提供自习座位，需要提前在网上预约。
五楼是报告厅，每周末都会举办公益讲座。
馆长表示，希望新馆能成为市民的第二个客厅。
开馆当天，不少家长带着孩子前来参观。
一位读者说，这里环境安静，很适合周末看书。
图书馆的开放时间为每天早上九点到晚上九点。"""

GOOD_JA = """駅前の小さな本屋は、今年で創業五十年を迎えた。店主の田中さんは、毎朝七時に店を開けて新聞を並べる。最近は通販で本を買う人が増えたが、常連客は今も足を運んでくれるという。

「本を手に取って選ぶ楽しさを、子どもたちにも知ってほしい」と田中さんは話す。店の奥には絵本のコーナーがあり、週末には読み聞かせの会も開かれている。地域の人々にとって、この本屋は大切な居場所になっている。"""

NO_STOP_WORDS_EN = (
    "Rain fell across northern valleys overnight, flooding several roads near Millbrook. Emergency crews closed "
    "two bridges while engineers checked their foundations. Local schools opened late on Monday, although most buses "
    "still ran on time. Forecasters expect drier weather by Wednesday, but residents living near rivers should stay "
    "alert. Farmers said crops suffered little damage because harvest finished early this year. Volunteers handed out "
    "sandbags at community centers throughout Sunday afternoon, helping families protect homes from rising water."
)

# A bare list of regional dishes: no function characters at all.
NO_STOP_WORDS_ZH = (
    "北京烤鸭 天津麻花 南京盐水鸭 苏州松鼠鳜鱼 杭州西湖醋鱼 广州白切鸡 长沙臭豆腐 武汉热干面 重庆火锅 "
    "绵阳米粉 西安肉夹馍 兰州牛肉面 扬州炒饭 福州佛跳墙 厦门沙茶面 桂林米粉 柳州螺蛳粉 昆明过桥米线 "
    "贵阳酸汤鱼 南昌瓦罐汤 合肥臭鳜鱼 济南甜沫 青岛海鲜 大连鲍鱼 沈阳鸡架 哈尔滨锅包肉 长春酱骨头 "
    "包头烧麦 乌鲁木齐大盘鸡 拉萨酥油茶 银川手抓羊肉 西宁酿皮 太原刀削面 石家庄驴肉火烧"
)

SPAM_LINE_ZH = "点击这里领取免费礼品，机会难得不要错过！"


def published(**config) -> RulesConfig:
    """The published thresholds (Gopher, C4 and FineWeb as datatrove implements them), which these tests
    exercise rule by rule; `config` on top."""
    return preset("published", **config)


def reason(text: str, lang: str = "en", **config) -> str | None:
    cfg = published(**config)
    return reasons_from_signals(rule_signals([text], [lang], cfg), cfg)[0]


def only(family: str, text: str, lang: str = "en", **config) -> str | None:
    return reason(text, lang, families=(family,), **config)


def signals(text: str, lang: str = "en", **config) -> dict:
    return rule_signals([text], [lang], published(**config)).row(0, named=True)


def numbered_sentences(count: int) -> str:
    """Distinct, ordinary sentences, so only the rule under test can fire."""
    subjects = ["The river", "Our neighbor", "The old bridge", "A small bakery", "The night train", "The school choir"]
    verbs = ["opened", "changed", "closed", "returned", "started", "grew"]
    return " ".join(
        f"{subjects[i % 6]} {verbs[(i // 6) % 6]} again in the spring of year {1900 + i} with the help of the town."
        for i in range(count)
    )


# --- ordinary prose passes everything ----------------------------------------------------------


@pytest.mark.parametrize("text, lang", [(GOOD_EN, "en"), (GOOD_ZH, "zh"), (SHORT_LINES_ZH, "zh"), (GOOD_JA, "ja")])
def test_ordinary_prose_passes_every_family(text, lang):
    assert reason(text, lang) is None
    for family in FAMILIES:
        assert only(family, text, lang) is None, family


def test_chinese_prose_passes_end_to_end():
    df = pl.DataFrame({"doc_id": ["zh1", "zh2"], "text": [GOOD_ZH, SHORT_LINES_ZH], "lang": ["zh", "zh-Hans"]})
    result = apply_rules(df, published())
    assert result.dropped.height == 0
    assert result.kept["q_cjk"].to_list() == [True, True]


def test_chinese_measured_with_word_rules_would_fail():
    # The same text under a non-CJK language code is judged by whitespace-word rules and fails.
    assert only("gopher_quality", GOOD_ZH, "en") == "gopher_quality:min_avg_word_length"
    assert only("c4", GOOD_ZH, "en") == "c4:min_sentences"


# --- Gopher quality -----------------------------------------------------------------------------


def test_min_doc_words():
    assert only("gopher_quality", "The cat sat on the mat with the hat.") == "gopher_quality:min_doc_words"
    assert signals(GOOD_EN)["q_word_count"] >= 50


def test_max_doc_words():
    assert only("gopher_quality", GOOD_EN, max_doc_words=60) == "gopher_quality:max_doc_words"
    assert only("gopher_quality", GOOD_EN, max_doc_words=1000) is None


def test_min_avg_word_length():
    text = "it is on to me and so we go up to the top of it as we do " * 5
    assert only("gopher_quality", text) == "gopher_quality:min_avg_word_length"


def test_max_avg_word_length():
    text = "the incomprehensibilities of counterrevolutionaries and electroencephalographically with " * 10
    assert only("gopher_quality", text) == "gopher_quality:max_avg_word_length"


def test_hash_word_ratio():
    hashtags = " ".join(f"#topic{i}" for i in range(40))
    assert only("gopher_quality", f"{GOOD_EN}\n{hashtags}") == "gopher_quality:hash_word_ratio"
    assert only("gopher_quality", f"{GOOD_EN}\n#library #budget") is None


def test_ellipsis_word_ratio():
    text = " ".join(f"we waited... and waited... for hour {i} and then... the rest of the day" for i in range(8))
    assert only("gopher_quality", text) == "gopher_quality:ellipsis_word_ratio"


def test_bullet_lines_ratio():
    text = "\n".join(
        f"- Item {i}: fresh apples and pears from the farm of the Miller family, sold with a smile."
        for i in range(8)
    )
    assert only("gopher_quality", text) == "gopher_quality:bullet_lines_ratio"
    assert only("gopher_quality", GOOD_EN + "\n- A reading list is available at the front desk.") is None


def test_ellipsis_lines_ratio():
    lines = GOOD_EN.split("\n\n")
    text = "\n".join([lines[0], "And then the lights went out...", lines[1], "Nobody knew what to say…", lines[2]])
    assert only("gopher_quality", text) == "gopher_quality:ellipsis_lines_ratio"
    assert only("gopher_quality", text, max_ellipsis_lines_ratio=0.5) is None


def test_alpha_words_ratio():
    numbers = " ".join(str(1000 + 37 * i) for i in range(80))
    text = f"The totals of the year and the quarter with all branches: {numbers}"
    assert only("gopher_quality", text) == "gopher_quality:alpha_words_ratio"


def test_min_stop_words():
    assert only("gopher_quality", NO_STOP_WORDS_EN) == "gopher_quality:min_stop_words"
    assert only("gopher_quality", NO_STOP_WORDS_EN + " The end of the storm came at last.") is None


def test_hyphenated_words_are_single_tokens():
    values = signals("state-of-the-art well-known one's e-mail " * 20, families=("gopher_quality",))
    assert values["q_word_count"] == 80
    assert values["q_alpha_words_ratio"] == 1.0


def test_languages_without_a_stop_word_list_skip_that_rule():
    assert signals(NO_STOP_WORDS_EN, "de")["q_stop_words"] is None
    assert only("gopher_quality", NO_STOP_WORDS_EN, "de") is None


def test_cjk_length_is_measured_in_characters():
    short = "欢迎访问本站，这里有最新的优惠信息。"
    assert len(short) < 25
    assert reason(short, "zh") == "gopher_quality:min_doc_chars_cjk"
    assert only("gopher_quality", GOOD_ZH, "zh", min_doc_chars_cjk=1000) == "gopher_quality:min_doc_chars_cjk"
    assert only("gopher_quality", GOOD_ZH, "zh", max_doc_chars_cjk=200) == "gopher_quality:max_doc_chars_cjk"
    assert signals(GOOD_ZH, "zh")["q_word_count"] > 250


def test_cjk_stop_words_are_function_characters():
    assert signals(GOOD_ZH, "zh")["q_stop_words"] > 20
    assert only("gopher_quality", NO_STOP_WORDS_ZH, "zh") == "gopher_quality:min_stop_words"


# --- Gopher repetition --------------------------------------------------------------------------


def test_dup_para_frac():
    paragraphs = GOOD_EN.split("\n\n")
    text = "\n\n".join([paragraphs[0], paragraphs[1], paragraphs[0], paragraphs[0]])
    assert only("gopher_repetition", text) == "gopher_repetition:dup_para_frac"


def test_dup_para_char_frac():
    long_para = numbered_sentences(6)
    text = "\n\n".join([long_para, "A short note.", "Another short note.", "A third note.", long_para])
    assert signals(text)["q_dup_para_frac"] <= 0.3
    assert only("gopher_repetition", text) == "gopher_repetition:dup_para_char_frac"


def test_dup_line_frac():
    text = "\n".join(GOOD_EN.split("\n\n") + ["Share this page."] * 4)
    assert only("gopher_repetition", text) == "gopher_repetition:dup_line_frac"


def test_dup_line_char_frac():
    long_line = numbered_sentences(6)
    text = "\n".join([long_line, "A short note.", "Another short note.", "A third note.", long_line])
    assert signals(text)["q_dup_line_frac"] <= 0.3
    assert only("gopher_repetition", text) == "gopher_repetition:dup_line_char_frac"


@pytest.mark.parametrize("n", [2, 3, 4])
def test_top_ngram(n):
    colours = "red blue green black white brown pink gold grey tan navy teal".split()
    text = " ".join(f"buy cheap shoes online {colour}" for colour in colours)
    config = {"top_n_grams": ((n, 0.18),), "dup_n_grams": ()}
    assert only("gopher_repetition", text, **config) == f"gopher_repetition:top_{n}gram"
    assert only("gopher_repetition", GOOD_EN, **config) is None


def test_dup_ngrams():
    block = "the quick brown fox jumps over a lazy dog near the quiet river bank at dawn"
    text = f"{numbered_sentences(2)} {block} {numbered_sentences(3)[100:]} {block}."
    values = signals(text, families=("gopher_repetition",))
    assert values["q_top_4gram_frac"] <= 0.16
    assert values["q_dup_5gram_frac"] > 0.15
    assert only("gopher_repetition", text) == "gopher_repetition:dup_5gram"


def test_chinese_sentence_repeated_on_lines_fails_repetition():
    text = "\n".join([SPAM_LINE_ZH] * 30)
    assert only("gopher_repetition", text, "zh") == "gopher_repetition:dup_line_frac"
    assert reason(text, "zh").startswith("gopher_repetition:")


def test_chinese_sentence_repeated_in_one_paragraph_fails_character_ngrams():
    text = SPAM_LINE_ZH * 30
    assert only("gopher_repetition", text, "zh") == "gopher_repetition:top_3gram"
    assert only("gopher_repetition", text, "zh", top_n_grams=()) == "gopher_repetition:dup_5gram"


def test_cjk_ngrams_span_more_characters():
    assert RulesConfig().cjk_ngram_size(2) == 3
    assert RulesConfig().cjk_ngram_size(5) == 8
    assert RulesConfig(cjk_chars_per_word=1.0).cjk_ngram_size(5) == 5


# --- C4 -----------------------------------------------------------------------------------------


def kept_text(text: str, lang: str = "en", **config) -> tuple[str, dict]:
    df = pl.DataFrame({"doc_id": ["d"], "text": [text], "lang": [lang]})
    result = apply_rules(df, published(families=("c4",), **config))
    assert result.dropped.height == 0, result.dropped
    return result.kept["text"][0], result.stats


def test_c4_removes_bad_lines_and_counts_them():
    junk = [
        "Home | News | Contact",
        "Read more...",
        "Please enable JavaScript to view the comments.",
        "By using this site you agree to our Privacy Policy.",
        "Thanks!",
        "This line hides " + "x" * 1001 + " inside it.",
    ]
    paragraphs = GOOD_EN.split("\n\n")
    text = "\n".join([junk[0], paragraphs[0], *junk[1:4], paragraphs[1], *junk[4:], "The bridge opened in 1932.[3]"])
    text += "\n" + paragraphs[2]

    cleaned, stats = kept_text(text)

    assert cleaned == "\n".join([paragraphs[0], paragraphs[1], "The bridge opened in 1932.", paragraphs[2]])
    assert stats["c4_lines_removed"] == len(junk)
    assert stats["c4_docs_with_lines_removed"] == 1


def test_c4_line_filtering_can_be_switched_off():
    text = GOOD_EN + "\nHome | News | Contact"
    cleaned, stats = kept_text(text, c4_filter_lines=False)
    assert cleaned == text
    assert stats["c4_lines_removed"] == 0
    assert signals(text, c4_filter_lines=False)["q_c4_lines_removed"] == 1


def test_c4_lorem_ipsum():
    text = GOOD_EN + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit."
    assert only("c4", text) == "c4:lorem_ipsum"
    assert only("c4", text, c4_filter_lorem_ipsum=False) is None
    # Like C4, only lines that survive the line rules are searched.
    assert only("c4", GOOD_EN + "\nLorem ipsum dolor sit amet") is None


def test_c4_curly_bracket():
    text = GOOD_EN + "\nThe template uses {name} as a placeholder for the user."
    assert only("c4", text) == "c4:curly_bracket"
    assert only("c4", text, c4_filter_curly_bracket=False) is None
    assert only("c4", GOOD_EN + "\nThe template uses (name) as a placeholder for the user.") is None


def test_c4_min_sentences():
    text = "The museum opens at nine. Tickets cost ten dollars. Children under twelve enter for free."
    assert only("c4", text) == "c4:min_sentences"
    assert only("c4", text, c4_min_sentences=3) is None
    assert signals(GOOD_EN)["q_c4_sentences"] == 7


def test_c4_understands_chinese_lines():
    text = "\n".join(
        [
            "首页 | 新闻 | 联系我们",
            GOOD_ZH,
            "本网站使用Cookie，详情请见隐私政策。",
            "他笑着说：“明天见。”",
            "登录",
        ]
    )
    cleaned, stats = kept_text(text, "zh")
    # Removed lines go; the paragraphs keep their blank lines.
    assert cleaned == GOOD_ZH + "\n他笑着说：“明天见。”"
    assert stats["c4_lines_removed"] == 3
    assert signals(GOOD_ZH, "zh")["q_c4_sentences"] >= 10
    assert only("c4", "今天天气很好。我们去公园散步。", "zh") == "c4:min_sentences"


# --- FineWeb ------------------------------------------------------------------------------------


def test_line_punct_ratio():
    menu = "\n".join(f"Products and services for your home and garden, page {i}" for i in range(10))
    assert only("fineweb", menu) == "fineweb:line_punct_ratio"
    assert only("fineweb", menu, line_punct_thr=None) is None


def test_line_punct_exclude_zero():
    menu = "\n".join(f"Products and services for your home and garden, page {i}" for i in range(10))
    assert only("fineweb", menu, line_punct_exclude_zero=True) is None


def test_short_line_ratio():
    text = "\n".join(f"Yes, item {i} works." for i in range(10)) + "\n" + GOOD_EN.split("\n\n")[0]
    assert only("fineweb", text) == "fineweb:short_line_ratio"
    assert only("fineweb", GOOD_EN) is None


def test_char_dup_ratio():
    footer = "Subscribe to our newsletter for weekly updates."
    text = f"{GOOD_EN}\n{footer}\n{footer}"
    assert only("fineweb", text) == "fineweb:char_dup_ratio"


def test_new_line_ratio():
    text = "\n".join(f"Counterrevolutionary-electroencephalography-{i}." for i in range(20))
    assert only("fineweb", text, short_line_thr=None) == "fineweb:new_line_ratio"
    assert only("fineweb", text, short_line_thr=None, new_line_ratio=0.6) is None


def test_fineweb_short_lines_are_scaled_for_cjk():
    assert only("fineweb", SHORT_LINES_ZH, "zh") is None
    # With the Latin-script 30-character threshold every line of this ordinary text counts as short.
    assert only("fineweb", SHORT_LINES_ZH, "zh", short_line_length_cjk=30) == "fineweb:short_line_ratio"
    menu = "\n".join(["首页。", "新闻。", "图片。", "视频。", "联系我们。"])
    assert only("fineweb", menu, "zh") == "fineweb:short_line_ratio"


def test_fineweb_counts_cjk_sentence_punctuation():
    assert signals(GOOD_ZH, "zh")["q_fw_line_punct_ratio"] == 1.0
    assert signals(SHORT_LINES_ZH, "zh")["q_fw_line_punct_ratio"] == 1.0
    unpunctuated = "\n".join(line.rstrip("。") for line in SHORT_LINES_ZH.split("\n"))
    assert only("fineweb", unpunctuated, "zh") == "fineweb:line_punct_ratio"


# --- the stage ----------------------------------------------------------------------------------


def mixed_frame() -> pl.DataFrame:
    docs = {
        "en_good": (GOOD_EN, "en"),
        "zh_good": (GOOD_ZH, "zh"),
        "ja_good": (GOOD_JA, "ja"),
        "en_short": ("Buy now.", "en"),
        "zh_short": ("欢迎访问本站，这里有最新的优惠信息。", "zh"),
        "zh_spam": ("\n".join([SPAM_LINE_ZH] * 30), "zh"),
        "en_lorem": (GOOD_EN + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.", "en"),
        "en_null": (None, "en"),
    }
    return pl.DataFrame(
        {"doc_id": list(docs), "text": [t for t, _ in docs.values()], "lang": [lang for _, lang in docs.values()]},
        schema={"doc_id": pl.String, "text": pl.String, "lang": pl.String},
    )


def test_apply_rules_splits_and_explains():
    df = mixed_frame()
    result = apply_rules(df, published())

    assert result.kept["doc_id"].to_list() == ["en_good", "zh_good", "ja_good"]
    reasons = dict(zip(result.dropped["doc_id"], result.dropped["reason"], strict=True))
    assert reasons == {
        "en_short": "gopher_quality:min_doc_words",
        "zh_short": "gopher_quality:min_doc_chars_cjk",
        "zh_spam": "gopher_repetition:dup_line_frac",
        "en_lorem": "c4:lorem_ipsum",
        "en_null": "gopher_quality:min_doc_words",
    }
    assert set(result.dropped["stage"]) == {"rules"}
    assert result.stats["docs_in"] == 8
    assert result.stats["docs_out"] == 3
    assert result.stats["dropped_by_reason"]["gopher_quality:min_doc_words"] == 2
    assert sum(result.stats["dropped_by_reason"].values()) == result.dropped.height == 5


def test_kept_rows_carry_signals_that_can_be_rethresholded():
    result = apply_rules(mixed_frame(), published())
    signal_columns = [c for c in result.kept.columns if c.startswith("q_")]
    assert {"q_word_count", "q_dup_line_frac", "q_top_2gram_frac", "q_c4_sentences", "q_fw_short_line_ratio"} <= set(
        signal_columns
    )
    stricter = published(min_doc_words=200, min_doc_chars_cjk=200)
    assert reasons_from_signals(result.kept, stricter).to_list() == [
        "gopher_quality:min_doc_words",
        None,
        "gopher_quality:min_doc_chars_cjk",
    ]
    # Stored signals give the same answer as a fresh computation.
    fresh = rule_signals(result.kept["text"].to_list(), result.kept["lang"].to_list(), stricter)
    assert reasons_from_signals(fresh, stricter).to_list() == reasons_from_signals(result.kept, stricter).to_list()


def test_rerunning_on_scored_rows_replaces_old_signals():
    once = apply_rules(mixed_frame(), published()).kept
    twice = apply_rules(once, published())
    assert twice.kept.columns == once.columns
    assert twice.dropped.height == 0
    narrower = apply_rules(once, published(families=("fineweb",)))
    assert "q_word_count" not in narrower.kept.columns


def test_families_can_be_chosen_and_ordered():
    df = mixed_frame()
    c4_only = apply_rules(df, published(families=("c4",)))
    assert not any(c.startswith(("q_word", "q_dup", "q_fw")) for c in c4_only.kept.columns)
    assert "en_short" in c4_only.dropped["doc_id"].to_list()

    spam = df.filter(pl.col("doc_id") == "zh_spam")
    assert apply_rules(spam, published(families=("fineweb", "gopher_repetition"))).dropped["reason"][0] == (
        "fineweb:char_dup_ratio"
    )


def test_switched_off_rules_never_fire():
    assert only("gopher_quality", "The cat sat on the mat with the hat.", min_doc_words=None) is None
    assert "gopher_quality:min_doc_words" not in rule_reasons(published(min_doc_words=None))
    assert rule_reasons(published(families=())) == []
    assert reason("", families=()) is None


def test_rule_reasons_name_family_and_rule():
    names = rule_reasons(published())
    assert names[0] == "gopher_quality:min_doc_words"
    assert {"gopher_repetition:dup_line_frac", "c4:lorem_ipsum", "fineweb:short_line_ratio"} <= set(names)
    assert all(name.split(":")[0] in FAMILIES for name in names)


def test_unknown_family_is_rejected():
    with pytest.raises(ValueError, match="unknown quality rule families"):
        RulesConfig(families=("gopher", "c4"))


def test_documents_shorter_than_the_ngram_size():
    values = signals("打开「」对话框。", lang="zh")
    assert values["q_dup_5gram_frac"] == 0.0
    assert signals("two words", families=("gopher_repetition",))["q_top_4gram_frac"] == 0.0



def _reference_ngram_chars(words: list[str], n: int) -> tuple[int, int]:
    """Gopher's two n-gram measures the plain way (as datatrove computes them): characters of the most
    frequent n-gram times its count, and characters under n-grams that repeat an earlier one."""
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    top = 0
    if counts and max(counts.values()) > 1:
        gram, count = counts.most_common(1)[0]
        top = (sum(map(len, gram)) + n - 1) * count
    seen, covered = set(), [False] * len(words)
    for i, gram in enumerate(grams):
        if gram in seen:
            covered[i : i + n] = [True] * n
        seen.add(gram)
    return top, sum(len(word) for word, hit in zip(words, covered) if hit)


def test_ngram_measures_match_a_plain_count():
    rng = random.Random(7)
    vocabulary = ["the", "table", "of", "contents", "a", "row", "is", "kept", "when", "it", "matches"]
    for trial in range(40):
        words = [rng.choice(vocabulary[: 3 + trial % 8]) for _ in range(rng.randint(0, 60))]
        sizes = list(range(2, 11))
        [(top, dup)] = _ngram_repetitions([words], [2, 3, 4], sizes[3:], 1)
        for n in (2, 3, 4):
            assert top[n] == _reference_ngram_chars(words, n)[0], (words, n)
        for n in sizes[3:]:
            assert dup[n] == _reference_ngram_chars(words, n)[1], (words, n)


def test_ngram_measures_of_many_documents_at_once_are_each_documents_own():
    """Documents counted side by side: an n-gram never spans two, and one seen in two documents is not a
    repeat in either."""
    rng = random.Random(11)
    vocabulary = ["the", "table", "of", "contents", "a", "row", "is", "kept"]
    docs = [[rng.choice(vocabulary[: 2 + i % 7]) for _ in range(rng.randint(0, 40))] for i in range(60)]
    docs += [[], ["one"], ["a", "b"] * 3, ["a", "b"] * 3]
    batched = _ngram_repetitions(docs, [2, 3, 4], [5, 6, 7], 1)
    for words, (top, dup) in zip(docs, batched, strict=True):
        for n in (2, 3, 4):
            assert top[n] == _reference_ngram_chars(words, n)[0], (words, n)
        for n in (5, 6, 7):
            assert dup[n] == _reference_ngram_chars(words, n)[1], (words, n)


def test_quality_signals_do_not_depend_on_how_documents_are_chunked(monkeypatch):
    from lm_assets.corpus.curation import rules

    rng = random.Random(5)
    texts = [" ".join(rng.choice(["alpha", "beta", "gamma", "delta."]) for _ in range(rng.randint(5, 300)))
             for _ in range(40)] + ["重复的句子。" * 30, "一个不同的句子。" * 5, ""]
    langs = ["en"] * 40 + ["zh", "zh", "en"]
    whole = rule_signals(texts, langs)
    monkeypatch.setattr(rules, "NGRAM_CHUNK_WORDS", 50)
    assert rule_signals(texts, langs).equals(whole)
    assert whole["q_top_2gram_frac"].max() > 0 and whole["q_dup_5gram_frac"].max() > 0


def test_whole_text_counts_match_the_python_patterns():
    text = "- Install it. Then run:\n\n3. (7.0, \"debian/*\") works!\n  参见 第一章。\nEnd... e.g. x"
    values = signals(text)
    # 12 tokens, list markers aside: "Install it. Then run: (7.0, "debian/*") works! 参见 第一章。 End... e.g. x";
    # only "(7.0," holds no letter.
    assert values["q_alpha_words_ratio"] == pytest.approx(11 / 12)
    # "it." "works!" "第一章。" "End..." and, as a pattern cannot tell, the marker "3." and "e.g." before a space.
    assert signals(text, families=("prose",))["q_sentences"] == 6


# --- the lm_assets preset: documentation-safe rules --------------------------------------------

DOC_PAGE = "\n\n".join(
    [
        "3. Installing packages",
        "Contents\n3.1. Choosing a mirror close to you\n3.2. Installing from the network\n3.3. Verifying signatures",
        "3.1. Choosing a mirror close to you",
        "The installer asks for a mirror close to you. Any mirror works, but a near one is faster. "
        "You can change it later in the sources list, which the package manager reads on every update.",
        "3.2. Installing from the network",
        "Packages are downloaded as they are needed. The installer keeps them in a cache, so that a second "
        "installation of the same release does not download them again.",
        "    def installed(name):\n        return name in database\n\n    class Database:\n        pass",
        "3.3. Verifying signatures",
        "Every package list is signed. The package manager refuses a list whose signature it cannot check, "
        "and tells you which key is missing. Use {\"key\": \"value\"} in the config, or SELECT '{1,2}'::int[].",
    ]
)


def test_lm_assets_preset_keeps_a_documentation_page_whole():
    cfg = preset("lm_assets")
    df = pl.DataFrame({"doc_id": ["doc"], "text": [DOC_PAGE], "lang": ["en"]})
    result = apply_rules(df, cfg)
    assert result.dropped.height == 0, result.dropped
    # Nothing removed: headings, the contents list, code and paragraphs stand as they were.
    assert result.kept["text"][0] == DOC_PAGE


def test_a_table_of_contents_echoing_the_headings_does_not_trip_repetition():
    lm_assets = rule_signals([DOC_PAGE], ["en"], preset("lm_assets")).row(0, named=True)
    published = signals(DOC_PAGE)
    assert published["q_dup_line_frac"] > 0 and published["q_dup_5gram_frac"] > 0
    assert lm_assets["q_dup_line_frac"] == lm_assets["q_dup_para_frac"] == lm_assets["q_dup_5gram_frac"] == 0.0


def test_structure_lines_are_headings_labels_and_contents_entries():
    for line in ("3.2. Installing from the network", "• See also", "Parameters", "1. 选择镜像", "第三章 安装软件包"):
        assert is_structure_line(line), line
    for line in ("The installer asks for a mirror close to you.", "Example:", "安装程序会询问离你最近的镜像。"):
        assert not is_structure_line(line), line


def test_sentences_are_counted_in_english_and_chinese_alike():
    assert signals("One. Two! Three? 四。五！六？", families=("prose",))["q_sentences"] == 6
    assert signals(GOOD_ZH, "zh", families=("prose",))["q_sentences"] >= 10
    assert reason("今天天气很好。我们去公园。", "zh", families=("prose",), min_sentences=3) == "prose:min_sentences"


def test_prose_share_drops_listings_and_licences_drop_by_share():
    listing = "\n".join(f"def f{i}(x):\n    return x + {i}" for i in range(30)) + "\n\nA helper module."
    assert signals(listing, families=("prose",))["q_prose_share"] < 0.1
    assert reason(listing, families=("prose",), min_prose_share=0.2) == "prose:min_prose_share"
    gpl = (
        "This program is free software; you can redistribute it and/or modify it under the terms of the GNU "
        "General Public License as published by the Free Software Foundation.\n\nThis program is distributed "
        "WITHOUT ANY WARRANTY; without even the implied warranty of MERCHANTABILITY or FITNESS FOR A PARTICULAR "
        "PURPOSE.\n\n" + GOOD_EN.split("\n\n")[0]
    )
    assert signals(gpl, families=("prose",))["q_licence_share"] > 0.5
    assert reason(gpl, families=("prose",), max_licence_share=0.5) == "prose:max_licence_share"
    assert signals(GOOD_EN, families=("prose",))["q_licence_share"] == 0.0
    for phrase in ("Redistribution and use in source and binary forms, with or without modification.",
                   "The software is sold without MERCHANTABILITY of any kind.", "本文件依通用公共授權條款發布。",
                   "Licensed under the Apache License, Version 2.0.", "版权所有，保留一切权利。"):
        assert signals(phrase, families=("prose",))["q_licence_share"] == 1.0, phrase


def test_javascript_notices_go_but_lines_about_javascript_stay():
    text = GOOD_EN + "\nPlease enable JavaScript to view the comments.\nJavaScript closures capture variables by reference."
    kept, _ = kept_text(text, c4_javascript_notices_only=True)
    assert "Please enable JavaScript" not in kept and "JavaScript closures capture" in kept
    kept, _ = kept_text(text)
    assert "JavaScript closures capture" not in kept


def test_presets_by_name_and_overrides():
    assert preset("lm_assets").min_sentences == 3 and preset().families == preset("lm_assets").families
    assert preset("fineweb").families == ("gopher_repetition", "gopher_quality", "c4", "fineweb")
    assert preset("fineweb").c4_filter_no_terminal_punct is False
    assert preset("lm_assets") == RulesConfig() == preset()
    assert preset("published") != RulesConfig()
    assert preset("c4", c4_min_sentences=3).c4_min_sentences == 3
    with pytest.raises(ValueError, match="unknown quality preset"):
        preset("nope")
    with pytest.raises(ValueError, match="unknown quality settings"):
        preset("lm_assets", min_sentence=3)


def test_a_documents_words_are_its_lines_words_and_its_prose_the_prose_lines_words():
    from lm_assets.corpus.curation.rules import _Doc, _find_words

    rng = random.Random(11)
    pieces = ["word", "it's", "e.g.", "x-y", "3.14", "_", "—", "é", "中文", "。", " ", " ", "\n", "\n\n", "#", "1.",
              "Ünïcode", "don’t", "- ", "Contents", "See the manual. ", "A long sentence ends here! "]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 60))) for _ in range(500)] + [DOC_PAGE]
    for text in texts:
        doc = _Doc.parse(text, "en")
        lines = text.split("\n")
        assert doc.words == [w for line in lines for w in _find_words(line)]
        prose = doc.prose_only()
        kept = [line for line, keep in zip(lines, doc.prose_mask()) if keep]
        assert prose.words == [w for line in kept for w in _find_words(line)]
        assert prose.n_tokens >= len(prose.words) and prose.word_chars == sum(map(len, prose.words))


def test_bare_rules_are_the_pipelines():
    """`RulesConfig()` and a bare `apply_rules(df)` run the rules curated_shard runs (the lm_assets
    preset); the published thresholds stay reachable by name."""
    from lm_assets.corpus.curation.pipeline import CurationConfig

    assert RulesConfig() == preset() == preset("lm_assets") == CurationConfig().quality
    assert PRESETS["lm_assets"] == {}
    df = mixed_frame()
    bare, named = apply_rules(df), apply_rules(df, preset("lm_assets"))
    assert bare.kept.equals(named.kept) and bare.dropped.equals(named.dropped)
    assert not apply_rules(df, preset("published")).dropped.equals(bare.dropped)
    assert rule_reasons() == rule_reasons(preset("lm_assets"))
