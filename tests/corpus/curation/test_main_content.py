import random
import re

from lm_assets.corpus.curation.extract import ExtractConfig, extract_html
from lm_assets.corpus.curation.main_content import (
    _collapse_spaces,
    _shown_runs,
    extract_main_text,
    is_code_line,
    walked_page,
)

PROSE = (
    "The package manager keeps a database of installed packages and their files, so that it can remove "
    "them cleanly later. "
)


def docbook_page(content: str) -> str:
    """A DocBook-style page: navigation tables above and below a section."""
    nav = (
        '<div class="navheader"><table width="100%"><tr><td><a href="a.html">Prev</a></td>'
        '<td><a href="index.html">Up</a></td><td><a href="index.html">Home</a></td>'
        '<td><a href="b.html">Next</a></td></tr></table></div>'
    )
    return (
        f"<html><head><title>Page</title></head><body>{nav}"
        f'<div class="section"><div class="titlepage"><h2 class="title">2.1. Packages</h2></div>{content}</div>'
        f'{nav.replace("navheader", "navfooter")}</body></html>'
    )


def test_inline_elements_never_glue_words_in_chinese_or_english():
    html = docbook_page(
        "<p>安裝 <code>manpages</code> 和 <code>manpages-dev</code> 包之後，就可以閱讀手冊頁。"
        "相關工具有 <span>dpkg</span>、<span>dselect</span> 等等，都可以用來管理套件。</p>"
        "<p>Choose <span class=\"guimenu\">Filters</span> → <span class=\"guisubmenu\">Render</span> to open it. "
        + PROSE * 3 + "</p>"
    )
    text = extract_main_text(html)
    assert "manpages 和 manpages-dev" in text
    assert "dpkg、dselect" in text
    assert "Filters → Render" in text
    assert "manpagesmanpages-dev" not in text and "FiltersRender" not in text


def test_structure_survives_and_navigation_goes():
    html = docbook_page(
        f"<p>{PROSE * 2}</p>"
        "<ul><li>Each package lists the packages it depends on.</li>"
        "<li>The database records which files every package installed.</li></ul>"
        "<h3>Example</h3>"
        "<pre>def installed(name):\n    return name in database\n\nclass Database:\n    pass</pre>"
        f"<p>{PROSE}</p>"
    )
    text = extract_main_text(html)
    assert "Prev" not in text and "Next" not in text and "Home" not in text
    assert "• Each package lists the packages it depends on." in text
    assert "• The database records which files every package installed." in text
    assert "def installed(name):\n    return name in database\n\nclass Database:\n    pass" in text
    paragraphs = text.split("\n\n")
    assert paragraphs[0] == "2.1. Packages"
    assert "Example" in paragraphs
    assert paragraphs[-1] == PROSE.strip()


def test_divs_of_prose_are_paragraphs_and_lists_nest():
    html = docbook_page(
        f'<div class="para">{PROSE}</div><div class="para">{PROSE}</div>'
        "<ol><li>First step.<ul><li>a detail</li></ul></li><li>Second step.</li></ol>"
    )
    text = extract_main_text(html)
    assert f"{PROSE.strip()}\n\n{PROSE.strip()}" in text
    assert "1. First step.\n  • a detail\n2. Second step." in text


def test_hidden_and_never_read_elements_are_left_out():
    html = docbook_page(
        f"<p>{PROSE}</p><p style=\"display: none\">hidden words</p><script>var x = 1;</script>"
        "<div hidden>also hidden</div><p>Visible <span aria-hidden=\"true\">icon</span>ending.</p>"
    )
    text = extract_main_text(html)
    assert "hidden" not in text and "var x" not in text and "icon" not in text
    assert "Visible ending." in text


def test_a_page_its_styles_hide_whole_is_read_as_its_script_would_show_it():
    # The desktop layout, hidden until a script picks it; the mobile one likewise.
    html = (
        "<html><body><script>pick()</script>"
        f'<div class="pc" style="display: none;"><h1>Village news</h1><p>{PROSE * 3}</p></div>'
        '<div class="m" style="display:none"><p>Mobile layout.</p></div></body></html>'
    )
    text = extract_main_text(html)
    assert PROSE.strip() in text and "Village news" in text


def test_a_page_whose_content_is_all_hidden_for_a_script_is_read_but_chrome_beside_hidden_text_is_not():
    # LibreOffice's help: the text written for each application, `hidden` until a script shows the one open.
    links = "".join(f'<a href="/h{i}">Help topic {i}</a> ' for i in range(8))
    switch = f'<span class="switch"><span hidden="true" class="WRITER"><h1>Fields</h1><p>{PROSE * 2}</p></span></span>'
    text = extract_main_text(f"<html><body><nav>{links}</nav><div id='DisplayArea'>{switch}</div></body></html>")
    assert PROSE.strip() in text and "Fields" in text and "Help topic" not in text
    # A page with content of its own leaves its hidden text out.
    shown = f"<html><body><nav>{links}</nav><div><p>{PROSE}</p><div hidden><p>{PROSE.upper()}</p></div></div></body></html>"
    text = extract_main_text(shown)
    assert PROSE.strip() in text and PROSE.upper().strip() not in text


def test_a_page_that_keeps_its_content_for_script_less_readers_in_noscript_is_read_from_there():
    # Discourse's crawler view: an empty shell for the script, the thread in <noscript>.
    posts = "".join(f'<div class="topic-body crawler-post"><div class="post"><p>{PROSE * 2}</p></div></div>' for _ in range(3))
    shell = ("<html><body><noscript><p>Please enable JavaScript to use this site.</p></noscript><div id='app'></div>"
             f"<noscript data-path='/t/1'><div id='main-outlet'><h1>Upgrading the package database</h1>{posts}</div>"
             "</noscript></body></html>")
    text = extract_main_text(shell)
    assert text.count(PROSE.strip()) >= 3 and "Upgrading the package database" in text
    # A page with content of its own leaves a short notice and a copy in <noscript> out.
    own = f"<html><body><noscript><p>Please enable JavaScript to use this site.</p></noscript><p>{PROSE * 6}</p></body></html>"
    assert "JavaScript" not in extract_main_text(own)


def test_a_form_that_wraps_the_page_is_its_wrapper_but_a_form_beside_it_goes():
    links = "".join(f'<li><a href="/s{i}">Section number {i}</a></li>' for i in range(60))
    article = f"<div id='content'><h1>Story</h1><p>{PROSE * 4}</p><p>{PROSE * 3}</p></div>"
    aspnet = f"<html><body><form id='frmMain'><ul class='menu'>{links}</ul>{article}</form></body></html>"
    text = extract_main_text(aspnet)
    assert PROSE.strip() in text and "Section number" not in text
    beside = f"<html><body>{article}<form><p>Sign in to comment on this story and more.</p></form></body></html>"
    text = extract_main_text(beside)
    assert PROSE.strip() in text and "Sign in" not in text


def test_highlighted_code_keeps_its_line_breaks_and_leaves_its_gutter_of_line_numbers():
    # Hexo's and highlight.js's markup: a table of a gutter and the code, each line a span ended by <br>.
    gutter = "<br>".join(f'<span class="line">{n}</span>' for n in range(1, 4))
    code = "<br>".join(f'<span class="line">{line}</span>' for line in ("#include &lt;map&gt;", "int main() {", "}"))
    html = docbook_page(
        f"<p>{PROSE * 2}</p><figure class='highlight'><table><tr><td class='gutter'><pre>{gutter}</pre></td>"
        f"<td class='code'><pre>{code}</pre></td></tr></table></figure><p>Output:</p><pre>42</pre>"
    )
    text = extract_main_text(html)
    assert "#include <map>\nint main() {\n}" in text
    assert "1\n2\n3" not in text and "123" not in text
    assert "\n42" in text  # one number is output, not a gutter


def test_chrome_only_page_is_empty_but_mislabelled_content_is_kept():
    assert extract_main_text("<html><body><nav><a href='/'>Home</a> x</nav></body></html>") == ""
    wrapped = f"<html><body><nav><a href='/'>Home</a></nav><aside><p>{PROSE * 6}</p></aside></body></html>"
    assert PROSE.strip() in extract_main_text(wrapped)


def test_deeply_nested_markup_is_extracted_without_recursion_errors():
    depth = 20_000
    html = "<html><body>" + "<div>" * depth + f"<p>{PROSE}</p>" + "</div>" * depth + "</body></html>"
    assert PROSE.strip() in extract_main_text(html)


def test_extract_html_reports_title_and_lang_hint_for_every_extractor():
    html = docbook_page(f"<p>{PROSE}</p>").replace("<html>", '<html lang="en_GB">')
    for extractor in ("main_content", "resiliparse", "all_text"):
        text, title, lang_hint = extract_html(html, ExtractConfig(extractor=extractor))
        assert PROSE.strip()[:40] in text
        assert (title, lang_hint) == ("Page", "en-gb")


def test_a_gallery_inside_an_article_does_not_take_its_place():
    story = [f"<p>Paragraph {i} of the story, as it was written. {PROSE}</p>" for i in range(8)]
    slides = "".join(
        f"<li><h2>Slide {i}</h2><p>Caption {i}, with a long line of words, commas, and more words, "
        f"about one picture, then another, and another, in a gallery of fifty.</p></li>"
        for i in range(50)
    )
    html = (
        "<html><body><article><div class='text-wrapper' id='share-buttons-parent'>"
        f"{''.join(story[:2])}<div class='gallery'><ul class='legends'>{slides}</ul></div>{''.join(story[2:])}"
        "</div></article></body></html>"
    )
    text = extract_main_text(html)
    assert all(f"Paragraph {i} of the story" in text for i in range(8))
    assert "Caption" not in text


def test_a_banner_beside_the_content_goes():
    html = docbook_page(f"<p>{PROSE * 3}</p><p>{PROSE * 3}</p>").replace(
        "</body>", "<p class='site-footer'>Hosted by a mirror. Mirrored content is copyright its original "
        "authors; see the canonical site for the original version.</p></body>"
    )
    text = extract_main_text(html)
    assert PROSE.strip() in text
    assert "Hosted by a mirror" not in text


def test_a_manual_of_sections_is_read_whole_when_one_section_outscores_the_rest():
    """Asciidoctor writes each section as a heading and a body; a long table of short cells in one body
    outscores every other section, and the root must still be the manual, not that body."""
    cells = "".join(
        f"<tr><td><p>Switch to inner layer {i}, the copper layer numbered {i}</p></td><td><p>Shift+{i}</p></td></tr>"
        for i in range(60)
    )
    sections = [
        f"<div class='sect1'><h2>{n}. Section {n}</h2><div class='sectionbody'>"
        f"<div class='paragraph'><p>Section {n} explains one tool of the editor. {PROSE}</p></div></div></div>"
        for n in range(1, 6)
    ]
    sections.insert(3, "<div class='sect1'><h2>9. Actions</h2><div class='sectionbody'>"
                       f"<p>Every action that a hotkey can start.</p><table>{cells}</table></div></div>")
    html = (
        "<html><body><div id='header'><h1>Pcbnew</h1></div>"
        f"<div id='content'>{''.join(sections)}</div>"
        "<div id='footer'><div id='footer-text'>Last updated 2023-01-01</div></div></body></html>"
    )
    text = extract_main_text(html)
    assert all(f"Section {n} explains one tool" in text for n in range(1, 6))
    assert "Switch to inner layer 59" in text and "1. Section 1" in text
    assert "Last updated" not in text


def test_an_xhtml_anchor_left_open_is_no_link_but_a_script_link_without_href_is():
    """DocBook's XHTML `<h2><a id="x"/>Title</h2>`, read as HTML, leaves the anchor open around every block
    after it; a menu of script links (`<a>` with a class and an `onclick`, no `href`) is still navigation."""
    sections = "".join(
        f'<div class="section"><div class="titlepage"><h2 class="title"><a id="s{n}"/>A.{n}. Part {n}</h2></div>'
        f"<p>Part {n} of the manifesto. {PROSE}</p><p>{PROSE}</p></div>"
        for n in range(1, 4)
    )
    menu = "".join(f"<li><a class='tab' onclick='go({i})'>Category number {i} of the shop</a></li>" for i in range(12))
    html = f"<html><body><div class='appendix'><ul class='menu-tabs'>{menu}</ul>{sections}</div></body></html>"
    text = extract_main_text(html)
    assert all(f"Part {n} of the manifesto." in text for n in range(1, 4))
    assert "Category number" not in text


def test_a_section_named_after_its_heading_is_no_chrome_but_a_sidebar_of_widgets_is():
    """Sphinx takes a section's id from its heading and puts an empty anchor first ("shared-libraries"
    reads as sharing buttons); a sidebar whose first widget opens with a heading is still chrome."""
    sections = "".join(
        f"<section id='{name}'><span id='s-{name}'></span><h2>{title}</h2><p>{title} are explained here. {PROSE}</p>"
        f"<p>{PROSE}</p></section>"
        for name, title in (("shared-libraries", "Shared libraries"), ("related-packages", "Related packages"),
                            ("maintainer-scripts", "Maintainer scripts"))
    )
    labels = "".join(f"<li><a href='/label/{i}'>Label {i}</a></li>" for i in range(10))
    sidebar = (f"<div id='sidebar'><div class='widget'><h3>Popular posts</h3><ul>{labels}</ul></div>"
               "<div class='widget'><p>Subscribe to the letters of this site, sent out every week.</p></div></div>")
    html = f"<html><body><div class='document'>{sections}{sidebar}</div></body></html>"
    text = extract_main_text(html)
    assert all(f"{title} are explained here." in text
               for title in ("Shared libraries", "Related packages", "Maintainer scripts"))
    assert "Popular posts" not in text and "Subscribe" not in text


# The single pattern `is_code_line` stands for, searched along the line.
_REFERENCE_CODE_LINE = re.compile(
    r"^\s*(?:def |class |import |from \S+ import |return\b|elif\b|else\s*[:{]|try\s*[:{]|except\b|raise |"
    r"yield\b|async |await |@\w|#include|#define|#!|//|/\*|\*/|\$ |>>> |var |let |const |function\b|"
    r"public |private |static |void |[}{])"
    r"|[;{}]\s*$|\)\s*:?\s*$|^\s*(?:if|for|while|with)\b.*:\s*$"
    r"|^\s*[A-Za-z_][\w.]*(?:\[[^\]]*\])?\s*[-+*/|&]?=\s*\S|[A-Za-z_]\w*\([^()]*\)"
)


def test_code_lines_are_those_of_the_single_pattern():
    samples = [
        "def main():", "    return x", "if x > 1:", "for i in range(3):", "x = 1", "  a.b[2] += f(y)",
        "printf(\"%d\\n\", n);", "}", "  {", "#include <stdio.h>", "$ make install", ">>> import os",
        "end)", "call(a) :", "The manual explains (in brief) why.", "See chapter 3.", "with care:",
        "whiles are long:", "while True :  ", "x == y", "= 3", "name =", "  \u3000x = 1", "\u00a0;", "a(b)(c)",
        "", "   ", "\t)\t", "こんにちは。", "if\u00a0x:", "ifx:",
    ]
    rng = random.Random(7)
    pieces = ["def ", "if", " ", "\t", "\u00a0", "\u3000", "x", "_y", ".", "[0]", "=", "+=", "==", "(", ")", ":",
              ";", "{", "}", "#!", "//", "return", "while", "a", "中", "*/", "@d", "$ ", ">>> ", "\r"]
    samples += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(20_000)]
    mismatches = [s for s in samples if is_code_line(s) != bool(_REFERENCE_CODE_LINE.search(s))]
    assert mismatches == []
    assert sum(map(is_code_line, samples)) > 1000


def test_shown_runs_leave_out_removed_elements_with_everything_inside():
    page = walked_page("<body><div>a<p>b<span>c</span>d</p>e<p>f</p>g</div><p>h</p></body>")
    div, first_p, span, second_p, last_p = range(1, 6)
    page.removed |= {first_p, span, second_p, last_p}
    runs = _shown_runs(page, [(page.start[div], page.end[div]), (page.start[last_p], page.end[last_p])])
    assert [event for run in runs for event in run] == [div, "a", "e", "g", ~div]


def test_collapse_spaces_as_a_browser_renders_them():
    assert _collapse_spaces("a b") == "a b"
    assert _collapse_spaces(" a \n\t b  ") == " a b "
    assert _collapse_spaces("中\n\n 文\u00a0 x") == "中 文\u00a0 x"  # no-break space kept, outside ASCII too
