"""Prometheus text exposition (format 0.0.4) of the server's counters, written by hand: a handful of series."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from itertools import accumulate

from tool_server.memory import MemoryBudget

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()  # (tool, status)
        self.errors: Counter[str] = Counter()  # error type
        self.cached: Counter[str] = Counter()  # tool -> answers served from the cache
        self._latency_sum: defaultdict[str, float] = defaultdict(float)
        self._latency_buckets: defaultdict[str, list[int]] = defaultdict(lambda: [0] * (len(BUCKETS) + 1))

    def observe(self, tool: str, status: int, seconds: float, *, cached: bool = False) -> None:
        self.requests[(tool, status)] += 1
        if cached:
            self.cached[tool] += 1
        self._latency_sum[tool] += seconds
        self._latency_buckets[tool][bisect_left(BUCKETS, seconds)] += 1  # per-bucket counts, summed when rendered

    def error(self, type_: str) -> None:
        self.errors[type_] += 1

    def render(
        self,
        *,
        cache: dict[str, dict[str, float]],
        coalesced: int,
        mei: dict[str, int],
        sessions: int,
        evicted: dict[str, int],
        image_bytes: int = 0,
        memory: MemoryBudget | None = None,
        search_restarts: int = 0,
        image_restarts: int = 0,
        online: dict[str, int] | None = None,
        borrowed: dict[str, int] | None = None,
    ) -> str:
        out = ["# HELP tool_requests_total Tool calls by tool and HTTP status.", "# TYPE tool_requests_total counter"]
        out += [
            f'tool_requests_total{{tool="{_label(t)}",status="{s}"}} {n}' for (t, s), n in sorted(self.requests.items())
        ]
        out += [
            "# HELP tool_cached_total Tool calls answered from the result cache.",
            "# TYPE tool_cached_total counter",
        ]
        out += [f'tool_cached_total{{tool="{_label(t)}"}} {n}' for t, n in sorted(self.cached.items())]
        out += ["# HELP tool_latency_seconds Tool call latency.", "# TYPE tool_latency_seconds histogram"]
        for tool in sorted(self._latency_buckets):
            buckets = list(accumulate(self._latency_buckets[tool]))
            t = _label(tool)
            out += [f'tool_latency_seconds_bucket{{tool="{t}",le="{b}"}} {buckets[i]}' for i, b in enumerate(BUCKETS)]
            out.append(f'tool_latency_seconds_bucket{{tool="{t}",le="+Inf"}} {buckets[-1]}')
            out.append(f'tool_latency_seconds_sum{{tool="{t}"}} {self._latency_sum[tool]:.6f}')
            out.append(f'tool_latency_seconds_count{{tool="{t}"}} {buckets[-1]}')
        out += ["# HELP tool_errors_total Structured errors returned, by type.", "# TYPE tool_errors_total counter"]
        out += [f'tool_errors_total{{type="{_label(t)}"}} {n}' for t, n in sorted(self.errors.items())]
        out += ["# HELP cache_events_total Result-cache events per level.", "# TYPE cache_events_total counter"]
        for level, stats in sorted(cache.items()):
            out += [
                f'cache_events_total{{level="{_label(level)}",event="{k}"}} {v:g}'
                for k, v in sorted(stats.items())
                if not k.endswith("_latency_s")
            ]
        out += [
            "# HELP cache_latency_seconds_total Summed cache latency per level and operation.",
            "# TYPE cache_latency_seconds_total counter",
        ]
        for level, stats in sorted(cache.items()):
            out += [
                f'cache_latency_seconds_total{{level="{_label(level)}",op="{k.removesuffix("_latency_s")}"}} {v:.6f}'
                for k, v in sorted(stats.items())
                if k.endswith("_latency_s")
            ]
        out += [
            "# HELP cache_coalesced_total Cache misses answered by a concurrent identical call's computation.",
            "# TYPE cache_coalesced_total counter",
            f"cache_coalesced_total {coalesced}",
        ]
        out += ["# HELP mei_events_total MEI calls and outcomes.", "# TYPE mei_events_total counter"]
        out += [f'mei_events_total{{event="{_label(k)}"}} {v}' for k, v in sorted(mei.items())]
        out += ["# HELP sessions_active Open sessions.", "# TYPE sessions_active gauge", f"sessions_active {sessions}"]
        out += [
            "# HELP session_image_bytes Decoded pixels held by every session's visual register.",
            "# TYPE session_image_bytes gauge",
            f"session_image_bytes {image_bytes}",
            "# HELP sessions_evicted_total Sessions evicted: idle past the TTL, least recently used for memory, or of "
            "a client over its share for a client within its own (preempted).",
            "# TYPE sessions_evicted_total counter",
        ]
        out += [f'sessions_evicted_total{{reason="{r}"}} {evicted.get(r, 0)}' for r in ("idle", "memory", "preempted")]
        if memory is not None:
            kinds = ("images", "cache", "bodies", "responses")
            out += [
                "# HELP memory_budget_bytes The process's memory budget (kind=limit) and what each kind holds of it.",
                "# TYPE memory_budget_bytes gauge",
                f'memory_budget_bytes{{kind="limit"}} {memory.limit_bytes}',
                *(f'memory_budget_bytes{{kind="{k}"}} {memory.used[k]}' for k in kinds),
                "# HELP memory_refused_total Charges the memory budget refused after reclaiming, by kind.",
                "# TYPE memory_refused_total counter",
                *(f'memory_refused_total{{kind="{k}"}} {memory.refused[k]}' for k in kinds),
                "# HELP memory_trims_total Heap memory given back to the OS after large releases (malloc_trim), and "
                "trims due where the allocator has none.",
                "# TYPE memory_trims_total counter",
                f'memory_trims_total{{result="done"}} {memory.trimmer.trims}',
                f'memory_trims_total{{result="unavailable"}} {memory.trimmer.unavailable}',
            ]
        out += [
            "# HELP client_share_borrowed_total Takes past a client's share let through because no other client "
            "competed, by budget.",
            "# TYPE client_share_borrowed_total counter",
        ]
        out += [f'client_share_borrowed_total{{budget="{k}"}} {n}' for k, n in sorted((borrowed or {}).items())]
        out += [
            "# HELP reverse_search_restarts_total Reverse-search processes found dead and replaced.",
            "# TYPE reverse_search_restarts_total counter",
            f"reverse_search_restarts_total {search_restarts}",
            "# HELP image_process_restarts_total Image process pools found broken (a process died) and replaced.",
            "# TYPE image_process_restarts_total counter",
            f"image_process_restarts_total {image_restarts}",
        ]
        if online is not None:
            out += [
                "# HELP online_events_total Online backends: API retries, page-reader failures fetched directly.",
                "# TYPE online_events_total counter",
            ]
            out += [f'online_events_total{{event="{_label(k)}"}} {v}' for k, v in sorted(online.items())]
        return "\n".join(out) + "\n"
