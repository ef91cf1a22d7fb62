"""Agent traffic that used to break a constraint or stall a service (issue: agent traffic that cannot
break the constraints): constraints that fail closed, unsatisfiable ones refused, grammar work off
every event loop, and the gateway's limits on the gRPC doors too. Real processes."""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import signal
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from service_support import CHAT, assert_openai_error

from specdec.cli.client import generation_options
from specdec.constraints.grammars import json_schema_grammar
from specdec.v1 import draft_pb2, draft_pb2_grpc, verify_pb2, verify_pb2_grpc

PROMPT = [{"role": "user", "content": "Answer in JSON."}]
# Each passes llguidance's grammar check, then blows its lexer up once matching starts.
BLOWS_UP = {
    "regex": {"type": "regex", "regex": "a{1000000}"},
    "schema-pattern": {
        "type": "json_schema",
        "json_schema": {
            "name": "x",
            "schema": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a{1000}){1000}$"}}, "required": ["code"]},
        },
    },
}
UNSATISFIABLE = {
    "self-ref": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#"}}},
    "mutual-ref": {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"}},
    },
    "empty-class": {"type": "regex", "regex": "[^\\s\\S]"},
}


def _chat(http, stream: bool = False, **fields):
    return http.post(CHAT, json={"model": "target", "messages": PROMPT, "max_tokens": 16, "stream": stream, **fields})


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", list(BLOWS_UP))
def test_a_constraint_whose_matcher_fails_is_refused_never_unconstrained(stack, http, case, stream):
    offset = len(stack.verify.output())
    error = assert_openai_error(_chat(http, stream, response_format=BLOWS_UP[case]), 400)
    assert error["param"].startswith("response_format") and "cannot be enforced" in error["message"], error
    assert "grammar constraint refused" in stack.verify.output()[offset:]  # logged, as a warning


def test_a_forced_tool_call_whose_arguments_cannot_be_enforced_is_refused(http):
    tool = {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "pattern": "^(a{1000}){1000}$"}},
                "required": ["code"],
            },
        },
    }
    error = assert_openai_error(_chat(http, tools=[tool], tool_choice="required"), 400, param="tool_choice")
    assert "cannot be enforced" in error["message"]


@pytest.mark.parametrize("case", list(UNSATISFIABLE))
def test_an_unsatisfiable_constraint_is_a_400_not_an_empty_answer(http, case):
    error = assert_openai_error(_chat(http, response_format=UNSATISFIABLE[case]), 400)
    assert error["param"].startswith("response_format") and "unsatisfiable" in error["message"], error


@pytest.mark.parametrize("stream", [False, True])
def test_a_repetition_penalty_too_small_to_keep_logits_finite_is_a_400(http, stream):
    # 1e-300 was valid under "> 0" and gave a 502 "target_probs contains NaN"
    assert_openai_error(_chat(http, stream, repetition_penalty=1e-300), 400, param="repetition_penalty")
    assert _chat(http, stream, repetition_penalty=1.3, max_tokens=4).status_code == 200


# --- the gRPC doors: verify ------------------------------------------------------------------------


def _generate_error(port: int, request: verify_pb2.GenerateRequest, timeout: float = 30) -> grpc.RpcError:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError) as refused:
        list(verify_pb2_grpc.VerifyServiceStub(channel).Generate(request, timeout=timeout))
    return refused.value


def _assert_refused(error: grpc.RpcError, field: str) -> None:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert error.details().startswith(f"{field}"), error.details()


def test_verify_refuses_a_grammar_past_the_gateways_size_cap_at_once(stack):
    grammar = "start: " + " | ".join(json.dumps(f"word{i}") for i in range(300_000))  # ~3.6 MB of Lark
    started = time.perf_counter()
    options = generation_options("Hello", max_tokens=4)
    options.grammar = grammar
    _assert_refused(_generate_error(stack.ports["verify"], verify_pb2.GenerateRequest(options=options)), "options.grammar")
    assert time.perf_counter() - started < 10  # was: 120 s to DEADLINE_EXCEEDED, and verify kept working for minutes


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"stop": [f"s{i}" for i in range(100_000)]}, "options.stop"),
        ({"stop": ["x" * 5000]}, "options.stop"),
        ({"repetition_penalty": 1e-300}, "options.penalties.repetition_penalty"),
        ({"temperature": float("inf")}, "options.sampling.temperature"),
    ],
    ids=["100k-stops", "long-stop", "repetition-penalty", "infinite-temperature"],
)
def test_verify_enforces_the_gateways_limits_on_direct_callers(stack, settings, field):
    options = generation_options("Hello", max_tokens=4, **settings)
    _assert_refused(_generate_error(stack.ports["verify"], verify_pb2.GenerateRequest(options=options)), field)


def test_verify_refuses_chat_roles_and_tools_the_gateway_would(stack):
    options = generation_options([{"role": "wizard", "content": "hi"}], max_tokens=4)
    _assert_refused(_generate_error(stack.ports["verify"], verify_pb2.GenerateRequest(options=options)), "options.chat.messages[0].role")
    options = generation_options([{"role": "user", "content": "hi"}], max_tokens=4)
    options.chat.tools_json = "[1, 2]"
    _assert_refused(_generate_error(stack.ports["verify"], verify_pb2.GenerateRequest(options=options)), "options.chat.tools_json")


# --- the gRPC doors: draft -------------------------------------------------------------------------


def _health_latency(port: int) -> float:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        started = time.perf_counter()
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
        return time.perf_counter() - started


def test_the_draft_builds_grammar_matchers_off_its_event_loop(stack):
    # 5,000 properties (129k characters, under the cap): the matcher took seconds to build, on the loop.
    grammar = json_schema_grammar({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}, "schema")
    opening = draft_pb2.ProposeRequest(
        open=draft_pb2.ProposeOpen(prompt_ids=[1, 2, 3], vocab_size=512, num_draft_tokens=2, grammar=grammar)
    )
    port = stack.ports["draft"]
    _health_latency(port)  # connected and warm

    def propose() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                list(draft_pb2_grpc.DraftServiceStub(channel).Propose(iter([opening]), timeout=60))
            except grpc.RpcError:
                pass  # refused or answered: either way, what matters is the loop meanwhile

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        opened = pool.submit(propose)
        time.sleep(0.2)
        latencies = []
        while not opened.done():
            latencies.append(_health_latency(port))
            time.sleep(0.05)
    assert latencies and max(latencies) < 0.5, latencies


def test_the_draft_refuses_a_grammar_past_the_cap(stack):
    grammar = "start: " + " | ".join(json.dumps(f"word{i}") for i in range(300_000))
    opening = draft_pb2.ProposeRequest(
        open=draft_pb2.ProposeOpen(prompt_ids=[1, 2, 3], vocab_size=512, num_draft_tokens=2, grammar=grammar)
    )
    with grpc.insecure_channel(f"127.0.0.1:{stack.ports['draft']}") as channel, pytest.raises(grpc.RpcError) as refused:
        list(draft_pb2_grpc.DraftServiceStub(channel).Propose(iter([opening]), timeout=30))
    _assert_refused(refused.value, "open.grammar")


# --- shutdown during grammar work ------------------------------------------------------------------


def test_sigterm_while_clients_keep_verify_compiling_grammars_drains_within_the_grace_period(stack):
    # A 5,000-property schema costs verify over a second of grammar work, and a 3.6 MB grammar kept it
    # working for minutes (and past SIGTERM); three clients alternate them.
    requests = []
    for grammar in (
        json_schema_grammar({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}, "schema"),
        "start: " + " | ".join(json.dumps(f"word{i}") for i in range(300_000)),
    ):
        options = generation_options("Hello", max_tokens=4)
        options.grammar = grammar
        requests.append(verify_pb2.GenerateRequest(options=options))
    stop = time.monotonic() + 60
    port = stack.ports["verify"]

    def client() -> list[grpc.StatusCode]:
        codes = []
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = verify_pb2_grpc.VerifyServiceStub(channel)
            for request in itertools.cycle(requests):
                if time.monotonic() >= stop:
                    break
                try:
                    list(stub.Generate(request, timeout=30))
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as error:
                    codes.append(error.code())
                    if error.code() == grpc.StatusCode.UNAVAILABLE:
                        return codes
        return codes

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        clients = [pool.submit(client) for _ in range(3)]
        time.sleep(3)
        stack.verify.signal(signal.SIGTERM)
        signalled = time.perf_counter()
        assert stack.verify.wait(timeout=30) == 0
        drained_s = time.perf_counter() - signalled
        stop = 0  # the clients stop at their next answer
        codes = [code for future in clients for code in future.result(timeout=60)]
    assert drained_s < 10 + 2, drained_s  # verify_service.grace_seconds, plus the announce second
    assert grpc.StatusCode.INVALID_ARGUMENT in codes and set(codes) <= {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
    }, codes


def test_refusals_of_oversized_grammars_are_paced_per_peer(stack):
    # A client looping megabytes of grammar gets its refusals at 4 a second, so it cannot keep a
    # service's loop receiving them; the first is answered at once.
    grammar = "start: " + " | ".join(json.dumps(f"word{i}") for i in range(30_000))  # ~330 KB: over the cap
    options = generation_options("Hello", max_tokens=4)
    options.grammar = grammar
    generate = verify_pb2.GenerateRequest(options=options)
    opening = draft_pb2.ProposeRequest(
        open=draft_pb2.ProposeOpen(prompt_ids=[1, 2, 3], vocab_size=512, num_draft_tokens=2, grammar=grammar)
    )
    with (
        grpc.insecure_channel(f"127.0.0.1:{stack.ports['verify']}") as verify,
        grpc.insecure_channel(f"127.0.0.1:{stack.ports['draft']}") as draft,
    ):
        calls = {
            "verify": lambda: list(verify_pb2_grpc.VerifyServiceStub(verify).Generate(generate, timeout=30)),
            "draft": lambda: list(draft_pb2_grpc.DraftServiceStub(draft).Propose(iter([opening]), timeout=30)),
        }
        for name, call in calls.items():
            answered = []
            for _ in range(5):
                started = time.perf_counter()
                with pytest.raises(grpc.RpcError) as refused:
                    call()
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, refused.value.details())
                answered.append(time.perf_counter() - started)
            assert answered[0] < 0.2 and sum(answered) >= 0.9, (name, answered)  # 4 a second after the first
