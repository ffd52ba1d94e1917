"""The walkthrough's questions: verified Neos tasks with their expert trajectories, entry images and a distractor.

Reads what ``python -m data_gen neos --out DIR`` wrote (``DIR/results.jsonl``, deduplicated as the export does) and
the world the tasks were synthesised on. No verl import.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from neos_core.neos_tasks import Outcome, Task, dedupe
from neos_core.results import latest_per_key, read_records
from neos_core.world.store import World
from tool_server.offline.pixels import open_flattened
from verl_ext.rollout.record import TrajectoryRecord
from verl_ext.walkthrough.behaviour import Call, Distractor

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Question:
    """One task ready to roll out: the prompt's pieces, the expert's calls and a wrong entity to deviate to."""

    task: Task
    expert_calls: tuple[Call, ...]
    distractor: Distractor
    images: tuple[Image.Image, ...]

    def raw_prompt(self) -> list[dict]:
        """The chat prompt the agent loop gets: the entry images (img_1, ...) then the question text."""
        content: list[dict] = [{"type": "image", "image": image} for image in self.images]
        content.append({"type": "text", "text": self.task.question})
        return [{"role": "user", "content": content}]


class NoTasksError(RuntimeError):
    """The tasks directory holds no verified task."""


def load_questions(tasks_dir: Path, world: World, limit: int, seed: int = 0) -> list[Question]:
    """The first ``limit`` verified tasks (in the export's key order) as :class:`Question` s; a bad line of
    ``results.jsonl`` raises :class:`~neos_core.results.ResultLogError` naming the file and line."""
    log_path = tasks_dir / "results.jsonl"
    if not log_path.is_file():
        raise NoTasksError(f"{log_path} does not exist: run `python -m data_gen neos --world W --out {tasks_dir}`")
    verified = dedupe(latest_per_key(read_records(log_path, Outcome)))  # read only: the log is the task run's
    if not verified:
        raise NoTasksError(f"{log_path} holds no verified task")
    if len(verified) < limit:  # said, not silent: the report would just show fewer groups than asked for
        logger.warning("%s holds %d verified tasks, fewer than the %d asked for (--groups); using those %d",
                       log_path, len(verified), limit, len(verified))
    questions = []
    for outcome in verified[:limit]:
        task = outcome.task
        expert = TrajectoryRecord.model_validate(outcome.trajectory)
        calls = tuple(Call(c.tool_name, c.arguments) for t in expert.turns if t.outcome == "call_ok" for c in t.calls)
        images = tuple(open_flattened(world.image_path(e.image_id)) for e in task.entry_images)
        distractor = pick_distractor(world, task, random.Random(f"{seed}:{task.id}"))
        questions.append(Question(task=task, expert_calls=calls, distractor=distractor, images=images))
    return questions


def pick_distractor(world: World, task: Task, rng: random.Random) -> Distractor:
    """A world entity of the answer's kind with a page, off the task's path: no path name (or the answer, or an
    alias) inside its name, no such name inside it, and none on its page (a judge reading the visit's observation
    would take terbium's "discovered in Sweden" for progress on a path through Sweden), so a judge cannot mistake
    it for progress."""
    kind = world.entities[task.answer_entity].kind
    taken = [n.lower() for n in (*task.evidence(), task.answer, *task.aliases)]
    candidates = sorted(
        e.id
        for e in world.entities.values()
        if e.kind == kind
        and e.page_id in world.pages
        and e.id != task.answer_entity
        and not any(n in e.label.lower() or e.label.lower() in n for n in taken)
        and not any(n in world.pages[e.page_id].text.lower() for n in taken)
    )
    if not candidates:
        raise ValueError(f"the world has no other {kind!r} entity with a page to serve as a wrong answer")
    entity = world.entities[rng.choice(candidates)]
    return Distractor(name=entity.label, page_url=world.pages[entity.page_id].url)


