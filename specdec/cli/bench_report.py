"""`specdec bench`'s report: results.md (tables per concurrency, mode and category) and speedup.png."""

from __future__ import annotations

from pathlib import Path

from specdec.cli.markdown import fmt as _fmt
from specdec.cli.markdown import table as _table
from specdec.errors import SpecdecError

DRAFTED_COLUMNS = ["on requests that drafted", "their mean acceptance"]


def _drafted(entry: dict) -> list[str]:
    on = entry["modes"]["on"]
    return [f"{on['drafted_requests']}/{on['requests']}", _fmt(entry["drafted_mean_acceptance"], 3)]


def render_markdown(results: dict) -> str:
    settings, levels = results["settings"], results["levels"]
    overall = [
        [
            level["concurrency"],
            _fmt(level["modes"]["on"]["tokens_per_s"], 1),
            _fmt(level["modes"]["off"]["tokens_per_s"], 1),
            _fmt(level["speedup"]),
            *_drafted(level),
            _fmt(level["latency_ratio_p50"]),
            _fmt(level["acceptance_rate"], 3),
            _fmt(level["mean_accepted_length"]),
        ]
        for level in levels
    ]
    latency = [
        [
            level["concurrency"],
            mode,
            *(" / ".join(_fmt(v, 2 if unit == "e2e_s" else 1) for v in summary[unit].values()) for unit in ("ttft_ms", "itl_ms", "e2e_s")),
        ]
        for level in levels
        for mode, summary in level["modes"].items()
    ]
    categories = [
        [
            level["concurrency"],
            name,
            entry["prompts"],
            _fmt(entry["acceptance_rate"], 3),
            _fmt(entry["mean_accepted_length"]),
            _fmt(entry["modes"]["on"]["tokens_per_s"], 1),
            _fmt(entry["modes"]["off"]["tokens_per_s"], 1),
            _fmt(entry["speedup"]),
            *_drafted(entry),
        ]
        for level in levels
        for name, entry in level["categories"].items()
    ]
    lines = [
        f"# specdec bench: {results['model']} at {results['url']}",
        "",
        (
            f"{results['prompts']} prompts, {len(results['skipped'])} skipped (refused by the gateway), "
            f"max_tokens {settings['max_tokens']}, temperature {settings['temperature']}, {results['timestamp']}"
        ),
        *_table(
            [
                "concurrency",
                "tok/s on",
                "tok/s off",
                "speedup",
                *DRAFTED_COLUMNS,
                "median latency off/on",
                "acceptance",
                "mean accepted length",
            ],
            overall,
        ),
        *_table(["concurrency", "mode", "TTFT p50/p90/p99 ms", "ITL p50/p90/p99 ms", "e2e p50/p90/p99 s"], latency),
        # Per category there is no wall time of its own (blocks mix categories): tokens over summed latency.
        *_table(
            [
                "concurrency",
                "category",
                "prompts",
                "acceptance",
                "mean accepted length",
                "tok/s per request on",
                "tok/s per request off",
                "speedup",
                *DRAFTED_COLUMNS,
            ],
            categories,
        ),
        *_render_baselines(results),
    ]
    return "\n".join(lines) + "\n"


def _render_baselines(results: dict) -> list[str]:
    if not (results.get("baselines") or {}).get("hf"):
        return []
    from specdec.cli.bench_hf import render_hf

    return render_hf(results)


def plot_speedup(results: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        raise SpecdecError(
            f"speedup.png needs matplotlib (pip install 'specdec[bench]') or --no-plot; the numbers are in {path.parent}"
        ) from None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    levels = results["levels"]
    groups = ["overall", *dict.fromkeys(c for level in levels for c in level["categories"])]
    width = 0.8 / len(levels)
    figure, axes = plt.subplots(figsize=(max(6.0, 0.9 * len(groups) + 2), 4))
    for n, level in enumerate(levels):
        values = [level["speedup"] if g == "overall" else level["categories"].get(g, {}).get("speedup") for g in groups]
        axes.bar(
            [i + (n - (len(levels) - 1) / 2) * width for i in range(len(groups))],
            [v or 0 for v in values],
            width,
            label=f"concurrency {level['concurrency']}",
        )
    axes.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    axes.set_xticks(range(len(groups)), groups, rotation=30, ha="right")
    axes.set_ylabel("speedup (tok/s on / off)")
    axes.set_title(f"specdec bench: {results['model']}")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
