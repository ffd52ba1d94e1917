"""``python -m tool_server --workers N``: session affinity through the router, and a worker killed mid-load."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal
import uuid
from pathlib import Path

import aiohttp
import pytest
from PIL import Image

from neos_core.world.sources import default_cache_dir
from tool_server.launch import served
from tool_server.workers import Router, merge_metrics

FLAG_FRA = "https://neos-world.invalid/media/flag_fra.png"


def _png_b64(colour: tuple[int, int, int]) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), colour).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _args(small_world, tmp_path, workers: int) -> tuple[str, ...]:
    return (
        "--no-ocr",
        "--workers",
        str(workers),
        "--cache-dir",
        str(default_cache_dir() / "tool-server"),
        "--mei-log",
        str(tmp_path / "mei.jsonl"),
    )


async def _post(http, path: str, body: dict) -> tuple[int, dict]:
    async with http.post(path, json=body) as r:
        return r.status, await r.json()


def test_merge_metrics_sums_series_and_keeps_families_together():
    a = '# HELP x X.\n# TYPE x counter\nx{t="a"} 1\nx{t="b"} 2\n# HELP g G.\n# TYPE g gauge\ng 3\n'
    b = '# HELP x X.\n# TYPE x counter\nx{t="a"} 4\nx{t="c"} 5\n# HELP g G.\n# TYPE g gauge\ng 1\n'
    assert merge_metrics([a, b]) == (
        '# HELP x X.\n# TYPE x counter\nx{t="a"} 5\nx{t="b"} 2\nx{t="c"} 5\n# HELP g G.\n# TYPE g gauge\ng 4\n'
    )


def test_768_sessions_x_50_calls_each_reach_their_own_register_under_2_workers(small_world, tmp_path):
    n, calls = 768, 50

    async def load(base: str) -> None:
        colours = [(i % 256, i // 256, 99) for i in range(n)]
        async with aiohttp.ClientSession(base, connector=aiohttp.TCPConnector(limit=64)) as http:
            created = await asyncio.gather(*(_post(http, "/v1/sessions", {"images": [_png_b64(c)]}) for c in colours))
            sids = [body["session_id"] for _, body in created]
            assert {sid[:3] for sid in sids} == {"s0_", "s1_"}  # both workers hold sessions

            async def episode(sid: str, colour) -> None:
                for k in range(calls):  # each crop adds img_{k+2} to this session's register only
                    crop = {"crop_config": {"img_1": [0, 0, 1000, 1000]}}
                    call = {"name": "CropImage", "arguments": crop, "include_pixels": k == calls - 1}
                    status, body = await _post(http, f"/v1/sessions/{sid}/call", call)
                    assert status == 200, body
                    assert body["images"][0]["ref"] == f"img_{k + 2}"
                last = Image.open(io.BytesIO(base64.b64decode(body["images"][0]["png_base64"]))).convert("RGB")
                assert last.getpixel((0, 0)) == colour

            await asyncio.gather(*(episode(s, c) for s, c in zip(sids, colours)))
            async with http.get("/metrics") as r:
                text = await r.text()
            assert f'tool_requests_total{{tool="CropImage",status="200"}} {n * calls}' in text
            assert f"sessions_active {n}" in text and 'tool_server_workers{state="alive"} 2' in text

    with served(small_world, *_args(small_world, tmp_path, 2)) as base:
        asyncio.run(load(base))


def test_a_stopped_worker_delays_its_calls_and_a_killed_one_fails_only_its_own_sessions_clearly(
    small_world, tmp_path
):
    async def load(base: str) -> None:
        async with aiohttp.ClientSession(base, connector=aiohttp.TCPConnector(limit=0)) as http:
            sids = [(await _post(http, "/v1/sessions", {}))[1]["session_id"] for _ in range(20)]
            async with http.get("/healthz") as r:
                pids = (await r.json())["worker_pids"]
            # a live worker that accepts nothing for a moment (its loop busy; here stopped): 300 calls reach it at
            # once, more than aiohttp's default accept queue of 128, which refused the rest as a lost worker (503)
            os.kill(pids[1], signal.SIGSTOP)
            try:
                search = {"name": "TextSearch", "arguments": {"query": ["Paris"]}}
                calls = [asyncio.create_task(_post(http, f"/v1/sessions/{sids[1]}/call", search)) for _ in range(300)]
                await asyncio.sleep(1.0)
            finally:
                os.kill(pids[1], signal.SIGCONT)
            assert [status for status, _ in await asyncio.gather(*calls)] == [200] * 300
            for sid in sids[:2]:  # one session on each worker: reverse search in the worker's own threads
                goal = f"which flag ({sid})"  # not answered from the cache another worker filled
                search = {"name": "ReverseImageSearch", "arguments": {"image_url": [FLAG_FRA], "goal": goal}}
                status, body = await _post(http, f"/v1/sessions/{sid}/call", search)
                assert status == 200 and not body["cached"], body
                assert "flag_fra" in [c["image_id"] for c in body["records"][0]["candidates"]]
            killed = asyncio.Event()
            outcomes: dict[str, list[tuple[bool, int, str | None]]] = {s: [] for s in sids}

            async def episode(sid: str) -> None:
                for _ in range(30):
                    after = killed.is_set()
                    status, body = await _post(
                        http, f"/v1/sessions/{sid}/call", {"name": "FetchImage", "arguments": {"urls": [FLAG_FRA]}}
                    )
                    outcomes[sid].append((after, status, body.get("error", {}).get("type")))

            async def kill() -> None:
                while sum(map(len, outcomes.values())) < 100:
                    await asyncio.sleep(0.01)
                orphans.extend(Path(f"/proc/{pids[1]}/task/{pids[1]}/children").read_text().split())
                os.kill(pids[1], signal.SIGKILL)
                killed.set()

            orphans: list[str] = []  # the killed worker's search process (and its resource tracker)

            await asyncio.wait_for(asyncio.gather(kill(), *(episode(s) for s in sids)), 300)  # never a hang
            for sid, results in outcomes.items():
                if sid.startswith("s1_"):  # every call sent after the kill: a clear 503, no hang, no other error
                    assert all((s, t) == (503, "worker_unavailable") for after, s, t in results if after)
                    assert all(s in (200, 503) for _, s, _ in results)
                else:
                    assert all(s == 200 for _, s, _ in results), results
            new = [(await _post(http, "/v1/sessions", {}))[1]["session_id"] for _ in range(4)]
            assert all(sid.startswith("s0_") for sid in new)  # new sessions avoid the dead worker
            async with http.get("/metrics") as r:
                assert 'tool_server_workers{state="dead"} 1' in await r.text()
            async with http.get("/healthz") as r:
                assert (await r.json())["status"] == "degraded"
            assert orphans  # the reverse search above ran in a search process of that worker
            for _ in range(300):  # each notices its server is gone within a second or two
                if not any(Path(f"/proc/{pid}").exists() for pid in orphans):
                    break
                await asyncio.sleep(0.1)
            assert not any(Path(f"/proc/{pid}").exists() for pid in orphans)

    with served(small_world, *_args(small_world, tmp_path, 2)) as base:
        asyncio.run(load(base))


def test_an_mei_version_announcement_reaches_every_worker(small_world, tmp_path):
    """The trainer's ``POST /admin/mei_version`` through the router: a session opened on each worker afterwards is
    fixed to the new version, and its WebVisit result is cached under that version's key (the shared directory tier
    of both workers, read back here)."""
    from tool_server.cache import DirectoryLevel, cache_key

    shared = tmp_path / "shared"

    async def load(base: str) -> None:
        async with aiohttp.ClientSession(base) as http:
            assert (await _post(http, "/admin/mei_version", {"version": ""}))[0] == 400  # refused by every worker
            status, answer = await _post(http, "/admin/mei_version", {"version": "v7"})
            assert status == 200 and answer["version"] == "v7"
            async with http.get("/admin/mei_version") as r:
                assert (await r.json())["version"] == "v7"
            opened = [(await _post(http, "/v1/sessions", {}))[1] for _ in range(2)]
            assert sorted(s["session_id"][:3] for s in opened) == ["s0_", "s1_"]  # one session on each worker
            assert [s["mei_version"] for s in opened] == ["v7", "v7"]
            for session, page in zip(opened, ("France", "Paris")):
                goal = f"capital of France {uuid.uuid4()}"  # computed here, not read from an earlier run's disk tier
                arguments = {"url": [f"https://neos-world.invalid/wiki/{page}"], "goal": goal}
                call = {"name": "WebVisit", "arguments": arguments}
                status, body = await _post(http, f"/v1/sessions/{session['session_id']}/call", call)
                assert status == 200 and not body["cached"] and [m["version"] for m in body["mei"]] == ["v7"], body
                level = DirectoryLevel(shared)
                assert await level.get(cache_key("WebVisit@mei:v7", arguments)) is not None
                await level.close()

    with served(small_world, *_args(small_world, tmp_path, 2), "--shared-cache-dir", str(shared)) as base:
        asyncio.run(load(base))


async def test_the_router_retries_a_live_worker_that_accepts_no_connection_for_a_bounded_time(world, tmp_path):
    """A worker process alive but not accepting (here: its socket not listening yet) is retried, then answers; a
    worker that never accepts gets a 503 ``worker_busy`` after the bound (its session kept); a dead one's calls are
    ``worker_unavailable``. The worker is our one-process app on the Unix socket; the process is a real one."""
    import multiprocessing
    import time

    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from tool_server.app import ServerSettings, create_app
    from tool_server.mei import MEIConfig, build_interface

    proc = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(120,), daemon=True)
    proc.start()
    path, never = str(tmp_path / "w0.sock"), str(tmp_path / "never.sock")
    waits, refuses = Router([proc], [path], connect_retry_s=30), Router([proc], [never], connect_retry_s=0.3)
    worker = create_app(
        world=world,
        mei=build_interface(MEIConfig(log_path=tmp_path / "mei.jsonl", ocr=False)),
        settings=ServerSettings(session_id_prefix="s0_"),
    )
    runner = web.AppRunner(worker)
    await runner.setup()
    try:
        async with TestClient(TestServer(waits.app())) as c, TestClient(TestServer(refuses.app())) as r:
            opening = asyncio.create_task(c.post("/v1/sessions", json={}))
            while waits.counters["connect_retries"] < 3:
                await asyncio.sleep(0.01)
            await web.UnixSite(runner, path).start()
            opened = await opening
            assert opened.status == 200 and (await opened.json())["session_id"].startswith("s0_")
            refused = await r.post("/v1/sessions/s0_abc/call", json={"name": "TextSearch"})
            assert (refused.status, (await refused.json())["error"]["type"]) == (503, "worker_busy")
            assert refuses.counters["busy"] == 1
            assert 'tool_server_router_events_total{event="busy"} 1' in await (await r.get("/metrics")).text()
            proc.kill()
            proc.join(10)
            lost = await c.post("/v1/sessions/s0_abc/call", json={"name": "TextSearch"})
            assert (lost.status, (await lost.json())["error"]["type"]) == (503, "worker_unavailable")
    finally:
        await runner.cleanup()
        proc.kill()


@pytest.mark.parametrize("bad", ["0", "-1"])
def test_workers_flag_is_checked(bad, small_world):
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "tool_server", "--world", str(small_world), "--workers", bad],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 2 and f"argument --workers: must be >= 1, got {bad}" in r.stderr


def test_workers_split_the_servers_image_budget_session_cap_and_client_quota():
    """Each worker holds its own sessions: with the whole budget each, --workers 4 held 4 x 16 GiB of images."""
    from tool_server.__main__ import parser
    from tool_server.assembly import server_settings

    args = parser().parse_args(["--world", "w", "--workers", "4", "--memory-budget-gib", "16",
                                "--max-sessions-per-client", "10"])
    one, each = server_settings(args), server_settings(args, share=4)
    assert (one.memory_budget_bytes, one.max_sessions, one.max_sessions_per_client) == (16 * 2**30, 100_000, 10)
    assert (each.memory_budget_bytes, each.max_sessions, each.max_sessions_per_client) == (4 * 2**30, 25_000, 3)
    assert each.max_session_image_bytes == one.max_session_image_bytes == 512 * 2**20  # a session is on one worker


async def test_a_session_open_a_workers_full_share_refuses_goes_to_the_next(world, tmp_path):
    """Worker 0's share of the client's quota is 1 session, worker 1's 2: the router opens 3 (the third passed on
    from worker 0 to worker 1, counted), then answers the fourth with the last 429. Workers: our app on Unix sockets
    in this process; their processes: live stand-ins."""
    import multiprocessing
    import time

    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from tool_server.app import ServerSettings, create_app
    from tool_server.mei import MEIConfig, build_interface
    from tool_server.workers import CLIENT_HEADER

    procs = [multiprocessing.get_context("spawn").Process(target=time.sleep, args=(120,), daemon=True) for _ in "ab"]
    for proc in procs:
        proc.start()
    paths, runners = [str(tmp_path / f"w{i}.sock") for i in range(2)], []
    try:
        for i, quota in enumerate((1, 2)):
            settings = ServerSettings(session_id_prefix=f"s{i}_", max_sessions_per_client=quota,
                                      client_header=CLIENT_HEADER)
            app = create_app(world=world, mei=build_interface(MEIConfig(log_path=tmp_path / f"m{i}.jsonl", ocr=False)),
                             settings=settings)
            runners.append(web.AppRunner(app))
            await runners[-1].setup()
            await web.UnixSite(runners[-1], paths[i]).start()
        router = Router(procs, paths)
        async with TestClient(TestServer(router.app())) as c:
            opened = [await c.post("/v1/sessions", json={}) for _ in range(4)]
            bodies = [await r.json() for r in opened]
            assert [r.status for r in opened] == [200, 200, 200, 429]
            assert [b["session_id"][:3] for b in bodies[:3]] == ["s0_", "s1_", "s1_"]
            assert bodies[3]["error"]["type"] == "session_quota"
            assert router.counters["create_passed_on"] == 2  # the third from worker 0; the fourth from worker 1
            text = await (await c.get("/metrics")).text()
            assert 'tool_server_router_events_total{event="create_passed_on"} 2' in text
    finally:
        for runner in runners:
            await runner.cleanup()
        for proc in procs:
            proc.kill()


async def test_the_router_refuses_an_oversized_call_body_before_holding_it(tmp_path):
    """A tool call is at most 1 MiB: the router answers 413 from the Content-Length, and reads a body without one no
    further than the limit, instead of holding up to 64 MiB per call for the worker to refuse."""
    import multiprocessing
    import time

    from aiohttp.test_utils import TestClient, TestServer

    from tool_server.limits import MAX_CALL_BODY_BYTES

    proc = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(120,), daemon=True)
    proc.start()
    router = Router([proc], [str(tmp_path / "never.sock")], connect_retry_s=30)  # a forwarded call would wait 30 s
    try:
        async with TestClient(TestServer(router.app())) as c:
            big = b"x" * (MAX_CALL_BODY_BYTES + 1)

            async def chunks():
                for i in range(0, len(big), 2**16):
                    yield big[i : i + 2**16]

            for data in (big, chunks()):
                r = await asyncio.wait_for(c.post("/v1/sessions/s0_abc/call", data=data), 10)
                assert (r.status, (await r.json())["error"]["type"]) == (413, "body_too_large")
            assert router.counters["connect_retries"] == 0  # nothing was forwarded
    finally:
        proc.kill()


async def test_the_router_reads_only_ascii_worker_indexes_of_bounded_length(tmp_path):
    """Session ids name their worker by an ASCII index: ``s١_`` was worker 1 and an index of 5,000 digits a 500
    (``int()`` refuses over 4,300 digits): both are unknown sessions now, answered without a worker."""
    import multiprocessing
    import time

    from aiohttp.test_utils import TestClient, TestServer

    procs = [multiprocessing.get_context("spawn").Process(target=time.sleep, args=(120,), daemon=True) for _ in "ab"]
    for proc in procs:
        proc.start()
    router = Router(procs, [str(tmp_path / f"never{i}.sock") for i in range(2)], connect_retry_s=30)
    try:
        async with TestClient(TestServer(router.app())) as c:
            for sid in ("s١_abc", "s" + "9" * 5000 + "_abc", "s2_abc", "x1_abc"):
                r = await asyncio.wait_for(c.post(f"/v1/sessions/{sid}/call", json={"name": "TextSearch"}), 10)
                body = await r.json()
                assert (r.status, body["error"]["type"]) == (404, "unknown_session") and len(str(body)) < 300
            assert router.counters["connect_retries"] == 0  # none reached a worker
    finally:
        for proc in procs:
            proc.kill()


def test_merge_metrics_takes_off_what_it_is_told():
    a = '# HELP e E.\n# TYPE e counter\ne{type="session_quota"} 3\n'
    assert merge_metrics([a, a], less={'e{type="session_quota"}': 2, "absent": 1}).endswith('e{type="session_quota"} 4\n')


def test_merged_metrics_count_each_session_quota_refusal_once(small_world, tmp_path):
    async def load(base: str) -> None:
        async with aiohttp.ClientSession(base) as http:
            statuses = [(await _post(http, "/v1/sessions", {}))[0] for _ in range(5)]
            assert statuses == [200, 200, 429, 429, 429]  # a quota of 2 split 1 and 1 between the workers
            async with http.get("/metrics") as r:
                text = await r.text()
            assert 'tool_errors_total{type="session_quota"} 3\n' in text, text

    with served(small_world, *_args(small_world, tmp_path, 2), "--max-sessions-per-client", "2") as base:
        asyncio.run(load(base))


def test_a_session_open_in_flight_when_its_worker_dies_is_opened_on_a_live_worker(small_world, tmp_path):
    async def load(base: str) -> None:
        async with aiohttp.ClientSession(base, connector=aiohttp.TCPConnector(limit=0)) as http:
            async with http.get("/healthz") as r:
                pids = (await r.json())["worker_pids"]
            os.kill(pids[1], signal.SIGSTOP)  # the open sent to it waits, in flight
            opens = [asyncio.create_task(_post(http, "/v1/sessions", {})) for _ in range(4)]
            await asyncio.sleep(0.5)
            os.kill(pids[1], signal.SIGKILL)
            answers = await asyncio.wait_for(asyncio.gather(*opens), 20)
            assert [status for status, _ in answers] == [200] * 4, answers
            assert all(body["session_id"].startswith("s0_") for _, body in answers)
            async with http.get("/metrics") as r:
                assert 'tool_server_router_events_total{event="create_reopened"} 2' in await r.text()

    with served(small_world, *_args(small_world, tmp_path, 2)) as base:
        asyncio.run(load(base))


def test_the_router_answers_every_4xx_with_our_json_error(small_world, tmp_path):
    async def load(base: str) -> None:
        async with aiohttp.ClientSession(base) as http:
            over = b"{" + b" " * (64 * 2**20) + b"}"  # over the 64 MiB body limit, under the router's body budget
            async with http.post("/v1/sessions", data=over, headers={"Content-Type": "application/json"}) as r:
                assert r.status == 413 and r.content_type == "application/json"
                assert (await r.json())["error"]["type"] == "body_too_large"
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"BAD\x01 / HTTP/1.1\r\nHost: x\r\n\r\n")
        head, body = (await asyncio.wait_for(reader.read(), 10)).split(b"\r\n\r\n", 1)
        writer.close()
        assert b" 400 " in head and b"application/json" in head, head
        assert json.loads(body)["error"]["type"] == "bad_http_request"

    with served(small_world, *_args(small_world, tmp_path, 2)) as base:
        asyncio.run(load(base))
