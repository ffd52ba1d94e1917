"""The offline ModalSearch expert: a **programmatic agent, no model**, that follows a task's graph path with real
ModalSearcher tool calls (``t2t_search``, ``t2i_search``, ``i2i_search``, ``read_url``) against the tool server and
answers only with what it retrieved. Its successful episodes are the SFT trajectories and success references.

Per node of the path (the question's composed hops are walked through their supporting images):

- image start: ``i2i_search`` of the input image must return its source page;
- text -> text: ``read_url`` of the source article must mention the target, ``t2t_search`` of the target's name
  must return the target's page;
- text -> image: ``t2i_search`` of the image's description must return the image; ``read_url`` loads its pixels;
- image -> text: ``read_url`` of the image's source page (found by ``i2i_search`` for a loaded image) must mention
  the target;
- terminal: a text answer must be stated in the last article read; an image answer must be read from the pixels
  ``read_url`` returned (``answerers.PixelAnswerer``).

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
from data_gen.modalsearch.relations import relative
from data_gen.modalsearch.schema import PathNode, Task
from data_gen.neos.observer import colour_shares
from data_gen.world.store import World
from verl_ext.rollout.record import TrajectoryRecord
from verl_ext.tools.client import ToolServerClient


class ModalSearchExpert:
    """``world``: where the expert reads which names in an article are candidates of the kind a hop asks for (the
    countries a region's article lists), so its reasoning weighs them against the question's clue before it
    commits; without it the reasoning names only the target."""

    name = "programmatic_path_expert"

    def __init__(self, client: ToolServerClient, world: World | None = None) -> None:
        self.client = client
        self._labels: dict[str, list[str]] = {}
        for entity in (world.entities.values() if world else ()):
            self._labels.setdefault(entity.kind, []).append(entity.label)
        self._kinds = {e.id: e.kind for e in world.entities.values()} if world else {}

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
        if nodes[0].kind == "image":
            found_page = await _call(episode, seen, "i2i_search", {"image": refs[0]},
                                     "I cannot name what the question's image shows yet; a reverse image search "
                                     "should find the page that carries it.")
            if found_page is None or nodes[0].source_page_url not in found_page.text:
                return "reverse search did not reach the start image's source page"
            loaded = await self._pixels(episode, seen, nodes[0], "The reverse search found where the image comes "
                                        "from; I load it at full size to look at it closely.")
        else:
            last_text = await self._read(episode, seen, nodes[0].url, f"The question starts from "
                                         f"{seen.named(nodes[0].name, 'an article')}; I read it.")
        relations = {h.target: h.relation for h in task.hops}
        for prev, node in zip(nodes, nodes[1:]):
            if prev.kind == "text" and node.kind == "text":
                if not _mentions(last_text, node):
                    return f"the article on {prev.name} does not mention {node.name}"
                result = await _call(episode, seen, "t2t_search", {"query": node.name},
                                     self._choice(seen, prev, node, relations.get(node.id, ""), last_text))
                if result is None or node.url not in result.text:
                    return f"text search did not find the page of {node.name}"
                last_text = await self._read(episode, seen, node.url, f"The search lists the page of {node.name}; I "
                                             "read it for the next clue.")
            elif node.kind == "image":
                result = await _call(episode, seen, "t2i_search", {"query": node.description}, (
                    f"The question's next clue is the {node.noun} of {seen.named(prev.name, 'the last entity')}; I "
                    "search images for it."))
                if result is None or node.url not in result.text:
                    return f"image search did not find {node.url}"
                loaded = await self._pixels(episode, seen, node, (
                    f"Of the images the search lists, the one captioned \u201c{node.name}\u201d is the {node.noun} "
                    "the clue means (the others show other entities); I load its pixels to see what it shows."))
            else:  # image -> text: the image's source page states the link
                page_text = await self._read(episode, seen, prev.source_page_url, (
                    "The image I looked at does not say by itself what it depicts; the page that carries it should."))
                if not _mentions(page_text, node) and prev.source_page_url != node.url:
                    return f"the source page of {prev.name} does not mention {node.name}"
                last_text = page_text if prev.source_page_url == node.url else await self._read(
                    episode, seen, node.url, f"That page names {node.name}; I read its own page.")
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

    def _choice(self, seen: Seen, prev: PathNode, node: PathNode, relation: str, article: str) -> str:
        """Why ``node`` is the next entity: the clue the question gives for it ("is part of {x}, and whose name
        begins with “R”"), weighed against the other names of its kind the article offers."""
        source = seen.named(prev.name, "the last entity")
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

    async def _pixels(self, episode: Episode, seen: Seen, node: PathNode, reasoning: str) -> bytes | None:
        result = await _call(episode, seen, "read_url", {"url": node.url}, reasoning, pixels=True)
        return result.images[0].png if result and result.images else None


_INITIAL = re.compile(r"whose name begins with \u201c(.)\u201d")


class Seen:
    """What the episode has shown so far (the question, then each observation): a reasoning names an entity only
    once it is here, as a policy could."""

    def __init__(self, question: str) -> None:
        self.text = question

    def named(self, name: str, otherwise: str) -> str:
        return name if name and found(name, self.text) else otherwise

    def add(self, observation: str) -> None:
        self.text += "\n" + observation


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
