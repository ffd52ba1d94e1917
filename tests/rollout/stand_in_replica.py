"""A stand-in rollout replica for routing tests, in a module of its own that imports no verl: Ray pickles the class by
value (tests are no installed package), and every process that unpickles a handle to one of its actors, such as each
load balancer it is added to, runs this module; a verl import there costs ~10 s of CPU per balancer. The replicas
themselves import no verl either: their answers become verl's ``TokenOutput`` where they are unpickled, in the caller
(three replicas importing verl on their first request took ~20 s of a 2-core machine)."""

from __future__ import annotations

import asyncio


def _token_output(fields: dict):
    from verl.workers.rollout.replica import TokenOutput  # runs in the caller, which has verl loaded

    return TokenOutput(**fields)


class _Reply:
    """A reply that unpickles as verl's ``TokenOutput``."""

    def __init__(self, **fields) -> None:
        self.fields = fields

    def __reduce__(self):
        return _token_output, (self.fields,)


class StandInGenerateServer:
    """Stands in for a vLLM/SGLang rollout server (none can run on this machine) behind verl's ``generate`` contract:
    replies ``reply_ids`` to every request after ``seconds_per_token`` x (prompt + reply tokens), and keeps each
    request's prompt so a test can tell which episode's turns it served."""

    def __init__(self, reply_ids: list[int], seconds_per_token: float) -> None:
        self.reply_ids = list(reply_ids)
        self.seconds_per_token = seconds_per_token
        self.prompts: list[tuple[int, ...]] = []

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict, **kwargs):
        self.prompts.append(tuple(prompt_ids))
        await asyncio.sleep(self.seconds_per_token * (len(prompt_ids) + len(self.reply_ids)))
        return _Reply(
            token_ids=self.reply_ids,
            log_probs=[0.0] * len(self.reply_ids),
            stop_reason="stop",
            extra_fields={"global_steps": 0},
        )

    async def served(self) -> list[tuple[int, ...]]:
        return self.prompts

    async def reset(self) -> None:
        self.prompts = []
