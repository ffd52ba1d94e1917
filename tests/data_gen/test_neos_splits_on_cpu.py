"""Leak-free splits of Neos tasks (``data_gen.neos.export.splits``): hand-built tasks whose answers alone (the old
split key) hash to different splits, so each test fails where a split is chosen per answer entity."""

from data_gen.common.export import pick_split
from data_gen.neos.export import SPLITS, splits
from neos_core.neos_tasks import EntryImage, Step, Task


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


def _sealed(got: dict[str, str]) -> bool:
    """Either every task is held out or none is: no benchmark task shares a key with a training task."""
    return len({split == "benchmark" for split in got.values()}) == 1


def test_tasks_sharing_an_entry_image_are_held_out_together_or_not_at_all():
    assert _old("Q7") == "benchmark" and _old("Q2") == "train"  # by answer alone: a benchmark task and its leak
    tasks = [_task("a", "map", ["N", "C", "Q7"]), _task("b", "map", ["N", "D", "Q2"])]
    assert _sealed(splits(tasks))


def test_a_shared_answer_joins_tasks_of_different_images_and_what_shares_their_images():
    assert _old("Q7") != _old("Q2")  # benchmark and train by answer alone
    tasks = [_task("a", "flag", ["N", "M", "Q7"]), _task("b", "map", ["S", "R", "Q7"]),
             _task("c", "map", ["S", "X", "Q2"])]
    assert _sealed(splits(tasks))


def test_a_chain_through_another_tasks_answer_is_held_out_with_it():
    assert _old("Q7") == "benchmark" and _old("Q1") == "rl"
    tasks = [_task("a", "flag", ["N", "M", "Q7"]), _task("b", "map", ["S", "Q7", "Q1"])]
    assert _sealed(splits(tasks))


def test_training_tasks_of_one_group_keep_their_answers_rl_or_train_split():
    """``rl`` and ``train`` may share keys (SFT and RL on overlapping data): within training, the answer decides."""
    tasks = [_task("a", "map", ["N", "C", "Q1"]), _task("b", "map", ["N", "D", "Q2"])]
    assert splits(tasks) == {"a": "rl", "b": "train"}


def test_an_entity_no_task_answers_joins_nothing():
    """Ten chains through one hub stay ten groups of one task: eight go to training, the ninth is held out
    (1/0.1 = 9/0.9 ties and the held-out split wins), the tenth trains (2/0.1 > 10/0.9). Joined by the hub they
    would be one group of ten, all training."""
    tasks = [_task(f"t{i}", f"img{i}", [f"S{i}", "HUB", f"A{i}"]) for i in range(10)]
    assert list(splits(tasks).values()).count("benchmark") == 1


def test_groups_fill_the_held_out_share_largest_first():
    """A group of 7 (one entry image) goes to training (7/0.9 < 7/0.1); of 3 single tasks the first goes to training
    (8/0.9 < 1/0.1), the second is held out (1/0.1 = 9/0.9 ties and the held-out split wins), the third trains
    (2/0.1 > 10/0.9)."""
    big = [_task(f"g{i}", "map", ["N", "M", f"A{i}"]) for i in range(7)]
    small = [_task(f"s{i}", f"img{i}", [f"S{i}", "M", f"B{i}"]) for i in range(3)]
    got = splits(big + small)
    assert "benchmark" not in {got[t.id] for t in big}
    assert sorted(got[t.id] == "benchmark" for t in small) == [False, False, True]


def test_splits_do_not_depend_on_task_order():
    tasks = [_task("a", "flag", ["N", "M", "Q7"]), _task("b", "map", ["S", "Q7", "Q1"]),
             _task("c", "pic", ["T", "U", "Q2"]), _task("d", "pic", ["T", "V", "Q12"])]
    assert splits(tasks) == splits(tasks[::-1])
