"""curated_shard's heuristic rules (config `quality_rules`) as typed fields, one Config per rule family of RulesConfig.

The preset (`quality_preset`) gives every value. A field left unset keeps the preset's value and a
field that is set replaces it; `disabled` switches single thresholds off (None in RulesConfig, where
None means "this rule is off"), so unset and off never mean the same thing. The result goes through
`preset(name, **overrides)` like any other override. `stop_words`, a long list per language, is
left to the preset.
"""

from __future__ import annotations

import typing
from typing import Any

import dagster as dg
from pydantic import Field, model_validator

from lm_assets.corpus.curation.rules import DEFAULT_PRESET, FAMILIES, RulesConfig, preset
from lm_assets.defs.common.config import ENUM_FIELDS_AS_VALUES, choices

PRESET_DEFAULTS = preset(DEFAULT_PRESET)

RuleFamilyName = choices("RuleFamilyName", FAMILIES)
# The thresholds that None switches off: the RulesConfig fields whose type allows None.
RuleThreshold = choices(
    "RuleThreshold",
    [name for name, hint in typing.get_type_hints(RulesConfig).items() if type(None) in typing.get_args(hint)],
)


def shown(value: Any) -> str:
    """A RulesConfig value as a description shows it."""
    if value is None:
        return "off"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ", ".join(f"{n}: {fraction}" for n, fraction in value)
    return str(value)


def preset_field(name: str, meaning: str) -> Any:
    """An unset field standing for RulesConfig's `name`, its description ending with the default
    preset's value."""
    return Field(default=None, description=f"{meaning}; unset: the preset's ({shown(getattr(PRESET_DEFAULTS, name))} "
                                           f"in {DEFAULT_PRESET})")


class RuleFamily(dg.Config):
    def overrides(self) -> dict[str, Any]:
        """The RulesConfig fields this family sets."""
        return {name: value for name, value in self.model_dump().items() if value is not None}


class GopherQualityThresholds(RuleFamily):
    """Gopher's quality rules: length, word length, symbols, bullets, ellipses, letters and stop words."""

    min_doc_words: int | None = preset_field("min_doc_words", "fewest words a document may have (not zh/ja/ko)")
    max_doc_words: int | None = preset_field("max_doc_words", "most words a document may have (not zh/ja/ko)")
    min_doc_chars_cjk: int | None = preset_field("min_doc_chars_cjk", "fewest characters a zh/ja/ko document may have")
    max_doc_chars_cjk: int | None = preset_field("max_doc_chars_cjk", "most characters a zh/ja/ko document may have")
    min_avg_word_length: float | None = preset_field(
        "min_avg_word_length", "shortest mean word length in characters (not zh/ja/ko)"
    )
    max_avg_word_length: float | None = preset_field(
        "max_avg_word_length", "longest mean word length in characters (not zh/ja/ko)"
    )
    max_symbol_word_ratio: float | None = preset_field(
        "max_symbol_word_ratio", "most '#' characters, and most ellipses, per token (two rules)"
    )
    max_bullet_lines_ratio: float | None = preset_field(
        "max_bullet_lines_ratio", "largest share of lines starting with a bullet (• or -)"
    )
    max_ellipsis_lines_ratio: float | None = preset_field(
        "max_ellipsis_lines_ratio", "largest share of lines ending in an ellipsis"
    )
    max_non_alpha_words_ratio: float | None = preset_field(
        "max_non_alpha_words_ratio",
        "smallest share of words holding a letter (a lower bound, despite datatrove's name)",
    )
    min_stop_words: int | None = preset_field(
        "min_stop_words", "fewest stop words of the document's language (languages without a list pass)"
    )


class NGramThreshold(dg.Config):
    n: int = Field(description="n-gram length in words (for zh/ja/ko in characters, n × cjk_chars_per_word)")
    fraction: float = Field(description="share of the document's characters, 0-1")


class GopherRepetitionThresholds(RuleFamily):
    """Gopher's repetition rules: repeated lines, paragraphs and n-grams."""

    dup_line_frac: float | None = preset_field("dup_line_frac", "largest share of lines that repeat an earlier line")
    dup_para_frac: float | None = preset_field(
        "dup_para_frac", "largest share of paragraphs that repeat an earlier paragraph"
    )
    dup_line_char_frac: float | None = preset_field(
        "dup_line_char_frac", "largest share of characters in lines that repeat an earlier line"
    )
    dup_para_char_frac: float | None = preset_field(
        "dup_para_char_frac", "largest share of characters in paragraphs that repeat an earlier paragraph"
    )
    top_n_grams: list[NGramThreshold] | None = preset_field(
        "top_n_grams",
        "per n, the largest share of characters the most frequent n-gram may cover; empty: no such rule",
    )
    dup_n_grams: list[NGramThreshold] | None = preset_field(
        "dup_n_grams",
        "per n, the largest share of characters in n-grams that repeat an earlier one; empty: no such rule",
    )
    cjk_chars_per_word: float | None = preset_field(
        "cjk_chars_per_word",
        "characters a word n-gram spans in zh/ja/ko text: their n-grams are round(n × this) characters",
    )
    repetition_skips_structure_lines: bool | None = preset_field(
        "repetition_skips_structure_lines",
        "count repetition over prose lines only, not headings, labels and contents entries",
    )

    def overrides(self) -> dict[str, Any]:
        values = super().overrides()
        for name in ("top_n_grams", "dup_n_grams"):
            pairs = getattr(self, name)
            if pairs is not None:
                values[name] = tuple((pair.n, pair.fraction) for pair in pairs)
        return values


class C4Rules(RuleFamily):
    """C4's rules: line rules that remove lines, and document rules that drop the document."""

    c4_filter_lines: bool | None = preset_field(
        "c4_filter_lines", "kept documents carry the text the line rules leave; false: the text stays whole"
    )
    c4_filter_no_terminal_punct: bool | None = preset_field(
        "c4_filter_no_terminal_punct", "remove lines that do not end in terminal punctuation, or end in ..."
    )
    c4_remove_citations: bool | None = preset_field(
        "c4_remove_citations", "remove citation marks such as [12] and [edit] from lines"
    )
    c4_min_words_per_line: int | None = preset_field(
        "c4_min_words_per_line", "remove lines of fewer words (not zh/ja/ko); 0: none"
    )
    c4_min_chars_per_line_cjk: int | None = preset_field(
        "c4_min_chars_per_line_cjk", "remove zh/ja/ko lines of fewer characters, punctuation included"
    )
    c4_max_word_length: int | None = preset_field(
        "c4_max_word_length", "remove lines holding a word longer than this many characters"
    )
    c4_filter_javascript: bool | None = preset_field("c4_filter_javascript", "remove lines that mention JavaScript")
    c4_javascript_notices_only: bool | None = preset_field(
        "c4_javascript_notices_only", 'of those, remove only notices such as "please enable JavaScript"'
    )
    c4_filter_policy: bool | None = preset_field(
        "c4_filter_policy", "remove lines about terms of use, privacy or cookie policies"
    )
    c4_filter_lorem_ipsum: bool | None = preset_field(
        "c4_filter_lorem_ipsum", "drop documents that contain lorem ipsum"
    )
    c4_filter_curly_bracket: bool | None = preset_field(
        "c4_filter_curly_bracket", "drop documents that contain a curly bracket"
    )
    c4_min_sentences: int | None = preset_field(
        "c4_min_sentences", "fewest sentences a document may keep after the line rules"
    )


class FineWebThresholds(RuleFamily):
    """FineWeb's rules on the text C4's line rules leave: punctuation, short lines, repeats, line breaks."""

    line_punct_thr: float | None = preset_field(
        "line_punct_thr", "smallest share of lines ending in punctuation"
    )
    line_punct_exclude_zero: bool | None = preset_field(
        "line_punct_exclude_zero", "documents with no such line at all pass the punctuation rule"
    )
    short_line_thr: float | None = preset_field(
        "short_line_thr", "share of short lines at or above which a document is dropped"
    )
    short_line_length: int | None = preset_field(
        "short_line_length", "a line of at most this many characters is short (not zh/ja/ko)"
    )
    short_line_length_cjk: int | None = preset_field(
        "short_line_length_cjk", "a zh/ja/ko line of at most this many characters is short"
    )
    char_duplicates_ratio: float | None = preset_field(
        "char_duplicates_ratio", "share of characters in repeated lines at or above which a document is dropped"
    )
    new_line_ratio: float | None = preset_field("new_line_ratio", "most line breaks per word")


class ProseThresholds(RuleFamily):
    """Our own rules: enough sentences and prose, not a licence."""

    min_sentences: int | None = preset_field(
        "min_sentences", "fewest sentences (. ! ? and 。！？ alike) over the whole text"
    )
    min_prose_share: float | None = preset_field(
        "min_prose_share", "smallest share of the text in lines of prose (not headings, code or link lists)"
    )
    max_licence_share: float | None = preset_field(
        "max_licence_share", "largest share of the text in paragraphs that quote a licence or copyright notice"
    )


class PageRules(RuleFamily):
    """Our own rules on what extraction measured on the HTML and the address; a document without HTML passes."""

    listing_page: bool | None = preset_field(
        "listing_page", "drop documents whose URL and title both name a listing (tag, category, archive, search, list)"
    )
    source_listing: bool | None = preset_field(
        "source_listing", "drop raw source listings (nearly all the text in `<pre>`, much of it code), under a classifier too"
    )
    max_html_link_share: float | None = preset_field(
        "max_html_link_share", "largest share of the page's visible text inside links"
    )
    max_html_removed_share: float | None = preset_field(
        "max_html_removed_share", "largest share of the page's visible text that extraction removed"
    )


class RuleOverrides(dg.Config):
    """The quality rules on top of the preset, by family; a family's thresholds apply when it runs."""

    model_config = ENUM_FIELDS_AS_VALUES

    families: list[RuleFamilyName] | None = Field(
        default=None,
        description=f"the rule families that run; unset: the preset's ({', '.join(PRESET_DEFAULTS.families)} in "
        f"{DEFAULT_PRESET})",
    )
    disabled: list[RuleThreshold] = Field(
        default=[],
        description="thresholds switched off, whatever the preset says; one also set below is refused",
    )
    gopher_quality: GopherQualityThresholds = Field(
        default=GopherQualityThresholds(), description="Gopher's quality rules"
    )
    gopher_repetition: GopherRepetitionThresholds = Field(
        default=GopherRepetitionThresholds(), description="Gopher's repetition rules"
    )
    c4: C4Rules = Field(default=C4Rules(), description="C4's line and document rules")
    fineweb: FineWebThresholds = Field(default=FineWebThresholds(), description="FineWeb's rules")
    prose: ProseThresholds = Field(default=ProseThresholds(), description="the prose and licence rules")
    page: PageRules = Field(default=PageRules(), description="the rules on the page's HTML and address")

    @model_validator(mode="after")
    def _off_or_set(self):
        both = sorted(set(self.disabled) & set(self.set_thresholds()))
        if both:
            raise ValueError(f"quality thresholds both set and switched off: {both}")
        return self

    def set_thresholds(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for family in (self.gopher_quality, self.gopher_repetition, self.c4, self.fineweb, self.prose, self.page):
            values |= family.overrides()
        return values

    def overrides(self) -> dict[str, Any]:
        """The RulesConfig fields to set on top of the preset."""
        families = {} if self.families is None else {"families": tuple(self.families)}
        return families | self.set_thresholds() | dict.fromkeys(self.disabled)
