"""The command line the in-process benchmark scripts share: which pair to load (default: the default pair)."""

from __future__ import annotations

import argparse


def pair_parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser with the script's docstring as its help and --target / --draft."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", help="target model (default: the default pair's)")
    parser.add_argument("--draft", help="draft model (default: the default pair's)")
    return parser
