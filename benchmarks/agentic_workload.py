"""Agentic traffic against a running gateway (issue 30, suffix decoding): multi-turn conversations of four kinds,
tool calls with JSON arguments, SQL over one fixed schema, code edits that return whole functions and answers
quoting a context passage, each turn sent with speculation on and then off; prints tok/s per mode and kind.

    specdec up &        # a fresh server (its gateway on port 8000); wait for http://127.0.0.1:8000/health
    python benchmarks/agentic_workload.py [--url http://127.0.0.1:8000] [--api-key KEY] [--model ID] \\
        [--split tune|heldout] [--max-tokens 160] [--temperature 0] [--seed N] [--conversations N] \\
        [--modes on,off] [--off-url URL] [--concurrency C] [--out results.json]

The conversations are benchmarks/agentic/{tune,heldout}.jsonl, one per line ({"id", "kind", "system", "tools"?,
"turns"}), split by conversation: tune what learns from repeated output (e.g. a suffix tree) on `tune`, report
`heldout`. Requests run one at a time, in order; with `--concurrency C`, C conversations at once, turn by turn: the C
requests of one turn in one mode are sent together and waited for (a wave), then the same turn in the next mode, so
each stack sees C requests at a time and the two modes never share the machine. Each mode keeps its own history (system, the user turns
so far, that mode's own answers), so a turn is the same request in both modes only while their answers agreed.
An answer with tool_calls is followed in that mode's history by a canned, deterministic tool result per call
(CANNED_RESULTS), under a call id derived from the turn, so equal answers give equal histories.

Speculation on runs before off for every turn: a server that learns from what it served (suffix decoding)
must not have seen the identical speculation-off answer to the same turn when the speculation-on request
runs, or on would be measured on output it had just been shown (`--modes` is the order sent). For the same
reason the server should be fresh at the start of a measured run: restart it between runs, so that neither an
earlier run of the same turns nor a warm-up has been learnt from.

`--off-url` sends the speculation-off requests to a second stack started the same way. With one stack, the mode
sent second finds the first mode's identical prompt in the server's prompt cache (a target's cache keeps every
finished sequence), so it skips the prefill the first paid, every turn, and the first mode (on) is measured
with the prefill the second is spared. Two fresh stacks give each mode a prompt cache of its own history only.
`--seed` sends seed = base + the turn's index in the run (the same for each mode). Failed requests (a 4xx, a
timeout) are recorded and the run goes on; tok/s counts successful requests only. Prints the load average at the
start and the end: run on a quiet machine.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

DATA = Path(__file__).with_name("agentic")
TIMEOUT_S = 600


def _weather(args: dict) -> dict:
    unit = args.get("unit", "celsius")
    temperature = 64 if unit == "fahrenheit" else 18
    return {"city": args.get("city"), "unit": unit, "temperature": temperature, "conditions": "partly cloudy", "wind_kmh": 12}


def _flights(args: dict) -> dict:
    route = {"origin": args.get("origin"), "destination": args.get("destination"), "date": args.get("date")}
    flights = [
        {"flight": "SD 214", "departs": "08:05", "arrives": "10:40", "price": 129.0, "seats_left": 7},
        {"flight": "SD 388", "departs": "17:20", "arrives": "19:55", "price": 98.0, "seats_left": 2},
    ]
    return {**route, "passengers": args.get("passengers", 1), "flights": flights}


def _event(args: dict) -> dict:
    return {"event_id": "evt_0042", "title": args.get("title"), "start": args.get("start"), "end": args.get("end"), "status": "created"}


def _order(args: dict) -> dict:
    items = [{"name": "item", "quantity": 1}]
    return {"order_id": args.get("order_id"), "status": "shipped", "carrier": "DHL", "estimated_delivery": "2025-04-03", "items": items}


CANNED_RESULTS = {"get_weather": _weather, "search_flights": _flights, "create_calendar_event": _event, "lookup_order": _order}


def tool_result(name: str, arguments: str) -> str:
    """The canned result of one call, as JSON text: deterministic in the call's name and arguments."""
    try:
        parsed = json.loads(arguments)
    except (TypeError, ValueError):
        parsed = None
    args = parsed if isinstance(parsed, dict) else {}
    result = CANNED_RESULTS[name](args) if name in CANNED_RESULTS else {"error": f"unknown tool {name!r}"}
    return json.dumps(result)


def load_conversations(split: str, limit: int | None) -> list[dict]:
    lines = (DATA / f"{split}.jsonl").read_text().splitlines()
    conversations = [json.loads(line) for line in lines if line.strip()]
    return conversations[:limit] if limit else conversations


def served_model(client: httpx.Client, url: str) -> str:
    answer = client.get(f"{url}/v1/models")
    answer.raise_for_status()
    return answer.json()["data"][0]["id"]


def request_body(args: argparse.Namespace, conversation: dict, messages: list[dict], mode: str, index: int) -> dict:
    body = {
        "model": args.model,
        "messages": messages,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "speculative": {"enabled": mode == "on"},
    }
    if conversation.get("tools"):
        body["tools"] = conversation["tools"]
    if args.seed is not None:
        body["seed"] = args.seed + index
    return body


def error_text(answer: httpx.Response) -> str:
    try:
        return json.dumps(answer.json()["error"])
    except (ValueError, KeyError, TypeError):
        return answer.text[:500]


def send(client: httpx.Client, url: str, body: dict) -> dict:
    """One request: its status, wall seconds and what came back (an error is recorded, not raised)."""
    started = time.perf_counter()
    try:
        answer = client.post(f"{url}/v1/chat/completions", json=body)
    except httpx.HTTPError as error:
        return {"status": None, "seconds": time.perf_counter() - started, "error": f"{type(error).__name__}: {error}"}
    seconds = time.perf_counter() - started
    if answer.status_code != 200:
        return {"status": answer.status_code, "seconds": seconds, "error": error_text(answer)}
    try:
        payload = answer.json()
        choice = payload["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return {"status": answer.status_code, "seconds": seconds, "error": f"unreadable answer: {answer.text[:500]}"}
    usage = payload.get("usage") or {}
    return {
        "status": 200,
        "seconds": seconds,
        "completion_tokens": usage.get("completion_tokens", 0),
        "prompt_tokens": usage.get("prompt_tokens"),
        "finish_reason": choice.get("finish_reason"),
        "text": choice["message"].get("content"),
        "tool_calls": choice["message"].get("tool_calls"),
        "speculative": payload.get("speculative"),
    }


def extend_history(messages: list[dict], record: dict, index: int) -> None:
    """The answer (and a canned result per tool call) appended to this mode's history; nothing after a failure."""
    if "error" in record:
        return
    calls = [
        {"id": f"call_{index}_{number}", "type": "function", "function": dict(call["function"])}
        for number, call in enumerate(record["tool_calls"] or [])
    ]
    assistant = {"role": "assistant", "content": record["text"]}
    if calls:
        assistant["tool_calls"] = calls
    messages.append(assistant)
    for call in calls:
        content = tool_result(call["function"]["name"], call["function"]["arguments"])
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})


def prompt_digest(messages: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:16]


def send_turn(
    client: httpx.Client, args: argparse.Namespace, conversation: dict, messages: list[dict], turn: int, mode: str, index: int
) -> dict:
    """One turn of one conversation in one mode, appended to that mode's history (`messages`)."""
    messages.append({"role": "user", "content": conversation["turns"][turn]})
    record = send(client, args.urls[mode], request_body(args, conversation, messages, mode, index))
    record.update(conversation=conversation["id"], kind=conversation["kind"], turn=turn, index=index, mode=mode)
    record["prompt_digest"] = prompt_digest(messages)
    extend_history(messages, record, index)
    shown = record.get("error") or f"{record['completion_tokens']} tokens"
    print(f"  {conversation['id']} turn {turn} {mode}: {record['seconds']:.2f} s, {shown}", flush=True)
    return record


def run_group(
    pool: ThreadPoolExecutor, client: httpx.Client, args: argparse.Namespace, group: list[tuple[dict, int]]
) -> tuple[list[dict], list[dict]]:
    """Conversations at once, turn by turn: a mode's requests for one turn sent together (a wave), waited for, then
    the next mode's. Each conversation keeps a history per mode. Returns the records and the waves' wall times."""
    histories = [{mode: [{"role": "system", "content": conversation["system"]}] for mode in args.modes} for conversation, _ in group]
    records, waves = [], []
    for turn in range(max(len(conversation["turns"]) for conversation, _ in group)):
        live = [number for number, (conversation, _) in enumerate(group) if turn < len(conversation["turns"])]
        for mode in args.modes:
            started = time.perf_counter()
            futures = [pool.submit(send_turn, client, args, group[n][0], histories[n][mode], turn, mode, group[n][1] + turn) for n in live]
            records += [future.result() for future in futures]
            waves.append({"mode": mode, "requests": len(live), "seconds": round(time.perf_counter() - started, 3)})
    return records, waves


def throughput(records: list[dict]) -> dict:
    done = [record for record in records if "error" not in record]
    tokens = sum(record["completion_tokens"] for record in done)
    seconds = sum(record["seconds"] for record in done)
    rate = tokens / seconds if seconds else 0.0
    return {
        "requests": len(records),
        "errors": len(records) - len(done),
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tok_s": round(rate, 2),
    }


def call_signature(calls: list[dict] | None) -> list:
    """The calls without their ids (random per response): name and arguments in order."""
    return [(call["function"]["name"], call["function"]["arguments"]) for call in calls or []]


def agreement(records: list[dict], on: str, off: str) -> dict:
    """Turns answered in both modes: how many had the same prompt, the same text, the same tool calls."""
    pairs = defaultdict(dict)
    for record in records:
        if "error" not in record:
            pairs[(record["conversation"], record["turn"])][record["mode"]] = record
    counts = dict.fromkeys(["compared", "same_prompt", "identical_text", "identical_tool_calls", "identical"], 0)
    counts["identical_given_same_prompt"] = 0
    for pair in pairs.values():
        if on not in pair or off not in pair:
            continue
        same_prompt = pair[on]["prompt_digest"] == pair[off]["prompt_digest"]
        same_text = pair[on]["text"] == pair[off]["text"]
        same_calls = call_signature(pair[on]["tool_calls"]) == call_signature(pair[off]["tool_calls"])
        counts["compared"] += 1
        counts["same_prompt"] += same_prompt
        counts["identical_text"] += same_text
        counts["identical_tool_calls"] += same_calls
        counts["identical"] += same_text and same_calls
        counts["identical_given_same_prompt"] += same_prompt and same_text and same_calls
    return counts


def ratio(numerator: dict, denominator: dict, rate: str = "tok_s") -> float | None:
    return round(numerator[rate] / denominator[rate], 3) if numerator[rate] and denominator[rate] else None


def summarize(records: list[dict], waves: list[dict], modes: list[str]) -> dict:
    kinds = sorted({record["kind"] for record in records})
    by_mode = {mode: throughput([r for r in records if r["mode"] == mode]) for mode in modes}
    for mode, row in by_mode.items():
        # Throughput: the mode's tokens over its waves' wall time (at concurrency 1, the requests' own seconds).
        row["wall_seconds"] = round(sum(wave["seconds"] for wave in waves if wave["mode"] == mode), 3)
        row["wall_tok_s"] = round(row["tokens"] / row["wall_seconds"], 2) if row["wall_seconds"] else 0.0
    by_kind = {
        kind: {mode: throughput([r for r in records if r["mode"] == mode and r["kind"] == kind]) for mode in modes} for kind in kinds
    }
    summary = {"modes": by_mode, "kinds": by_kind}
    if "on" in modes and "off" in modes:
        summary["on_off_ratio"] = ratio(by_mode["on"], by_mode["off"], "wall_tok_s")
        summary["on_off_ratio_by_kind"] = {kind: ratio(by_kind[kind]["on"], by_kind[kind]["off"]) for kind in kinds}
        summary["agreement"] = agreement(records, "on", "off")
    return summary


def print_summary(summary: dict, load_start: tuple, load_end: tuple) -> None:
    print()
    for mode, row in summary["modes"].items():
        counts = f"{row['tokens']} tokens in {row['wall_seconds']:.1f} s, {row['requests']} requests, {row['errors']} errors"
        print(f"speculation {mode}: {row['wall_tok_s']:.1f} tok/s, {row['tok_s']:.1f} per request ({counts})")
    for kind, rows in summary["kinds"].items():
        rates = ", ".join(f"{mode} {row['tok_s']:.1f}" for mode, row in rows.items())
        shown = summary.get("on_off_ratio_by_kind", {}).get(kind)
        print(f"  {kind:<11} tok/s per request {rates}" + (f", on/off {shown}" if shown is not None else ""))
    if "agreement" in summary:
        print(f"on/off ratio: {summary['on_off_ratio']}")
        same = summary["agreement"]
        print(
            f"of {same['compared']} turns answered in both modes: {same['identical_text']} identical text, "
            f"{same['identical_tool_calls']} identical tool_calls, {same['identical']} both; "
            f"{same['same_prompt']} had the same prompt, {same['identical_given_same_prompt']} of them identical"
        )
    start, end = (" ".join(f"{value:.2f}" for value in load) for load in (load_start, load_end))
    print(f"load average (1, 5, 15 min): start {start}, end {end}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--api-key", help="sent as Authorization: Bearer")
    parser.add_argument("--model", help="default: the first id of /v1/models")
    parser.add_argument("--split", choices=["tune", "heldout"], default="heldout")
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, help="base seed: a request's seed is base + its turn's index (sent only when given)")
    parser.add_argument("--conversations", type=int, help="only the first N conversations (default all)")
    parser.add_argument("--modes", default="on,off", help="speculation modes, sent in this order per turn")
    parser.add_argument("--off-url", help="speculation off on this stack instead (same settings, its own prompt cache)")
    parser.add_argument("--concurrency", type=int, default=1, help="conversations at once, each turn's requests of a mode sent together")
    parser.add_argument("--out", type=Path, help="raw records and the summary as JSON")
    args = parser.parse_args()
    args.url = args.url.rstrip("/")
    args.urls = {"on": args.url, "off": (args.off_url or args.url).rstrip("/")}
    args.modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if not args.modes or set(args.modes) - {"on", "off"} or len(set(args.modes)) != len(args.modes):
        parser.error("--modes takes on and/or off, comma-separated, each once")
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    conversations = load_conversations(args.split, args.conversations)
    load_start = os.getloadavg()
    records: list[dict] = []
    waves: list[dict] = []
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    with httpx.Client(headers=headers, timeout=TIMEOUT_S, limits=limits) as client, ThreadPoolExecutor(args.concurrency) as pool:
        args.model = args.model or served_model(client, args.url)
        shown = f"{len(conversations)} conversations, {args.concurrency} at once, model {args.model}, modes {','.join(args.modes)}"
        print(f"{args.split}: {shown}")
        first_indices = itertools.accumulate((len(c["turns"]) for c in conversations), initial=0)
        numbered = list(zip(conversations, first_indices, strict=False))  # a turn's index (its seed) as at concurrency 1
        for start in range(0, len(numbered), args.concurrency):
            group_records, group_waves = run_group(pool, client, args, numbered[start : start + args.concurrency])
            records += group_records
            waves += group_waves
    load_end = os.getloadavg()
    summary = summarize(records, waves, args.modes)
    print_summary(summary, load_start, load_end)
    if args.out:
        settings = {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items() if key != "api_key"}
        report = {"settings": settings, "load_start": load_start, "load_end": load_end, "summary": summary}
        report |= {"records": records, "waves": waves}
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
