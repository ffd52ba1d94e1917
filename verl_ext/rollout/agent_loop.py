"""verl agent loops ``neos_search_agent`` and ``modalsearch_react_agent``: one episode engine, two protocols.

Per episode: open a tool-server session with the question image(s) as img_1.., then per assistant turn generate
(``server_manager.generate`` with every image the policy has seen so far, processed with ``data.mm_processor_kwargs``
as the prompt's placeholders were), parse one action under the protocol, run the call, and append the observation;
the pixels a tool loads (FetchImage, CropImage, read_url of an image) enter the context through the VL processor and
stay in ``image_data`` for every later turn and in the exported ``multi_modal_data``. Tokens go through verl's
Continuous Token builder (``ct_*`` of ``AgentLoopBase``), so the training inputs are token-identical to what the model
generated from.

Nothing the model writes raises: malformed calls, unknown tools and schema violations come back as error
observations (agent-caused); timeouts, 5xx and refused connections too (tool-caused). The episode ends on an
answer, on the turn budget (the last turn has tools disabled and an instruction to answer), on an error streak
when the protocol has one, or when the next observation would not fit the response budget (then it is withheld
and recorded as ``observation_delivered_to_policy=false``). See ``record.py`` for what is exported.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar
from uuid import uuid4

from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from verl_ext.rollout.media import QUESTION_MEDIA, has_media, question_media_key, shared_result
from verl_ext.rollout.prompts import system_prompt
from verl_ext.rollout.protocols import Protocol, ToolCall, parse_turn
from verl_ext.rollout.record import (
    RECORD_KEY,
    CallRecord,
    ImageEntry,
    TerminationReason,
    TrajectoryRecord,
    TurnRecord,
)
from verl_ext.rollout.settings import EpisodeSettings, resolve_settings, truncate
from verl_ext.rollout.splice import Splice, merge_tail
from verl_ext.rollout.tokens import (
    OFF_LOOP_MERGE_CHARS,
    OFF_LOOP_MIN_EPISODES,
    fast_text_renders,
    text_chars,
    text_merge_executor,
)
from verl_ext.rollout.tool_backend import CallOutcome, ToolSession, encoded_question_images, tool_catalog
from verl_ext.rollout.verl_tools_session import VerlToolsSession, verl_tool_catalog


@dataclass
class _Episode:
    """Mutable state of one trajectory; ``prompt_ids`` is the whole runtime token stream (prompt + response)."""

    messages: list[dict[str, Any]]
    images: list[Any]
    # ``data.mm_processor_kwargs``: the server processes the images with the settings the token builder rendered
    # their placeholders with, and verl's postprocessing computes the training inputs with them (as ToolAgentLoop)
    mm_processor_kwargs: dict[str, Any] = field(default_factory=dict)
    prompt_ids: list[int] = field(default_factory=list)
    prompt_len: int = 0
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    register: list[ImageEntry] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    context_turns: int = 0  # observation and instruction messages appended (verl's user_turns)
    answer: str | None = None
    termination: TerminationReason = "max_turns"
    ended_by: str | None = None
    error_streak: int = 0
    mei_version: str | None = None


def _plain(kwargs: Any) -> dict[str, Any]:
    """``mm_processor_kwargs`` as plain dicts and lists, however deep (OmegaConf containers resolved)."""
    return {k: OmegaConf.to_container(v, resolve=True) if isinstance(v, DictConfig | ListConfig) else v
            for k, v in (kwargs or {}).items()}


class SearchAgentLoop(AgentLoopBase):
    """The shared engine; subclasses fix the protocol. Settings: see ``settings.py``."""

    protocol: ClassVar[Protocol]
    in_flight: ClassVar[int] = 0  # episodes of this process inside their turn loop (both protocols)

    def __init__(self, *args: Any, tools: Any = None, **kwargs: Any) -> None:
        # ``tools``: the worker's verl tools (multi_turn.tool_config_path / function_tool_path), used with
        # tool_backend: verl; the default backend is our tool server.
        overrides = {k: kwargs.pop(k) for k in list(kwargs) if k in EpisodeSettings.model_fields}
        super().__init__(*args, **kwargs)
        # verl hands ``data.mm_processor_kwargs`` over as the config's DictConfig and copies it shallowly; a nested
        # value (the recipes' ``size: {shortest_edge, longest_edge}``) then reaches the processor as a DictConfig,
        # which transformers 5's strict kwargs refuse at the first prompt of every episode. Plain containers here,
        # for the token builder, the generate calls and the output alike.
        self.mm_processor_kwargs = _plain(self.mm_processor_kwargs)
        builder = self.continuous_token_builder
        if hasattr(builder, "mm_processor_kwargs"):
            builder.mm_processor_kwargs = _plain(builder.mm_processor_kwargs)
        self.verl_tools = list(tools.tools) if tools is not None else []
        self.continuous_token_builder = fast_text_renders(self.continuous_token_builder)
        self.settings = resolve_settings(self.protocol, self.rollout_config, overrides)

    async def process_multi_modal_info(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """verl's, once per process for the same question media (``media.question_media_key``: by the encoded file's
        or the pixels' digest): the G rollouts of a GRPO group decode and resize the question image once, not G times
        (verl's ``fetch_image``: ~2 ms for a 320x240 PNG here, tens of ms for a photo). The decoded images are shared
        read-only; each call gets its own lists. Keyed by the dataset class and processor too (the data config is the
        worker's one)."""
        key = question_media_key(messages)
        if key is None:
            return await super().process_multi_modal_info(messages)
        key = (id(self.dataset_cls), id(self.processor), key)
        mm = await shared_result(QUESTION_MEDIA, key, partial(super().process_multi_modal_info, messages))
        return {kind: list(items) for kind, items in mm.items()}

    async def _prepared_images(self, outcomes: list[CallOutcome]) -> list[CallOutcome]:
        """The tools' new images prepared as verl's dataset class prepares question images (Qwen's ``fetch_image``
        rounds the sides to the patch grid before the processor's own resize). verl's SFT dataset prepares every image
        so, the cold-start episodes' fetched images included: without this a fetched 320x240 flag reaches the
        processor as 54 visual tokens in RL where SFT and the question image show it as 56. An image the preparation
        refuses (an aspect ratio over 200) goes on as it is, for the render to refuse and withhold it by name."""
        if not any(o.images for o in outcomes):
            return outcomes
        base = super().process_multi_modal_info

        async def prepared(image: Any) -> Any:
            try:
                mm = await base([{"role": "user", "content": [{"type": "image", "image": image}]}])
            except ValueError:  # smart_resize refuses an aspect ratio over 200; the render then names the reason
                return image
            return mm["images"][0]

        out = []
        for o in outcomes:
            images = await asyncio.gather(*(prepared(im) for _, im in o.images))
            out.append(replace(o, images=[(ref, im) for (ref, _), im in zip(o.images, images)]) if o.images else o)
        return out

    def _cap_text_prompt_length(self, prompt_ids: list[int]) -> list[int]:
        """verl left-truncates an over-long text prompt with a warning; here that would cut the system prompt and
        the tool schemas, so it is a configuration error."""
        limit = self.rollout_config.prompt_length
        if len(prompt_ids) > limit:
            raise ValueError(
                f"the {self.protocol} prompt (system prompt, tool schemas, question) is {len(prompt_ids)} tokens but "
                f"actor_rollout_ref.rollout.prompt_length={limit}: raise prompt_length"
            )
        return prompt_ids

    def _merge_assistant(self, ep: _Episode, token_ids: list[int], logprobs: list[float] | None) -> None:
        """verl's assistant merge (a concatenation) in place, inline: cheaper than the wake-up of an executor thread."""
        builder = self.continuous_token_builder
        tracked = bool(ep.logprobs or logprobs)
        splice = merge_tail(
            builder,
            ep.prompt_ids,
            lambda tail: builder.merge_assistant_tokens(tail, token_ids),
            logprobs=tracked,
            assistant_logprobs=logprobs or None,
        )
        splice.apply(ep.prompt_ids, ep.mask, ep.logprobs if tracked else None)

    async def _merge_context(self, ep: _Episode, new_messages: list[dict[str, Any]], tools: Any) -> Splice:
        """verl's merge of ``new_messages`` after the stream. With media it runs on the default executor, as verl's
        does (the processor renders the images). Without, the render is a memo lookup or a tokenization
        (``tokens.py``): short texts inline; long ones on the process's text-merge thread, where the encoder releases
        the GIL, while other episodes are in flight for the event loop to serve meanwhile (alone, a hop gains
        nothing)."""
        builder = self.continuous_token_builder
        previous, updated = ep.messages, ep.messages + new_messages
        merge = partial(
            merge_tail,
            builder,
            ep.prompt_ids,
            lambda tail: builder.merge_context_tokens(previous, updated, tail, tools=tools),
            logprobs=bool(ep.logprobs),
        )
        if has_media(new_messages):
            return await asyncio.get_running_loop().run_in_executor(None, merge)
        if text_chars(new_messages) >= OFF_LOOP_MERGE_CHARS and SearchAgentLoop.in_flight >= OFF_LOOP_MIN_EPISODES:
            return await asyncio.get_running_loop().run_in_executor(text_merge_executor(), merge)
        return merge()

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        s = self.settings
        request_id = uuid4().hex
        if s.tool_backend == "verl":
            catalog = verl_tool_catalog(self.verl_tools)
            session: ToolSession | VerlToolsSession = VerlToolsSession(
                self.verl_tools, catalog, kwargs.get("tools_kwargs") or {}, request_id
            )
        else:
            catalog = await tool_catalog(s.tool_server_url, self.protocol, s.call_timeout_s)
            # a GRPO group's sessions on one server (verl_ext.tools.shards), where its identical calls coalesce
            session = ToolSession(
                s.tool_server_url,
                catalog,
                timeout_s=s.call_timeout_s,
                max_in_flight=s.max_concurrent_calls,
                shard_key=str(kwargs.get("uid") or request_id),
            )
        native_tools = catalog.schemas if self.protocol == "neos" else None
        messages = list(kwargs["raw_prompt"])
        if not any(m.get("role") == "system" for m in messages):
            messages.insert(
                0, {"role": "system", "content": s.system_prompt or system_prompt(self.protocol, catalog.schemas)}
            )
        group_id = str(kwargs["uid"]) if s.group_cache and kwargs.get("uid") is not None else None
        mm, refs = await self._open_session(session, messages, group_id, kwargs["raw_prompt"])
        ep = _Episode(
            messages=messages, images=list(mm.get("images") or []), mm_processor_kwargs=self._get_mm_processor_kwargs()
        )
        session_id = session.session_id or ""
        ep.register = [ImageEntry(ref=r, source="question", turn=None, in_context=True) for r in refs]
        SearchAgentLoop.in_flight += 1
        try:
            ep.prompt_ids = await self.ct_build_initial_tokens(
                ep.messages, tools=native_tools, images=ep.images or None
            )
            ep.prompt_len = len(ep.prompt_ids)
            await self._loop(ep, session, sampling_params, native_tools, request_id)
        finally:
            SearchAgentLoop.in_flight -= 1
            await session.close()
        return self._output(ep, kwargs, session_id, group_id)

    async def _open_session(
        self, session: Any, messages: list[dict[str, Any]], group_id: str | None, raw_prompt: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[str]]:
        """verl's multi-modal info (decoding and resizing the question images, in a thread) and the session open
        (the tool server decoding the row's files) side by side: neither needs the other's result, unless an image
        has no file or the server refuses one, when the session waits for the policy's copies. A session left open
        by a failure is closed."""
        mm_info = asyncio.ensure_future(self.process_multi_modal_info(messages))

        async def policy_images() -> list[Any]:
            mm = await asyncio.shield(mm_info)
            self._assert_mm_supported(bool(mm.get("images")))
            return list(mm.get("images") or [])

        opening = asyncio.ensure_future(session.open(policy_images, group_id, encoded_question_images(raw_prompt)))
        try:
            _, refs = await asyncio.gather(policy_images(), opening)
        except BaseException:
            await asyncio.gather(mm_info, opening, return_exceptions=True)
            await session.close()
            raise
        return mm_info.result(), refs

    async def _loop(
        self, ep: _Episode, session: Any, sampling_params: dict[str, Any], native_tools: Any, request_id: str
    ) -> None:
        s = self.settings
        if s.max_turn_tokens is not None:
            sampling_params = {**sampling_params, "max_tokens": s.max_turn_tokens}  # servers clamp it to the budget
        for turn in range(s.max_turns):
            final = turn == s.max_turns - 1
            if final and not await self._append_context(
                ep, [{"role": "user", "content": s.final_turn_text()}], native_tools
            ):
                ep.termination = "context"
                return
            start = len(ep.mask)
            with simple_timer("generate_sequences", ep.metrics):
                # The stream is edited in place once this returns: a server copies what it keeps (verl's Ray call
                # serializes it).
                out = await self.server_manager.generate(
                    request_id=request_id,
                    prompt_ids=ep.prompt_ids,
                    sampling_params=sampling_params,
                    image_data=ep.images or None,
                    mm_processor_kwargs=ep.mm_processor_kwargs,
                )
            self._merge_server_fields(ep, out.extra_fields or {})
            self._merge_assistant(ep, out.token_ids, out.log_probs)
            span = _generated_span(ep.mask, start)
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            parsed = parse_turn(self.protocol, text, max_calls=s.max_parallel_calls)
            base = {"index": turn, "span": span, "text": text, "tools_enabled": not final}

            if parsed.answer is not None:
                ep.answer, ep.termination = parsed.answer, "answer"
                ep.turns.append(TurnRecord(**base, outcome="answer"))
                return
            if len(ep.mask) >= s.response_budget:
                ep.termination = "response_length"
                ep.turns.append(TurnRecord(**base, outcome="no_action", error_type="response_length"))
                return
            if final:  # tools are disabled: a call here is not run, and there is no answer
                error = parsed.error.type if parsed.error else "tools_disabled"
                ep.turns.append(TurnRecord(**base, outcome="no_action", error_class="agent", error_type=error))
                return

            ep.messages.append(self._assistant_message(text, parsed.calls))
            if parsed.error is not None:
                outcomes = [
                    CallOutcome(
                        False,
                        f"Error ({parsed.error.type}): {parsed.error.message}",
                        error_class="agent",
                        error_type=parsed.error.type,
                    )
                ]
                calls: list[ToolCall] = []
            else:
                calls = parsed.calls
                with simple_timer("tool_calls", ep.metrics):
                    outcomes = await asyncio.gather(*(session.call(c, turn) for c in calls))
                outcomes = await self._prepared_images(outcomes)
            record = self._turn_record(ep, base, calls, outcomes, parsed.error)
            ep.error_streak = ep.error_streak + 1 if record.error_class else 0
            streak_over = (s.max_consecutive_errors is not None and ep.error_streak >= s.max_consecutive_errors) or any(
                o.session_lost for o in outcomes  # its server is gone: tool instability ends the episode
            )
            delivered = False
            if not streak_over:
                delivered, shown = await self._deliver(ep, outcomes, native_tools)
                if shown is not outcomes:  # images withheld: the record says what the policy was shown
                    outcomes, record = shown, self._turn_record(ep, base, calls, shown, parsed.error)
            if not delivered:
                record = record.model_copy(update={"observation_delivered_to_policy": False})
            ep.turns.append(record)
            for call, o in zip(calls, outcomes):  # the server registered them all; the policy saw those delivered
                ep.register += [
                    ImageEntry(ref=ref, source=call.name, turn=turn, in_context=delivered and ref not in o.withheld)
                    for ref, _ in o.images
                ]
            if streak_over:
                ep.termination = "agent_errors" if record.error_class == "agent" else "tool_errors"
                ep.ended_by = record.error_class
                return
            if not delivered:
                ep.termination = "context"
                return

    async def _deliver(
        self, ep: _Episode, outcomes: list[CallOutcome], native_tools: Any
    ) -> tuple[bool, list[CallOutcome]]:
        """Appends the observations of ``outcomes`` (``_append_context``); returns whether they fit and the outcomes
        as shown. An image the policy's processor refuses (Qwen's: an aspect ratio over 200, which a thin crop or a
        banner has) would fail the render: it is withheld, its ref named in the text with the reason, and the rest
        delivered, so that a call the model chose cannot end the rollout. The refusals are found only after a render
        fails (one probe render per new image), so deliveries that succeed cost nothing more."""
        s = self.settings

        def append(shown: list[CallOutcome]):
            messages = [self._tool_message(o, s) for o in shown]
            return self._append_context(ep, messages, native_tools, [im for o in shown for _, im in o.shown_images])

        try:
            return await append(outcomes), outcomes
        except Exception:
            refused = await self._refused_images([pair for o in outcomes for pair in o.images])
            if not refused:
                raise
        shown = [_withhold(o, refused) for o in outcomes]
        return await append(shown), shown

    async def _refused_images(self, images: list[tuple[str, Any]]) -> dict[str, str]:
        """ref -> why the policy's processor refuses that image alone (a render of one message with it)."""
        render = getattr(self.continuous_token_builder, "render_tokens_with_mm", None)
        if render is None or not images:
            return {}

        def why(image: Any) -> str | None:
            message = {"role": "user", "content": [{"type": "image", "image": image}]}
            try:
                render([message], [image], add_generation_prompt=False)
            except Exception as e:  # whatever the processor raises: that image cannot be shown
                return f"{type(e).__name__}: {e}"
            return None

        reasons = await asyncio.get_running_loop().run_in_executor(None, lambda: [why(im) for _, im in images])
        return {ref: reason for (ref, _), reason in zip(images, reasons) if reason}

    async def _append_context(
        self, ep: _Episode, new_messages: list[dict[str, Any]], native_tools: Any, new_images: list[Any] = ()
    ) -> bool:
        """Render ``new_messages`` after the stream; False (state untouched) when they do not fit the budget."""
        if new_images:
            self._assert_mm_supported(True)
        splice = await self._merge_context(ep, new_messages, native_tools)
        if splice.mask_length(ep.mask) >= self.settings.response_budget:
            return False
        splice.apply(ep.prompt_ids, ep.mask, ep.logprobs or None)
        ep.messages.extend(new_messages)
        ep.images.extend(new_images)
        ep.context_turns += 1
        return True

    def _assistant_message(self, text: str, calls: list[ToolCall]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls and self.protocol == "neos":
            message["content"] = text.split("<tool_call>")[0].strip()
            message["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
            ]
        return message

    @staticmethod
    def _tool_message(outcome: CallOutcome, s: EpisodeSettings) -> dict[str, Any]:
        text = truncate(outcome.text, s.max_observation_chars, s.truncate_side)
        if not outcome.shown_images:
            return {"role": "tool", "content": text}
        content: list[dict[str, Any]] = []
        for ref, image in outcome.shown_images:
            content += [{"type": "text", "text": f"{ref}:"}, {"type": "image", "image": image}]
        content.append({"type": "text", "text": text})
        return {"role": "tool", "content": content}

    def _turn_record(
        self, ep: _Episode, base: dict[str, Any], calls: list[ToolCall], outcomes: list[CallOutcome], format_error: Any
    ) -> TurnRecord:
        s = self.settings
        records = []
        for call, o in zip(calls, outcomes):
            versions = [m["version"] for m in o.mei]
            if versions and ep.mei_version is None:
                ep.mei_version = versions[0]
            records.append(
                CallRecord(
                    tool_name=call.name,
                    arguments=call.arguments,
                    ok=o.ok,
                    error_class=o.error_class,
                    error_type=o.error_type,
                    observation=truncate(o.text, s.max_observation_chars, s.truncate_side),
                    images_added=[ref for ref, _ in o.shown_images],
                    latency_s=o.latency_s,
                    mei_call_ids=[m["call_id"] for m in o.mei],
                    mei_versions=versions,
                    cached=o.cached,
                )
            )
        if format_error is not None:
            return TurnRecord(**base, outcome="no_action", error_class="agent", error_type=format_error.type)
        failed = next((r for r in records if not r.ok), None)
        if failed is None:
            return TurnRecord(**base, outcome="call_ok", calls=records)
        return TurnRecord(
            **base, outcome="call_error", calls=records, error_class=failed.error_class, error_type=failed.error_type
        )

    @staticmethod
    def _merge_server_fields(ep: _Episode, fields: dict[str, Any]) -> None:
        """The server's per-generation fields (global_steps, min/max_global_steps) as verl's ToolAgentLoop keeps them:
        the first call's, with ``max_global_steps`` updated by later calls (the v1 trainer's staleness tags)."""
        if not ep.extra:
            ep.extra.update(fields)
        elif fields.get("max_global_steps") is not None:
            ep.extra["max_global_steps"] = fields["max_global_steps"]

    def _output(self, ep: _Episode, kwargs: dict[str, Any], session_id: str, group_id: str | None) -> AgentLoopOutput:
        budget = self.settings.response_budget
        response_ids = ep.prompt_ids[ep.prompt_len : ep.prompt_len + budget]
        turns = [t.model_copy(update={"span": (min(t.span[0], budget), min(t.span[1], budget))}) for t in ep.turns]
        record = TrajectoryRecord(
            protocol=self.protocol,
            question=_question_text(kwargs["raw_prompt"]),
            session_id=session_id or None,
            group_id=str(kwargs["uid"]) if kwargs.get("uid") is not None else group_id,
            mei_version=ep.mei_version,
            termination_reason=ep.termination,
            error_class_ended=ep.ended_by,
            final_answer=ep.answer,
            images=ep.register,
            turns=turns,
        )
        extra = {**ep.extra, "termination_reason": ep.termination, RECORD_KEY: record.model_dump(mode="json")}
        return AgentLoopOutput(
            prompt_ids=ep.prompt_ids[: ep.prompt_len],
            response_ids=response_ids,
            response_mask=ep.mask[:budget],
            response_logprobs=ep.logprobs[:budget] if ep.logprobs else None,
            multi_modal_data={"images": ep.images} if ep.images else {},
            mm_processor_kwargs=ep.mm_processor_kwargs,
            num_turns=len(ep.turns) + ep.context_turns + 1,  # as verl's ToolAgentLoop counts: + the prompt
            metrics=ep.metrics,
            extra_fields=extra,
        )


def _withhold(outcome: CallOutcome, refused: dict[str, str]) -> CallOutcome:
    """``outcome`` with its images in ``refused`` withheld, each named in its text with the reason."""
    withheld = {ref: refused[ref] for ref, _ in outcome.images if ref in refused}
    if not withheld:
        return outcome
    notes = [f"{ref} is registered but could not be shown to you ({why})" for ref, why in withheld.items()]
    return replace(outcome, text="\n".join([outcome.text, *notes]), withheld=withheld)


def _generated_span(mask: list[int], start: int) -> tuple[int, int]:
    """[first, last+1) of the 1s the assistant merge appended at or after ``start`` (empty span if none)."""
    ones = [i for i in range(start, len(mask)) if mask[i]]
    return (ones[0], ones[-1] + 1) if ones else (len(mask), len(mask))


def _question_text(raw_prompt: Any) -> str:
    for message in reversed(list(raw_prompt)):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return " ".join(c.get("text", "") for c in content or [] if isinstance(c, dict) and c.get("type") == "text")
    return ""


@register("neos_search_agent")
class NeosSearchAgentLoop(SearchAgentLoop):
    """Neos: native function calls, one call or a plain-text answer per turn, 50 turns."""

    protocol = "neos"


@register("modalsearch_react_agent")
class ModalSearchReActAgentLoop(SearchAgentLoop):
    """ModalSearcher: ReAct ``<think>`` + ``<tool_call>``/``<answer>``, 46 turns, 3 consecutive errors end it."""

    protocol = "modalsearch"
