"""Session fixtures shared across test areas."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from neos_core.keyed_dirs import use_keyed_dir

REPO = Path(__file__).resolve().parents[1]
# The files that take longest in `make test` (a whole pipeline run, a fleet of fresh processes, a paper-scale
# rehearsal, Ray actors, several servers or CLI runs), longest first: `make test`'s workers start them first, so
# that the run ends on short files and neither worker is left running a long one alone at the end. A long file not
# listed costs only that balance; a listed file that no longer exists stops the run.
LONG_FILES = ("trainer/test_rehearsal_on_cpu.py", "trainer/test_mei_pool_on_cpu.py",
              "plugin/test_registrations_on_cpu.py", "data_gen/test_modalsearch_run_on_cpu.py",
              "tool_server/test_workers_on_cpu.py", "rollout/test_hf_replica_on_cpu.py",
              "rollout/test_bench_rollout_vllm_on_cpu.py", "world/test_world_build_on_cpu.py",
              "install/test_resolution_on_cpu.py", "rollout/test_turn_router_on_cpu.py",
              "data_gen/test_modalsearch_kill_on_cpu.py", "eval/test_verl_val_on_cpu.py",
              "cli/test_verl_notices_on_cpu.py", "walkthrough/test_walkthrough_on_cpu.py",
              "mei/test_serving_on_cpu.py", "recipes/test_paper_recipes_on_cpu.py",
              "world/test_concurrent_builds_on_cpu.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``: ``--dist loadfile --no-loadscope-reorder``, files handed out in collection
    order) the long files come first, longest first; a run in one process keeps pytest's order."""
    if hasattr(config, "workerinput"):
        rank = {REPO / "tests" / f: i for i, f in enumerate(LONG_FILES)}
        if missing := [str(f) for f in rank if not f.is_file()]:
            raise pytest.UsageError(f"tests/conftest.py LONG_FILES: no such file {', '.join(missing)}")
        items.sort(key=lambda item: rank.get(item.path, len(rank)))  # stable: the rest keep their order


def _code_digest() -> str:
    """The world code's digest: every module that shapes a world's content (not the command line, ``__main__``): the
    builder (``data_gen/world``) and the format it writes (``neos_core/world``)."""
    digest = hashlib.sha256()
    for path in sorted([*(REPO / "data_gen" / "world").rglob("*.py"), *(REPO / "neos_core" / "world").rglob("*.py")]):
        if path.name != "__main__.py":
            digest.update(path.relative_to(REPO).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="session")
def small_world() -> Iterator[Path]:
    """Path to a built ``small`` world. Built once and kept in the source cache, keyed by the source archives'
    hashes, the world code and the adapters, so later sessions reuse it until one changes. All adapters unless
    ``NEOS_WORLD_ADAPTERS`` (comma-separated) names a subset, for working on one adapter; ``NEOS_SMALL_WORLD`` names
    a prebuilt world instead (``python -m data_gen.world build --size small --out DIR``). Sessions of several
    checkouts share the cache: the world is held under a lock for the session, and a build deletes only worlds of
    other keys that nobody holds or has used for a week (``neos_core.keyed_dirs``)."""
    if os.environ.get("NEOS_SMALL_WORLD"):
        yield Path(os.environ["NEOS_SMALL_WORLD"]).resolve()
        return
    from data_gen.world import corroborate, wiki
    from data_gen.world.adapters import ADAPTERS, load_adapter
    from data_gen.world.builder import build
    from neos_core.world.sources import SourceCache

    cache = SourceCache()
    subset = os.environ.get("NEOS_WORLD_ADAPTERS")
    names = [n.strip() for n in subset.split(",") if n.strip()] if subset else list(ADAPTERS)
    needed = {wiki.SOURCE, *corroborate.SOURCES}.union(*(set(load_adapter(name).SOURCES) for name in names))
    resolved = cache.resolve_all(needed)
    key = hashlib.sha256(
        (
            "\n".join(f"{n}={r.archive_sha256}" for n, r in sorted(resolved.items())) + _code_digest() + ",".join(names)
        ).encode()
    ).hexdigest()[:20]

    def build_small(path: Path) -> None:
        build("small", path, cache=cache.root, adapters=names, progress=bool(os.environ.get("NEOS_WORLD_PROGRESS")))

    path, lock = use_keyed_dir(cache.root / "worlds", "small-", key, build_small, ready="manifest.json")
    with lock:  # held until the session ends: other checkouts' builds leave this world alone
        yield path


@pytest.fixture(scope="session")
def small_world_tasks(small_world) -> list:
    """Twelve real tasks of the small world with distinct answers, the first candidates of its seeds (seed 0)."""
    from data_gen.neos.synth import Synthesizer
    from neos_core.world.store import World

    synth = Synthesizer(World.load(small_world), seed=0)
    found = []
    for seed_entity in synth.seeds():
        for cand in synth.synthesize(seed_entity).candidates:
            if cand.task and cand.task.answer not in {t.answer for t in found}:
                found.append(cand.task)
        if len(found) >= 12:
            return found
    raise AssertionError("the small world yields fewer than 12 tasks")


@pytest.fixture(scope="session")
def tiny_vl_model_dir() -> Path:
    """HF directory of the tiny Qwen2.5-VL (hf_model_type ``qwen2_5_vl``), built once into the source cache
    (``~/.cache/neos-world/models/``) and reused until ``verl_ext/models`` or the tokenizer package changes.
    ``NEOS_TINY_VL_DIR`` names a prebuilt one instead (``python -m verl_ext.models build --out DIR``): the GPU
    machine has no tokenizer package to build from."""
    if os.environ.get("NEOS_TINY_VL_DIR"):
        return Path(os.environ["NEOS_TINY_VL_DIR"]).resolve()
    from verl_ext.models.tiny_vl import cached_tiny_qwen_vl

    return cached_tiny_qwen_vl()


@pytest.fixture(scope="session")
def tiny_vl_processor(tiny_vl_model_dir: Path):
    """The model's ``Qwen2_5_VLProcessor`` (tokenizer at ``.tokenizer``, VL chat template set)."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_vl_model_dir)


@pytest.fixture(scope="session")
def tiny_vl_model(tiny_vl_model_dir: Path):
    """The model loaded once (float32, CPU, eval): share it across ``TransformersGenerateClient`` instances."""
    import torch
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(tiny_vl_model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="session")
def verl_subprocess_env() -> dict[str, str]:
    """Environment for a subprocess that runs verl (``main_ppo``, ``sft_trainer``) with our plugin from this
    checkout: the repo on ``PYTHONPATH`` and ``VERL_USE_EXTERNAL_MODULES`` (the GPU machine has the package on the
    path, not pip-installed); JAX kept off the GPU (the GPU image's JAX takes ~75% of it if anything initialises it)."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p),
        "VERL_USE_EXTERNAL_MODULES": "verl_ext.plugin",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "JAX_PLATFORMS": "cpu",
    }


@pytest.fixture(scope="session")
def compose_ppo_config():
    """``compose_ppo_config(model_dir, *overrides, rollout="vllm")``: verl's own ``ppo_trainer`` config as ``main_ppo``
    composes it, for the model at ``model_dir`` and the rollout engine ``rollout`` (vllm only names one: nothing here
    starts it; our ``hf`` engine is the one a test can run)."""
    from hydra import compose, initialize_config_module

    def compose_config(model_dir: Path, *overrides: str, rollout: str = "vllm"):
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            return compose(
                config_name="ppo_trainer",
                overrides=[
                    f"actor_rollout_ref.model.path={model_dir}",
                    f"actor_rollout_ref.rollout.name={rollout}",
                    *overrides,
                ],
            )

    return compose_config


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray for the whole session (starting one costs ~10 s on 2 cores), a new one even where a cluster runs
    on the machine (another session's ``ray start``). Logical CPUs above the machine's: TransferQueue's controller and
    storage unit are Ray actors of one CPU each and would wait forever on 2."""
    import ray

    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def _transfer_queue_system(ray_cluster):
    import transfer_queue as tq
    from omegaconf import OmegaConf

    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield tq
    tq.close()


@pytest.fixture
def transfer_queue(_transfer_queue_system):
    """A real TransferQueue (verl's v1 trainer data plane) on the session's Ray: one in-memory storage unit, started
    once. Empty for each test: the keys a test leaves are cleared after it, whichever tests ran before it on this
    worker (a test that checks a partition holds only its batch's keys would otherwise see an earlier test's)."""
    tq = _transfer_queue_system
    yield tq
    for partition, keys in tq.kv_list().items():
        if keys:
            tq.kv_clear(keys=list(keys), partition_id=partition)


@pytest.fixture(scope="session")
def world(small_world):
    """The small world as the tool server loads it, shared by the session. Its image features are cached in the
    source cache beside the worlds, as in every test that starts a tool server, also for a ``NEOS_SMALL_WORLD``
    inside a checkout, which must not grow a cache folder."""
    from neos_core.world.sources import default_cache_dir
    from tool_server.offline.world import OfflineWorld

    w = OfflineWorld.load(small_world, cache_dir=default_cache_dir() / "tool-server")
    yield w
    w.close()


@pytest.fixture(scope="session")
def features_cached(world):
    """``features_cached(dir)`` -> ``dir``: a tool server ``--cache-dir`` for the small world that already holds its
    image features (a link to the session's, which are keyed by the world's content), so a server process started on
    it loads them instead of spending ~10 s of CPU computing them again, and whose OCR texts are the source cache's
    (a link to its ``ocr`` directory: keyed by image and engine, shared by every session, so a whole pipeline run
    OCRs only images no run has met; a ModalSearch run of 20 questions spent ~90 s of its ~2 min on OCR). Its result
    cache starts empty."""
    import shutil

    from neos_core.world.sources import default_cache_dir
    from tool_server.mei.ocr import disk_cache_dir
    from tool_server.offline.world import features_path

    world.wait_features()
    shared = default_cache_dir() / "tool-server"
    source = features_path(shared, world.content_hash)

    def seed(directory: Path) -> Path:
        target = features_path(directory, world.content_hash)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, target)
        except OSError:  # another file system
            shutil.copyfile(source, target)
        disk_cache_dir(shared).mkdir(exist_ok=True)
        disk_cache_dir(directory).symlink_to(disk_cache_dir(shared), target_is_directory=True)
        return directory

    return seed


@pytest.fixture
async def tool_server_with(world, tmp_path):
    """``await tool_server_with(middlewares=(), **ServerSettings fields)``: a real tool server (our aiohttp app,
    extractive MEI without OCR) on loopback, in this event loop, with those settings and ``middlewares`` in front
    (fault injection); all are closed after the test."""
    from aiohttp.test_utils import TestServer

    from tool_server.app import ServerSettings, create_app
    from tool_server.cache import TieredCache
    from tool_server.mei import MEIConfig, build_interface
    from verl_ext.tools.client import close_shared_clients

    servers: list[TestServer] = []

    async def start(middlewares=(), **settings):
        app = create_app(
            world=world,
            mei=build_interface(MEIConfig(log_path=tmp_path / f"mei{len(servers) or ''}.jsonl", ocr=False)),
            cache=TieredCache.from_config(memory_items=1000),
            settings=ServerSettings(**{"max_register_images": 64, **settings}),
        )
        app.middlewares.extend(middlewares)
        servers.append(TestServer(app))
        await servers[-1].start_server()
        return servers[-1]

    yield start
    await close_shared_clients()
    for server in servers:
        await server.close()


@pytest.fixture
async def tool_server(tool_server_with):
    """A real tool server with the default settings (see ``tool_server_with``)."""
    return await tool_server_with()


@dataclass
class ChatServer:
    """A real chat-completions server (aiohttp) on loopback, on its own thread: callers that block (the
    data-generation model steps) or run their own event loop (``python -m verl_ext.eval``) cannot share the test's
    loop. ``reply(body) -> str`` answers each request (an ``int`` is sent as that HTTP status, a ``dict`` as the whole
    assistant message, e.g. with native ``tool_calls``, and its ``usage`` key as the body's token counts; an ``async``
    reply is awaited on the server's loop); ``seen`` logs bodies."""

    url: str = ""
    reply: Callable[[dict], str | int | dict] = lambda body: "{}"
    seen: list[dict] = field(default_factory=list)


@pytest.fixture
def threaded_chat():
    server = ChatServer()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        server.seen.append(body)
        content = server.reply(body)
        if inspect.isawaitable(content):  # an async reply may wait without holding up other requests
            content = await content
        if isinstance(content, int):
            return web.Response(status=content, text="unavailable")
        message = dict(content) if isinstance(content, dict) else {"role": "assistant", "content": content}
        usage = message.pop("usage", None)  # a script may report token counts as a server does
        return web.json_response({"choices": [{"message": message}], **({"usage": usage} if usage else {})})

    async def start() -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        server.url = f"http://127.0.0.1:{port}/v1"
        return runner

    runner = asyncio.run_coroutine_threadsafe(start(), loop).result()
    yield server
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result()
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


@pytest.fixture(scope="session")
def free_port():
    """``free_port()``: a loopback TCP port free right now (for servers a test starts as subprocesses)."""
    from neos_core.ports import free_local_port

    return free_local_port


@pytest.fixture(scope="session")
def wait_ready():
    """``wait_ready(url, proc, timeout_s=300)``: until ``url`` answers (any HTTP status below 500 counts), or raise
    if ``proc`` exits first or the time runs out."""
    import subprocess
    import time
    import urllib.error
    import urllib.request

    def wait(url: str, proc: subprocess.Popen, timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{url} exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(url, timeout=5):
                    return
            except urllib.error.HTTPError as e:
                if e.code < 500:
                    return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError(url)

    return wait


@pytest.fixture(scope="session")
def run_main_ppo():
    """``run_main_ppo(recipe, tmp_path, env)``: ``python -m verl.trainer.main_ppo +recipe=RECIPE`` with checkpoints in
    ``tmp_path`` and the space-separated ``NEOS_SMOKE_OVERRIDES``, killed with its Ray processes after
    ``NEOS_SMOKE_TIMEOUT`` s (540); returns (exit status, its log). The GPU smoke tests' launcher."""
    import os
    import shlex
    import signal
    import subprocess
    import sys

    def run(recipe: str, tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
        command = [sys.executable, "-m", "verl.trainer.main_ppo", f"+recipe={recipe}",
                   f"trainer.default_local_dir={tmp_path}/checkpoints",
                   *os.environ.get("NEOS_SMOKE_OVERRIDES", "").split()]
        print("command:", shlex.join(command))
        with open(tmp_path / "main_ppo.log", "w") as out:
            proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                proc.wait(timeout=float(os.environ.get("NEOS_SMOKE_TIMEOUT", 540)))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
                proc.wait()
        return proc.returncode, (tmp_path / "main_ppo.log").read_text(errors="replace")

    return run

