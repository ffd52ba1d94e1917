"""verl's import-time notices that this machine has no accelerator or lacks an optional training engine (Megatron,
torchtitan, veomni, automodel, mindspeed): a dozen lines before a command's own output, which a first-time user
reads as failures. Our commands that import verl to run on CPU or with FSDP silence those notices only, before
their first import that reaches verl; every other warning still shows. No verl import here."""

from __future__ import annotations

import logging
import warnings


def quiet_verl_import_notices() -> None:
    warnings.filterwarnings("ignore", message=r"\w+ engine is not available", category=UserWarning)
    platform = logging.getLogger("verl.plugin.platform.platform_manager")
    platform.addFilter(lambda record: record.levelno > logging.WARNING)
