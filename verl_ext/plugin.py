"""Entry point of group ``verl.plugins``: verl imports this module on ``import verl`` in every process."""

from verl_ext.models.freeze import install as install_vision_freeze
from verl_ext.registrations import register_all

register_all()
install_vision_freeze()  # only acts when $NEOS_FREEZE_VISION_TOWER=1 (the neos recipe sets it for every Ray worker)
