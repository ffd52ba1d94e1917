"""``python -m tool_server.tour --world DIR``: start a real tool server and walk one scripted session through it.

A newcomer's first look at the environment a policy sees: every Neos tool, then one ModalSearcher tool, called over
HTTP exactly as the rollout worker calls them, with what each returned. The server runs as a subprocess on a free
loopback port and is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

import aiohttp

from neos_core.usage import OneLineParser
from neos_core.world.model import image_url, page_url
from tool_server.launch import served

SCRIPT: tuple[tuple[str, dict], ...] = (
    ("TextSearch", {"query": ["capital of France"]}),
    ("WebVisit", {"url": [page_url("France")], "goal": "What is the capital of France and which flag does it use?"}),
    ("ImageSearch", {"query": ["flag of France"], "goal": "the national flag of France"}),
    ("FetchImage", {"urls": [image_url("flag_fra")]}),
    ("CropImage", {"crop_config": {"img_2": [0, 0, 340, 1000]}}),
    ("ReverseImageSearch", {"image_token": ["img_1"], "goal": "which country does this map highlight?"}),
    ("t2t_search", {"query": "Eiffel Tower city"}),
)


async def tour(base: str, width: int = 300) -> None:
    """Walk ``SCRIPT`` through the server at ``base`` and print what each tool returned."""
    print(f"tool server at {base}")
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


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m tool_server.tour", description="Start a real tool server on a free loopback "
                      "port and walk one scripted session through it: every Neos tool, then one ModalSearcher tool, "
                      "called over HTTP as the rollout worker calls them, with what each returned.")
    p.add_argument("--world", required=True, type=Path, metavar="DIR",
                   help="a built world (python -m data_gen.world build --size small --out DIR)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not (args.world / "manifest.json").is_file():
        p.error(f"--world: {args.world} is not a built world (python -m data_gen.world build --size small --out DIR)")
    # the tour's MEI log is of no use after it: a temporary file, not ./mei.jsonl left in the caller's directory
    with tempfile.TemporaryDirectory(prefix="tool-server-tour-") as scratch, \
            served(args.world, "--no-ocr", "--log-level", "WARNING", "--mei-log", f"{scratch}/mei.jsonl") as base:
        asyncio.run(tour(base))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
