"""``python -m tool_server.tour --world DIR``: start a real tool server and walk one scripted session through it.

A newcomer's first look at the environment a policy sees: every Neos tool, then one ModalSearcher tool, called over
HTTP exactly as the rollout worker calls them, with what each returned. The server runs as a subprocess on a free
loopback port and is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import aiohttp

from data_gen.world.model import image_url, page_url

SCRIPT: tuple[tuple[str, dict], ...] = (
    ("TextSearch", {"query": ["capital of France"]}),
    ("WebVisit", {"url": [page_url("France")], "goal": "What is the capital of France and which flag does it use?"}),
    ("ImageSearch", {"query": ["flag of France"], "goal": "the national flag of France"}),
    ("FetchImage", {"urls": [image_url("flag_fra")]}),
    ("CropImage", {"crop_config": {"img_2": [0, 0, 340, 1000]}}),
    ("ReverseImageSearch", {"image_token": ["img_1"], "goal": "which country does this map highlight?"}),
    ("t2t_search", {"query": "Eiffel Tower city"}),
)


async def _start_server(world: Path) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tool_server", "--world", str(world), "--port", "0", "--no-ocr", "--log-level", "WARNING",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,  # its log; run `python -m tool_server` directly to read it
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), timeout=300)).decode()
    if "listening on " not in line:
        proc.kill()
        raise SystemExit(f"error: tool server did not start (exit {await proc.wait()})")
    return proc, line.split("listening on ", 1)[1].split()[0]


async def tour(world: Path, width: int = 300) -> None:
    proc, base = await _start_server(world)
    print(f"tool server at {base}")
    try:
        async with aiohttp.ClientSession(base_url=base) as http:
            async with http.post("/v1/sessions", json={"images": [image_url("map_fra")]}) as r:
                session = await r.json()
            print(f"session {session['session_id'][:8]}: question image registered as {session['images']}")
            for name, arguments in SCRIPT:
                async with http.post(f"/v1/sessions/{session['session_id']}/call",
                                     json={"name": name, "arguments": arguments}) as r:
                    body = await r.json()
                if r.status != 200:
                    print(f"\n== {name} -> HTTP {r.status}: {body['error']}")
                    continue
                refs = ", ".join(f"{i['ref']} {i['width']}x{i['height']}" for i in body["images"]) or "none"
                text = " ".join(body["text"].split())
                print(f"\n== {name}({arguments})\n   new images: {refs}; MEI calls: {len(body['mei'])}")
                print(f"   {text[:width]}{'...' if len(text) > width else ''}")
            await http.delete(f"/v1/sessions/{session['session_id']}")
    finally:
        proc.terminate()
        await proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tool_server.tour", description=__doc__.splitlines()[0])
    p.add_argument("--world", required=True, type=Path)
    args = p.parse_args(argv)
    if not (args.world / "manifest.json").is_file():
        p.error(f"{args.world} is not a built world (python -m data_gen.world build --size small --out DIR)")
    asyncio.run(tour(args.world))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
