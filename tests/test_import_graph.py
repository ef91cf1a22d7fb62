"""The package's layering, read from the source's import statements (AST, nothing imported):
no import cycles, and only the composition root (specdec/cli) imports the services or the gateway."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("specdec", "gateway", "draft_service", "verify_service")
SERVICES = ("gateway", "draft_service", "verify_service")
COMPOSITION_ROOT = "specdec.cli"
GENERATED = "specdec.v1"  # protoc output


def module_files(root: Path = ROOT) -> dict[str, Path]:
    files = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if not _within(name, GENERATED):
                files[name] = path
    return files


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The known modules `path` imports, deferred imports included. `from a import b` counts a.b where b is a
    module (not a: a package's __init__ runs first anyway, as for any import of a.b), else a."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            found.update(submodules if len(submodules) == len(node.names) else {base, *submodules})
    return {module for module in found if module in known and module != name}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = module_files(root)
    return {name: imported_modules(name, path, set(files)) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, str] = {}
    for start, imports in graph.items():
        if start in state:
            continue
        path, stack = [start], [iter(sorted(imports))]
        state[start] = "open"
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = "done"
                stack.pop()
            elif state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in state:
                state[nxt] = "open"
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a service or the gateway from anywhere but specdec/cli and the service itself."""
    return sorted(
        f"{importer} -> {imported}"
        for importer, imports in graph.items()
        for imported in imports
        if any(_within(imported, service) and not _within(importer, service) for service in SERVICES)
        and not _within(importer, COMPOSITION_ROOT)
    )


def test_the_tree_has_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_only_the_cli_imports_the_services_and_the_gateway():
    graph = import_graph()
    assert any(_within(name, COMPOSITION_ROOT) for name in graph)  # the walk saw the package at all
    assert upward_imports(graph) == []


def test_the_gateway_imports_no_algorithm_module():
    # The gateway reaches the model through gRPC only: specdec/serving and the torch-free limits.
    # specdec.constraints.grammars is torch-free (llguidance only): the gateway builds and checks a
    # request's grammar (response_format, forced tool calls) before any model work.
    allowed = ("specdec.serving", "specdec.limits", "specdec.errors", "specdec.enums", "specdec.constraints.grammars", "gateway")
    graph = import_graph()
    bad = sorted(
        f"{importer} -> {imported}"
        for importer, imports in graph.items()
        if _within(importer, "gateway")
        for imported in imports
        if not any(_within(imported, prefix) for prefix in allowed)
    )
    assert bad == []


@pytest.fixture
def fake_tree(tmp_path):
    def write(files: dict[str, str]) -> Path:
        for relative, text in files.items():
            path = tmp_path / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        for package in PACKAGES:
            (tmp_path / package).mkdir(exist_ok=True)
            (tmp_path / package / "__init__.py").touch()
        return tmp_path

    return write


def test_a_cycle_through_a_deferred_relative_import_is_found(fake_tree):
    root = fake_tree({"specdec/a.py": "from specdec import b\n", "specdec/b.py": "def f():\n    from . import a\n"})
    assert find_cycle(import_graph(root)) in (["specdec.a", "specdec.b", "specdec.a"], ["specdec.b", "specdec.a", "specdec.b"])


def test_a_core_module_importing_a_service_is_reported_and_the_cli_is_not(fake_tree):
    root = fake_tree(
        {
            "specdec/core.py": "import verify_service.server\n",
            "verify_service/server.py": "",
            "specdec/cli/__init__.py": "",
            "specdec/cli/commands.py": "from gateway import app\n",
            "gateway/app.py": "",
        }
    )
    assert upward_imports(import_graph(root)) == ["specdec.core -> verify_service.server"]


# Where transformers' loader may be called directly: the hf engine's loader, draft models (specdec.draft_methods),
# distillation's teacher and the transformers-only `bench --hf` baseline. Targets are loaded through
# specdec.engines.load_engine, whatever their engine.
DIRECT_MODEL_LOADERS = ("specdec.engines", "specdec.draft_methods", "specdec.distill.run", "specdec.cli.bench_hf")


def direct_model_loaders(root: Path = ROOT) -> list[str]:
    """Modules that import specdec.engines.hf.load_model by name."""
    found = []
    for name, path in module_files(root).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "specdec.engines.hf"
                and any(alias.name == "load_model" for alias in node.names)
            ):
                found.append(name)
    return sorted(set(found))


def test_targets_are_loaded_through_the_engine_interface():
    graph = import_graph()
    assert [name for name in direct_model_loaders() if name not in DIRECT_MODEL_LOADERS] == []
    assert "specdec.engines" in graph["verify_service.server"] and "specdec.engines" in graph["specdec.assembly"]


def test_a_service_loading_its_target_with_transformers_directly_is_reported(fake_tree):
    root = fake_tree(
        {
            "specdec/engines/hf.py": "def load_model(): ...\n",
            "verify_service/server.py": ("from specdec.engines.hf import LoadedModel, load_model\n"),
        }
    )
    assert direct_model_loaders(root) == ["verify_service.server"]
