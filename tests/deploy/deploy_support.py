"""What the deployment tests share: the repository's roles and ports, strict YAML, the real CLI parser.

Importable from the tests because pytest puts tests/deploy on sys.path (pyproject: pythonpath)."""

from __future__ import annotations

from pathlib import Path

import yaml

from specdec.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("draft", "verify", "gateway")
# grace_seconds: draft_service 5, verify_service 10, the gateway's uvicorn graceful shutdown 10.
DRAIN_S = {"draft": 5, "verify": 10, "gateway": 10}
PORTS = {"draft": 50051, "verify": 50052, "gateway": 8000}
METRICS_PORTS = {"draft": 9101, "verify": 9102, "gateway": 8000}


class StrictLoader(yaml.SafeLoader):
    """Refuses duplicate keys, which PyYAML would silently resolve to the last one (Compose and kubectl refuse them)."""


def _construct_unique_mapping(loader, node):
    keys = [loader.construct_object(key, deep=True) for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge"]
    duplicates = sorted({str(key) for key in keys if keys.count(key) > 1})
    if duplicates:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate keys {duplicates}", node.start_mark)
    return loader.construct_mapping(node, deep=True)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def parse_cli(argv: list[str]):
    try:
        return build_parser().parse_args([str(arg) for arg in argv])
    except SystemExit as exit_:  # argparse prints the reason on stderr
        raise AssertionError(f"`specdec {' '.join(map(str, argv))}` is refused by specdec's CLI (exit {exit_.code})") from None
