"""`specdec bench` against the real stack (tiny random pair), and its helpers. Speeds are printed, never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.cli.bench import (
    DEFAULT_PROMPTS,
    BenchOptions,
    Record,
    ab_schedule,
    compare,
    distribution,
    load_prompts,
    make_record,
    parse_int_list,
    percentile,
    plot_speedup,
    render_markdown,
    round_robin,
    run_bench,
    summarize,
)
from specdec.errors import SpecdecError

SMALL = {"limit": 4, "concurrency": [1, 2], "max_tokens": 16}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def bench_run(gateway_url, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    results = run_bench(BenchOptions(url=gateway_url, out=out, command="pytest", **SMALL))
    print(render_markdown(results))
    return results, out


def test_results_have_both_modes_at_every_concurrency(bench_run):
    results, out = bench_run
    assert json.loads((out / "results.json").read_text()) == results
    assert results["model"] == "target" and results["command"] == "pytest" and results["timestamp"]
    assert [level["concurrency"] for level in results["levels"]] == [1, 2]
    for level in results["levels"]:
        assert set(level["modes"]) == {"on", "off"}
        assert all(level["modes"][mode]["requests"] == 4 for mode in ("on", "off"))
        assert level["speedup"] > 0 and level["latency_ratio_p50"] > 0


def test_speculative_stats_are_zero_off_and_positive_on(bench_run):
    for level in bench_run[0]["levels"]:
        off, on = level["modes"]["off"], level["modes"]["on"]
        assert (off["rounds"], off["draft_tokens"], off["accepted_tokens"]) == (0, 0, 0)
        assert off["acceptance_rate"] is None and off["mean_accepted_length"] is None
        assert on["rounds"] > 0 and on["draft_tokens"] > 0 and on["accepted_tokens"] > 0
        assert on["acceptance_rate"] == on["accepted_tokens"] / on["draft_tokens"]
        assert on["mean_accepted_length"] == 1 + on["accepted_tokens"] / on["rounds"]
        assert all(r["rounds"] > 0 for r in level["requests"] if r["mode"] == "on")
        assert on["drafted_requests"] == on["requests"] and level["drafted_share"] == 1.0 and level["drafted_mean_acceptance"] > 0


def test_token_counts_are_the_sums_of_usage(bench_run):
    for level in bench_run[0]["levels"]:
        for mode, summary in level["modes"].items():
            requests = [r for r in level["requests"] if r["mode"] == mode]
            assert summary["completion_tokens"] == sum(r["tokens"] for r in requests)
            assert all(0 < r["tokens"] <= 16 and r["chunks"] >= 1 for r in requests)
            assert summary["itl_ms"]["p50"] is not None and summary["ttft_ms"]["p99"] >= summary["ttft_ms"]["p50"]
        # Greedy speculation is lossless: each prompt gets as many tokens with it as without.
        tokens = {(r["prompt"], r["mode"]): r["tokens"] for r in level["requests"]}
        assert all(tokens[(prompt, "on")] == tokens[(prompt, "off")] for prompt, _ in tokens)


def test_every_selected_category_has_an_entry(bench_run):
    categories = {p.category for p in load_prompts(DEFAULT_PROMPTS, None, 4)}
    assert len(categories) == 4  # round-robin: four prompts, four categories
    for level in bench_run[0]["levels"]:
        assert set(level["categories"]) == categories
        for entry in level["categories"].values():
            assert entry["prompts"] == 1 and entry["speedup"] > 0 and entry["acceptance_rate"] is not None


def test_markdown_and_plot_are_written(bench_run):
    results, out = bench_run
    markdown = (out / "results.md").read_text()
    assert markdown == render_markdown(results)
    assert "| concurrency | tok/s on | tok/s off | speedup |" in markdown and "| concurrency | category |" in markdown
    assert (out / "speedup.png").read_bytes().startswith(PNG_SIGNATURE)


def test_a_missing_matplotlib_is_one_line(bench_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(SpecdecError, match="needs matplotlib"):
        plot_speedup(bench_run[0], tmp_path / "speedup.png")


def test_the_cli_prints_the_summary_and_skips_the_plot(gateway_url, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SPECDEC_", "OPENAI_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "specdec.cli",
            "bench",
            "--url",
            gateway_url,
            "--limit",
            "2",
            "--concurrency",
            "1,2",
            "--max-tokens",
            "8",
            "--out",
            str(tmp_path),
            "--no-plot",
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert "| speedup |" in done.stdout and f"results: {tmp_path}" in done.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["command"].startswith("specdec bench --url=") and "--concurrency=1,2" in results["command"]
    assert [level["concurrency"] for level in results["levels"]] == [1, 2] and not (tmp_path / "speedup.png").exists()


def test_prompts_over_the_context_are_skipped_in_both_modes(gateway_url, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        json.dumps({"prompt": "Hello there", "category": "short"})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "word " * 2000}], "category": "long"})
        + "\n"
    )
    results = run_bench(BenchOptions(url=gateway_url, prompts=prompts, concurrency=[1], max_tokens=4, out=tmp_path, plot=False))
    assert results["prompts"] == 1 and [s["category"] for s in results["skipped"]] == ["long"]
    assert "context" in results["skipped"][0]["reason"]
    assert set(results["levels"][0]["categories"]) == {"short"} and len(results["levels"][0]["requests"]) == 2


def test_gateway_errors_are_one_line(gateway_url, tmp_path):
    with pytest.raises(SpecdecError, match="cannot reach the gateway at http://127.0.0.1:9"):
        run_bench(BenchOptions(url="http://127.0.0.1:9", limit=1, out=tmp_path))
    with pytest.raises(SpecdecError, match="HTTP 404"):
        run_bench(BenchOptions(url=gateway_url, model="no-such-model", limit=1, concurrency=[1], out=tmp_path))


def test_percentile_interpolates_like_numpy():
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == 2.5 and percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile(values, 90) == pytest.approx(3.7) and percentile([7.0], 99) == 7.0 and percentile([], 50) is None
    assert distribution([0.001, 0.002], scale=1e3) == {"p50": 1.5, "p90": pytest.approx(1.9), "p99": pytest.approx(1.99)}
    assert distribution([]) == {"p50": None, "p90": None, "p99": None}


def _record(prompt: int, mode: str, e2e: float, tokens: int = 10, rounds: int = 0, drafted: int = 0, accepted: int = 0) -> Record:
    return Record(prompt, "c", mode, 0.1, e2e, tokens, 5, rounds, drafted, accepted, False, [0.01])


def test_summary_and_comparison():
    records = [
        _record(0, "on", 1.0, rounds=4, drafted=20, accepted=6),
        _record(0, "off", 2.0),
        _record(1, "on", 1.0, rounds=2, drafted=10, accepted=4),
        _record(1, "off", 4.0),
    ]
    on = summarize(records[::2], wall_s=2.0)
    assert on["completion_tokens"] == 20 and on["tokens_per_s"] == 10.0 and on["acceptance_rate"] == pytest.approx(10 / 30)
    assert on["mean_accepted_length"] == pytest.approx(1 + 10 / 6) and on["e2e_s"]["p50"] == 1.0
    report = compare(records, {"on": 2.0, "off": 5.0})
    assert report["speedup"] == pytest.approx(10.0 / 4.0) and report["latency_ratio_p50"] == pytest.approx(3.0)
    assert report["drafted_share"] == 1.0 and report["drafted_mean_acceptance"] == pytest.approx((6 / 20 + 4 / 10) / 2)


def test_on_requests_that_did_not_draft_are_reported_beside_the_speedup():
    records = [
        _record(0, "on", 1.0, rounds=4, drafted=20, accepted=5),
        _record(0, "off", 2.0),
        _record(1, "on", 1.0),
        _record(1, "off", 2.0),
    ]  # the policy kept prompt 1 from drafting
    report = compare(records, {"on": 2.0, "off": 4.0})
    assert report["drafted_share"] == 0.5 and report["drafted_mean_acceptance"] == 0.25
    level = {"concurrency": 1, **report, "categories": {"c": {"prompts": 2, **report}}, "requests": []}
    results = {
        "model": "m",
        "url": "u",
        "prompts": 2,
        "skipped": [],
        "timestamp": "t",
        "settings": {"max_tokens": 8, "temperature": 0},
        "levels": [level],
    }
    markdown = render_markdown(results)
    assert "| speedup | on requests that drafted | their mean acceptance |" in markdown
    assert "| 2.00 | 1/2 | 0.250 |" in markdown  # overall, next to the speedup
    assert markdown.count("| 1/2 | 0.250 |") == 2  # and per category


def test_make_record_spreads_chunk_gaps_over_tokens_per_chunk():
    final = {"usage": {"completion_tokens": 6}, "speculative": {"rounds": 3, "draft_tokens": 9, "accepted_tokens": 3}}
    record = make_record(0, load_prompts(DEFAULT_PROMPTS, None, 1)[0], "on", (10.0, [10.5, 10.7, 11.1], 11.2, final))
    assert record.ttft_s == pytest.approx(0.5) and record.e2e_s == pytest.approx(1.2) and record.chunks == 3
    assert record.itl_s == pytest.approx([0.1, 0.2])  # 2 tokens per chunk
    with pytest.raises(SpecdecError, match="no usage"):
        make_record(0, load_prompts(DEFAULT_PROMPTS, None, 1)[0], "on", (0.0, [], 1.0, {}))


def test_ab_schedule_alternates_which_mode_goes_first():
    assert ab_schedule(3, 1) == [("on", [0]), ("off", [0]), ("off", [1]), ("on", [1]), ("on", [2]), ("off", [2])]
    assert ab_schedule(5, 2) == [("on", [0, 1]), ("off", [0, 1]), ("off", [2, 3]), ("on", [2, 3]), ("on", [4]), ("off", [4])]
    assert ab_schedule(0, 4) == []


def test_prompt_files_and_selection(tmp_path):
    path = tmp_path / "p.jsonl"
    lines = [
        {"category": "a", "turns": ["first", "second"]},
        {"category": "a", "prompt": "x"},
        {"category": "b", "messages": [{"role": "user", "content": "y"}]},
        {"prompt": "no category"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    prompts = load_prompts(path, None, 10)
    selected = [(p.category, p.messages[-1]["content"]) for p in prompts]
    assert selected == [("a", "first"), ("b", "y"), ("default", "no category"), ("a", "x")]
    assert [p.messages[0]["content"] for p in load_prompts(path, ["a"], 1)] == ["first"]
    with pytest.raises(SpecdecError, match="--categories: c not in"):
        load_prompts(path, ["c"], 1)
    path.write_text('{"category": "a"}\n')
    with pytest.raises(SpecdecError, match="line 1"):
        load_prompts(path, None, 1)
    with pytest.raises(SpecdecError, match="cannot read"):
        load_prompts(tmp_path / "missing.jsonl", None, 1)
    assert round_robin([]) == []


def test_default_prompt_set_covers_every_spec_bench_category():
    prompts = load_prompts(DEFAULT_PROMPTS, None, 80)
    assert len(prompts) == 80 and len({p.category for p in prompts}) == 13
    assert Path(DEFAULT_PROMPTS).name == "question.jsonl"


def test_parse_int_list():
    assert parse_int_list("1,4", "--concurrency") == [1, 4] and parse_int_list(" 2 ", "--x") == [2]
    for bad in ("", "0", "1,x", "-1"):
        with pytest.raises(SpecdecError, match="--concurrency"):
            parse_int_list(bad, "--concurrency")


def test_hf_baseline_times_target_only_and_assisted_generation(gateway_url, tiny_pair_paths, tmp_path):
    options = BenchOptions(
        url=gateway_url,
        limit=3,
        concurrency=[1],
        max_tokens=12,
        out=tmp_path,
        plot=False,
        baseline="hf",
        target=str(tiny_pair_paths.target),
        draft=str(tiny_pair_paths.draft),
    )
    results = run_bench(options)
    hf = results["baselines"]["hf"]
    assert hf["target"] == str(tiny_pair_paths.target) and hf["prompts"] == 3
    assert all(rate > 0 for rate in hf["tokens_per_s"].values()) and hf["speedup"] > 0
    assert set(hf["categories"]) == set(results["levels"][0]["categories"])
    assert "HF assisted speedup" in (tmp_path / "results.md").read_text()
