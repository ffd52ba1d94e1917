"""Leak-free splits of Neos tasks (``data_gen.neos.export.splits``): hand-built tasks whose answers alone (the old
split key) hash to different splits, so each test fails where a split is chosen per answer entity."""

from data_gen.common.export import pick_split
from data_gen.neos.export import SPLITS, splits
from data_gen.neos.schema import EntryImage, Step, Task


def _task(task_id: str, image: str, chain: list[str]) -> Task:
    """A path task from the anchor ``chain[0]`` (shown by ``image``) to its answer ``chain[-1]``."""
    steps = [Step(index=i, source=a, target=b, relation="P1", relation_label="r", forward=True, fact=(a, "P1", b),
                  source_name=a, target_name=b, source_page_url=None, target_page_url=None, checkpoint=False, span=b)
             for i, (a, b) in enumerate(zip(chain, chain[1:]), 1)]
    return Task(id=task_id, world_hash="w", seed=0, structure_type="path", structure={}, question=f"{task_id}?",
                entry_images=[EntryImage(image_id=image, url=f"https://img/{image}", entity_id=chain[0])],
                answer=chain[-1], answer_entity=chain[-1], aliases=[], steps=steps)


def _old(answer: str) -> str:
    return pick_split(answer, SPLITS)


def test_tasks_sharing_an_entry_image_share_a_split():
    assert _old("Q1") != _old("Q2")  # rl and train by answer alone
    tasks = [_task("a", "map", ["N", "C", "Q1"]), _task("b", "map", ["N", "D", "Q2"])]
    assert len(set(splits(tasks).values())) == 1


def test_a_shared_answer_joins_tasks_of_different_images_and_what_shares_their_images():
    assert _old("Q7") != _old("Q2")  # benchmark and train by answer alone
    tasks = [_task("a", "flag", ["N", "M", "Q7"]), _task("b", "map", ["S", "R", "Q7"]),
             _task("c", "map", ["S", "X", "Q2"])]
    assert len(set(splits(tasks).values())) == 1


def test_a_chain_through_another_tasks_answer_shares_its_split():
    assert _old("Q1") != _old("Q7")
    tasks = [_task("a", "flag", ["N", "M", "Q7"]), _task("b", "map", ["S", "Q7", "Q1"])]
    assert len(set(splits(tasks).values())) == 1


def test_an_entity_no_task_answers_joins_nothing():
    """Two chains through the same hub stay two groups of one task: the first goes to ``train``, the second to
    ``rl`` (1/0.3 < 1/0.1 and 2/0.6 is not below 1/0.3 either, the earlier split wins); one group would share one."""
    tasks = [_task("a", "flag", ["N", "HUB", "Q1"]), _task("b", "map", ["S", "HUB", "Q7"])]
    assert sorted(splits(tasks).values()) == ["rl", "train"]


def test_groups_fill_the_shares_largest_first():
    """A group of 7 (one entry image) fills ``train`` (7/0.6 is the least fill); 3 single tasks then go to ``rl``,
    ``rl`` and ``benchmark`` (fills 1/0.3, 2/0.3, then 1/0.1 = 3/0.3 ties and the earlier split wins)."""
    big = [_task(f"g{i}", "map", ["N", "M", f"A{i}"]) for i in range(7)]
    small = [_task(f"s{i}", f"img{i}", [f"S{i}", "M", f"B{i}"]) for i in range(3)]
    got = splits(big + small)
    assert {got[t.id] for t in big} == {"train"}
    assert sorted(got[t.id] for t in small) == ["benchmark", "rl", "rl"]


def test_splits_do_not_depend_on_task_order():
    tasks = [_task("a", "flag", ["N", "M", "Q7"]), _task("b", "map", ["S", "Q7", "Q1"]),
             _task("c", "pic", ["T", "U", "Q2"]), _task("d", "pic", ["T", "V", "Q12"])]
    assert splits(tasks) == splits(tasks[::-1])
