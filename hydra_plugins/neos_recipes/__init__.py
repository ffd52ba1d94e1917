"""Hydra search-path plugin: makes ``python -m verl.trainer.main_ppo +recipe=neos`` find our recipes.

Hydra discovers every module under the ``hydra_plugins`` namespace package; appending ``pkg://recipes`` puts the
installed ``recipes/recipe/*.yaml`` into the ``recipe`` config group of any Hydra app, verl's ``main_ppo`` included,
without a source checkout or an editable install.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class NeosRecipesSearchPathPlugin(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="neos-verl", path="pkg://recipes")
