"""Predicted outputs on edit tasks: tokens/s with and without `prediction`, through the real stack.

    SPECDEC_MODELS_DIR=/work/main/models python benchmarks/predicted_outputs.py [--repeats 2]
        [--max-tokens 600] [--prediction-draft-tokens 64] [--out FILE]

Starts `specdec up` (no model arguments: the default SmolLM2 pair) on free ports, then for each edit
task (a system message asking for the complete edited file, the file in a fenced block, a one-line
instruction; the reply stops at the closing fence) sends the same greedy chat request through the
gateway with the official `openai` client, without and with `prediction` = the original file,
interleaving the two arms. Reports tokens/s of each (completion tokens / wall time), the speedup, whether the two
texts are identical (they must be: the target decides every token), the accepted / rejected
prediction tokens from usage, how close the reply is to the prediction, and the machine's load
average before each request (the host may be shared: compare ratios, repeat runs).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml
from openai import OpenAI
from service_processes import free_port

PYTHON_FILE = """import json
from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 0
    tags: list[str] = field(default_factory=list)

    def total(self) -> float:
        return self.price * self.quantity


class Inventory:
    def __init__(self) -> None:
        self.items: dict[str, Item] = {}

    def add(self, item: Item) -> None:
        if item.name in self.items:
            self.items[item.name].quantity += item.quantity
        else:
            self.items[item.name] = item

    def remove(self, name: str, quantity: int) -> None:
        item = self.items[name]
        if quantity > item.quantity:
            raise ValueError(f"only {item.quantity} of {name} left")
        item.quantity -= quantity
        if item.quantity == 0:
            del self.items[name]

    def value(self) -> float:
        return sum(item.total() for item in self.items.values())

    def tagged(self, tag: str) -> list[Item]:
        return [item for item in self.items.values() if tag in item.tags]

    def save(self, path: str) -> None:
        with open(path, "w") as file:
            json.dump({name: vars(item) for name, item in self.items.items()}, file, indent=2)

    @classmethod
    def load(cls, path: str) -> "Inventory":
        inventory = cls()
        with open(path) as file:
            for data in json.load(file).values():
                inventory.add(Item(**data))
        return inventory
"""

CONFIG_FILE = """server:
  host: 0.0.0.0
  port: 8080
  workers: 4
  timeout_seconds: 30
database:
  url: postgres://db.internal:5432/shop
  pool_size: 10
  max_overflow: 5
  echo: false
cache:
  backend: redis
  url: redis://cache.internal:6379/0
  ttl_seconds: 300
logging:
  level: info
  format: json
  file: /var/log/shop/app.log
features:
  new_checkout: true
  recommendations: false
  gift_cards: true
"""

PROSE_FILE = """The river runs through the middle of the town, and every morning the market opens on its banks.
Farmers bring apples, pears and plums from the orchards on the hills.
Fishermen sell what they caught before dawn, and the baker sets out bread that is still warm.
Children run between the stalls while their parents talk about the weather, the prices and the news from the city.
At noon the bells of the old church ring, and the traders cover their goods with cloth to keep off the sun.
In the afternoon the crowd thins out, and by evening only the sound of the water is left.
"""

SYSTEM = "You are a code editor. Reply with the complete edited file and nothing else."

# (name, fence language, file, one-line instruction). The file comes first, the instruction after it:
# SmolLM2-135M-Instruct re-emits a fenced file asked this way, and talks about it when the
# instruction comes first. The reply is cut at the closing fence (stop), as an editor client would.
TASKS = [
    ("yaml: change one value", "yaml", CONFIG_FILE, "Change the cache ttl_seconds from 300 to 600."),
    ("prose: fix one word", "markdown", PROSE_FILE, "Replace the word 'plums' with 'cherries'."),
    ("python: rename a method", "python", PYTHON_FILE, "Rename the method `tagged` to `with_tag`."),
]
STOP = ["\n```"]


def edit_messages(language: str, text: str, instruction: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"```{language}\n{text}```\n\n{instruction}"}]


def start_stack(workdir: str, prediction_draft_tokens: int | None) -> tuple[subprocess.Popen, str]:
    """`specdec up` with no model arguments, on free ports; returns the process and the gateway URL."""
    ports = {
        flag: free_port() for flag in ("--gateway-port", "--draft-port", "--verify-port", "--draft-metrics-port", "--verify-metrics-port")
    }
    command = [sys.executable, "-m", "specdec.cli", "up", *[part for flag, port in ports.items() for part in (flag, str(port))]]
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    if prediction_draft_tokens is not None:
        env["SPECDEC_SPECULATIVE__PREDICTION_DRAFT_TOKENS"] = str(prediction_draft_tokens)
    log = open(os.path.join(workdir, "up.log"), "wb")  # noqa: SIM115 -- lives as long as the stack
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{ports['--gateway-port']}"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"specdec up exited ({process.returncode}); see {log.name}")
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit("specdec up did not become ready within 15 minutes")


def stop_stack(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def timed(client: OpenAI, model: str, task: tuple[str, str, str, str], max_tokens: int, prediction: bool) -> dict:
    _, language, text, instruction = task
    fields = {"prediction": {"type": "content", "content": text}} if prediction else {}
    load = os.getloadavg()[0]
    started = time.perf_counter()
    response = client.chat.completions.create(
        model=model, messages=edit_messages(language, text, instruction), max_tokens=max_tokens, temperature=0, stop=STOP, **fields
    )
    seconds = time.perf_counter() - started
    usage = response.usage
    details = usage.completion_tokens_details
    return {
        "text": response.choices[0].message.content,
        "completion_tokens": usage.completion_tokens,
        "seconds": seconds,
        "tokens_per_s": usage.completion_tokens / seconds,
        "finish_reason": response.choices[0].finish_reason,
        "accepted_prediction_tokens": details.accepted_prediction_tokens if details else 0,
        "rejected_prediction_tokens": details.rejected_prediction_tokens if details else 0,
        "rounds": response.model_extra["speculative"]["rounds"],
        "load_average_1m": round(load, 2),
    }


def run_task(client: OpenAI, model: str, task: tuple[str, str, str, str], repeats: int, max_tokens: int) -> dict:
    """Both arms `repeats` times, interleaved (off/on, then on/off, ...) so that load drifts hit both alike."""
    runs = {False: [], True: []}
    for repeat in range(repeats):
        for prediction in (False, True) if repeat % 2 == 0 else (True, False):
            runs[prediction].append(timed(client, model, task, max_tokens, prediction))
    without, with_ = runs[False], runs[True]
    off_rate = statistics.median(run["tokens_per_s"] for run in without)
    on_rate = statistics.median(run["tokens_per_s"] for run in with_)
    output, original = without[0]["text"], task[2]
    body = output.split("\n", 1)[1] if output.startswith("```") else output  # the reply without its opening fence
    return {
        "task": task[0],
        "completion_tokens": without[0]["completion_tokens"],
        "finish_reason": without[0]["finish_reason"],
        "tokens_per_s_without": round(off_rate, 2),
        "tokens_per_s_with": round(on_rate, 2),
        "speedup": round(on_rate / off_rate, 2),
        "identical_text": len({run["text"] for run in without + with_}) == 1,
        "similarity_to_prediction": round(difflib.SequenceMatcher(None, body.strip(), original.strip()).ratio(), 3),
        "accepted_prediction_tokens": with_[0]["accepted_prediction_tokens"],
        "rejected_prediction_tokens": with_[0]["rejected_prediction_tokens"],
        "rounds_without": without[0]["rounds"],
        "rounds_with": with_[0]["rounds"],
        "seconds_without": [round(run["seconds"], 2) for run in without],
        "seconds_with": [round(run["seconds"], 2) for run in with_],
        "load_average_1m_without": [run["load_average_1m"] for run in without],
        "load_average_1m_with": [run["load_average_1m"] for run in with_],
        "output": output,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="requests per task and side (medians are reported)")
    parser.add_argument(
        "--max-tokens", type=int, default=600, help="room to finish the longest file (~400 tokens); the reply ends at its closing fence"
    )
    parser.add_argument("--prediction-draft-tokens", type=int, help="speculative.prediction_draft_tokens (default: the config's)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="predicted-outputs-")
    load_before = os.getloadavg()
    process, url = start_stack(workdir, args.prediction_draft_tokens)
    try:
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=1800)
        model = client.models.list().data[0].id
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "warm up"}], max_tokens=8)
        results = [run_task(client, model, task, args.repeats, args.max_tokens) for task in TASKS]
    finally:
        stop_stack(process)
    total_without = sum(r["completion_tokens"] / r["tokens_per_s_without"] for r in results)
    total_with = sum(r["completion_tokens"] / r["tokens_per_s_with"] for r in results)
    report = {
        "model": model,
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "prediction_draft_tokens": args.prediction_draft_tokens,
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "tasks": results,
        "overall_speedup": round(total_without / total_with, 2),
        "all_identical": all(r["identical_text"] for r in results),
    }
    print(yaml.safe_dump({k: v for k, v in report.items() if k != "tasks"}, sort_keys=False))
    for result in results:
        print(yaml.safe_dump({k: v for k, v in result.items() if k != "output"}, sort_keys=False))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
