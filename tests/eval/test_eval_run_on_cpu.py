"""``python -m verl_ext.eval run`` end to end against real servers: the scripted stand-in policy and the scripted
judge on a loopback chat-completions server, our tool server (a subprocess on the small world). Expected numbers
are worked out by hand from the script (see ``conftest.py``)."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import os
import signal
import socket
import threading
import time
from pathlib import Path

import aiohttp
import pytest

from verl_ext.eval.__main__ import main
from verl_ext.eval.benchmarks import EvalItem
from verl_ext.eval.episode import Episode, PolicySettings
from verl_ext.eval.judging import prompt_digest
from verl_ext.reward.judge import JudgeConfig

from .conftest import QUESTIONS, scripted_policy

ANSWERS = {QUESTIONS[0]: "Aruba", QUESTIONS[1]: "It is the flag of Brazil.", "Name the country of this flag.": "Aruba"}


def _args(out: Path, files: dict[str, Path], policy_url: str, tool_url: str, *extra: str) -> list[str]:
    return ["run", "--bench", f"neos=verl:{files['neos']}", "--bench", f"ms=generic:{files['ms']}", "--out", str(out),
            "--policy-url", policy_url, "--tool-server", tool_url, "--max-turns", "4", "--no-progress", *extra]


def _requests(seen: list[dict], judge: bool) -> list[dict]:
    return [b for b in seen if (b["model"] == "judge") == judge]


def test_run_report_and_judge(tmp_path, threaded_chat, tool_server, benchmark_files) -> None:
    threaded_chat.reply = scripted_policy(ANSWERS)
    out = tmp_path / "run"
    code = main(_args(out, benchmark_files, threaded_chat.url, tool_server, "--runs", "2", "--judge-url",
                      threaded_chat.url, "--judge-model", "judge", "--judge-passes", "2"))
    assert code == 0
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and {x["status"] for x in lines} == {"ok"}
    summary = json.loads((out / "report" / "summary.json").read_text())
    acc = summary["accuracy"]
    # neos: Aruba right, Angola answered "Brazil" in both runs; ms: right in both runs
    assert acc["neos"]["per_run"] == [0.5, 0.5] and acc["neos"]["ci95"] == 0.0
    assert (acc["neos"]["pass_at_1"], acc["neos"]["pass_at_k"], acc["ms"]["mean"]) == (0.5, 0.5, 1.0)
    assert acc["overall"]["per_run"] == pytest.approx([2 / 3, 2 / 3]) and acc["overall"]["items"] == 3

    # the judge: 3 distinct responses x 2 passes asked once each (the second run is answered from the cache)
    assert len(_requests(threaded_chat.seen, judge=True)) == 6
    assert len((out / "judge_cache.jsonl").read_text().splitlines()) == 6
    judge = summary["judge"]
    assert judge["by_source"] == {"llm": 6} and judge["repeatability"] == {"pairs": 6, "agreement": 1.0}
    pin = json.loads((out / "run.json").read_text())
    assert pin["judge"] == {"kind": "llm", "model": "judge", "prompt_sha256": prompt_digest(),
                            "version": "neos-answer-judge/1"}
    assert pin["endpoints"]["judge"] == threaded_chat.url
    # the papers' sampling per protocol (ModalSearcher Table 11; Neos Table 12's rollout sampling)
    policy = _requests(threaded_chat.seen, judge=False)
    neos = [b for b in policy if "<tool_call>" not in b["messages"][0]["content"]]
    ms = [b for b in policy if b not in neos]
    assert {b["temperature"] for b in neos} == {1.0} and {(b["top_p"], b["top_k"]) for b in ms} == {(0.8, 20)}
    # neos: tools offered natively on turns 1-3, not on the final turn; 4 turns x 4 episodes
    assert len(neos) == 16 and sum("tools" in b for b in neos) == 12
    tool_turn = neos[-1]["messages"][3]
    assert tool_turn["role"] == "tool" and tool_turn["tool_call_id"] == "call_0"
    # ms: the malformed turn's error went back as a <tool_response> the policy could recover from
    last_ms = max(ms, key=lambda b: len(b["messages"]))
    feedback = last_ms["messages"][-1]["content"]
    assert last_ms["messages"][-1]["role"] == "user" and "Error (bad_format)" in feedback[-1]["text"]

    b = summary["behaviour"]
    assert b["trajectories"] == 6
    assert b["tool_calls"]["by_tool"] == {"TextSearch": 8, "FetchImage": 4, "t2t_search": 2}
    assert b["errors_by_class"] == {"agent/bad_format": 2} and b["truncation_rate"] == 0.0
    assert b["termination"] == {"answer": 6} and b["t2i_rate"] == 0.0
    # one repeated search per neos trajectory: "flag of Aruba" / "Aruba flag" with the same results
    assert b["repeated_searches"]["total"] == 4 and b["repeated_searches"]["trajectories_with_any"] == 4
    assert b["per_turn"]["completion_tokens"]["n"] == 22  # 16 neos + 6 ms turns, each with usage

    # pixels kept for the viewer: the question images and the fetched flag
    record = next(x for x in lines if x["key"] == "neos/t0/0")
    assert set(record["image_files"]) == {"img_1", "img_2"}
    assert all((out / "images" / f).is_file() for f in record["image_files"].values())
    report = (out / "report" / "report.md").read_text()
    assert "| neos | 2 | 2 | 50.0 ± 0.0 | 50.0 | 50.0 |" in report and "100.0% agreement" in report
    assert "- Tool calls: 14 (2.33 per trajectory): TextSearch 8, FetchImage 4, t2t_search 2" in report
    # the viewer lists trajectories by benchmark, item and run, not in the order they finished
    titles = re.findall(r'<a href="#ep\d+">([^<]+)</a>', (out / "report" / "viewer.html").read_text())
    assert titles == [f"{b} / {i} / run {r}" for b, i in (("ms", "m0"), ("neos", "t0"), ("neos", "t1"))
                      for r in (0, 1)]


def test_with_world_the_servers_mei_log_goes_to_the_run_directory_not_the_current_one(
        tmp_path, monkeypatch, threaded_chat, small_world, benchmark_files) -> None:
    monkeypatch.chdir(tmp_path)
    threaded_chat.reply = scripted_policy(ANSWERS)
    out = tmp_path / "run"
    args = _args(out, benchmark_files, threaded_chat.url, "unused", "--runs", "1", "--limit", "1", "--no-embeddings")
    at = args.index("--tool-server")
    args[at: at + 2] = ["--world", str(small_world)]
    assert main(args) == 0
    assert (out / "mei.jsonl").is_file() and not (tmp_path / "mei.jsonl").exists()


def test_restart_redoes_only_what_is_missing(tmp_path, threaded_chat, tool_server, benchmark_files, caplog,
                                             capsys) -> None:
    threaded_chat.reply = scripted_policy(ANSWERS)
    out = tmp_path / "run"
    assert main(_args(out, benchmark_files, threaded_chat.url, tool_server, "--runs", "1")) == 0
    path = out / "results.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    # a crash while the last record was written: its line is cut; one earlier record is lost altogether
    path.write_text(lines[0] + "\n" + lines[2][: len(lines[2]) // 2])
    threaded_chat.seen.clear()
    with caplog.at_level(logging.WARNING):
        assert main(_args(out, benchmark_files, threaded_chat.url, tool_server, "--runs", "1")) == 0
    assert f"{path}:2: a line cut mid-write" in caplog.text
    report = (out / "report" / "report.md").read_text()  # the rule matcher judged
    assert "No LLM judge asked: no fallbacks." in report and "Repeatability: not applicable" in report
    assert {json.loads(x)["key"] for x in path.read_text().splitlines()} == {json.loads(x)["key"] for x in lines}
    assert len({b["messages"][1]["content"][-1]["text"] for b in threaded_chat.seen}) == 2  # two episodes asked

    # a damaged complete line is not guessed at: one line naming file and line, exit 2
    text = path.read_text().splitlines()
    path.write_text("\n".join([text[0], '{"key": "broken"}', *text[1:]]) + "\n")
    with pytest.raises(SystemExit) as exit_:
        main(_args(out, benchmark_files, threaded_chat.url, tool_server, "--runs", "1"))
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}:2: not a valid result record" in err


@pytest.mark.parametrize(("signum", "code", "what"), [(signal.SIGINT, 130, "interrupted"),
                                                     (signal.SIGTERM, 143, "terminated")])
def test_ctrl_c_is_one_line_and_the_rerun_goes_on(tmp_path, capsys, threaded_chat, tool_server, benchmark_files,
                                                  signum, code, what) -> None:
    """SIGINT (a Ctrl-C) or SIGTERM, sent to this process once an episode is recorded while ``run`` runs: one line,
    no traceback, the recorded episodes intact; the same command again runs only the rest."""
    async def reply(body: dict) -> str:
        await asyncio.sleep(0.5)  # 6 one-turn episodes one at a time: the run is still going when the signal comes
        return "Aruba"

    threaded_chat.reply = reply
    out = tmp_path / "run"
    results = out / "results.jsonl"
    argv = _args(out, benchmark_files, threaded_chat.url, tool_server, "--runs", "3", "--limit", "1",
                 "--concurrency", "1", "--no-embeddings")

    def interrupt() -> None:
        while not (results.exists() and results.read_text().count("\n") >= 1):
            time.sleep(0.02)
        os.kill(os.getpid(), signum)

    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL alone; an earlier test's ray.init() leaves Ray's handler
    signal.signal(signal.SIGINT, lambda *_: None)  # a handler an embedding process left: Ctrl-C must still stop it
    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == code and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(f"{what}; finished episodes are kept in {results}: rerun the "
                                                 "same command to go on")
    assert signal.getsignal(signal.SIGTERM) is before  # the command's handler is its own only
    signal.signal(signal.SIGINT, signal.default_int_handler)
    assert 1 <= len(results.read_text().splitlines()) < 6
    threaded_chat.reply = scripted_policy(ANSWERS)
    assert main(argv) == 0
    assert len(results.read_text().splitlines()) == 6  # 2 items (one per benchmark) x 3 runs, none twice


def test_dead_policy_is_counted_and_redone(tmp_path, threaded_chat, tool_server, benchmark_files) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    out = tmp_path / "run"
    assert main(_args(out, benchmark_files, dead, tool_server, "--runs", "1")) == 1
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [x["status"] for x in lines] == ["error"] * 3 and "policy unavailable after 3 attempts" in lines[0]["error"]
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert summary["episodes"]["errors"] == 3 and summary["accuracy"]["overall"]["items"] == 0
    # the same directory once the policy is up (at another address): the errors are redone, nothing else
    threaded_chat.reply = scripted_policy(ANSWERS)
    assert main(_args(out, benchmark_files, threaded_chat.url, tool_server, "--runs", "1")) == 0
    latest = {x["key"]: x["status"] for x in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert len(latest) == 3 and set(latest.values()) == {"ok"}


def test_concurrency_limit_and_progress_bar(tmp_path, threaded_chat, tool_server, benchmark_files, capsys) -> None:
    """``--concurrency 2``: 6 episodes whose policy takes 0.3 s a reply never have more than 2 requests at the
    policy at once, and do have 2 (one answering turn each: the reply has no call, so it is the answer). The
    progress bar (stderr) counts episodes and errors."""
    in_flight, peak = [0], [0]

    async def reply(body: dict) -> str:
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await asyncio.sleep(0.3)
        in_flight[0] -= 1
        return "Aruba"

    threaded_chat.reply = reply
    out = tmp_path / "run"
    assert main(["run", "--bench", f"neos=verl:{benchmark_files['neos']}", "--out", str(out), "--policy-url",
                 threaded_chat.url, "--tool-server", tool_server, "--runs", "3", "--concurrency", "2",
                 "--no-embeddings"]) == 0
    assert len(threaded_chat.seen) == 6 and peak[0] == 2
    assert re.search(r"episodes: 100%\S* 6/6 .*errors=0", capsys.readouterr().err)


def test_bad_flags_are_one_line_errors(tmp_path, capsys, benchmark_files) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q", "answer": "x"}\n{"id": "b", "question": "q"}\n')
    cases = [
        (["run", "--bench", f"b=generic:{bad}", "--out", str(tmp_path / "o"), "--policy-url", "u", "--tool-server",
          "http://127.0.0.1:9"], f"{bad}:2: field 'answer': no answer"),  # a malformed row: file, line and field
        (["run"], "the following arguments are required"),
        (["run", "--bench", f"x=csv:{benchmark_files['ms']}", "--out", "o", "--policy-url", "u", "--world", "w"],
         "unknown format 'csv'"),
        (["run", "--bench", f"ms=generic:{benchmark_files['ms']}", "--out", "o", "--policy-url", "u", "--world",
          "w", "--runs", "0"], "argument --runs: must be >= 1, got 0"),
        (["run", "--bench", f"ms=generic:{benchmark_files['ms']}", "--out", str(tmp_path), "--policy-url", "u",
          "--world", str(tmp_path)], "not a built world"),
        (["training", str(tmp_path / "none.jsonl"), "--out", str(tmp_path)], "METRICS: "),
        (["run", "--bench", f"ms=generic:{benchmark_files['ms']}", "--out", "o", "--policy-url", "u", "--world",
          "w", "--sampling", "[1]"], "argument --sampling: must be a JSON object"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2 and len(err.splitlines()) == 1 and message in err, (argv, err)
    assert not (tmp_path / "o").exists()  # nothing written before the rows were read


def test_restart_with_another_judge_is_refused(tmp_path, capsys, threaded_chat, tool_server, benchmark_files):
    threaded_chat.reply = scripted_policy(ANSWERS)
    out = tmp_path / "run"
    assert main(_args(out, benchmark_files, threaded_chat.url, tool_server, "--runs", "1", "--limit", "1",
                      "--sampling", '{"temperature": 0.5}')) == 0
    assert {b["temperature"] for b in threaded_chat.seen} == {0.5} and not any("top_k" in b for b in threaded_chat.seen)
    with pytest.raises(SystemExit) as exit_:
        main(_args(out, benchmark_files, threaded_chat.url, tool_server, "--runs", "1", "--limit", "1",
                   "--sampling", '{"temperature": 0.5}', "--judge-url", threaded_chat.url))
    assert exit_.value.code == 2 and "was run with other settings (judge)" in capsys.readouterr().err


def test_protocol_per_benchmark(tmp_path, capsys, threaded_chat, tool_server, benchmark_files) -> None:
    """Rows that name no protocol (a SimpleVQA-style file) take their benchmark's ``--protocol NAME=P``, else the
    default ``--protocol P``; a row's own agent (our split: neos_search_agent) wins over both."""
    threaded_chat.reply = scripted_policy(ANSWERS)
    row = json.loads(benchmark_files["ms"].read_text())
    del row["protocol"]
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps(row) + "\n")
    (tmp_path / "flag.png").write_bytes((benchmark_files["ms"].parent / "flag.png").read_bytes())
    out = tmp_path / "run"
    argv = ["run", "--bench", f"a=generic:{plain}", "--bench", f"b=generic:{plain}", "--bench",
            f"neos=verl:{benchmark_files['neos']}", "--out", str(out), "--policy-url", threaded_chat.url,
            "--tool-server", tool_server, "--max-turns", "4", "--no-progress", "--no-embeddings", "--runs", "1",
            "--limit", "1"]
    assert main([*argv, "--protocol", "modalsearch", "--protocol", "b=neos", "--protocol", "neos=modalsearch"]) == 0
    records = map(json.loads, (out / "results.jsonl").read_text().splitlines())
    protocols = {x["benchmark"]: x["protocol"] for x in records}
    assert protocols == {"a": "modalsearch", "b": "neos", "neos": "neos"}
    pin = json.loads((out / "run.json").read_text())["protocols"]
    assert pin == {"default": "modalsearch", "by_benchmark": {"b": "neos", "neos": "modalsearch"}}
    for flag, message in (("c=neos", "no --bench is named 'c'"), ("react", "expected [NAME=]PROTOCOL")):
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--protocol", flag])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # a restart with other protocols would mix them in one results file
        main([*argv, "--protocol", "b=modalsearch"])
    assert exit_.value.code == 2 and "other settings (protocols)" in capsys.readouterr().err


def test_malformed_native_call_is_an_observation_and_a_refused_context_ends_the_episode(
        tmp_path, threaded_chat, tool_server) -> None:
    """Turn 1: a native call whose arguments are not JSON (the policy is told and goes on); turn 2: an unknown tool
    (refused by the schema check, agent-caused); turn 3: the endpoint answers 400 (a context overflow): the episode
    ends as ``context`` instead of failing."""
    def reply(body: dict):
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        if turn == 2:
            return 400
        name, arguments = [("TextSearch", "{not json"), ("Teleport", "{}")][turn]
        return {"role": "assistant", "content": "",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}]}

    threaded_chat.reply = reply
    item = EvalItem("b", "i", "Capital of France?", {"target": "Paris", "aliases": []})
    policy = PolicySettings(JudgeConfig(url=threaded_chat.url, model="p", retry_backoff_s=0.0))

    async def run():
        async with aiohttp.ClientSession() as http:
            return await Episode(item, "neos", policy, tool_server, http, tmp_path, 0).run_episode()

    result = asyncio.run(run())
    record = result.record
    assert record.termination_reason == "context" and result.response == ""
    assert [(t.outcome, t.error_class, t.error_type) for t in record.turns] == [
        ("no_action", "agent", "malformed_call"), ("call_error", "agent", "unknown_tool")]
    second = threaded_chat.seen[1]["messages"]
    assert second[-1]["role"] == "user" and "Error (malformed_call)" in second[-1]["content"][-1]["text"]
