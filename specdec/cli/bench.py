"""`specdec bench`: measured speedup, speculation on versus off, against a running gateway.

Every prompt runs once in each mode through streamed chat completions. Prompts go in blocks of
`concurrency`; each block runs in one mode, then the other, and the mode that goes first alternates
block by block, so slow drift (warm caches, clocks, other load) hits both modes alike while each
mode's wall time stays its own.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import httpx

from specdec.cli.bench_report import plot_speedup, render_markdown
from specdec.errors import SpecdecError

# The Spec-Bench prompt set next to the checkout (../shared from the repository root).
# A copy of the Spec-Bench questions (Apache-2.0, see benchmarks/spec-bench/SOURCE.md): a test set, never trained on.
DEFAULT_PROMPTS = Path(__file__).resolve().parents[2] / "benchmarks" / "spec-bench" / "question.jsonl"
MODES = ("on", "off")
PERCENTILES = (50, 90, 99)


@dataclass
class BenchOptions:
    url: str = "http://localhost:8000"
    api_key: str | None = None
    model: str | None = None
    prompts: Path = DEFAULT_PROMPTS
    limit: int = 80
    categories: list[str] | None = None
    concurrency: list[int] = field(default_factory=lambda: [1, 4])
    max_tokens: int = 128
    temperature: float = 0.0
    seed: int = 0
    num_draft_tokens: int | None = None
    acceptance: str | None = None  # "rejection" or "coupled" for the on requests (None: the server's)
    speculation_policy: str | None = None  # "always": the on requests draft whatever the load-aware policy says
    out: Path | None = None
    plot: bool = True
    command: str = ""
    baseline: str | None = None  # "hf": also Hugging Face generate(), target alone and assisted, in-process
    target: str | None = None  # the pair the baseline loads (default: the default pair)
    draft: str | None = None


@dataclass
class Prompt:
    id: int | str
    category: str
    messages: list[dict]


@dataclass
class Record:
    """One streamed request. ITLs are per token, estimated per chunk (see `make_record`)."""

    prompt: int
    category: str
    mode: str
    ttft_s: float
    e2e_s: float
    tokens: int
    chunks: int
    rounds: int
    draft_tokens: int
    accepted_tokens: int
    fallback: bool
    itl_s: list[float] = field(repr=False)


class PromptRefused(SpecdecError):
    """The gateway refused this prompt alone (longer than the model's context): skip, not stop."""


def parse_int_list(text: str, flag: str) -> list[int]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise SpecdecError(f"{flag}: expected positive integers separated by commas, like 1,4; got {text!r}")
    return [int(part) for part in parts]


def load_prompts(path: Path, categories: list[str] | None, limit: int) -> list[Prompt]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise SpecdecError(f"--prompts: cannot read {path}: {error.strerror or error}") from None
    prompts = [_to_prompt(line, number) for number, line in enumerate(lines, 1) if line.strip()]
    if categories:
        unknown = sorted(set(categories) - {p.category for p in prompts})
        if unknown:
            known = ", ".join(dict.fromkeys(p.category for p in prompts))
            raise SpecdecError(f"--categories: {', '.join(unknown)} not in {path} (it has: {known})")
        prompts = [p for p in prompts if p.category in categories]
    return round_robin(prompts)[:limit]


def _to_prompt(line: str, number: int) -> Prompt:
    try:
        row = json.loads(line)
        if "turns" in row:  # Spec-Bench: multi-turn questions are measured on their first turn
            messages = [{"role": "user", "content": row["turns"][0]}]
        elif "prompt" in row:
            messages = [{"role": "user", "content": row["prompt"]}]
        else:
            messages = list(row["messages"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise SpecdecError(f"--prompts: line {number}: expected JSON with `turns`, `prompt` or `messages`") from None
    return Prompt(row.get("question_id", number), str(row.get("category", "default")), messages)


def round_robin(prompts: list[Prompt]) -> list[Prompt]:
    """One prompt of each category in turn, so any --limit covers every category (the file is sorted by category)."""
    return [prompt for turn in itertools.zip_longest(*_by_category(prompts).values()) for prompt in turn if prompt is not None]


def _by_category(items: list) -> dict[str, list]:
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(item.category, []).append(item)
    return groups


def ab_schedule(count: int, concurrency: int) -> list[tuple[str, list[int]]]:
    """Phases (mode, prompt indices): each block of `concurrency` prompts in both modes, first mode alternating."""
    phases = []
    for block, start in enumerate(range(0, count, concurrency)):
        indices = list(range(start, min(start + concurrency, count)))
        phases += [(mode, indices) for mode in (MODES if block % 2 == 0 else MODES[::-1])]
    return phases


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    return ordered[low] + (ordered[min(low + 1, len(ordered) - 1)] - ordered[low]) * (rank - low)


def distribution(values: list[float], scale: float = 1.0) -> dict[str, float | None]:
    return {f"p{q}": None if (v := percentile(values, q)) is None else v * scale for q in PERCENTILES}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def summarize(records: list[Record], wall_s: float) -> dict:
    tokens, rounds = sum(r.tokens for r in records), sum(r.rounds for r in records)
    drafting = [r for r in records if r.draft_tokens]
    drafted, accepted = sum(r.draft_tokens for r in records), sum(r.accepted_tokens for r in records)
    return {
        "requests": len(records),
        "completion_tokens": tokens,
        "wall_s": wall_s,
        "tokens_per_s": ratio(tokens, wall_s),
        "ttft_ms": distribution([r.ttft_s for r in records], 1e3),
        "itl_ms": distribution([gap for r in records for gap in r.itl_s], 1e3),
        "e2e_s": distribution([r.e2e_s for r in records]),
        "rounds": rounds,
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "acceptance_rate": ratio(accepted, drafted),
        "mean_accepted_length": None if not rounds else 1 + accepted / rounds,
        "fallbacks": sum(r.fallback for r in records),
        # Requests that drafted at all, and their own mean acceptance: a speedup measured while the
        # load-aware policy (or a fallback) kept drafting off is not a speculative one.
        "drafted_requests": len(drafting),
        "drafted_mean_acceptance": ratio(sum(r.accepted_tokens / r.draft_tokens for r in drafting), len(drafting)),
    }


def compare(records: list[Record], wall: dict[str, float]) -> dict:
    modes = {mode: summarize([r for r in records if r.mode == mode], wall[mode]) for mode in MODES}
    e2e = {(r.prompt, r.mode): r.e2e_s for r in records}
    # Per prompt off/on, so above 1 means faster with speculation, like the speedup.
    pairs = [e2e[(p, "off")] / e2e[(p, "on")] for p, mode in e2e if mode == "on" and (p, "off") in e2e]
    return {
        "modes": modes,
        "speedup": ratio(modes["on"]["tokens_per_s"], modes["off"]["tokens_per_s"]),
        "latency_ratio_p50": percentile(pairs, 50),
        "acceptance_rate": modes["on"]["acceptance_rate"],
        "mean_accepted_length": modes["on"]["mean_accepted_length"],
        "drafted_share": ratio(modes["on"]["drafted_requests"], modes["on"]["requests"]),
        "drafted_mean_acceptance": modes["on"]["drafted_mean_acceptance"],
    }


def by_category(records: list[Record]) -> dict[str, dict]:
    """Blocks mix categories, so a category has no wall time of its own: its tokens/s is tokens over summed latency."""
    report = {}
    for category, subset in _by_category(records).items():
        wall = {mode: sum(r.e2e_s for r in subset if r.mode == mode) for mode in MODES}
        report[category] = {"prompts": len({r.prompt for r in subset}), **compare(subset, wall)}
    return report


class Gateway:
    def __init__(self, url: str, api_key: str | None, connections: int) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(600, connect=10),
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )

    @contextlib.contextmanager
    def _reachable(self):
        try:
            yield
        except httpx.TransportError as error:
            what = "cannot reach the gateway" if isinstance(error, httpx.ConnectError) else f"{type(error).__name__} from the gateway"
            raise SpecdecError(f"{what} at {self.url}: {error}".rstrip(": ")) from None

    def first_model(self) -> str:
        with self._reachable():
            reply = self.http.get("/v1/models")
        if reply.status_code != 200:
            raise SpecdecError(f"GET {self.url}/v1/models: HTTP {reply.status_code}: {_message(reply.text)}")
        models = reply.json().get("data") or []
        if not models:
            raise SpecdecError(f"GET {self.url}/v1/models: the gateway lists no model")
        return models[0]["id"]

    def complete(self, body: dict) -> dict:
        """One chat completion, not streamed: the response body."""
        with self._reachable():
            reply = self.http.post("/v1/chat/completions", json=body)
        if reply.status_code != 200:
            raise SpecdecError(f"POST {self.url}/v1/chat/completions: HTTP {reply.status_code}: {_message(reply.text)}")
        return reply.json()

    def stream(self, body: dict) -> tuple[float, list[float], float, dict]:
        """(start, content-chunk arrival times, end, the last usage and speculative fields seen)."""
        arrivals, final = [], {}
        started = time.perf_counter()
        with self._reachable(), self.http.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                message = _message(response.read().decode(errors="replace"))
                message = f"POST {self.url}/v1/chat/completions: HTTP {response.status_code}: {message}"
                raise (PromptRefused if response.status_code == 400 and "context" in message else SpecdecError)(message)
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[len("data: ") :])
                if "error" in chunk:
                    raise SpecdecError(f"the gateway failed mid-stream: {_message(json.dumps(chunk))}")
                if any((choice.get("delta") or {}).get("content") for choice in chunk.get("choices") or []):
                    arrivals.append(time.perf_counter())
                final.update({key: chunk[key] for key in ("usage", "speculative") if chunk.get(key)})
        return started, arrivals, time.perf_counter(), final


def _message(text: str) -> str:
    try:
        return json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return text.strip()[:200] or "(empty body)"


def make_record(index: int, prompt: Prompt, mode: str, timing: tuple[float, list[float], float, dict]) -> Record:
    started, arrivals, ended, final = timing
    if "usage" not in final:
        raise SpecdecError("the gateway's stream carried no usage chunk (stream_options.include_usage ignored?)")
    tokens, spec = final["usage"]["completion_tokens"], final.get("speculative") or {}
    # A chunk carries a whole round's tokens and the stream does not say how many: spread each gap
    # over the mean tokens per chunk (exact with speculation off, where a chunk is one token).
    per_chunk = tokens / len(arrivals) if arrivals else 1.0
    return Record(
        index,
        prompt.category,
        mode,
        (arrivals[0] if arrivals else ended) - started,
        ended - started,
        tokens,
        len(arrivals),
        spec.get("rounds", 0),
        spec.get("draft_tokens", 0),
        spec.get("accepted_tokens", 0),
        bool(spec.get("fallback")),
        [(b - a) / per_chunk for a, b in itertools.pairwise(arrivals)],
    )


def request_body(options: BenchOptions, model: str, prompt: Prompt, mode: str) -> dict:
    draft_tokens = {"num_draft_tokens": options.num_draft_tokens} if options.num_draft_tokens else {}
    policy = {"policy": options.speculation_policy} if options.speculation_policy else {}
    acceptance = {"acceptance": options.acceptance} if options.acceptance else {}
    speculative = {"enabled": True, **draft_tokens, **acceptance, **policy} if mode == "on" else {"enabled": False}
    return {
        "model": model,
        "messages": prompt.messages,
        "max_tokens": options.max_tokens,
        "temperature": options.temperature,
        "seed": options.seed,
        "stream": True,
        "stream_options": {"include_usage": True},
        "speculative": speculative,
    }


def run_level(gateway: Gateway, body, prompts: list[Prompt], concurrency: int, refused: dict, bar) -> tuple[list[Record], dict]:
    """All prompts in both modes at one concurrency; `refused` (prompt index: reason) grows as prompts are refused."""

    def one(index: int, mode: str) -> Record | None:
        try:
            return make_record(index, prompts[index], mode, gateway.stream(body(prompts[index], mode)))
        except PromptRefused as error:
            refused[index] = str(error)
            return None
        finally:
            bar.update(1)

    records, wall = [], dict.fromkeys(MODES, 0.0)
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for mode, indices in ab_schedule(len(prompts), concurrency):
            wanted = [i for i in indices if i not in refused]
            started = time.perf_counter()
            records += pool.map(one, wanted, [mode] * len(wanted))
            wall[mode] += time.perf_counter() - started
    # A refusal is the same in both modes; dropping both sides keeps the pairs matched.
    return [r for r in records if r is not None and r.prompt not in refused], wall


def warm_up(gateway: Gateway, body, prompts: list[Prompt]) -> None:
    """One unmeasured request per mode: the very first pays for connections and lazily built server state."""
    for mode in MODES:
        with contextlib.suppress(PromptRefused):
            gateway.stream(body(prompts[0], mode))


def run_bench(options: BenchOptions) -> dict:
    """Run the benchmark, write results.json, results.md and (unless options.plot is off) speedup.png."""
    from tqdm import tqdm

    prompts, started = load_prompts(options.prompts, options.categories, options.limit), datetime.now(timezone.utc)
    if not prompts:
        raise SpecdecError(f"--prompts: no prompts selected from {options.prompts}")
    gateway, levels, refused = Gateway(options.url, options.api_key, max(options.concurrency)), [], {}
    # disable=None: a bar on a terminal only, whatever TQDM_DISABLE the CLI set for the model loaders.
    total = 2 * len(prompts) * (len(options.concurrency) + (options.baseline == "hf"))
    with gateway.http, tqdm(total=total, desc="bench", unit="req", disable=None) as bar:
        model = options.model or gateway.first_model()
        body = functools.partial(request_body, options, model)
        warm_up(gateway, body, prompts)
        for concurrency in options.concurrency:
            records, wall = run_level(gateway, body, prompts, concurrency, refused, bar)
            levels.append(
                {
                    "concurrency": concurrency,
                    **compare(records, wall),
                    "categories": by_category(records),
                    "requests": [{k: v for k, v in asdict(r).items() if k != "itl_s"} for r in records],
                }
            )
        baselines = {}
        if options.baseline == "hf":
            from specdec.cli.bench_hf import hf_baseline

            baselines["hf"] = hf_baseline(options, [p for i, p in enumerate(prompts) if i not in refused], bar)
    if len(refused) == len(prompts):
        raise SpecdecError(f"the gateway refused every prompt: {next(iter(refused.values()))}")
    hidden = ("api_key", "command", "out", "plot")  # never write the key
    settings = {key: str(value) if isinstance(value, Path) else value for key, value in asdict(options).items() if key not in hidden}
    results = {
        "command": options.command,
        "timestamp": started.isoformat(timespec="seconds"),
        "url": options.url,
        "model": model,
        "settings": settings,
        "prompts": len(prompts) - len(refused),
        "skipped": [{"id": prompts[i].id, "category": prompts[i].category, "reason": why} for i, why in sorted(refused.items())],
        "levels": levels,
        "baselines": baselines,
    }
    write_outputs(results, Path(options.out or f"bench-results/{started:%Y%m%d-%H%M%S}"), options.plot)
    return results


def write_outputs(results: dict, out: Path, plot: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results["out"] = str(out)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.md").write_text(render_markdown(results))
    if plot:
        plot_speedup(results, out / "speedup.png")
