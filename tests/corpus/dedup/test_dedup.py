import random
import re

import numpy as np
import polars as pl
import pytest

from lm_assets.corpus.dedup.clustering import cluster_documents, deduplicate, edge_components, lookup
from lm_assets.corpus.dedup.config import BAND_SCHEMA, CLUSTER_SCHEMA, DEDUP_DROPPED_SCHEMA, DedupConfig, DuckDBConfig
from lm_assets.corpus.dedup.decisions import apply_dedup, dedup_stats
from lm_assets.corpus.dedup.duckdb_session import DuckDBSession
from lm_assets.corpus.dedup.incremental import DedupState, deduplicate_incremental, merge_clusters
from lm_assets.corpus.dedup.ranking import band_ranges, candidate_edges, rank_documents, verify_edges
from lm_assets.corpus.dedup.sketches import band_table, content_hash, content_hashes, sketch_documents
from lm_assets.corpus.dedup.union_find import UnionFind
from tests.support.dedup_crawl import edit_words

EN = {
    "bread": (
        "Baking bread at home takes patience more than skill. The dough needs time to rise, and the warmth "
        "of the kitchen decides how long that takes. On a cold morning it can sit for three hours before it "
        "doubles in size, while on a summer afternoon an hour is often enough. Experienced bakers learn to "
        "read the dough rather than the clock: it should feel soft and slightly tacky, and a finger pressed "
        "into it should leave a dent that springs back slowly.\n\n"
        "Once shaped, the loaf rests again while the oven heats. A tray of water on the lowest shelf fills "
        "the oven with steam, which keeps the crust supple for the first minutes of baking and lets the "
        "bread expand. After forty minutes the crust turns a deep brown, and a tap on the bottom of the loaf "
        "sounds hollow. It is tempting to cut it at once, but the crumb is still setting, and waiting half "
        "an hour gives a far better slice."
    ),
    "trains": (
        "The night train from the capital to the coast leaves a little after ten and arrives as the sun "
        "rises over the marshes. Most passengers book a couchette, a narrow bunk in a compartment shared "
        "with five strangers, and fall asleep soon after the lights of the suburbs disappear. The carriages "
        "are old, and the ride is noisy wherever the track crosses a bridge, yet many travellers prefer it "
        "to flying because it saves a night in a hotel and delivers them to the centre of town.\n\n"
        "Before departure the conductor walks along the corridor, checks tickets and hands out small bottles "
        "of water. He also collects passports when the route crosses a border, so that the passengers are "
        "not woken by the police in the middle of the night. In the morning a trolley brings coffee and "
        "pastries, and the windows fill with fields, canals and grazing cattle."
    ),
    "garden": (
        "A vegetable garden on a small balcony can feed a family with herbs and salad for most of the year. "
        "The secret is to choose plants that grow upward rather than outward: climbing beans, cherry "
        "tomatoes on tall canes and cucumbers trained along a trellis. Deep containers hold moisture longer "
        "than shallow ones, which matters because balconies are exposed to wind and dry out quickly in "
        "summer.\n\n"
        "Compost made from kitchen scraps keeps the soil rich without buying fertiliser. A sealed bin with a "
        "tap at the bottom turns peelings into a dark liquid within a few weeks, and diluted with water it "
        "gives the plants a steady supply of nutrients. Gardeners who sow a few seeds every fortnight, "
        "instead of all at once, avoid the glut of lettuce that otherwise arrives in a single week and then "
        "bolts in the heat."
    ),
    "library": (
        "The public library in our town opened in a former textile mill, and the building still shows its "
        "past. Iron columns hold up the reading room, tall windows let in the northern light that weavers "
        "once needed, and the floorboards creak under the shelves of novels. On weekday mornings the tables "
        "are taken by students revising for exams and by retired engineers reading the newspapers from "
        "cover to cover.\n\n"
        "Besides lending books, the library runs a repair café on the first Saturday of every month. "
        "Volunteers fix toasters, bicycles and torn coats while the owners wait with a cup of tea, and "
        "they explain each step so that the visitors can manage the next repair themselves. The children's "
        "corner hosts a story hour in three languages, reflecting the families who have settled in the "
        "streets around the old mill."
    ),
}

ZH = {
    "tea": (
        "每年清明前后，山区的茶农便开始忙碌起来。天刚蒙蒙亮，采茶的妇女们就背着竹篓上山，沿着梯田一垄一垄地采摘嫩芽。"
        "她们的手指在茶树间飞快地移动，只挑选一芽一叶或一芽两叶，这样制成的绿茶香气才最为清雅。到了中午，竹篓里已经装满了鲜叶，"
        "大家便在树荫下歇息，吃着从家里带来的米饭和咸菜。\n\n"
        "鲜叶运回村里之后，需要在竹匾上摊晾几个小时，让水分慢慢散失。随后，老师傅把茶叶倒进烧热的铁锅里，用手不停地翻炒，"
        "既要把青草气炒掉，又不能让叶片焦糊。这道工序全凭经验，火候稍有偏差，整锅茶的味道就会大打折扣。"
        "炒好的茶叶经过揉捻和烘干，才能装进锡罐，送到城里的茶庄出售。"
    ),
    "subway": (
        "这座城市的地铁在过去十年里迅速扩张，从最初的两条线路发展到如今的十几条，几乎覆盖了所有的主要街区。"
        "每天早上七点到九点，换乘站里人流如潮，工作人员拿着扩音器提醒乘客排队候车，不要拥挤。许多上班族已经习惯在车厢里"
        "看新闻、回复邮件，或者戴上耳机听一段播客，把通勤时间变成了一天中难得的独处时光。\n\n"
        "为了缓解高峰期的压力，运营公司采取了多种措施，比如缩短发车间隔、在部分线路上开行大站快车，以及鼓励企业实行弹性"
        "上班制度。与此同时，城市规划部门也在地铁站周边建设住宅和商业设施，希望市民能够在步行范围内解决日常需求。"
        "不过，也有人担心站点附近的房价因此上涨，让年轻人更难在市中心安家。"
    ),
    "library": (
        "老城区的图书馆是一栋两层的红砖建筑，建于上世纪三十年代，至今仍保留着木质的楼梯和高大的拱形窗户。"
        "每到周末，馆里总是坐满了读书的人：有带着孩子来借绘本的父母，有准备考试的大学生，也有戴着老花镜翻阅报纸的退休"
        "教师。阅览室里十分安静，只能听到翻书的沙沙声和窗外偶尔传来的鸟鸣。\n\n"
        "近几年，图书馆开始举办各种公益活动，比如每月一次的读书会、面向老年人的手机使用课程，以及暑假期间的儿童手工坊。"
        "馆长说，图书馆不只是借书还书的地方，更应该成为社区居民交流的空间。为此，他们在一楼开辟了一间小小的咖啡角，"
        "读者可以一边喝咖啡，一边和朋友讨论刚读完的小说。"
    ),
    "river": (
        "小镇依河而建，一条清澈的河流从镇中心穿过，把街道分成南北两半。河上架着七座石桥，其中最古老的一座已有四百多年的历史，"
        "桥面的青石板被来往的行人磨得光滑发亮。清晨时分，居民们在河边的石阶上洗菜、洗衣服，船夫撑着乌篷船缓缓驶过，"
        "船头的竹篮里装着刚从集市上买来的蔬菜和鲜鱼。\n\n"
        "随着旅游业的发展，镇上开起了许多民宿和茶馆，游客可以坐在临河的窗边，看着夕阳把水面染成金色。当地政府规定，"
        "新建的房屋必须采用传统的白墙黑瓦样式，河道两岸也禁止修建高楼，以保护小镇原有的风貌。"
        "一些年轻人从大城市回到家乡，把老宅改造成书店和工作室，为古镇带来了新的活力。"
    ),
}

EN_HEADER = "This page is a mirror of the original article, copied on 2024-03-04 from news.example."
ZH_HEADER = "本页面为原文的镜像，于2024年3月4日从原站同步。"


def edit_chars(text: str, rate: float, seed: int) -> str:
    """Substitute about `rate` of the CJK characters with other characters of the same text."""
    rng = random.Random(seed)
    chars = list(text)
    cjk = [i for i, c in enumerate(chars) if re.match(r"[\u4e00-\u9fff]", c)]
    pool = [chars[i] for i in cjk]
    for i in rng.sample(cjk, max(1, round(rate * len(cjk)))):
        chars[i] = rng.choice(pool)
    return "".join(chars)


def with_urls(rows: list[tuple]) -> pl.DataFrame:
    """rows: (doc_id, text, lang, fetched_at, url)."""
    return pl.DataFrame(
        [dict(zip(["doc_id", "text", "lang", "fetched_at", "url"], row)) for row in rows],
        schema={"doc_id": pl.String, "text": pl.String, "lang": pl.String, "fetched_at": pl.String, "url": pl.String},
    )


def make_docs(rows: list[tuple]) -> pl.DataFrame:
    """rows: (doc_id, text, lang, fetched_at[, quality_score])."""
    columns = ["doc_id", "text", "lang", "fetched_at", "quality_score"]
    records = [dict(zip(columns, row + (None,) * (5 - len(row)))) for row in rows]
    return pl.DataFrame(
        records,
        schema={"doc_id": pl.String, "text": pl.String, "lang": pl.String, "fetched_at": pl.String,
                "quality_score": pl.Float64},
    )


def crawl() -> pl.DataFrame:
    """Eight originals, an exact and a near copy in each language, fetched after their originals."""
    rows = [(f"en-{name}", text, "en", "2024-03-01T00:00:00Z", 1.0) for name, text in EN.items()]
    rows += [(f"zh-{name}", text, "zh", "2024-03-01T00:00:00Z", 1.0) for name, text in ZH.items()]
    rows += [
        ("en-bread-copy", EN["bread"], "en", "2024-03-05T00:00:00Z", 1.0),
        ("en-trains-near", EN_HEADER + "\n\n" + edit_words(EN["trains"], 0.02, 1), "en", "2024-03-05T00:00:00Z", 1.0),
        ("zh-tea-copy", ZH["tea"], "zh", "2024-03-05T00:00:00Z", 1.0),
        ("zh-subway-near", ZH_HEADER + "\n\n" + edit_chars(ZH["subway"], 0.02, 2), "zh", "2024-03-05T00:00:00Z", 1.0),
    ]
    return make_docs(rows)


def by_id(clusters: pl.DataFrame) -> dict[str, dict]:
    return {row["doc_id"]: row for row in clusters.iter_rows(named=True)}


# ---------------------------------------------------------------------------------------------


def test_content_hash_normalises_case_width_and_whitespace():
    assert content_hash("Hello   World\n") == content_hash("hello world") == content_hash("ＨＥＬＬＯ\tworld")
    assert content_hash("hello world") != content_hash("hello, world")
    assert re.fullmatch(r"[0-9a-f]{32}", content_hash("x"))
    assert content_hashes(["A", "a", None, ""]).to_list()[:2] == [content_hash("a")] * 2


def test_exact_and_near_duplicates_in_english_and_chinese():
    docs = crawl()
    result = deduplicate(docs)
    rows = by_id(result.clusters)

    assert result.clusters["doc_id"].to_list() == docs["doc_id"].to_list()
    removed = {d: (r["reason"], r["kept_doc_id"]) for d, r in rows.items() if not r["kept"]}
    assert removed == {
        "en-bread-copy": ("exact_duplicate", "en-bread"),
        "en-trains-near": ("near_duplicate", "en-trains"),
        "zh-tea-copy": ("exact_duplicate", "zh-tea"),
        "zh-subway-near": ("near_duplicate", "zh-subway"),
    }
    for original in ["en-bread", "en-trains", "zh-tea", "zh-subway"]:
        assert rows[original] == {
            "doc_id": original, "cluster_id": original, "cluster_size": 2, "kept": True, "reason": None,
            "kept_doc_id": original,
        }
    for single in ["en-garden", "en-library", "zh-library", "zh-river"]:
        assert (rows[single]["cluster_size"], rows[single]["kept"], rows[single]["cluster_id"]) == (1, True, single)
    assert result.stats | {"largest_clusters": None} == {
        "documents": 12, "kept": 8, "removed": 4, "exact_duplicates": 2, "near_duplicates": 2,
        "dup_rate": 4 / 12, "clusters": 8, "duplicate_clusters": 4,
        "cluster_size_histogram": {"1": 4, "2": 4}, "largest_clusters": None,
    }
    assert [c["cluster_size"] for c in result.stats["largest_clusters"]] == [2, 2, 2, 2, 1, 1, 1, 1]

    near = result.edges.filter(pl.col("doc_b").is_in(["en-trains-near", "zh-subway-near"]))
    assert near.height == 2 and near["similarity"].min() >= 0.55


def test_band_range_split_gives_the_same_edges():
    docs = crawl()
    sketches = sketch_documents(docs)
    bands = band_table(sketches)
    n_bands = bands["band"].max() + 1
    assert n_bands == 24 and bands.height == 24 * docs.height

    def edge_set(frame):
        return set(frame.iter_rows())

    whole = edge_set(candidate_edges(bands))
    assert {("en-bread", "en-bread-copy"), ("en-trains", "en-trains-near"), ("zh-tea", "zh-tea-copy"),
            ("zh-subway", "zh-subway-near")} <= whole
    for parts in (2, 3, 24):
        ranges = band_ranges(n_bands, parts)
        assert ranges[0][0] == 0 and ranges[-1][1] == n_bands and len(ranges) == parts
        split = set().union(*(edge_set(candidate_edges(bands, r)) for r in ranges))
        assert split == whole
    assert edge_set(candidate_edges(bands, (0, 0))) == set()
    assert deduplicate(docs, band_parts=5).clusters.equals(deduplicate(docs).clusters)


def test_candidate_edges_are_stars_to_the_smallest_doc_id(tmp_path):
    bands = pl.DataFrame(
        {
            "doc_id": ["e", "c", "a", "d", "b", "x", "y", "z"],
            "band": [0, 0, 0, 0, 0, 1, 1, 2],
            "band_hash": [7, 7, 7, 7, 7, 9, 9, 9],
        },
        schema=BAND_SCHEMA,
    )
    edges = candidate_edges(bands).sort("doc_a", "doc_b")
    assert edges.rows() == [("a", "b"), ("a", "c"), ("a", "d"), ("a", "e"), ("x", "y")]
    assert candidate_edges(bands, members=pl.DataFrame({"doc_id": ["c", "d", "e"]})).sort("doc_b").rows() == [
        ("c", "d"), ("c", "e")
    ]
    bands.write_parquet(tmp_path / "bands.parquet")
    spill = tmp_path / "spill"
    from_parquet = candidate_edges(
        [tmp_path / "bands.parquet"], duckdb_cfg=DuckDBConfig(memory_limit="256MB", temp_directory=str(spill))
    )
    assert from_parquet.sort("doc_a", "doc_b").equals(edges)
    assert spill.is_dir()


def test_duckdb_runs_with_the_configured_memory_limit_and_spill_folder(tmp_path):
    with DuckDBSession(DuckDBConfig(memory_limit="300MB", temp_directory=str(tmp_path / "spill"), threads=1)) as db:
        settings = db.query(
            "SELECT current_setting('memory_limit') AS memory, current_setting('temp_directory') AS temp, "
            "current_setting('threads') AS threads"
        ).row(0)
    assert settings[0].startswith("286") and settings[1] == str(tmp_path / "spill") and int(settings[2]) == 1


def test_verification_keeps_only_similar_pairs():
    docs = crawl()
    sketches = sketch_documents(docs)
    edges = pl.DataFrame(
        {"doc_a": ["en-bread", "en-trains", "zh-tea"], "doc_b": ["en-bread-copy", "en-garden", "zh-river"]}
    )
    scored = verify_edges(edges, sketches, None).sort("doc_a")
    assert scored["similarity"].to_list()[0] == 1.0 and max(scored["similarity"].to_list()[1:]) < 0.1
    assert verify_edges(edges, sketches, 0.55).rows() == [("en-bread", "en-bread-copy", 1.0)]
    assert verify_edges(edges.clear(), sketches, 0.55).height == 0
    with pytest.raises(ValueError, match="no signature"):
        verify_edges(pl.DataFrame({"doc_a": ["en-bread"], "doc_b": ["unknown"]}), sketches, 0.5)


def test_copies_of_one_text_keep_the_canonical_url_then_the_earliest_fetch():
    text = EN["garden"]
    site = [("s1", EN["library"], "en", "2024-03-01", "https://docs.example/library.html"),
            ("s2", EN["trains"], "en", "2024-03-01", "https://docs.example/trains.html")]
    docs = with_urls([
        ("query", text, "en", "2024-01-01", "https://docs.example/garden.html?utm_source=feed"),
        ("mirror", text, "en", "2024-01-02", "https://mirror3.docs.example/garden.html"),
        ("canonical", text, "en", "2024-02-01", "https://docs.example/garden.html"),
        ("archive", text, "en", "2024-01-03", "https://docs.example/archive/2017/garden.html"),
        ("plain-http", text, "en", "2024-01-04", "http://docs.example/garden.html"),
        *site,
        ("x-later", EN["bread"], "en", "2024-05-01", None),
        ("x-earlier", EN["bread"], "en", "2024-04-01", None),
        ("y-b", ZH["tea"], "zh", None, None),
        ("y-a", ZH["tea"], "zh", None, None),
    ])
    rows = by_id(deduplicate(docs).clusters)
    kept = {d for d, r in rows.items() if r["kept"]}
    assert kept == {"canonical", "s1", "s2", "x-earlier", "y-a"}
    assert {rows[d]["kept_doc_id"] for d in ("query", "mirror", "archive", "plain-http")} == {"canonical"}
    assert rows["x-later"]["reason"] == "exact_duplicate" and rows["y-b"]["kept_doc_id"] == "y-a"
    ranked = rank_documents(sketch_documents(docs))["doc_id"].to_list()
    # No query string, then the bigger host, then https, then the shallower path.
    assert ranked.index("canonical") < ranked.index("archive") < ranked.index("plain-http") < ranked.index("mirror")
    assert ranked.index("mirror") < ranked.index("query")


def test_the_original_is_kept_over_a_longer_bannered_mirror_and_edited_copies():
    original = EN["trains"]
    docs = with_urls([
        ("original", original, "en", "2024-03-02", "https://news.example/trains.html"),
        ("bannered", EN_HEADER + "\n\n" + original + "\n\n" + EN_HEADER, "en", "2024-03-01",
         "https://news.example/trains.html?print=1"),
        ("edited", edit_words(original, 0.03, 7), "en", "2024-03-01", "https://news.example/trains.html?ref=2"),
        ("zh-original", ZH["subway"], "zh", "2024-03-05", "https://zh.example/subway.html"),
        ("zh-bannered", ZH_HEADER + "\n\n" + edit_chars(ZH["subway"], 0.02, 3), "zh", "2024-03-01",
         "https://zh.example/subway.html"),
    ])
    rows = by_id(deduplicate(docs).clusters)
    # Three texts: the original is the one the two copies are each closest to, though it is shorter
    # and fetched last.
    assert rows["original"]["kept"] and rows["original"]["cluster_size"] == 3
    assert rows["bannered"]["kept_doc_id"] == rows["edited"]["kept_doc_id"] == "original"
    # Two texts at one URL: the earlier fetch decides, as nothing else tells them apart.
    assert rows["zh-bannered"]["kept"] and rows["zh-original"]["kept_doc_id"] == "zh-bannered"


def test_a_chain_of_similar_pages_removes_only_what_is_like_the_kept_one():
    # a ~ b ~ c ~ d, each like the next but the ends far apart: eight blocks of distinct words, each
    # page five of them in a row (Jaccard about 0.67 to the next page, 0.43 two pages on).
    blocks = [" ".join(f"w{block}x{i}" for i in range(30)) for block in range(8)]
    pages = [(name, " ".join(blocks[start : start + 5]), "en", f"2024-01-0{start + 1}") for start, name in enumerate("abcd")]
    sketches = sketch_documents(make_docs(pages))
    sigs = dict(zip(sketches["doc_id"], sketches["signature"].to_numpy()))
    assert (sigs["a"] == sigs["b"]).mean() >= 0.55 and (sigs["b"] == sigs["d"]).mean() < 0.55
    ranked = rank_documents(sketches)
    edges = pl.DataFrame({"doc_a": ["a", "b", "c"], "doc_b": ["b", "c", "d"]})
    chained = by_id(cluster_documents(ranked, edges))  # without signatures: the whole chain is one cluster
    assert sum(r["kept"] for r in chained.values()) == 1
    rows = by_id(cluster_documents(ranked, edges, sketches, 0.55))
    # The centre is a middle page (the one with the highest mean estimated similarity); the pages like
    # it go, and the far end of the chain, unlike it, stays as its own cluster.
    mean = {x: sum((sigs[x] == sigs[y]).mean() for y in "abcd" if y != x) / 3 for x in "abcd"}
    centre = max("abcd", key=lambda x: (mean[x], -"abcd".index(x)))
    assert centre in "bc" and rows[centre]["kept"]
    for page in "abcd":
        like = (sigs[page] == sigs[centre]).mean() >= 0.55
        assert rows[page]["kept_doc_id"] == (centre if like else page)
    assert sum(r["kept"] for r in rows.values()) == 2


def test_incremental_dedup_against_persisted_state(tmp_path):
    old_docs = make_docs([
        ("o-bread", EN["bread"], "en", "2024-01-01", 0.5),
        ("o-bread-near", EN_HEADER + "\n\n" + edit_words(EN["bread"], 0.02, 3), "en", "2024-01-02", 0.4),
        ("o-tea", ZH["tea"], "zh", "2024-01-01", 0.5),
        ("o-river", ZH["river"], "zh", "2024-01-01", 0.5),
    ])
    old = deduplicate(old_docs)
    assert by_id(old.clusters)["o-bread-near"]["kept_doc_id"] == "o-bread"
    old.sketches.write_parquet(tmp_path / "sketches.parquet")
    old.bands.write_parquet(tmp_path / "bands.parquet")
    old.clusters.write_parquet(tmp_path / "clusters.parquet")
    state = DedupState(
        sketches=[tmp_path / "sketches.parquet"],
        bands=tmp_path / "bands.parquet",
        clusters=tmp_path / "clusters.parquet",
    )

    new_docs = make_docs([
        ("n-tea-copy", ZH["tea"], "zh", "2024-02-01", 0.9),
        ("n-bread-near", edit_words(EN["bread"], 0.02, 4) + "\n\nMirrored by docs.example.", "en", "2024-02-01", 0.9),
        ("n-river-near", ZH_HEADER + edit_chars(ZH["river"], 0.02, 5), "zh", "2024-02-01", 0.5),
        ("n-library", EN["library"], "en", "2024-02-01", 0.5),
        ("n-library-near", edit_words(EN["library"], 0.02, 6), "en", "2024-02-02", 0.6),
        ("n-subway", ZH["subway"], "zh", "2024-02-01", 0.5),
        ("n-empty", "", "en", "2024-02-01", 0.5),
    ])
    new_sketches = sketch_documents(new_docs)
    result = deduplicate_incremental(new_sketches, band_table(new_sketches), state, band_parts=4)
    rows = by_id(result.clusters)

    assert result.clusters["doc_id"].to_list() == new_docs["doc_id"].to_list()
    assert {d: (r["kept"], r["reason"], r["kept_doc_id"], r["cluster_size"]) for d, r in rows.items()} == {
        "n-tea-copy": (False, "exact_duplicate", "o-tea", 2),
        "n-bread-near": (False, "near_duplicate", "o-bread", 3),
        "n-river-near": (False, "near_duplicate", "o-river", 2),
        "n-library": (True, None, "n-library", 2),
        "n-library-near": (False, "near_duplicate", "n-library", 2),
        "n-subway": (True, None, "n-subway", 1),
        "n-empty": (True, None, "n-empty", 1),
    }
    # Old kept documents stay kept, and old rows only grow in cluster_size.
    merged = by_id(merge_clusters(old.clusters, result.clusters))
    assert len(merged) == 11
    assert {d: (r["kept"], r["kept_doc_id"], r["cluster_size"]) for d, r in merged.items() if d.startswith("o-")} == {
        "o-bread": (True, "o-bread", 3),
        "o-bread-near": (False, "o-bread", 3),
        "o-tea": (True, "o-tea", 2),
        "o-river": (True, "o-river", 2),
    }
    # No edge links two old documents.
    assert not result.edges.filter(pl.col("doc_a").str.starts_with("o-") & pl.col("doc_b").str.starts_with("o-")).height


def test_incremental_with_nothing_old_in_common_matches_a_fresh_run(tmp_path):
    old = deduplicate(make_docs([("o-tea", ZH["tea"], "zh", "2024-01-01", 0.5)]))
    docs = crawl().filter(~pl.col("doc_id").str.starts_with("zh-tea"))
    sketches = sketch_documents(docs)
    state = DedupState(sketches=old.sketches, bands=old.bands, clusters=old.clusters)
    incremental = deduplicate_incremental(sketches, band_table(sketches), state)
    assert incremental.clusters.equals(deduplicate(docs).clusters)


def test_incremental_state_must_cover_matched_old_documents():
    old = deduplicate(make_docs([("o-tea", ZH["tea"], "zh", "2024-01-01", 0.5)]))
    new = sketch_documents(make_docs([("n-tea", ZH["tea"], "zh", "2024-02-01", 0.5)]))
    state = DedupState(sketches=old.sketches, bands=old.bands, clusters=old.clusters.clear())
    with pytest.raises(ValueError, match="not in the clusters table"):
        deduplicate_incremental(new, band_table(new), state)


def test_every_document_appears_once_and_shards_conserve_rows():
    docs = crawl().with_columns(
        pl.when(pl.int_range(pl.len()) % 2 == 0).then(pl.lit("shard-a")).otherwise(pl.lit("shard-b")).alias("source")
    )
    clusters = deduplicate(docs).clusters
    assert clusters.height == docs.height and clusters["doc_id"].n_unique() == docs.height
    assert clusters.schema == pl.Schema(CLUSTER_SCHEMA)
    assert clusters.filter(pl.col("kept")).select((pl.col("doc_id") == pl.col("kept_doc_id")).all()).item()
    assert clusters.filter(~pl.col("kept"))["reason"].null_count() == 0

    total_kept = total_dropped = 0
    for _, shard_docs in docs.group_by("source"):
        result = apply_dedup(shard_docs, clusters)
        assert result.kept.height + result.dropped.height == shard_docs.height
        assert result.kept.columns == shard_docs.columns
        assert result.dropped.schema == pl.Schema(DEDUP_DROPPED_SCHEMA)
        assert set(result.dropped["stage"]) <= {"deduplicated"}
        assert result.stats["documents_in"] == shard_docs.height
        total_kept += result.kept.height
        total_dropped += result.dropped.height
    assert (total_kept, total_dropped) == (8, 4)

    with pytest.raises(ValueError, match="no row in the clusters table"):
        apply_dedup(docs, clusters.head(5))


def test_empty_and_one_word_documents():
    docs = make_docs([
        ("empty-1", "", "en", None),
        ("empty-2", "", "en", None),
        ("none", None, "zh", None),
        ("blank", "   \n\t ", "zh", None),
        ("punct", "... !!! ???", "en", None),
        ("word-1", "Hello", "en", None),
        ("word-2", "hello!", "en", None),
        ("word-3", "Goodbye", "en", None),
        ("char-1", "好", "zh", None),
        ("char-2", "好。", "zh", None),
    ])
    result = deduplicate(docs)
    rows = by_id(result.clusters)
    empty = result.sketches.filter(pl.col("empty"))["doc_id"].to_list()
    assert empty == ["empty-1", "empty-2", "none", "blank", "punct"]
    # Empty documents are never grouped, not even with each other.
    assert {d: (r["kept"], r["cluster_size"], r["kept_doc_id"]) for d, r in rows.items()} == {
        "empty-1": (True, 1, "empty-1"),
        "empty-2": (True, 1, "empty-2"),
        "none": (True, 1, "none"),
        "blank": (True, 1, "blank"),
        "punct": (True, 1, "punct"),
        "word-1": (True, 2, "word-1"),
        "word-2": (False, 2, "word-1"),
        "word-3": (True, 1, "word-3"),
        "char-1": (True, 2, "char-1"),
        "char-2": (False, 2, "char-1"),
    }
    # Punctuation makes the content hashes differ; the shingles are the same.
    assert rows["word-2"]["reason"] == rows["char-2"]["reason"] == "near_duplicate"
    assert result.bands["doc_id"].unique().sort().to_list() == ["char-1", "char-2", "word-1", "word-2", "word-3"]
    assert result.stats["removed"] == 2

    nothing = deduplicate(make_docs([]))
    assert nothing.clusters.height == 0 and nothing.stats["dup_rate"] == 0.0


def test_union_find():
    sets = UnionFind(6)
    sets.union(np.array([0, 3, 1, 2]), np.array([1, 4, 2, 5]))
    roots = sets.roots()
    # Every root is its set's smallest member.
    assert roots.tolist() == [0, 0, 0, 3, 3, 0]
    # A long chain given in one batch, and a star, settle in a few vectorised rounds.
    chain = UnionFind(1000)
    chain.union(np.arange(1, 1000), np.arange(999))
    assert set(chain.roots().tolist()) == {0}
    star = UnionFind(5)
    star.union(np.array([4, 4, 4]), np.array([3, 2, 1]))
    assert star.roots().tolist() == [0, 1, 1, 1, 1]
    assert UnionFind(0).roots().tolist() == []

    values, components = edge_components(np.array([10, 30, 20]), np.array([20, 40, 50]))
    assert values.tolist() == [10, 20, 30, 40, 50]
    assert components[0] == components[1] == components[4] != components[2] == components[3]
    assert lookup(values, components, np.array([10, 11, 40]), -1).tolist() == [components[0], -1, components[3]]


def test_dedup_stats_counts_and_histogram():
    clusters = pl.DataFrame(
        {
            "doc_id": ["a", "b", "c", "d", "e", "f", "g"],
            "cluster_id": ["a", "a", "a", "d", "d", "f", "g"],
            "cluster_size": [3, 3, 3, 2, 2, 1, 1],
            "kept": [True, False, False, True, False, True, True],
            "reason": [None, "exact_duplicate", "near_duplicate", None, "near_duplicate", None, None],
            "kept_doc_id": ["a", "a", "a", "d", "d", "f", "g"],
        },
        schema=CLUSTER_SCHEMA,
    )
    stats = dedup_stats(clusters, largest=2)
    assert stats == {
        "documents": 7, "kept": 4, "removed": 3, "exact_duplicates": 1, "near_duplicates": 2, "dup_rate": 3 / 7,
        "clusters": 4, "duplicate_clusters": 2, "cluster_size_histogram": {"1": 2, "2": 1, "3-4": 1},
        "largest_clusters": [
            {"cluster_id": "a", "cluster_size": 3, "kept_doc_id": "a"},
            {"cluster_id": "d", "cluster_size": 2, "kept_doc_id": "d"},
        ],
    }


def test_verify_threshold_defaults_below_the_lsh_threshold():
    assert DedupConfig().effective_verify_threshold == 0.55
    assert DedupConfig(verify=False).effective_verify_threshold is None
    assert DedupConfig(verify_threshold=0.7).effective_verify_threshold == 0.7
