"""Signals of spam and listings read from a document's classifier tokens, so that every labelled page has them.

The classifier reads a document as tokens (`classifier.tokens`: lower case, every CJK character and every
punctuation mark or symbol a token of its own, other words whole), kept as their CRC-32 so that the shipped
training pages carry no text. These signals are computed from those ids alone, the same way for a page of
the shipped set and for a document being scored, on the HTML path and the text path alike. Each stands for a
general property of spam and machine-made pages, never for one site's wording:

- `q_tok_symbols`: symbols (Unicode So, Sm, Sk, private use; not the few prose uses such as ° × ©) per 100
  tokens: decoration such as ★ ♀ № ∝ strewn through spam;
- `q_tok_symbol_breaks`: such a symbol between two CJK characters, per 100 CJK characters: Chinese sentences
  cut apart by symbols, which gambling and lottery spam uses to slip past keyword filters;
- `q_tok_function_words`: English function words and Chinese function characters per content token:
  keyword lists and stuffed product titles hold few;
- `q_tok_separators`: list separators (, ， 、 | / ; ·) per 100 content tokens: keyword lists are short
  items separated by commas, bars and slashes;
- `q_tok_phrase_repeats`: how often the most frequent 6-token phrase occurs, per 1,000 tokens: the same
  phrase inserted every sentence or two, and templated text with one slot changed;
- `q_tok_spam_terms`: terms of gambling, lottery, pornography and cracked software (`SPAM_TERMS`, English
  and Chinese, simplified and traditional), per 1,000 tokens.
"""

from __future__ import annotations

import functools
import re
import unicodedata
import zlib

import numpy as np

from lm_assets.text import CJK_RANGES

SIGNALS = (
    "q_tok_symbols",
    "q_tok_symbol_breaks",
    "q_tok_function_words",
    "q_tok_separators",
    "q_tok_phrase_repeats",
    "q_tok_spam_terms",
)
PHRASE_TOKENS = 6
# Symbols of ordinary prose, specifications and recipes, not decoration.
_PROSE_SYMBOLS = set("°±×÷©®™·•→←↑↓…‰§¶€£¥$¢+=<>|^~`")
_SEPARATORS = ",，、|｜/;；·"
_FUNCTION_WORDS_EN = (
    "the of and to a in is that for it as with was on be by this are or from at an not have has had which but "
    "they he she we you i his her their its were been can will would there these those if when than so do does "
    "did about into also more one all what who how"
).split()
# Chinese function characters: particles, prepositions, conjunctions, pronouns and common verbs of grammar,
# simplified and traditional.
_FUNCTION_CHARS_ZH = "的了是在和也就都而及与與着著或等被把从從对對以为為这這那之其但并並因所如则則又很还還已它他她我你们們个個不有会會可能要说說到得地过過于於吗嗎呢吧"
# Terms of gambling and lottery, pornography and cracked software. Single English words are matched whole;
# Chinese terms as runs of characters. Words common in other senses (bet, crack, serial, patch, 成人, 激情)
# are left out: a term must mean spam wherever it stands.
SPAM_TERMS = {
    "gambling": (
        "casino casinos poker gambling betting sportsbook bookmaker roulette blackjack baccarat jackpot slots "
        "lottery lotto togel judi "
        "赌博 赌场 赌球 博彩 彩票 娱乐城 时时彩 六合彩 百家乐 老虎机 投注 下注 开奖 彩金 返水 特码 赔率 足彩 "
        "棋牌 真人荷官 电子游艺 彩民 首存 一肖 心水 赛车pk10 快三 "
        # gambling platforms as spam names them: the casino brands and the words that follow a brand
        "现金网 贵宾会 娱乐平台 娱乐官网 体育官网 体育app 手机版登录 官网登录 网页版登录 买球 网投 洗码 打码 "
        "威尼斯人 葡京 美高梅 幸运飞艇 幸运28 北京赛车 bet365 bt365 "
        "賭博 賭場 賭球 博彩 彩票 娛樂城 時時彩 六合彩 百家樂 老虎機 投注 下注 開獎 彩金 返水 賠率 真人荷官 "
        "現金網 貴賓會 娛樂平台 體育官網 手機版登錄 官網登錄 威尼斯人 葡京"
    ),
    "adult": (
        "porn porno pornography xxx nude nudes naked escort escorts milf hentai camgirls sexcam "
        "色情 黄片 av女优 女优 无码 裸聊 约炮 一夜情 援交 偷拍 人妻 乱伦 三级片 色片 性爱 做爱 成人视频 成人网站 "
        "黄色网站 福利视频 激情视频 成人电影 伦理片 国产精品 番号 "
        "黃片 女優 無碼 約炮 一夜情 亂倫 三級片 性愛 做愛 成人影片"
    ),
    "cracked software": (
        "keygen warez nulled cracked torrent torrents "
        "破解版 注册机 激活码 注册码 序列号 绿色版 免安装 破解补丁 汉化版 "
        "破解版 註冊機 激活碼 註冊碼 序號 綠色版 免安裝 破解補丁 漢化版"
    ),
}


def _crc(token: str) -> int:
    return zlib.crc32(token.encode())


def _chars_of(ranges) -> list[str]:
    return [chr(c) for first, last in ranges for c in range(first, last + 1)]


@functools.lru_cache(maxsize=1)
def _tables() -> dict:
    """The token ids of each class of token. The CJK table holds every Han, kana and Hangul character."""
    symbols = {
        _crc(chr(c))
        for c in range(0x80, 0x30000)
        if unicodedata.category(chr(c)) in ("So", "Sm", "Sk", "Co") and chr(c) not in _PROSE_SYMBOLS
        and chr(c).lower() == chr(c)
    }
    terms: dict[int, set[tuple[int, ...]]] = {}
    words: set[int] = set()
    for listed in SPAM_TERMS.values():
        for term in listed.split():
            if term.isascii():
                words.add(_crc(term))
            else:
                # A Chinese term as the classifier cuts it: each character a token, an ASCII run (pk10) one.
                ids = tuple(_crc(t) for t in re.findall(r"[a-z0-9]+|[^\x00-\x7f]", term.lower()))
                terms.setdefault(len(ids), set()).add(ids)
    return {
        "cjk": frozenset(_crc(ch) for ch in _chars_of(CJK_RANGES)),
        "symbols": frozenset(symbols),
        "separators": frozenset(_crc(ch) for ch in _SEPARATORS),
        "punctuation": frozenset(
            _crc(chr(c)) for c in range(0x21, 0x30000)
            if unicodedata.category(chr(c)).startswith(("P", "S"))
        ),
        "function": frozenset([_crc(w) for w in _FUNCTION_WORDS_EN] + [_crc(ch) for ch in _FUNCTION_CHARS_ZH]),
        "spam_words": frozenset(words),
        "spam_terms": {n: frozenset(ids) for n, ids in terms.items()},
    }


def _member(ids: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Whether each id is in the sorted `table`."""
    at = np.minimum(np.searchsorted(table, ids), len(table) - 1)
    return table[at] == ids


def _per_doc(values: np.ndarray, starts: np.ndarray, empty: np.ndarray) -> np.ndarray:
    sums = np.add.reduceat(values.astype(np.int64), starts) if len(values) else np.zeros(len(starts), dtype=np.int64)
    return np.where(empty, 0, sums)


def _arrays() -> dict:
    tables = _tables()
    out = {name: np.asarray(sorted(tables[name]), dtype=np.uint32)
           for name in ("cjk", "symbols", "separators", "punctuation", "function", "spam_words")}
    out["spam_terms"] = {n: terms for n, terms in tables["spam_terms"].items()}
    return out


_ARRAYS: dict = {}
_KEY_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def token_signal_matrix(token_lists: list[list[int]], names: list[str] | tuple[str, ...] = SIGNALS) -> np.ndarray:
    """Rows of `names` signals (see the module docstring), one per document's token ids: every document of a
    batch at once, laid side by side."""
    if not names:
        return np.zeros((len(token_lists), 0))
    if not _ARRAYS:
        _ARRAYS.update(_arrays())
    t = _ARRAYS
    n_docs = len(token_lists)
    counts = np.fromiter(map(len, token_lists), dtype=np.int64, count=n_docs)
    ids = np.fromiter((i for row in token_lists for i in row), dtype=np.uint32, count=int(counts.sum()))
    ends = np.cumsum(counts)
    starts = np.minimum(ends - counts, max(len(ids) - 1, 0))
    empty = counts == 0
    doc_of = np.repeat(np.arange(n_docs), counts)
    # Membership is looked up once per distinct id of the batch: far fewer than its tokens.
    distinct, inverse = np.unique(ids, return_inverse=True)

    def member(table: np.ndarray) -> np.ndarray:
        return _member(distinct, table)[inverse]

    def per_doc(values: np.ndarray) -> np.ndarray:
        return _per_doc(values, starts, empty)

    def symbol_breaks() -> np.ndarray:
        """Symbols between two CJK characters of the same document, per 100 CJK characters."""
        is_cjk, is_symbol = member(t["cjk"]), member(t["symbols"])
        between = np.zeros(len(ids), dtype=bool)
        if len(ids) > 2:
            between[1:-1] = is_symbol[1:-1] & is_cjk[:-2] & is_cjk[2:] & (doc_of[:-2] == doc_of[2:])
        return 100.0 * per_doc(between) / per_doc(is_cjk)

    def spam_terms() -> np.ndarray:
        spam = per_doc(member(t["spam_words"]))
        for size, terms in t["spam_terms"].items():
            spam += _window_hits(ids, doc_of, size, terms, n_docs)
        return 1000.0 * spam / counts

    def phrase_repeats() -> np.ndarray:
        top = _top_phrase_counts(ids, doc_of, ends, n_docs)
        return np.where(top >= 2, 1000.0 * top / counts, 0.0)

    def content() -> np.ndarray:
        return counts - per_doc(member(t["punctuation"]))

    # Each signal computed only when asked for: scoring reads one or two.
    compute = {
        "q_tok_symbols": lambda: 100.0 * per_doc(member(t["symbols"])) / counts,
        "q_tok_symbol_breaks": symbol_breaks,
        "q_tok_function_words": lambda: per_doc(member(t["function"])) / content(),
        "q_tok_separators": lambda: 100.0 * per_doc(member(t["separators"])) / content(),
        "q_tok_phrase_repeats": phrase_repeats,
        "q_tok_spam_terms": spam_terms,
    }
    with np.errstate(divide="ignore", invalid="ignore"):
        values = {name: compute[name]() for name in dict.fromkeys(names)}
    matrix = np.column_stack([values[name] for name in names]).astype(np.float64)
    return np.nan_to_num(matrix, nan=0.0, posinf=0.0, neginf=0.0)


def _window_keys(ids: np.ndarray, doc_of: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The key of every window of `size` ids that lies inside one document, and the window's start."""
    n = len(ids) - size + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(doc_of[:n] == doc_of[size - 1:])
    keys = np.zeros(len(starts), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(size):
            keys = keys * _KEY_MULTIPLIER + ids[starts + k].astype(np.uint64) + np.uint64(1)
    return keys, starts


def _window_hits(ids: np.ndarray, doc_of: np.ndarray, size: int, terms: frozenset, n_docs: int) -> np.ndarray:
    """Per document, how many windows of `size` ids are one of `terms`."""
    keys, starts = _window_keys(ids, doc_of, size)
    term_keys = np.unique(_window_keys(np.asarray([i for term in sorted(terms) for i in term], dtype=np.uint32),
                                       np.repeat(np.arange(len(terms)), size), size)[0])
    hits = _member(keys, term_keys) if len(term_keys) else np.zeros(len(keys), dtype=bool)
    return np.bincount(doc_of[starts[hits]], minlength=n_docs)


def _top_phrase_counts(ids: np.ndarray, doc_of: np.ndarray, ends: np.ndarray, n_docs: int) -> np.ndarray:
    """Per document, how often its most frequent phrase of `PHRASE_TOKENS` tokens occurs."""
    keys, starts = _window_keys(ids, doc_of, PHRASE_TOKENS)
    top = np.zeros(n_docs, dtype=np.int64)
    if len(keys) == 0:
        return top
    docs = doc_of[starts]
    order = np.lexsort((keys, docs))
    keys, docs = keys[order], docs[order]
    new = np.concatenate(([True], (keys[1:] != keys[:-1]) | (docs[1:] != docs[:-1])))
    group_starts = np.flatnonzero(new)
    sizes = np.diff(np.append(group_starts, len(keys)))
    np.maximum.at(top, docs[group_starts], sizes)
    return top


def token_signals(ids: list[int]) -> dict[str, float]:
    """The signals of one document's token ids."""
    return dict(zip(SIGNALS, token_signal_matrix([ids])[0].tolist()))
