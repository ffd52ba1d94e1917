"""The offline ModalSearch expert: a **programmatic agent, no model**, that follows a task's graph path with real
ModalSearcher tool calls (``t2t_search``, ``t2i_search``, ``i2i_search``, ``read_url``) against the tool server and
answers only with what it retrieved. Its successful episodes are the SFT trajectories and success references.

It opens only what a policy could: the question's image, pages and images a search it made returned. Per node of
the path (the question's composed hops are walked through their supporting images):

- image start: ``i2i_search`` of the input image; every result the search says looks like it (``exact_match`` or
  ``visual_match``) is loaded with ``read_url`` and its colours compared with the question image's, the comparison
  in the next turn's reasoning; the one that matches, and only it, must be the start image;
- text start: the question describes it (``Task.start_clues``); by a neighbour it names (``t2t_search`` of the
  neighbour, ``read_url`` of its page, which must name the start, then the start's own page, which must name every
  clue) or by a quoted sentence (``t2t_search`` of its words must return the start's page);
- text -> text: the article read must mention the target; ``t2t_search`` of the target's name must return its page;
  a flag clue ("whose national flag is mostly red and white and ...") first has it fetch (``t2i_search``,
  ``read_url``) the flag of every candidate the article names and read its colours: only the target's may match;
- text -> image: ``t2i_search`` of "<kind> of <source>" must return the image; ``read_url`` loads its pixels. An
  image of another entity (a state's page shows its country's flag) is loaded from the source's page, which lists it;
- image -> text: ``read_url`` of the image's source page (listed beside the image in the search result) must mention
  the target, whose page a ``t2t_search`` then finds; a figure loaded from a page is followed by its caption (it
  names the entity depicted: a ``t2t_search`` of that name);
- terminal: a text answer must be stated in the last article read; an image answer must be read from the pixels
  ``read_url`` returned (``answerers.PixelAnswerer``).

``data_gen.modalsearch.replay.unexplained`` checks a trajectory for anything its calls and reasoning use that the
question and the observations before them do not explain.

Every turn is written as the ``modalsearch_react_agent`` loop parses a policy's: ``<think>`` with a short reasoning,
then one ``<tool_call>`` or the ``<answer>``. The reasoning is grounded in what the episode has observed: it names an
entity only once the question or an earlier observation has named it (:func:`_named`), and an answer read from
pixels comes after the turn that loaded them.
"""

from __future__ import annotations

import io
import re

from PIL import Image as PILImage

from data_gen.common.episode import Episode, call_text, expert_episode, found
from data_gen.modalsearch.answerers import VISUAL_QUESTIONS
from data_gen.common.teacher import Brief
from data_gen.modalsearch.relations import clue_colours, colour_words, listed, reading_of, relative
from data_gen.modalsearch.schema import PathHop, PathNode, Task
from data_gen.neos.observer import colour_shares
from neos_core.world.store import World
from verl_ext.rollout.record import TrajectoryRecord
from verl_ext.tools.client import ToolServerClient


class ModalSearchExpert:
    """``world``: where the expert reads which names in an article are candidates of the kind a hop asks for (the
    countries a region's article lists), so its reasoning weighs them against the question's clue before it
    commits, the question image's pixels (the input a policy sees), and page titles to URLs (a clue's page is
    opened only from a search result that lists it)."""

    name = "programmatic_path_expert"

    def __init__(self, client: ToolServerClient, world: World) -> None:
        self.client = client
        self.image_path = world.image_path
        self._labels: dict[str, list[str]] = {}
        for entity in world.entities.values():
            self._labels.setdefault(entity.kind, []).append(entity.label)
        self._kinds = {e.id: e.kind for e in world.entities.values()}
        self._names = {e.id: e.label for e in world.entities.values()}
        self._pages = {p.title: PathNode(id=p.id, kind="text", name=p.title, noun="", url=p.url)
                       for p in world.pages.values()}

    async def solve(self, task: Task) -> tuple[bool, TrajectoryRecord, str]:
        """(solved, trajectory, why it failed or '')."""
        return await expert_episode(
            self.client, [task.start_image_url] if task.start_image_url else [],
            lambda episode, refs: self._walk(task, episode, refs), protocol="modalsearch", question=task.question,
            group_id=task.id, answer=task.answer,
            render=lambda final: _answer_turn(task, final))

    async def _walk(self, task: Task, episode: Episode, refs: list[str]) -> str:
        nodes = task.nodes
        seen = Seen(task.question)
        last_text = ""
        loaded: bytes | None = None
        after = ""  # what the last comparison decided, said in the next turn's reasoning
        figure = ""  # the caption of a figure loaded from a page, which names what it depicts
        if nodes[0].kind == "image":
            found_page = await _call(episode, seen, "i2i_search", {"image": refs[0]},
                                     "I cannot name what the question's image shows yet; a reverse image search "
                                     "should find the page that carries it.")
            if found_page is None:
                return "reverse search failed"
            chosen = await self._compare(episode, seen, task, found_page.records)
            if isinstance(chosen, str):
                return chosen
            loaded, after = chosen
        else:
            failed = await self._find_start(episode, seen, task)
            if failed:
                return failed
            last_text = seen.last
        hops = {h.target: h for h in task.hops}
        relations = {h.target: h.relation for h in task.hops}
        figures = {h.via or h.target for h in task.hops if "page_figure" in h.relation_source}
        for prev, node in zip(nodes, nodes[1:]):
            if prev.kind == "text" and node.kind == "text":
                if not _mentions(last_text, node):
                    return f"the article on {prev.name} does not mention {node.name}"
                hop = hops.get(node.id)
                if hop is not None and hop.peers:
                    failed, reasoning = await self._flag_choice(episode, seen, prev, node, hop, last_text)
                    if failed:
                        return failed
                else:
                    reasoning = self._choice(seen, prev, node, relations.get(node.id, ""), last_text)
                last_text = await self._search_and_read(episode, seen, node, reasoning)
                if last_text is None:
                    return f"text search did not find the page of {node.name}"
            elif node.id in figures:  # an image of another entity that prev's page shows
                if node.url not in seen.last:
                    return f"the page of {prev.name} does not show {node.url}"
                loaded = await self._pixels(episode, seen, node.url, (
                    f"The article on {seen.named(prev.name, 'the last one')} shows an image captioned \u201c{node.name}"
                    f"\u201d, a {node.noun} of something other than the article's subject; I load it."))
                figure = f"The image is captioned \u201c{node.name}\u201d. "
            elif node.kind == "image":
                result = await _call(episode, seen, "t2i_search", {"query": f"{node.noun} of {prev.name}"}, (
                    f"The question's next clue is the {node.noun} of {seen.named(prev.name, 'the last one')}; I "
                    "search images for it."))
                if result is None or node.url not in result.text:
                    return f"image search did not find {node.url}"
                loaded = await self._pixels(episode, seen, node.url, (
                    f"Of the images the search lists, the one captioned \u201c{node.name}\u201d is the {node.noun} "
                    f"of {prev.name} (the others show other entities or other kinds of image); I load its pixels to "
                    "see what it shows."))
            elif figure and found(node.name, figure) and node.entity == prev.entity:
                last_text = await self._search_and_read(episode, seen, node, (  # a figure's caption names it
                    f"{figure}It depicts {node.name}; I search for its page."))
                figure = ""
                if last_text is None:
                    return f"text search did not find the page of {node.name}"
            else:  # image -> text: the image's source page states the link
                if figure:  # loaded from another page: its own page is found by the name its caption gives
                    depicted = self._names.get(prev.entity or "", "")
                    if not depicted or not found(depicted, figure):
                        return f"the caption of {prev.name} does not name what it depicts"
                    result = await _call(episode, seen, "t2t_search", {"query": depicted},
                                         f"{figure}It depicts {depicted}; I search for its page.")
                    figure = ""
                    if result is None or not prev.source_page_url or prev.source_page_url not in result.text:
                        return f"text search did not find the page of {depicted}"
                page_text = await self._read(episode, seen, prev.source_page_url, (
                    f"{after}The image does not say by itself what it depicts; the page that carries it should."))
                after = ""
                if not _mentions(page_text, node) and prev.source_page_url != node.url:
                    return f"the source page of {prev.name} does not mention {node.name}"
                if prev.source_page_url == node.url:
                    last_text = page_text
                else:
                    last_text = await self._search_and_read(episode, seen, node, (
                        f"That page names {node.name}; I search for its own page."))
                    if last_text is None:
                        return f"text search did not find the page of {node.name}"
        if task.terminal.modality == "text":
            if not any(found(a, last_text) for a in (task.answer, *task.aliases)):
                return "the last article read does not state the answer"
            return ""
        if loaded is None:
            return "the terminal image was not loaded"
        ask = next((q for q in VISUAL_QUESTIONS if q[0] == task.terminal.ask), None)
        if ask is None:
            return f"unknown visual ask {task.terminal.ask!r}"
        with PILImage.open(io.BytesIO(loaded)) as im:
            read = ask[2](colour_shares(im))
        return "" if read == task.answer else f"the fetched pixels read {read!r}, not {task.answer!r}"

    async def _compare(self, episode: Episode, seen: Seen, task: Task,
                       records: list[dict]) -> tuple[bytes, str] | str:
        """Load every image the reverse search says looks like the question's and compare its colours with the
        question image's, each comparison in the next turn's reasoning; the closest must be the start image. (its
        pixels, the verdict), or why not."""
        shown = [r for r in records if r.get("match_state") in MATCHING]
        if not shown:
            return "the reverse search shows no matching image"
        with PILImage.open(self.image_path(task.start_image_id)) as im:
            mine = dict(colour_shares(im))
        names = ", ".join(f"\u201c{r['caption']}\u201d" for r in shown)
        reasoning = (f"The reverse search shows {len(shown)} image{'s' if len(shown) > 1 else ''} that look like the "
                     f"question's ({names}); I load each to compare it with the question's image, which reads "
                     f"{_colours(mine)}.")
        pixels: dict[str, bytes] = {}
        distance: dict[str, float] = {}
        for record in shown:
            loaded = await self._pixels(episode, seen, record["url"], reasoning)
            if loaded is None:
                return f"could not load {record['url']}"
            with PILImage.open(io.BytesIO(loaded)) as im:
                theirs = dict(colour_shares(im))
            pixels[record["url"]], distance[record["url"]] = loaded, _distance(mine, theirs)
            verdict = "the same colours in the same proportions" if distance[record["url"]] <= SAME \
                else "not the question's image"
            reasoning = f"\u201c{record['caption']}\u201d reads {_colours(theirs)}: {verdict}."
        best = min(shown, key=lambda r: distance[r["url"]])
        others = [r for r in shown if r is not best and distance[r["url"]] <= SAME]
        if distance[best["url"]] > SAME or others:
            return f"{len(others) + (distance[best['url']] <= SAME)} of {len(shown)} candidates match the image"
        if best["url"] != task.nodes[0].url:
            return f"the comparison picks {best['url']}, not the start image"
        rest = f", the other {len(shown) - 1} differ" if len(shown) > 1 else ""
        return pixels[best["url"]], (f"{reasoning} Only \u201c{best['caption']}\u201d matches the question's "
                                     f"image{rest}; its page is {best.get('page_title')}. ")

    async def _flag_choice(self, episode: Episode, seen: Seen, prev: PathNode, node: PathNode, hop: PathHop,
                           article: str) -> tuple[str, str]:
        """A flag clue: fetch each candidate's national flag (every one the article names) and read its colours;
        only the target's may read as the clue says. (why it failed or '', the reasoning of the next search)."""
        clue = clue_colours(hop.relation)
        if clue is None:
            return f"no flag colours in {hop.relation!r}", ""
        missing = [p for p in hop.peers if not found(p, article)]
        if missing:
            return f"the article on {prev.name} does not name the candidate {missing[0]}", ""
        reasoning = (f"The article on {prev.name} names {len(hop.peers)} candidates for the {node.noun}, "
                     f"{listed(hop.peers)}; the question wants the one whose national flag is mostly "
                     f"{colour_words(clue)}, so I look at each one's flag. ")
        matching = []
        for peer in hop.peers:
            result = await _call(episode, seen, "t2i_search", {"query": f"national flag of {peer}"},
                                 f"{reasoning}I search for the national flag of {peer}.")
            record = next((r for r in (result.records if result else []) if r.get("page_title") == peer
                           and str(r.get("caption", "")).startswith("Flag of")), None)
            if record is None:
                return f"image search did not find the flag of {peer}", ""
            loaded = await self._pixels(episode, seen, record["url"], (
                f"The result captioned \u201c{record['caption']}\u201d, on the page of {peer}, is its flag; I load it "
                "to see its colours."))
            if loaded is None:
                return f"could not load {record['url']}", ""
            with PILImage.open(io.BytesIO(loaded)) as im:
                reading = reading_of(im)
            words = colour_words(reading) if reading else "no colour clearly"
            if reading == clue:
                matching.append(peer)
            reasoning = f"{peer}'s flag is mostly {words}: {'as' if reading == clue else 'not as'} the clue says. "
        if matching != [node.name]:
            return f"the flags of {matching or 'none'} read as the clue, not just {node.name}'s", ""
        return "", f"{reasoning}Only {node.name}'s flag is mostly {colour_words(clue)}; I search for its page."

    async def _find_start(self, episode: Episode, seen: Seen, task: Task) -> str:
        """A text start, found as a policy can: the question describes it by neighbours it names (search one, read
        its page, which names the start) or by a quoted sentence (search its words); '' or why not."""
        start = task.nodes[0]
        if not task.start_clues:
            return "the task says nothing to search the start by"
        clue = task.start_clues[0]
        if "___" in clue:  # the masked lead sentence the question quotes
            words = " ".join(p.strip(" .,;") for p in clue.split("___") if p.strip(" .,;"))
            text = await self._search_and_read(episode, seen, start, (
                "The question quotes a sentence of the article it starts from, with the name left out; I search "
                "for the sentence's words."), query=words, pick="the result whose text carries the quoted sentence")
            return "" if text is not None else "the quoted sentence's search did not find the start page"
        neighbour = self._pages.get(clue)
        if neighbour is None:
            return f"no page for the clue {clue!r}"
        text = await self._search_and_read(episode, seen, neighbour, (
            f"The question describes where it starts only through {clue}, which it names; I search for {clue}'s "
            "page."))
        if text is None or not _mentions(text, start):
            return f"the page of {clue} does not name {start.name}"
        text = await self._search_and_read(episode, seen, start, (
            f"The article on {clue} names {start.name}, which fits the question's description; I search for its "
            "page to check the rest of the description."))
        if text is None:
            return f"text search did not find the page of {start.name}"
        missing = [c for c in task.start_clues if not found(c, text)]
        return f"the page of {start.name} does not name {missing[0]}" if missing else ""

    async def _search_and_read(self, episode: Episode, seen: Seen, node: PathNode, reasoning: str, *,
                               query: str | None = None, pick: str | None = None) -> str | None:
        """``t2t_search`` (of ``node``'s name unless ``query``), then ``read_url`` of ``node``'s page, which the
        search must return; the page's text, or None."""
        result = await _call(episode, seen, "t2t_search", {"query": query or node.name}, reasoning)
        if result is None or node.url not in result.text:
            return None
        title = next((r.get("title") for r in result.records if r.get("url") == node.url), node.name)
        return await self._read(episode, seen, node.url, f"The search lists {pick or 'the page titled ' + title}"
                                f" ({title}); I read it.")

    def _choice(self, seen: Seen, prev: PathNode, node: PathNode, relation: str, article: str) -> str:
        """Why ``node`` is the next entity: the clue the question gives for it ("is part of {x}, and whose name
        begins with “R”"), weighed against the other names of its kind the article offers."""
        source = seen.named(prev.name, "the last one")
        clue = relation.replace("{x}", source)
        kind = self._kinds.get(node.entity or "")
        offered = [n for n in self._labels.get(kind or "", []) if n != node.name and found(n, article)]
        initial = _INITIAL.search(relation)
        if offered and initial:
            listed = ", ".join(sorted(offered)[:5]) + (", ..." if len(offered) > 5 else "")
            return (f"The article on {source} names {len(offered) + 1} candidates for the {node.noun}, {node.name} "
                    f"and {listed}; the question wants the one whose name begins with \u201c{initial.group(1)}\u201d,"
                    f" which only {node.name} does. I search for its own page.")
        return f"The article on {source} names {node.name}, {relative(node.noun, clue)}; I search for its own page."

    async def _read(self, episode: Episode, seen: Seen, url: str | None, reasoning: str) -> str:
        if url is None:
            return ""
        result = await _call(episode, seen, "read_url", {"url": url}, reasoning)
        return result.text if result else ""

    async def _pixels(self, episode: Episode, seen: Seen, url: str, reasoning: str) -> bytes | None:
        result = await _call(episode, seen, "read_url", {"url": url}, reasoning, pixels=True)
        return result.images[0].png if result and result.images else None


_INITIAL = re.compile(r"whose name begins with \u201c(.)\u201d")
MATCHING = ("exact_match", "visual_match")  # reverse-search states that say a result looks like the query
SAME = 0.05  # colour shares closer than this in total (L1) are the same image as a person sees it


def _distance(a: dict[str, float], b: dict[str, float]) -> float:
    return sum(abs(a.get(c, 0.0) - b.get(c, 0.0)) for c in {*a, *b})


def _colours(shares: dict[str, float]) -> str:
    return ", ".join(f"{c} {round(100 * v)}%" for c, v in shares.items()) or "no colour clearly"


class Seen:
    """What the episode has shown so far (the question, then each observation): a reasoning names an entity only
    once it is here, as a policy could."""

    def __init__(self, question: str) -> None:
        self.text = question
        self.last = ""  # the last observation


    def named(self, name: str, otherwise: str) -> str:
        return name if name and found(name, self.text) else otherwise

    def add(self, observation: str) -> None:
        self.text += "\n" + observation
        self.last = observation


async def _call(episode: Episode, seen: Seen, name: str, arguments: dict, reasoning: str, pixels: bool = False):
    """One ReAct call turn (``<think>`` reasoning, then the call); its observation joins ``seen``."""
    text = f"<think>{reasoning}</think>\n<tool_call>{call_text(name, arguments)}</tool_call>"
    result = await episode.call(name, arguments, pixels=pixels, text=text)
    if result is not None:
        seen.add(result.text)
    return result


def _answer_turn(task: Task, final: str | None) -> str:
    if final is None:
        return "<think>The evidence I gathered does not settle it.</think>\n<answer>I could not verify an " \
               "answer.</answer>"
    why = "The image I loaded shows it in its pixels" if task.terminal.modality == "image" \
        else "The last page I read states it"
    return f"<think>{why}.</think>\n<answer>{final}</answer>"


def _mentions(text: str, node: PathNode) -> bool:
    return found(node.name, text)


def teacher_brief(world: World, task: Task) -> Brief:
    """The task as the model-backed teacher gets it: the question and the start image, if any (URL and pixels). An
    image question's answer is read from pixels, so no observation need name it."""
    start = [(task.start_image_url, task.start_image_id)] if task.start_image_url and task.start_image_id else []
    return Brief(task.id, task.question, [url for url, _ in start], [world.image_path(i) for _, i in start],
                 task.ground_truth(), answer_in_text=task.terminal.modality == "text")
