"""Markdown tables for the benchmark reports (bench.py and its HF baseline, bench_hf.py)."""

from __future__ import annotations


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(header: list[str], rows: list[list]) -> list[str]:
    return ["", *("| " + " | ".join(str(cell) for cell in row) + " |" for row in [header, ["---"] * len(header), *rows])]
