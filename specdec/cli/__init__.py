"""The composition root: the `specdec` command and the tools behind it. Only this package imports
the services (draft_service, verify_service) and the gateway; the core and specdec/serving never do."""

from specdec.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
