"""verl's ``MultiTurnSFTDataset`` over ``sft.parquet`` (``data_gen.common.sft``), whose ``tools`` column is JSON text.

Parquet cannot hold differently shaped tool schemas in one column without padding every schema with the others'
keys as nulls (see ``data_gen.common.sft``), so the exporter writes them as JSON and this subclass decodes them after
verl has read the files; everything else (templating per turn, loss masks, images, position ids) is verl's own.
Select it in verl's SFT trainer with ``data.custom_cls.path=pkg://verl_ext.data.sft_dataset
data.custom_cls.name=JsonToolsMultiTurnSFTDataset``.
"""

from __future__ import annotations

import json

from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset


class JsonToolsMultiTurnSFTDataset(MultiTurnSFTDataset):
    def _read_files_and_process(self) -> None:
        super()._read_files_and_process()
        if self.tools is not None:
            self.tools = [json.loads(t) if isinstance(t, str) else t for t in self.tools]
