"""A stand-in rollout replica for routing tests, in a module of its own that imports no verl: Ray pickles the class by
value (tests are no installed package), and every process that unpickles a handle to one of its actors, such as each
load balancer it is added to, runs this module; a verl import there costs ~10 s of CPU per balancer."""

from __future__ import annotations

import asyncio


class StandInGenerateServer:
    """Stands in for a vLLM/SGLang rollout server (none can run on this machine) behind verl's ``generate`` contract:
    replies ``reply_ids`` to every request after ``seconds_per_token`` x (prompt + reply tokens), and keeps each
    request's prompt so a test can tell which episode's turns it served."""

    def __init__(self, reply_ids: list[int], seconds_per_token: float) -> None:
        self.reply_ids = list(reply_ids)
        self.seconds_per_token = seconds_per_token
        self.prompts: list[tuple[int, ...]] = []

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict, **kwargs):
        from verl.workers.rollout.replica import TokenOutput  # here, not above: see the module's docstring

        self.prompts.append(tuple(prompt_ids))
        await asyncio.sleep(self.seconds_per_token * (len(prompt_ids) + len(self.reply_ids)))
        return TokenOutput(
            token_ids=self.reply_ids,
            log_probs=[0.0] * len(self.reply_ids),
            stop_reason="stop",
            extra_fields={"global_steps": 0},
        )

    async def served(self) -> list[tuple[int, ...]]:
        return self.prompts

    async def reset(self) -> None:
        self.prompts = []
