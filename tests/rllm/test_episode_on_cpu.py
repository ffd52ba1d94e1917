"""The rLLM adapters' framework-free core on a real tool server (the small world), with scripted assistant turns:
a scripted stand-in for a model, since no model writes valid calls here. No verl, no rLLM needed (CI runs these)."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp.test_utils import TestServer
from PIL import Image

from verl_ext.reward.judge import AnswerJudge, JudgeConfig
from verl_ext.rllm.benchmark import export
from verl_ext.rllm.engines import message_route
from verl_ext.rllm.episode import (
    Observation,
    SearchEpisode,
    SearchSettings,
    SearchTask,
    assistant_text,
    ground_truth_of,
    native_calls,
)
from verl_ext.rllm.messages import (
    answer_native_calls,
    engine_observation,
    engine_prompt,
    openai_observations,
    openai_prompt,
)
from verl_ext.rollout.prompts import final_turn_instruction

from .conftest import ORIGIN, call, png, react, row

RULE_JUDGE = AnswerJudge(JudgeConfig())


def url_of(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")


async def test_a_neos_episode_runs_its_turns_on_the_server_and_scores_as_our_reward_manager(tool_server):
    task = SearchTask.from_row(row("Which country's flag is it?", "Mexico"))
    assert task.protocol == "neos" and len(task.images) == 1
    ep = SearchEpisode(task, SearchSettings.for_protocol("neos", tool_server_url=url_of(tool_server)))
    assert ep.settings.max_turns == 50 and ep.settings.max_consecutive_errors is None  # Neos' defaults
    try:
        assert await ep.open() == ["img_1"]
        assert ep.native_tools and {t["function"]["name"] for t in ep.native_tools} >= {"FetchImage", "CropImage"}
        observations = await ep.act(call("FetchImage", urls=[f"{ORIGIN}/media/flag_mex.png"]))
        assert [o.refs for o in observations] == [["img_2"]]
        assert observations[0].images[0][1].size[0] > 0
        observations = await ep.act(call("CropImage", crop_config={"img_2": [0, 0, 500, 500]}))
        assert [o.refs for o in observations] == [["img_3"]]
        assert await ep.act("<think>the emblem is Mexico's</think>Mexico") is None
    finally:
        await ep.close()
    assert ep.done and ep.termination_reason == "answer" and ep.answer == "Mexico"
    assert ep.register == ["img_1", "img_2", "img_3"]
    assert [c["name"] for c in ep.calls] == ["FetchImage", "CropImage"]
    reward, info = await ep.score(RULE_JUDGE)
    assert reward == 1.0 and info["acc"] == 1.0 and info["judge"] == "rule"


async def test_modalsearch_errors_are_observations_and_three_in_a_row_end_the_episode(tool_server):
    task = SearchTask.from_row(row("Which country?", "France", agent="modalsearch_react_agent"))
    ep = SearchEpisode(task, SearchSettings.for_protocol("modalsearch", tool_server_url=url_of(tool_server)))
    assert (ep.settings.max_turns, ep.settings.max_consecutive_errors) == (46, 3)  # ModalSearcher's defaults
    try:
        await ep.open()
        assert ep.native_tools is None and "t2t_search" in ep.system_prompt  # ReAct: tools listed in the prompt
        bad = await ep.act("I think it is France")  # no <think> block: a format error the policy sees
        assert bad[0].text.startswith("Error (bad_format)")
        unknown = await ep.act(react("NoSuchTool", query="x"))
        assert unknown[0].text.startswith("Error (unknown_tool)")
        assert await ep.act(react("t2t_search", query=7)) is None  # schema violation: the third agent error
    finally:
        await ep.close()
    assert ep.termination_reason == "agent_errors"
    reward, info = await ep.score(RULE_JUDGE)
    assert reward == pytest.approx(0.1) and info["acc"] == 0.0  # ModalSearcher: 0.1 after 3 agent errors


async def test_modalsearch_answer_scores_accuracy_plus_format(tool_server):
    task = SearchTask.from_row(row("Which country?", "France", agent="modalsearch_react_agent"))
    ep = SearchEpisode(task, SearchSettings.for_protocol("modalsearch", tool_server_url=url_of(tool_server)))
    try:
        await ep.open()
        assert await ep.act(react("t2t_search", query="flag of France")) is not None
        assert await ep.act("<think>found it</think><answer>France</answer>") is None
    finally:
        await ep.close()
    reward, info = await ep.score(RULE_JUDGE)
    assert reward == pytest.approx(0.9 * 1 + 0.1 * 1) and info["fmt"] == 1.0


async def test_the_last_turn_has_tools_disabled(tool_server):
    task = SearchTask.from_row(row("Which country?", "France"))
    ep = SearchEpisode(task, SearchSettings.for_protocol("neos", tool_server_url=url_of(tool_server), max_turns=2))
    try:
        await ep.open()
        assert not ep.final_turn
        assert await ep.act(call("TextSearch", query=["France"])) is not None
        assert ep.final_turn and ep.final_instruction == final_turn_instruction("neos")
        assert await ep.act(call("TextSearch", query=["again"])) is None  # not run
    finally:
        await ep.close()
    assert ep.termination_reason == "max_turns" and len(ep.calls) == 1
    assert (await ep.score(RULE_JUDGE))[0] == 0.0


async def test_a_dead_tool_server_is_a_tool_error_observation_not_an_exception(tool_server):
    task = SearchTask.from_row(row("Which country?", "France", agent="modalsearch_react_agent"))
    ep = SearchEpisode(task, SearchSettings.for_protocol("modalsearch", tool_server_url=url_of(tool_server)))
    await ep.open()
    await tool_server.close()
    try:
        for _ in range(2):
            observations = await ep.act(react("t2t_search", query="France"))
            assert "the tool is unavailable" in observations[0].text
        assert await ep.act(react("t2t_search", query="France")) is None
    finally:
        await ep.close()  # the failed delete is left to the server's session TTL
    assert ep.termination_reason == "tool_errors"
    assert (await ep.score(RULE_JUDGE))[0] == 0.0


def test_tool_images_render_as_user_turns_with_images_and_text_only_results_stay_tool_turns():
    image = Image.new("RGB", (8, 8))
    with_image = engine_observation(Observation("Loaded img_2 (8x8).", (("img_2", image),)))
    assert with_image["role"] == "user" and with_image["images"] == [image]
    assert with_image["content"].startswith("<tool_response>\n") and with_image["content"].endswith("</tool_response>")
    assert "img_2" in with_image["content"]
    assert engine_observation(Observation("3 results")) == {"role": "tool", "content": "3 results"}
    # OpenAI form: a native call's result answers its id, its images follow in a user turn as data URIs.
    native = openai_observations([Observation("Loaded img_2.", (("img_2", image),), call_id="c1")])
    assert native[0] == {"role": "tool", "tool_call_id": "c1", "content": "Loaded img_2."}
    assert native[1]["role"] == "user" and native[1]["content"][0]["image_url"]["url"].startswith("data:image/png")
    react_turn = openai_observations([Observation("3 results")])
    assert react_turn == [{"role": "user", "content": "<tool_response>\n3 results\n</tool_response>"}]


def test_every_native_call_gets_an_answer_even_when_the_turn_was_refused():
    ok = [Observation("3 results")]
    assert [o.call_id for o in answer_native_calls(ok, ["c1"])] == ["c1"]
    refused = [Observation("Error (too_many_calls): 2 tool calls in one turn; at most 1")]
    answered = answer_native_calls(refused, ["c1", "c2"])
    assert [(o.call_id, o.text) for o in answered] == [("c1", refused[0].text), ("c2", refused[0].text)]
    assert answer_native_calls(ok, []) == ok  # text-form calls (ModalSearcher) have no ids


def test_openai_native_calls_become_the_text_form_our_parsers_read():
    text = assistant_text("Let me look.", [{"id": "c1", "type": "function", "function": {
        "name": "FetchImage", "arguments": json.dumps({"urls": ["u"]})}}])
    assert text == 'Let me look.\n<tool_call>\n{"name": "FetchImage", "arguments": {"urls": ["u"]}}\n</tool_call>'


async def test_question_images_open_the_prompt_in_both_forms(tool_server):
    ep = SearchEpisode(SearchTask.from_row(row("Which?", "X")), SearchSettings.for_protocol(
        "neos", tool_server_url=url_of(tool_server)))
    try:
        await ep.open()
    finally:
        await ep.close()
    system, user = engine_prompt(ep)
    assert system["role"] == "system" and user == {"role": "user", "content": "Which?", "images": ep.question_images}
    parts = openai_prompt(ep)[1]["content"]
    assert [p["type"] for p in parts] == ["image_url", "text"]


class _Function:
    """Shaped as OpenAI's ``Function`` (``.name``, ``.arguments`` as a JSON string): the openai package is not here."""

    def __init__(self, name: str, arguments: str) -> None:
        self.name, self.arguments = name, arguments


def openai_tool_call(call_id: str, name: str, arguments: dict):
    """OpenAI's ``ChatCompletionMessageFunctionToolCall`` where the openai package is installed (rLLM's environment),
    else an object of its shape (``.id``, ``.type``, ``.function.name``, ``.function.arguments``)."""
    try:
        from openai.types.chat import ChatCompletionMessageFunctionToolCall
    except ImportError:
        return SimpleNamespace(id=call_id, type="function", function=_Function(name, json.dumps(arguments)))
    return ChatCompletionMessageFunctionToolCall(
        id=call_id, type="function", function={"name": name, "arguments": json.dumps(arguments)})


def test_tool_calls_read_alike_from_openai_objects_rllm_toolcalls_and_dicts():
    """Issue 34: ``workflow.py`` read ``c.name`` and crashed on OpenAI's objects (rLLM's OpenAIEngine, chat mode)."""
    expected = {"id": "c1", "type": "function", "function": {"name": "FetchImage", "arguments": '{"urls": ["u"]}'}}
    openai_object = openai_tool_call("c1", "FetchImage", {"urls": ["u"]})
    openai_dict = {"id": "c1", "type": "function", "function": {"name": "FetchImage", "arguments": '{"urls": ["u"]}'}}
    assert native_calls([openai_object]) == native_calls([openai_dict]) == [expected]
    rllm_tool_call = SimpleNamespace(name="FetchImage", arguments={"urls": ["u"]})  # rllm.tools.tool_base.ToolCall
    flat = {"name": "FetchImage", "arguments": {"urls": ["u"]}}
    parsed = {"id": None, "type": "function", "function": {"name": "FetchImage", "arguments": {"urls": ["u"]}}}
    assert native_calls([rllm_tool_call]) == native_calls([flat]) == [parsed]
    text = '<tool_call>\n{"name": "FetchImage", "arguments": {"urls": ["u"]}}\n</tool_call>'
    assert {assistant_text(None, [c]) for c in (openai_object, openai_dict, rllm_tool_call, flat)} == {text}


def test_an_engine_route_is_chat_or_a_parser_with_a_processor():
    """``message_route`` reads rLLM's engines by their attributes (the real engines: tests/rllm/
    test_rllm_plugins_on_cpu.py): ``OpenAIEngine`` sets ``_use_chat_completions`` when it has no tokenizer;
    ``VerlEngine`` holds its processor, None for a text-only model."""
    assert message_route(SimpleNamespace(_use_chat_completions=True)) == "chat"
    assert message_route(SimpleNamespace(_use_chat_completions=False, processor=object())) == "parser"
    for text_only in (SimpleNamespace(_use_chat_completions=False), SimpleNamespace(processor=None)):
        with pytest.raises(ValueError, match="images would never reach the model"):
            message_route(text_only)


def two_image_row() -> dict:
    return {**row("Which two flags?", "Mexico"), "images": [{"bytes": png(), "path": None},
                                                             {"bytes": png((0, 90, 200)), "path": None}]}


def test_task_rows_from_pandas_hf_datasets_and_dicts_give_one_task(tmp_path: Path):
    """Issue 34: a pandas row's list cells are numpy arrays, and ``row.get("images") or []`` raised "The truth value
    of an array ... is ambiguous" for a task with 2+ images. Each row below is the parquet data generation writes
    (pandas), read back by pandas, by HF datasets (raw and with its ``Image`` feature, which decodes to PIL) and as
    the dict it was written from."""
    pd = pytest.importorskip("pandas")
    datasets = pytest.importorskip("datasets")
    path = tmp_path / "tasks.parquet"
    pd.DataFrame([two_image_row()]).to_parquet(path, index=False)
    pandas_row = pd.read_parquet(path).iloc[0]
    hf = datasets.Dataset.from_parquet(str(path))
    hf_decoded = hf.cast_column("images", datasets.List(datasets.Image()))
    assert isinstance(hf_decoded[0]["images"][0], Image.Image)
    tasks = [SearchTask.from_row(r) for r in (two_image_row(), pandas_row, hf[0], hf_decoded[0])]
    pixels = [[Image.open(io.BytesIO(b)).convert("RGB").getpixel((0, 0)) for b in t.images] for t in tasks]
    assert pixels == [[(200, 30, 30), (0, 90, 200)]] * 4
    assert {(t.question, t.protocol, json.dumps(t.ground_truth)) for t in tasks} == {
        ("Which two flags?", "neos", '{"target": "Mexico", "aliases": []}')}
    assert tasks[1].images == tasks[0].images == (png(), png((0, 90, 200)))  # the bytes as written
    assert ground_truth_of(pandas_row) == {"target": "Mexico", "aliases": []}  # a list, not a numpy array


def test_task_rows_name_what_they_lack():
    with pytest.raises(ValueError, match="no ground_truth"):
        SearchTask.from_row({"question": "q"})
    with pytest.raises(ValueError, match="agent_name 'other'"):
        SearchTask.from_row({"question": "q", "ground_truth": "a", "agent_name": "other"})


def test_the_benchmark_export_writes_an_rllm_local_benchmark(tmp_path: Path):
    summary = export([row("Which country?", "Mexico")], tmp_path / "bench", name="neos-small")
    assert summary == {"out": str(tmp_path / "bench"), "split": "benchmark", "protocol": "neos", "rows": 1,
                       "agent": "neos_search", "evaluator": "neos_answer_judge"}
    toml = (tmp_path / "bench" / "dataset.toml").read_text()
    assert 'category = "vlm"' in toml and 'split = "benchmark"' in toml
    (line,) = (tmp_path / "bench" / "data" / "benchmark.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["question"] == "Which country?" and record["images"][0].startswith("images/")
    assert (tmp_path / "bench" / record["images"][0]).read_bytes() == png()
    # What rLLM's loader hands the flow (the row as Task metadata, the directory) reads back to the same task.
    again = SearchTask.from_row(record, base_dir=tmp_path / "bench")
    assert again.images == (png(),) and again.ground_truth == {"target": "Mexico", "aliases": []}


def test_a_bad_row_fails_the_export_naming_it_and_leaves_nothing(tmp_path: Path):
    with pytest.raises(ValueError, match="row 1: task row has no ground_truth"):
        export([row("q", "a"), {"question": "q2", "extra_info": {"split": "benchmark"}}], tmp_path / "bench", name="b")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(importlib.util.find_spec("rllm") is not None, reason="rLLM is installed here")
def test_without_rllm_the_adapters_say_how_to_install_it():
    for module in ("verl_ext.rllm.env", "verl_ext.rllm.workflow", "verl_ext.rllm.flow"):
        with pytest.raises(ImportError, match="uv pip install ./rllm ./rllm/rllm-model-gateway"):
            importlib.import_module(module)


def test_the_install_hint_is_the_documented_command_sequence():
    """The hint prints docs/rllm.md's commands (which tests/install resolves), not a sequence of its own."""
    from verl_ext.rllm import INSTALL_HINT

    docs = (Path(__file__).resolve().parents[2] / "docs" / "rllm.md").read_text()
    block = docs.split("## Install", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("   #")[0].strip() for line in block.strip().splitlines()][1:]  # the clone and the install
    assert len(commands) == 2 and " && ".join(commands) in INSTALL_HINT, (commands, INSTALL_HINT)
