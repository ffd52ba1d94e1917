"""An in-process generate client backed by plain transformers: the CPU / development test backend for agent loops.

Production rollouts use verl's vLLM or SGLang servers. This client stands in for them where those cannot run (no
GPU, no vLLM wheel): it has the signature of verl's ``LLMServerClient.generate`` as agent loops call it
(``self.server_manager.generate(request_id=, prompt_ids=, sampling_params=, image_data=, ...)``) and returns the same
``TokenOutput``, so an agent loop runs unchanged on a real (tiny) Qwen2.5-VL and the tests see what the model saw.

What it does like the servers: prompt ids arrive with image placeholders already expanded by verl's processor path;
images go through the model's own processor; vision placeholder tokens are never sampled (vLLM bans them);
the output keeps the stop token; ``stop_reason`` is ``"stop"`` or ``"length"`` as SGLang reports it (verl's vLLM
server folds both into ``"completed"``; agent loops only act on ``"aborted"``); ``extra_fields`` carries ``global_steps``.
``abort()`` is the servers' ``abort_all_requests``: every call accepted before it (running or queued) returns at its
next token with what it has and ``stop_reason="aborted"``; calls after it run normally. That is what the policy
boundary of mixed-group sampling needs: a cancelled trajectory's request must not keep the model busy, nor run while
the colocated actor trains. Where a server would silently misbehave it
raises instead: placeholders that do not match the images (the multi-turn image-drop bug class of verl #4613),
sampling parameters it does not implement, video or audio inputs.

Log-probs: each returned log-prob is that of the chosen token under ``softmax(logits / T)`` of the raw model logits
(``T`` the request's temperature, 1 when greedy), before repetition penalty and top-k/top-p truncation. That is what
verl's actor recomputes for the same tokens, and equals vLLM's default ``processed_logprobs`` whenever top_k, top_p
and repetition_penalty are off (verl's training defaults).

Forced responses are a test device: ``forced`` may script the text of any call; the scripted tokens are then scored
by one teacher-forced forward pass over prompt + response with the images, so log-probs are the real model's and the
multimodal context is really processed even when the words are fixed.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
    PreTrainedModel,
    ProcessorMixin,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from verl.workers.rollout.replica import TokenOutput

SAMPLING_KEYS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "repetition_penalty",
        "logprobs",
        "max_tokens",
        "max_new_tokens",
        "stop_token_ids",
        "seed",
    }
)
# Keyword arguments verl's LLMServerClient.generate forwards that carry nothing for this backend.
_IGNORED_KWARGS = frozenset(
    {
        "mm_processor_output",  # SGLang's precomputed video payload; videos are rejected here
        "priority",  # a vLLM scheduling hint; this client runs calls one at a time in arrival order
    }
)


@dataclass(frozen=True, slots=True)
class GenerateCall:
    """What one generate call gave the model, recorded before it runs (``forced`` receives it too)."""

    request_id: str
    prompt_ids: tuple[int, ...]
    prompt_len: int
    num_images: int
    num_image_pad_tokens: int
    pixel_values_shape: tuple[int, ...] | None
    image_grid_thw: tuple[tuple[int, int, int], ...]
    sampling_params: dict[str, Any]


class TransformersGenerateClient:
    """Drop-in for ``LLMServerClient.generate`` running one transformers VL model in process (CPU tests, development).

    Calls run in a worker thread (``run_in_executor``) one at a time behind an asyncio lock, so many agent loops can
    await ``generate`` concurrently on one event loop. ``self.calls`` records every call in execution order (unless
    ``record_calls`` is false, as in a long-running server).
    ``global_steps`` is the weight version reported in ``extra_fields`` (set it when weights change).
    Inputs follow ``model.device``, so the model may sit on a GPU (as in the ``hf`` rollout server) or on the CPU.
    ``forced`` (a test device, never for training) is called in the worker thread with each call's record; a string
    it returns (without the closing ``<|im_end|>``, which is appended) becomes the response, scored by teacher forcing.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        processor: ProcessorMixin,
        *,
        max_new_tokens: int = 64,
        seed: int = 0,
        global_steps: int = 0,
        forced: Callable[[GenerateCall], str | None] | None = None,
        record_calls: bool = True,
    ) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.model = model.eval()
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.max_new_tokens = max_new_tokens
        self.global_steps = global_steps
        self.forced = forced
        self.calls: list[GenerateCall] = []
        self._record_calls = record_calls
        self._rng = torch.Generator().manual_seed(seed)
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
        self._epoch = 0  # abort() generation: a call started under an older one stops at its next token
        self._accepted = 0  # calls running or waiting for the lock
        config = model.config
        self._image_token_id = int(config.image_token_id)
        self._video_token_id = int(config.video_token_id)
        self._merge = int(processor.image_processor.merge_size)
        self._im_end_id = int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        eos = model.generation_config.eos_token_id
        self._eos_ids = {self._im_end_id, *([eos] if isinstance(eos, int) else (eos or []))}

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> TransformersGenerateClient:
        """Load model (float32, CPU) and processor from a HF directory such as the tiny VL model's."""
        model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
        return cls(model, AutoProcessor.from_pretrained(path), **kwargs)

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Image.Image] | None = None,
        video_data: list[Any] | None = None,
        audio_data: list[Any] | None = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        """Generate a response for ``prompt_ids`` (placeholders expanded, one run of image pads per image, the images
        processed with ``mm_processor_kwargs`` as the prompt was). ``log_probs`` are returned unless
        ``sampling_params["logprobs"]`` is given and false."""
        unknown = set(kwargs) - _IGNORED_KWARGS
        if unknown:
            raise TypeError(f"generate() got unexpected keyword arguments {sorted(unknown)}")
        if video_data or audio_data:
            raise NotImplementedError(
                "TransformersGenerateClient handles text and images only (got video or audio data)"
            )
        unsupported = set(sampling_params) - SAMPLING_KEYS
        if unsupported:
            raise ValueError(
                f"sampling parameters {sorted(unsupported)} are not implemented by TransformersGenerateClient"
            )
        epoch = self._epoch
        loop = asyncio.get_running_loop()
        self._accepted += 1
        try:
            async with self._lock(loop):
                return await loop.run_in_executor(
                    None,
                    self._generate,
                    request_id,
                    list(prompt_ids),
                    dict(sampling_params),
                    list(image_data or []),
                    mm_processor_kwargs,
                    epoch,
                )
        finally:
            self._accepted -= 1

    async def abort(self) -> int:
        """Stop every call accepted so far (each returns ``stop_reason="aborted"``) and wait until none runs; returns
        how many were running or queued."""
        self._epoch += 1
        pending = self._accepted
        # Queued calls return at once, the running one at its next token; then the lock is free.
        async with self._lock(asyncio.get_running_loop()):
            return pending

    def _lock(self, loop: asyncio.AbstractEventLoop) -> asyncio.Lock:
        return self._locks.setdefault(loop, asyncio.Lock())

    # -- in the worker thread ---------------------------------------------------------------------------------------

    def _generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling: dict[str, Any],
        images: list[Image.Image],
        mm_processor_kwargs: dict[str, Any] | None,
        epoch: int,
    ) -> TokenOutput:
        if epoch != self._epoch:
            return self._output([], [], "aborted", sampling)
        vision = self._vision_inputs(prompt_ids, images, mm_processor_kwargs)
        grid = vision.get("image_grid_thw")
        call = GenerateCall(
            request_id=request_id,
            prompt_ids=tuple(prompt_ids),
            prompt_len=len(prompt_ids),
            num_images=len(images),
            num_image_pad_tokens=prompt_ids.count(self._image_token_id),
            pixel_values_shape=tuple(vision["pixel_values"].shape) if images else None,
            image_grid_thw=tuple(tuple(int(v) for v in row) for row in grid.tolist()) if grid is not None else (),
            sampling_params=dict(sampling),
        )
        if self._record_calls:
            self.calls.append(call)
        limit = self.max_new_tokens
        for key in ("max_tokens", "max_new_tokens"):
            if sampling.get(key) is not None:
                limit = max(1, min(limit, int(sampling[key])))  # vLLM clamps a request's budget to at least 1
        temperature = float(sampling.get("temperature", 1.0))
        text = self.forced(call) if self.forced is not None else None
        with torch.inference_mode():
            if text is not None:
                token_ids, log_probs, stop_reason = self._score_forced(prompt_ids, vision, text, temperature, limit)
            else:
                token_ids, log_probs, stop_reason = self._sample(
                    prompt_ids, vision, sampling, temperature, limit, epoch
                )
        return self._output(token_ids, log_probs, stop_reason, sampling)

    def _output(self, token_ids: list[int], log_probs: list[float], stop_reason: str, sampling: dict) -> TokenOutput:
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs if sampling.get("logprobs", True) else None,
            stop_reason=stop_reason,
            num_preempted=0,
            extra_fields={
                "global_steps": int(self.global_steps),
                "min_global_steps": int(self.global_steps),
                "max_global_steps": int(self.global_steps),
            },
        )

    def _vision_inputs(
        self, prompt_ids: list[int], images: list[Image.Image], mm_processor_kwargs: dict[str, Any] | None
    ) -> dict[str, torch.Tensor]:
        """Pixel values and grids of ``images``; raises unless the prompt holds exactly one run of image pads per
        image, of the length the processor gives that image (grid t*h*w / merge_size**2)."""
        if self._video_token_id in prompt_ids:
            raise ValueError("prompt_ids hold <|video_pad|> tokens but TransformersGenerateClient takes no videos")
        runs: list[int] = []
        previous = None
        for token in prompt_ids:
            if token == self._image_token_id:
                if previous == self._image_token_id:
                    runs[-1] += 1
                else:
                    runs.append(1)
            previous = token
        if not images:
            if runs:
                raise ValueError(
                    f"prompt_ids hold {len(runs)} image placeholder run(s) ({sum(runs)} <|image_pad|>) "
                    "but no images were given"
                )
            return {}
        # The processor's image processor with the same mm_processor_kwargs (image keys: size, min/max_pixels) verl's
        # builders pass the processor; not the processor itself, which needs text beside images (transformers 5.9's
        # Qwen2.5-VL processor fails on text=None).
        processed = self.processor.image_processor(images=images, return_tensors="pt", **(mm_processor_kwargs or {}))
        vision = {key: processed[key].to(self.model.device) for key in ("pixel_values", "image_grid_thw")}
        expected = (vision["image_grid_thw"].prod(-1) // self._merge**2).tolist()
        if runs != expected:
            raise ValueError(
                f"image placeholders do not match the images: prompt_ids hold <|image_pad|> runs of lengths {runs} "
                f"({sum(runs)} tokens) but the {len(images)} image(s) need {expected} ({sum(expected)} tokens); "
                "a turn's image was dropped or added, or the prompt was tokenized with other processor settings"
            )
        return vision

    def _positions(self, input_ids: torch.Tensor, vision: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        """3-D RoPE positions (3, 1, L) for ``input_ids`` and the offset of later text positions (mrope delta).
        Computed explicitly from ``mm_token_type_ids`` and the grids: without them Qwen2.5-VL silently falls back to
        1-D positions."""
        if "image_grid_thw" not in vision:
            return torch.arange(input_ids.shape[1], device=input_ids.device).view(1, 1, -1).expand(3, 1, -1), 0
        mm_token_type_ids = (input_ids == self._image_token_id).int()
        positions, delta = self.model.model.get_rope_index(
            input_ids, mm_token_type_ids=mm_token_type_ids, image_grid_thw=vision["image_grid_thw"]
        )
        return positions, int(delta.item())

    def _forward(
        self, input_ids: torch.Tensor, vision: dict[str, torch.Tensor], *, keep: int
    ) -> tuple[torch.Tensor, Any, int]:
        """Prefill ``input_ids`` with the images: the last ``keep`` positions' logits (float), the KV cache and the
        mrope delta of the text positions that follow."""
        positions, delta = self._positions(input_ids, vision)
        out = self.model(
            input_ids=input_ids,
            pixel_values=vision.get("pixel_values"),
            image_grid_thw=vision.get("image_grid_thw"),
            position_ids=positions,
            use_cache=True,
            logits_to_keep=keep,
        )
        return out.logits[0].float(), out.past_key_values, delta

    def _sample(
        self,
        prompt_ids: list[int],
        vision: dict[str, torch.Tensor],
        sampling: dict[str, Any],
        temperature: float,
        limit: int,
        epoch: int,
    ) -> tuple[list[int], list[float], str]:
        greedy = temperature <= 0.0
        top_k = int(sampling.get("top_k", -1) or -1)
        top_p = float(sampling.get("top_p", 1.0))
        penalty = float(sampling.get("repetition_penalty", 1.0))
        stops = self._eos_ids | set(sampling.get("stop_token_ids") or [])
        warpers: list[Any] = [] if penalty == 1.0 else [RepetitionPenaltyLogitsProcessor(penalty)]
        if not greedy:
            warpers.append(TemperatureLogitsWarper(temperature))
            if top_k > 0:
                warpers.append(TopKLogitsWarper(top_k))
            if top_p < 1.0:
                warpers.append(TopPLogitsWarper(top_p))
        rng = torch.Generator().manual_seed(int(sampling["seed"])) if sampling.get("seed") is not None else self._rng
        device = self.model.device
        context = torch.tensor([prompt_ids], device=device)
        logits, cache, delta = self._forward(context, vision, keep=1)
        logits = logits[-1]
        tokens: list[int] = []
        log_probs: list[float] = []
        while True:
            scores = logits.clone()
            scores[[self._image_token_id, self._video_token_id]] = float("-inf")  # never sample a placeholder
            for warp in warpers:
                scores = warp(context, scores[None])[0]
            if greedy:
                token = int(scores.argmax())
            else:
                token = int(torch.multinomial(torch.softmax(scores, -1).cpu(), 1, generator=rng))  # rng is on CPU
            scale = temperature if not greedy else 1.0
            log_probs.append(float(torch.log_softmax(logits / scale, -1)[token]))
            tokens.append(token)
            if token in stops:
                return tokens, log_probs, "stop"
            if len(tokens) >= limit:
                return tokens, log_probs, "length"
            if epoch != self._epoch:
                return tokens, log_probs, "aborted"
            context = torch.cat([context, torch.tensor([[token]], device=device)], dim=1)
            position = torch.full((3, 1, 1), context.shape[1] - 1 + delta, device=device)
            out = self.model(input_ids=context[:, -1:], position_ids=position, past_key_values=cache, use_cache=True)
            logits, cache = out.logits[0, -1].float(), out.past_key_values

    def _score_forced(
        self, prompt_ids: list[int], vision: dict[str, torch.Tensor], text: str, temperature: float, limit: int
    ) -> tuple[list[int], list[float], str]:
        """The forced text + <|im_end|>, cut to ``limit`` tokens, with teacher-forced log-probs."""
        tokens = [*self.tokenizer.encode(text, add_special_tokens=False), self._im_end_id]
        if {self._image_token_id, self._video_token_id} & set(tokens):
            raise ValueError("a forced response may not contain vision placeholder tokens")
        stop_reason = "stop" if len(tokens) <= limit else "length"
        tokens = tokens[:limit]
        logits, _, _ = self._forward(
            torch.tensor([prompt_ids + tokens[:-1]], device=self.model.device), vision, keep=len(tokens)
        )
        scale = temperature if temperature > 0.0 else 1.0
        index = torch.tensor(tokens, device=logits.device)[:, None]
        log_probs = torch.log_softmax(logits / scale, -1).gather(-1, index)[:, 0]
        return tokens, log_probs.tolist(), stop_reason
