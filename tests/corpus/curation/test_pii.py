import random

import polars as pl
import pytest

from lm_assets.corpus.curation import pii
from lm_assets.corpus.curation.pii import (
    PII_TYPES,
    PLACEHOLDERS,
    cn_id_check_char,
    cn_id_valid,
    credit_card_valid,
    find_pii,
    luhn_valid,
    redact,
    redact_frame,
)

VALID_CN_ID = "11010519900307451X"
VALID_CN_ID_DIGIT = "440301198512310020"


def redacted(text: str) -> str:
    return redact(text)[0]


def nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


# --- placeholders -------------------------------------------------------------------------------


def test_placeholders_cover_every_type():
    assert PLACEHOLDERS == {
        "EMAIL": "<EMAIL>",
        "PHONE": "<PHONE>",
        "CN_PHONE": "<CN_PHONE>",
        "IP": "<IP>",
        "CREDIT_CARD": "<CREDIT_CARD>",
        "CN_ID": "<CN_ID>",
    }


def test_placeholders_never_match_themselves():
    text = " ".join(PLACEHOLDERS.values()) + "".join(PLACEHOLDERS.values())
    assert find_pii(text) == []
    assert redacted(text) == text


# --- EMAIL --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Write to jane.doe+news@example.co.uk for details.", "Write to <EMAIL> for details."),
        ("Contact: SUPPORT@Example.com.", "Contact: <EMAIL>."),
        ("如有疑问请发邮件至zhang.san@example.com.cn，我们会尽快回复。", "如有疑问请发邮件至<EMAIL>，我们会尽快回复。"),
        ("邮箱：13812345678@163.com", "邮箱：<EMAIL>"),
    ],
)
def test_email_is_redacted(text, expected):
    assert redacted(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Follow @python on social media.",
        "The price is 5 @ $3 each.",
        "user@localhost is not routable.",
        "关注我们的微博@人民日报。",
    ],
)
def test_email_lookalikes_are_kept(text):
    assert redacted(text) == text


# --- PHONE --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Call +1 415 555 0132 today.", "Call <PHONE> today."),
        ("London office: +44 20 7946 0958.", "London office: <PHONE>."),
        ("Paris: +33 1 23 45 67 89.", "Paris: <PHONE>."),
        ("Fax +12025550132 now.", "Fax <PHONE> now."),
        ("Phone (415) 555-0132 or 415-555-0132 or 415.555.0132.", "Phone <PHONE> or <PHONE> or <PHONE>."),
        ("Toll free 1-800-555-0199.", "Toll free <PHONE>."),
        ("请致电+44 20 7946 0958咨询。", "请致电<PHONE>咨询。"),
        ("美国客服电话(415) 555-0132，工作日接听。", "美国客服电话<PHONE>，工作日接听。"),
    ],
)
def test_phone_is_redacted(text, expected):
    assert redacted(text) == expected


def test_phone_followed_by_more_numbers_is_cut_back_not_missed():
    assert redacted("Tel +44 20 7946 0958 and 2026.") == "Tel <PHONE> and 2026."
    assert find_pii(redacted("tel +1 415 555 0132 2026 11 29")) == []


@pytest.mark.parametrize(
    "text",
    [
        "Python 3.11.7 was released on 2026-11-29.",
        "The meeting is on 2026/11/29 at 10:30-11:45.",
        "It cost $1,299.99 in 2024, up from 1,050 in 2023.",
        "Room 1234, building 5678.",
        "Scores were 12-10 and 3-2; 300 400 5000 people came.",
        "+1 234 is too short to be a number.",
        "会议定于2026年11月29日举行，门票价格为1299元。",
    ],
)
def test_phone_lookalikes_are_kept(text):
    assert redacted(text) == text


# --- CN_PHONE -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("手机号13812345678请联系", "手机号<CN_PHONE>请联系"),
        ("联系电话：+86 138 1234 5678。", "联系电话：<CN_PHONE>。"),
        ("请拨打138-1234-5678或008613912345678。", "请拨打<CN_PHONE>或<CN_PHONE>。"),
        ("Call me on +86-159-8765-4321 tomorrow.", "Call me on <CN_PHONE> tomorrow."),
        ("Her number is 18612345678.", "Her number is <CN_PHONE>."),
    ],
)
def test_cn_phone_is_redacted(text, expected):
    assert redacted(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "订单号12345678901请保存。",  # second digit 2 is not a mobile prefix
        "编号213812345678共十二位。",  # twelve digits
        "Order 1381234567 has ten digits.",
        "时间戳1700000000000毫秒。",
    ],
)
def test_cn_phone_lookalikes_are_kept(text):
    assert redacted(text) == text


# --- IP -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The server at 192.168.1.20 rejected the request.", "The server at <IP> rejected the request."),
        ("Gateway is 10.0.0.1.", "Gateway is <IP>."),
        ("Use fd12:3456::1 for tests.", "Use <IP> for tests."),
        ("Link-local fe80::1ff:fe23:4567:890a is set.", "Link-local <IP> is set."),
        ("Full 2a00:1450:4001:0829:0000:0000:0000:200e form.", "Full <IP> form."),
        ("服务器地址为192.168.0.1，端口8080。", "服务器地址为<IP>，端口8080。"),
        ("内网IPv6地址fd00:abcd::42已启用。", "内网IPv6地址<IP>已启用。"),
        ("Seen from 8.8.4.4 and 100.64.3.2 today.", "Seen from <IP> and <IP> today."),
    ],
)
def test_ip_is_redacted(text, expected):
    assert redacted(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Upgrade to Python 3.11.7 now.",
        "Chrome 120.0.6099.109 is out.",
        "Out of range 256.1.1.1 and 999.10.10.10.",
        "Version 1.2.3.4.5 of the tool.",
        "The train leaves at 12:30:45.",
        "MAC 00:1A:2B:3C:4D:5E is printed on the box.",
        "Use std::vector or a::b in C++.",
        "比分是3:2，时间是18:30:00。",
    ],
)
def test_ip_lookalikes_are_kept(text):
    assert redacted(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "See Section 4.1.2.4 for the rules, and section (4.1.2.5) for exceptions.",
        "Changed in v1.2.3.4 and in release 2.10.1.3; see Table 3.1.2.1 and Appendix 1.2.3.4.",
        "请参阅第 4.1.2.4 节，以及手册 4.1.2.5 节的说明。",
        "The manual's examples use 192.0.2.10, 198.51.100.7, 203.0.113.254 and 2001:db8::7.",
        "Connect to 127.0.0.1 or ::1, bind 0.0.0.0, broadcast 255.255.255.255, netmask 255.255.255.0.",
    ],
)
def test_section_numbers_documentation_addresses_and_loopback_are_not_personal_data(text):
    assert redacted(text) == text
    assert find_pii(text) == []


# --- CREDIT_CARD --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "number",
    ["4111 1111 1111 1111", "4111-1111-1111-1111", "5555555555554444", "3782 822463 10005", "6212345678901232",
     "4222222222222"],  # the last: a 13-digit card, the fewest digits a card holds
)
def test_luhn_valid_cards_are_redacted(number):
    assert luhn_valid(number.replace(" ", "").replace("-", ""))
    assert redacted(f"Card: {number}.") == "Card: <CREDIT_CARD>."
    assert redacted(f"银行卡号{number}已绑定。") == "银行卡号<CREDIT_CARD>已绑定。"


@pytest.mark.parametrize(
    "number",
    [
        "4111 1111 1111 1112",  # fails Luhn
        "4111111111111112",
        "6222021234567890",  # fails Luhn
        "1234567812345670",  # passes Luhn but no card network starts with 1
    ],
)
def test_invalid_cards_are_kept(number):
    assert not credit_card_valid(number)
    assert redacted(f"Number {number} here.") == f"Number {number} here."
    assert redacted(f"卡号{number}无效。") == f"卡号{number}无效。"


def test_luhn():
    assert luhn_valid("4111111111111111")
    assert luhn_valid("1234567812345670")
    assert not luhn_valid("4111111111111112")


def test_rejected_candidate_does_not_hide_a_card_after_it():
    assert redacted("In 2024 4111 1111 1111 1111 was used.") == "In 2024 <CREDIT_CARD> was used."


# --- CN_ID --------------------------------------------------------------------------------------


def test_check_character_follows_iso_7064():
    assert cn_id_check_char(VALID_CN_ID[:17]) == "X"
    assert cn_id_check_char(VALID_CN_ID_DIGIT[:17]) == "0"


@pytest.mark.parametrize(
    "text, expected",
    [
        (f"身份证号{VALID_CN_ID}，请核对。", "身份证号<CN_ID>，请核对。"),
        (f"身份证号码：{VALID_CN_ID.lower()}", "身份证号码：<CN_ID>"),
        (f"ID number {VALID_CN_ID_DIGIT} on file.", "ID number <CN_ID> on file."),
    ],
)
def test_cn_id_is_redacted(text, expected):
    assert redacted(text) == expected


def test_cn_id_is_not_eaten_as_a_phone():
    text, counts = redact(f"证件号{VALID_CN_ID_DIGIT}")
    assert text == "证件号<CN_ID>"
    assert nonzero(counts) == {"CN_ID": 1}


@pytest.mark.parametrize(
    "candidate",
    [
        "110105199003074515",  # bad check character
        "440301198512310021",  # bad check character
        "440301198502300021",  # 30 February, even with a matching check character
        "991234198512310020",  # no such province, though the check character matches
    ],
)
def test_invalid_cn_ids_are_kept(candidate):
    assert not cn_id_valid(candidate)
    assert redacted(f"号码{candidate}无效。") == f"号码{candidate}无效。"
    assert redacted(f"Number {candidate} is invalid.") == f"Number {candidate} is invalid."


def test_february_30_id_has_a_matching_check_character():
    assert cn_id_check_char("44030119850230002") == "1"


# --- whole documents ----------------------------------------------------------------------------

MIXED_EN = (
    "Hi team, the new server is at 10.20.30.40 and the backup at fd00:db8::7. "
    "Send questions to ops-team@example.org or call +1 415 555 0132. "
    "Billing used card 5555 5555 5555 4444. Python 3.11.7 ships on 2026-11-29."
)
MIXED_ZH = (
    "各位好，报名表请发送到 wang.fang@example.cn，或者直接拨打13912345678联系王老师。"
    f"参会人员需要提供身份证号（例如{VALID_CN_ID}）和银行卡号4111 1111 1111 1111。"
    "会议将于2026年11月29日上午9点开始，地点在3号楼1205室，门票价格为1299元。"
)


def test_redact_counts_each_type():
    text, counts = redact(MIXED_EN)
    assert nonzero(counts) == {"IP": 2, "EMAIL": 1, "PHONE": 1, "CREDIT_CARD": 1}
    assert "Python 3.11.7 ships on 2026-11-29." in text

    text, counts = redact(MIXED_ZH)
    assert nonzero(counts) == {"EMAIL": 1, "CN_PHONE": 1, "CN_ID": 1, "CREDIT_CARD": 1}
    assert "会议将于2026年11月29日上午9点开始，地点在3号楼1205室，门票价格为1299元。" in text
    assert set(counts) == set(PII_TYPES)


def test_find_pii_reports_matches_and_nothing_after_redaction():
    found = find_pii(MIXED_ZH)
    assert ("CN_ID", VALID_CN_ID) in found
    assert ("CN_PHONE", "13912345678") in found
    for text in (MIXED_EN, MIXED_ZH):
        assert find_pii(redacted(text)) == []


def test_redact_frame_adds_counts_and_drops_nothing():
    df = pl.DataFrame(
        {"doc_id": ["en", "zh", "clean", "empty"], "text": [MIXED_EN, MIXED_ZH, "Nothing to see here.", None]}
    )
    result = redact_frame(df)

    assert result.dropped.height == 0
    assert result.kept["doc_id"].to_list() == ["en", "zh", "clean", "empty"]
    assert result.kept["text"][2] == "Nothing to see here."
    assert result.kept["text"][3] is None
    assert result.kept["pii_email"].to_list() == [1, 1, 0, 0]
    assert result.kept["pii_ip"].to_list() == [2, 0, 0, 0]
    assert result.kept["pii_cn_id"].to_list() == [0, 1, 0, 0]
    assert result.stats["redacted"] == {"EMAIL": 2, "CN_ID": 1, "CREDIT_CARD": 2, "IP": 2, "CN_PHONE": 1, "PHONE": 1}
    assert result.stats["docs_with_pii"] == 2
    assert all(find_pii(t) == [] for t in result.kept["text"].to_list() if t)


def test_redact_frame_uses_the_named_column():
    df = pl.DataFrame({"doc_id": ["a"], "body": ["mail me: a.b@example.com"]})
    result = redact_frame(df, column="body")
    assert result.kept["body"][0] == "mail me: <EMAIL>"
    assert result.kept["pii_email"][0] == 1


def test_anchored_patterns_fit_the_window_searched_around_their_anchors():
    from re import _parser

    anchored = [detector for detector in pii._DETECTORS if detector.anchor is not None]
    assert len(anchored) == 6
    for detector in anchored:
        assert _parser.parse(detector.pattern.pattern).getwidth()[1] < pii._MAX_MATCH


def _search_everywhere(text: str) -> list[tuple[str, str]]:
    """find_pii with every pattern searched over the whole text, as if no anchor applied."""
    found: list[tuple[str, str]] = []
    for detector in pii._DETECTORS:
        record = lambda value, t=detector.pii_type: found.append((t, value))  # noqa: E731
        text = pii._replace_matches(text, detector, record)
    return found


def test_searching_only_around_anchors_finds_what_a_whole_search_finds():
    draw = random.Random(3)
    pieces = [*"0123456789 -.()+xXa@:\n", "第", "节", "+86 ", "138", "4111 1111 1111 1111", VALID_CN_ID, " 4111111111111111 ", "4222222222222",
              "(415) 555-0132", "+1 415 555 0132 2026", "192.168.1.1", "10.0.0.7.", "fe80::1", "2001:db8::7",
              "fe80:0:0:0:0:0:0:1%", "::", "Section ", "v", "x" * 70, " " * 70]
    texts = ["".join(draw.choice(pieces) for _ in range(draw.randint(0, 120))) for _ in range(3000)]
    found = [_search_everywhere(t) for t in texts]
    kinds = {pii_type for spans in found for pii_type, _ in spans}
    assert sum(map(bool, found)) > 1000 and kinds >= {"IP", "PHONE", "CN_PHONE", "CN_ID", "CREDIT_CARD"}
    for text, expected in zip(texts, found):
        assert find_pii(text) == expected, repr(text)
