"""Pages read in linear time (issue 24, item 3): what MEI sees of an HTML or Markdown page, and the inputs on which the
standard library's HTMLParser and a Markdown regex once took quadratic time or raised."""

from __future__ import annotations

import time

import pytest

from tool_server.online.markup import markdown_images, read_html

BOUND_S = 5.0  # linear: ~0.1 s for these pages on a loaded 2-core box; quadratic: minutes (7.4 s at a fifth the size)


def test_title_visible_text_blocks_entities_and_images():
    page = read_html(
        "<!DOCTYPE html><html><head><title>Ada &amp; the\n Engine</title><style>p {color: red}</style>"
        '<script>var s = "<p>never in the text</p>";</script></head><body><!-- a <p>comment</p> -->'
        "<h1>Ada Lovelace</h1><p>She wrote   the first\nalgorithm &lt;1843&gt;.</p><svg><text>drawn</text></svg>"
        '<div>a < b</div><img alt="portrait &quot;Ada&quot;" src="/img/ada.png"><br/>end'
        '<img src="/img/ada.png" alt="again"><img src="data:image/png;base64,AAAA"><img src=\'x.png\'/>',
        "https://example.com/wiki/Ada",
    )
    assert page.title == "Ada & the Engine"
    assert page.text == "Ada Lovelace\nShe wrote the first\nalgorithm <1843>.\na < b\nend"  # source lines kept
    assert page.images == [
        ("https://example.com/img/ada.png", 'portrait "Ada"'),  # the first of a repeated URL
        ("https://example.com/wiki/x.png", ""),  # data: URLs are no web images
    ]


def test_page_images_are_deduplicated_in_first_seen_order():
    html = "".join(f'<img src="/i/{i % 15000}.png" alt="a{i}">' for i in range(20_000))
    images = read_html(html, "https://example.com/page").images
    assert len(images) == 15_000
    assert images[:2] == [("https://example.com/i/0.png", "a0"), ("https://example.com/i/1.png", "a1")]


@pytest.mark.parametrize(
    "piece",
    ["<a ", "<a b='", '<a b="c', "<a\n", "<!--", "<![", "<![CDATA[", "</a", "<?", "<", "<title>", "<script>x"],
)
def test_a_page_of_unterminated_constructs_is_read_in_linear_time(piece):
    """50,000 copies (up to 450 kB): HTMLParser took 7.4 s for 10,000 copies of ``<a `` (4x that for 20,000), and
    raised AssertionError on ``<![``. A construct still open at the end ends the page."""
    page = "<p>before</p>" + piece * 50_000
    start = time.process_time()
    read = read_html(page, "https://example.com/")
    assert time.process_time() - start < BOUND_S
    assert read.text.startswith("before")


def test_markdown_images_in_order_first_alt_wins_and_no_quadratic_scan():
    text = "![a](https://x/1.png) ![b] (no) ![c](ftp://x) [d](https://x/2.png) ![e](https://x/1.png) ![ f ](http://x/3)"
    assert markdown_images(text) == {"https://x/1.png": "a", "http://x/3": "f"}
    assert markdown_images("![x ![y](https://x/1.png)") == {"https://x/1.png": "x ![y"}  # alt runs to the first "]"
    for text in ("![" * 200_000, "![" * 200_000 + "]", "![a](" * 100_000):  # each "![" once scanned to the end
        start = time.process_time()
        assert markdown_images(text) == {}
        assert time.process_time() - start < BOUND_S
