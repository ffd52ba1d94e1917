"""verl's Continuous Token merges, applied to an episode's token stream in place instead of by copying it.

verl's ``merge_*_tokens`` return the whole stream as a new list and ``align_response_metadata`` copies the response
mask and log-probs, several copies of lists that grow to tens of thousands of entries per merge, twice a turn. The
builders' boundary edits (a newline after ``<|im_end|>``, a stale separator dropped, ...) look only at the last few
tokens of the stream, so the merge here gets the stream's last ``TAIL`` tokens and its result replaces that tail;
the metadata of what it appends comes from verl's own ``align_response_metadata`` and is appended in place. The
result is the stream verl's merge would give (``tests/rollout/test_splice_on_cpu.py`` checks it against the full
merge).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

# Tokens of the stream a builder sees; its boundary edits reach a few tokens back, this leaves room for any of them.
TAIL = 64


@dataclass(frozen=True, slots=True)
class Splice:
    """One merge, ready to apply: the stream keeps ``keep`` tokens then ``token_ids``; the metadata drops ``removed``
    entries (prefix tokens the builder dropped) then gains ``mask`` and ``logprobs``."""

    keep: int
    token_ids: list[int]
    removed: int
    mask: list[int]
    logprobs: list[float] | None

    def mask_length(self, mask: list[int]) -> int:
        """The response length after :meth:`apply` to a response whose mask is ``mask``."""
        return max(len(mask) - self.removed, 0) + len(self.mask)

    def apply(self, ids: list[int], mask: list[int], logprobs: list[float] | None) -> None:
        """Edit the stream, mask and log-probs (when tracked) in place."""
        del ids[self.keep :]
        ids.extend(self.token_ids)
        for values, added in ((mask, self.mask), (logprobs, self.logprobs)):
            if values is None:
                continue
            if self.removed:
                del values[-self.removed :]
            values.extend(added or ())


def merge_tail(
    builder: Any,
    ids: list[int],
    merge: Callable[[list[int]], Any],
    *,
    logprobs: bool,
    assistant_logprobs: list[float] | None = None,
) -> Splice:
    """``merge(tail)`` (a builder merge given the last ``TAIL`` tokens of ``ids``) as a :class:`Splice`; ``logprobs``:
    whether the episode tracks log-probs (verl's ``response_logprobs`` is not None)."""
    keep = max(len(ids) - TAIL, 0)
    result = merge(ids[keep:])
    mask, added_logprobs = builder.align_response_metadata(
        replace(result, removed_prefix_token_count=0),
        [],
        [] if logprobs else None,
        assistant_logprobs=assistant_logprobs,
    )
    return Splice(keep, result.token_ids, result.removed_prefix_token_count, mask, added_logprobs)
