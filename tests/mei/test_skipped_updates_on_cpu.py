"""A due MEI update with no usable retained call (Neos §3.5 schedule): counted as ``mei/update_skipped`` with its
reason and warned, its calls dropped rather than tokenised again at every later step, and the run stopped with a
message naming the setting once ``max_skipped_updates`` updates in a row were skipped, through the trainer's own
hook (``MEICoEvolutionMixin._update_mei``) on a real buffer and the real tiny Qwen-VL processor."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from tool_server.mei.log import BlobStore
from verl_ext.mei.buffer import MEIBuffer
from verl_ext.mei.selection import RetainedCall
from verl_ext.trainer.mei_coevolution import max_skipped_updates
from verl_ext.trainer.neos_trainer import NeosTrainer

from .conftest import mei_record


def _trainer(tmp_path, tiny_vl_processor, limit):
    trainer = object.__new__(NeosTrainer)  # only the hook's own state: no workers, no GPU
    trainer.config = OmegaConf.create({"trainer": {"v1": {"neos": {"mei": {"max_skipped_updates": limit}}}}})
    trainer.mei_buffer = MEIBuffer(tmp_path / "buffer")
    trainer.mei_every = 1
    trainer.mei_max_skipped = max_skipped_updates(trainer._mei_config())
    trainer.mei_processor = tiny_vl_processor
    trainer.mei_settings = SimpleNamespace(max_seq_len=16)  # every logged call is longer: none is usable
    return trainer


def test_skipped_updates_are_counted_dropped_and_stop_the_run(tmp_path, tiny_vl_processor, caplog):
    trainer = _trainer(tmp_path, tiny_vl_processor, 2)
    buffer = trainer.mei_buffer
    assert buffer.add([RetainedCall(mei_record(c), "success", "s", 0) for c in ("a", "b")], BlobStore(tmp_path)) == 2
    buffer.record_policy_update()
    metrics: dict[str, float] = {}
    with caplog.at_level(logging.WARNING):
        trainer._update_mei(metrics)
    assert metrics == {"mei/skipped/too_long": 2.0, "mei/update_skipped": 1.0,
                       "mei/update_skipped/no_usable_calls": 1.0, "mei/dropped_calls": 2.0}
    assert "MEI update skipped (no_usable_calls): 2 retained calls, none usable (too_long 2)" in caplog.text
    # dropped: nothing pending, not due again before K more policy updates, MEI unchanged
    assert buffer.pending().calls == [] and not buffer.due(1)
    assert (buffer.state.mei_version, buffer.state.mei_updates, buffer.state.skipped_updates) == ("v0", 0, 1)

    buffer.record_policy_update()
    with pytest.raises(RuntimeError, match=r"MEI co-evolution stalled: 2 MEI updates in a row were skipped \(no call was "
                       r"retained since the last update\).*trainer\.v1\.neos\.mei\.max_skipped_updates=null"):
        trainer._update_mei(metrics)


def test_null_max_skipped_updates_trains_on(tmp_path, tiny_vl_processor):
    trainer = _trainer(tmp_path, tiny_vl_processor, None)
    for _ in range(4):
        trainer.mei_buffer.record_policy_update()
        metrics: dict[str, float] = {}
        trainer._update_mei(metrics)
        assert metrics["mei/update_skipped/no_retained_calls"] == 1.0
    assert trainer.mei_buffer.state.skipped_updates == 4
    with pytest.raises(ValueError, match=r"trainer\.v1\.neos\.mei\.max_skipped_updates must be an integer >= 1 or "
                       r"null, got 0"):
        max_skipped_updates(OmegaConf.create({"max_skipped_updates": 0}))
