"""Parsing tool calls out of model output (pure): whole and streamed outputs give the same calls and
content, markers never leak into content, and anything that is not a call stays content as written."""

from __future__ import annotations

import json

import pytest

from gateway.tool_calls import ToolCallParser, parse_output
from specdec.serving.tool_format import CALL_SEPARATOR, call_text

FUNCTIONS = {"get_weather", "add"}
WEATHER = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
ADD = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


def calls_of(delta) -> list[tuple[str, dict]]:
    return [(call.name, json.loads(call.arguments)) for call in delta.calls]


def fed_in_pieces(text: str, size: int, parallel: bool = True, finish_reason: str = "stop"):
    """What a stream of `size`-character pieces releases: the content and the calls, assembled."""
    parser = ToolCallParser(FUNCTIONS, parallel)
    deltas = [parser.feed(text[start : start + size]) for start in range(0, len(text), size)] + [parser.finish(finish_reason)]
    return "".join(delta.content for delta in deltas), [call for delta in deltas for call in delta.calls]


def test_a_call_is_parsed_and_its_arguments_are_json_text():
    delta = parse_output(WEATHER, FUNCTIONS)
    assert delta.content == "" and calls_of(delta) == [("get_weather", {"city": "Paris", "unit": "celsius"})]
    call = delta.calls[0]
    assert call.index == 0 and call.id.startswith("call_") and isinstance(call.arguments, str)
    assert call.message_entry() == {"id": call.id, "type": "function", "function": {"name": "get_weather", "arguments": call.arguments}}


def test_text_around_calls_is_content_without_the_separators():
    delta = parse_output(f"Let me look that up.\n{WEATHER}\n{ADD}\n", FUNCTIONS)
    assert delta.content == "Let me look that up."
    assert calls_of(delta) == [("get_weather", {"city": "Paris", "unit": "celsius"}), ("add", {"a": 1, "b": 2})]
    assert [call.index for call in delta.calls] == [0, 1] and delta.calls[0].id != delta.calls[1].id


@pytest.mark.parametrize("size", [1, 2, 3, 5, 11, 1000])
def test_streamed_pieces_give_the_whole_outputs_content_and_calls(size):
    for text in (
        f"Sure.\n{WEATHER}\n{ADD}",
        "Plain prose, no calls at all.\n\n",
        f"{WEATHER} and then some text <tool_ca",
        "a < b <tool <tool_cal x",
        f"x <tool_call>{{bad json}}</tool_call> y {ADD}",
    ):
        whole = parse_output(text, FUNCTIONS)
        content, calls = fed_in_pieces(text, size)
        assert content == whole.content
        assert [(c.index, c.name, c.arguments) for c in calls] == [(c.index, c.name, c.arguments) for c in whole.calls]


@pytest.mark.parametrize("size", [1, 4, 9])
def test_no_piece_of_a_streamed_call_reaches_the_content(size):
    text = f"Checking.\n{WEATHER}\n{ADD}"
    parser = ToolCallParser(FUNCTIONS)
    pieces = [parser.feed(text[start : start + size]).content for start in range(0, len(text), size)] + [parser.finish().content]
    assert "".join(pieces) == "Checking."


def test_output_without_calls_is_content_unchanged():
    for text in ("Hello world.  ", "<tool_c", "1 < 2 and <tool> is not a marker\n", ""):
        delta = parse_output(text, FUNCTIONS)
        assert delta.content == text and delta.calls == []


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "unknown_fn", "arguments": {}}',
        "{not json}",
        '{"arguments": {"a": 1}}',
        '["add"]',
        '{"name": "add", "arguments": [1, 2]}',
        '{"name": "add", "arguments": "not json"}',
    ],
)
def test_a_block_that_is_not_a_call_to_a_known_function_stays_content(body):
    text = f"before <tool_call>{body}</tool_call> after"
    delta = parse_output(text, FUNCTIONS)
    assert delta.content == text and delta.calls == []


@pytest.mark.parametrize("finish_reason", ["length", "stop"])
@pytest.mark.parametrize("size", [1, 4, 1000])
def test_an_unfinished_call_is_dropped_never_content(finish_reason, size):
    # A forced call cut short by max_tokens used to come back as raw markup in `content`, next to the
    # calls completed before it (issue 29).
    for text, content, calls in (
        ('Calling: <tool_call>\n{"name": "add", "arguments": {"a": 1', "Calling:", []),
        (f'{WEATHER}\n<tool_call>\n{{"name": "add", "argu', "", ["get_weather"]),
        (f"{ADD}\n<tool_call>", "", ["add"]),
        ("<tool_call>", "", []),
    ):
        parser = ToolCallParser(FUNCTIONS)
        deltas = [parser.feed(text[start : start + size]) for start in range(0, len(text), size)] + [parser.finish(finish_reason)]
        assert "".join(delta.content for delta in deltas) == content
        assert [call.name for delta in deltas for call in delta.calls] == calls
        whole = parse_output(text, FUNCTIONS, finish_reason=finish_reason)
        assert whole.content == content and [call.name for call in whole.calls] == calls


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_a_marker_start_cut_short_is_dropped_and_kept_after_a_stop(size):
    for text, cut in (("Let me check. <tool_c", "Let me check."), (f"{ADD}\n<tool", ""), ("a <", "a"), ("Hi.  ", "Hi.  ")):
        assert parse_output(text, FUNCTIONS, finish_reason="length").content == cut
        assert fed_in_pieces(text, size, finish_reason="length")[0] == cut
    # the model's own end: the text was not a marker
    assert parse_output("Let me check. <tool_c", FUNCTIONS).content == "Let me check. <tool_c"


def test_arguments_given_as_a_json_string_or_as_parameters_are_accepted():
    as_string = parse_output('<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>', FUNCTIONS)
    as_parameters = parse_output('<tool_call>{"name": "add", "parameters": {"a": 1}}</tool_call>', FUNCTIONS)
    no_arguments = parse_output('<tool_call>{"name": "add"}</tool_call>', FUNCTIONS)
    assert calls_of(as_string) == calls_of(as_parameters) == [("add", {"a": 1})] and calls_of(no_arguments) == [("add", {})]


def test_without_parallel_calls_only_the_first_call_is_kept():
    delta = parse_output(f"{WEATHER}\n{ADD}", FUNCTIONS, parallel=False)
    assert calls_of(delta) == [("get_weather", {"city": "Paris", "unit": "celsius"})] and delta.content == ""


def test_stream_deltas_name_the_call_first_then_carry_its_arguments():
    call = parse_output(f"x {ADD}", FUNCTIONS).calls[0]
    header, arguments = call.stream_deltas()
    assert header == {"index": 0, "id": call.id, "type": "function", "function": {"name": "add", "arguments": ""}}
    assert arguments == {"index": 0, "function": {"arguments": call.arguments}}


def test_marker_text_is_held_back_until_it_cannot_be_a_marker():
    parser = ToolCallParser(FUNCTIONS)
    assert parser.feed("Answer <tool").content == "Answer"
    assert parser.feed("box> done").content == " <toolbox> done"
    assert parser.finish().content == ""


def test_a_rendered_call_parses_back_to_the_same_call():
    text = CALL_SEPARATOR.join([call_text("get_weather", '{"city": "Paris"}'), call_text("ping", "{}")])
    parsed = parse_output(text, {"get_weather", "ping"})
    assert parsed.content == "" and [(call.name, json.loads(call.arguments)) for call in parsed.calls] == [
        ("get_weather", {"city": "Paris"}),
        ("ping", {}),
    ]
