"""Extractive MEI: passage ranking, boilerplate removal, OCR gating and caching, relevance and match thresholds."""

import io
import multiprocessing
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFont

from tool_server.mei.extractive import ExtractiveMEI, is_boilerplate, passages, terms
from tool_server.mei.ocr import OCR
from tool_server.mei.schema import ImageView, PageView

PAGE_TEXT = """Skip to content
Home | News | Sport | Contact

The Eiffel Tower is a wrought-iron lattice tower in Paris.
It was designed by the engineering company of Gustave Eiffel.

The tower was completed in 1889 for the World's Fair.

Berlin is the capital of Germany.

Accept all cookies to continue
© 2024 Example Media. All rights reserved."""

P0 = ("The Eiffel Tower is a wrought-iron lattice tower in Paris. "
      "It was designed by the engineering company of Gustave Eiffel.")
P1 = "The tower was completed in 1889 for the World's Fair."
P2 = "Berlin is the capital of Germany."


def png_with_text(text: str) -> bytes:
    im = Image.new("RGB", (360, 80), "white")
    ImageDraw.Draw(im).text((10, 15), text, fill="black", font=ImageFont.load_default(size=40))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def ocr() -> OCR:
    return OCR()


def test_terms_and_boilerplate():
    assert terms("Who designed the Eiffel Tower?") == ["designed", "eiffel", "tower"]
    assert terms("double-decker buses") == ["double", "decker", "buses"]
    assert is_boilerplate("Home | News | Sport | Contact")
    assert is_boilerplate("We use cookies to improve your experience")
    assert not is_boilerplate("Paris | the capital of France, is on the Seine | since 508")


def test_boilerplate_check_of_a_long_whitespace_run_is_linear():
    """A page's text (a reader's Markdown or a text/plain page is not whitespace-collapsed) may hold a line of
    100,000 spaces: the menu-row check rescanned the run from each of its spaces (20,000 took 1.9 s, on the loop)."""
    import time

    line = "a" + " " * 100_000 + "b"
    start = time.process_time()
    assert not is_boilerplate(line) and passages(f"{line}\n\nsecond") == [line, "second"]
    assert time.process_time() - start < 5.0  # linear: milliseconds; quadratic: ~45 s
    assert is_boilerplate("Home  \t|   News |  Sport")  # runs before and after a separator still split


async def test_web_visit_ranks_passages_on_its_pool_not_on_the_event_loop(monkeypatch):
    """Passages and BM25 of a page (~35 ms for 200,000 characters) ran on the event loop, stalling every session."""
    import threading

    from tool_server.mei import extractive

    threads: list[str] = []
    split = extractive.passages

    def recorded(text: str, **kwargs) -> list[str]:
        threads.append(threading.current_thread().name)
        return split(text, **kwargs)

    monkeypatch.setattr(extractive, "passages", recorded)
    page = PageView(url="https://x/", title="t", text="Paris is the capital of France.\n\nLyon is a city.")
    ev = await ExtractiveMEI().web_visit(goal="capital of France", page=page)
    assert ev.evidence == "Paris is the capital of France."
    assert len(threads) == 1 and threads[0].startswith("pool-extractive")


def test_passages_drop_boilerplate_and_pack_sentences():
    assert passages(PAGE_TEXT) == [P0, P1, P2]
    long = " ".join(f"Sentence number {i} is here." for i in range(10))  # 10 x 27 chars + spaces
    windows = passages(long, max_chars=60)
    assert all(len(w) <= 60 for w in windows)
    assert " ".join(windows) == long


async def test_web_visit_ranks_passages_and_selects_images(ocr):
    eiffel_png = png_with_text("EIFFEL")
    page = PageView(
        url="https://neos-world.invalid/wiki/Eiffel_Tower",
        title="Eiffel Tower",
        text=PAGE_TEXT,
        images=[
            ImageView(url="https://neos-world.invalid/media/a.png", caption="Map of Berlin", alt="map"),
            ImageView(url="https://neos-world.invalid/media/b.png", caption="The Eiffel Tower at night", alt="tower",
                      png=png_with_text("IGNORED")),
            ImageView(url="https://neos-world.invalid/media/c.png", caption="", alt="", png=eiffel_png),
        ],
    )
    mei = ExtractiveMEI(ocr=ocr)
    ev = await mei.web_visit(goal="Who designed the Eiffel Tower?", page=page)
    assert ev.evidence == f"{P0}\n\n{P1}"  # P2 shares no goal term; page order kept
    assert "cookies" not in ev.evidence and "Skip" not in ev.evidence
    assert ev.summary.startswith("Eiffel Tower: The Eiffel Tower is a wrought-iron")
    assert "Extractive" in ev.rational
    # b: caption matches 2 of 3 goal terms; c: OCR finds "eiffel" (1 of 3); a: nothing
    assert [i.url for i in ev.relevant_images] == [page.images[1].url, page.images[2].url]
    assert "text in image" in ev.relevant_images[1].caption
    # OCR ran only for c (b's metadata already matched, a has no pixels), and is cached by image hash
    assert ocr.calls == 1
    await mei.web_visit(goal="Who designed the Eiffel Tower?", page=page)
    assert ocr.calls == 1


async def test_web_visit_without_evidence():
    page = PageView(url="https://neos-world.invalid/wiki/B", title="B", text=PAGE_TEXT)
    mei = ExtractiveMEI()
    ev = await mei.web_visit(goal="volcano eruption", page=page)
    assert (ev.evidence, ev.summary, ev.relevant_images) == ("", "", [])
    ev = await mei.web_visit(goal="what is it, and where?", page=page)
    assert ev.evidence == "" and "no content words" in ev.rational


async def test_image_search_relevance_levels():
    caps = ["A red double-decker bus on Oxford Street, London", "London skyline", "A bus in London", "A cat"]
    cands = [ImageView(url=f"https://neos-world.invalid/media/{i}.png", caption=c) for i, c in enumerate(caps)]
    ev = await ExtractiveMEI().image_search(goal="red double-decker bus in London", query="bus", candidates=cands)
    # goal terms: red, double, decker, bus, london -> shares 5/5, 1/5, 2/5, 0/5
    assert [(c.index, c.relevance) for c in ev.candidates] == [(0, "high"), (2, "medium"), (1, "low"), (3, "none")]


async def test_reverse_image_match_states():
    scores = [0.9, 0.85, 0.6, 0.59, None]
    cands = [ImageView(url=f"https://neos-world.invalid/media/{i}.png", caption=f"c{i}", match_score=s)
             for i, s in enumerate(scores)]
    q = ImageView(url="https://neos-world.invalid/media/q.png")
    ev = await ExtractiveMEI().reverse_image_search(goal="same building?", query_image=q, candidates=cands)
    assert [c.match_state for c in ev.candidates] == [
        "visual_match", "visual_match", "partial_match", "not_match", "insufficient_evidence"]
    with pytest.raises(ValueError):
        ImageView(url="u", match_score=1.5)


def test_ocr_texts_outlive_the_process_on_disk_keyed_by_image_and_settings(tmp_path, monkeypatch, caplog):
    """A restarted server (a second OCR on the same directory) reads a text back instead of running the engine; other
    settings or other pixels run it; a disk that fails is counted and each call still gets its text."""
    runs: list[bytes] = []

    def engine(text: str):
        def recognise(self, png: bytes) -> str:
            runs.append(png)
            return text
        return recognise

    monkeypatch.setattr(OCR, "_recognise", engine("EIFFEL"))
    a, b = png_with_text("A"), png_with_text("B")
    assert OCR(cache_dir=tmp_path / "ocr").text_sync(a) == "EIFFEL" and runs == [a]
    monkeypatch.setattr(OCR, "_recognise", engine("other"))
    restarted = OCR(cache_dir=tmp_path / "ocr")
    assert [restarted.text_sync(a), restarted.text_sync(a), restarted.text_sync(b)] == ["EIFFEL", "EIFFEL", "other"]
    assert (restarted.disk_hits, runs) == (1, [a, b])  # the second read of a came from memory
    assert OCR(cache_dir=tmp_path / "ocr", min_score=0.9).text_sync(a) == "other" and runs == [a, b, a]
    (tmp_path / "file").write_text("not a directory")
    broken = OCR(cache_dir=tmp_path / "file")
    assert broken.text_sync(a) == "other" and broken.disk_errors == 2  # the read and the write
    assert "OCR disk cache" in caplog.text


def _ocr_in_a_process(cache_dir: str, texts: list[str], start, out) -> None:
    """One tool server process's OCR over ``texts`` (each image's "engine" answer is its own text), after ``start``."""
    OCR._recognise = lambda self, png: png.decode()  # noqa: E731 - a stand-in engine: this is about the disk cache
    ocr = OCR(cache_dir=Path(cache_dir))
    start.wait()
    out.put((sorted(ocr.text_sync(t.encode()) for t in texts), ocr.disk_errors))


def test_two_processes_fill_one_ocr_disk_cache_at_once_and_read_each_others_texts(tmp_path):
    """Tool servers of two jobs share one ``--cache-dir``: both write at once, neither fails, and a third reads every
    text of both back without running the engine."""
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    texts = [[f"job{j}-{i}" for i in range(200)] for j in (0, 1)]
    shared = [*texts[0][:100], *texts[1][:100]]  # half of each job's images are the other job's too
    jobs = [ctx.Process(target=_ocr_in_a_process, args=(str(tmp_path), t + shared, start, out)) for t in texts]
    for job in jobs:
        job.start()
    start.set()
    results = [out.get(timeout=120) for _ in jobs]
    for job in jobs:
        job.join(timeout=30)
    assert [job.exitcode for job in jobs] == [0, 0]
    assert sorted(results) == sorted((sorted(t + shared), 0) for t in texts)
    reader = OCR(cache_dir=tmp_path)
    reader._recognise = lambda png: pytest.fail("read from disk, not recognised")
    assert [reader.text_sync(t.encode()) for t in texts[0] + texts[1]] == texts[0] + texts[1]
    assert reader.disk_hits == 400
