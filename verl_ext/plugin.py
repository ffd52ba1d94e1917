"""Entry point of group ``verl.plugins``: verl imports this module on ``import verl`` in every process."""

from verl_ext.registrations import register_all

register_all()
