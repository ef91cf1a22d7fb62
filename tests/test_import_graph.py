"""The package's layering, read from the source's import statements (AST, nothing imported): no import
cycles, between modules or through a package's __init__; only the composition root (specdec/cli) imports
the services or the gateway; the core below specdec/serving imports none of it; and nothing the gateway
shares (specdec/serving) or the gateway itself loads torch or transformers."""

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


def _import_nodes(tree: ast.AST, import_time: bool) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement; with `import_time`, only those that run when the module is imported
    (not in a function body, not under `if TYPE_CHECKING:`)."""
    if not import_time:
        return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    found, pending = [], list(ast.iter_child_nodes(tree))
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def imported_modules(name: str, path: Path, known: set[str], import_time: bool = False, packages: bool = False) -> set[str]:
    """The known modules `path` imports, deferred imports included unless `import_time`. `from a import b`
    counts a.b where b is a module, else a; with `packages`, a too where the statement names the package a
    (its __init__ runs: a package-level edge)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8")), import_time):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        else:
            base = _absolute(node, package)
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            found.update(submodules if len(submodules) == len(node.names) and not packages else {base, *submodules})
    return {module for module in found if module in known and module != name}


def external_imports(path: Path, import_time: bool = False) -> set[str]:
    """The top-level names of what `path` imports (torch, transformers, ...), relative imports aside."""
    found = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8")), import_time):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif not node.level:
            found.add((node.module or "").partition(".")[0])
    return found


def import_graph(root: Path = ROOT, import_time: bool = False, packages: bool = False) -> dict[str, set[str]]:
    files = module_files(root)
    return {name: imported_modules(name, path, set(files), import_time, packages) for name, path in files.items()}


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
    allowed = (
        "specdec.serving",
        "specdec.fields",
        "specdec.limits",
        "specdec.errors",
        "specdec.enums",
        "specdec.constraints.grammars",
        "gateway",
    )
    graph = import_graph()
    bad = sorted(
        f"{importer} -> {imported}"
        for importer, imports in graph.items()
        if _within(importer, "gateway")
        for imported in imports
        if not any(_within(imported, prefix) for prefix in allowed)
    )
    assert bad == []


def package_cycle(root: Path = ROOT) -> list[str] | None:
    """A cycle through a package's __init__: a module that imports its package by name (`from specdec.cli import
    commands` runs specdec/cli/__init__), whose __init__ imports the module back."""
    return find_cycle(import_graph(root, packages=True))


TORCH = {"torch", "transformers"}
TORCH_FREE = ("specdec.serving", "gateway")  # what the gateway loads


def _loads(graph: dict[str, set[str]], name: str) -> set[str]:
    """Every module importing `name` runs: its own imports, and each parent package's __init__ (transitively)."""
    seen, pending = set(), [name]
    while pending:
        module = pending.pop()
        parents = {".".join(module.split(".")[:depth]) for depth in range(1, module.count(".") + 1)}
        for nxt in (graph[module] | parents) & set(graph):
            if nxt not in seen:
                seen.add(nxt)
                pending.append(nxt)
    return seen - {name}


def torch_leaks(root: Path = ROOT) -> list[str]:
    """Modules of specdec/serving and the gateway that import torch or transformers, deferred imports
    included, or load a module that does at import time."""
    files = module_files(root)
    graph = import_graph(root, import_time=True)
    loads_torch = {name for name, path in files.items() if external_imports(path, import_time=True) & TORCH}
    leaks = []
    for name, path in files.items():
        if not any(_within(name, package) for package in TORCH_FREE):
            continue
        direct = external_imports(path) & TORCH
        through = sorted(_loads(graph, name) & loads_torch)
        if direct or through:
            leaks.append(f"{name} -> {', '.join(sorted(direct) or through)}")
    return sorted(leaks)


# Layers, lowest first: the core; specdec/serving (configuration, metrics, gRPC plumbing) with the modules
# that build what the config names; what the model services share that needs torch; the services and the
# gateway; the composition root. An import points down or sideways, never up.
LAYERS = (
    (),  # the core: the rest of specdec
    ("specdec.serving", "specdec.assembly", "specdec.draft_methods", "specdec.memory_plan", "specdec.engines"),
    ("specdec.model_services",),
    SERVICES,
    (COMPOSITION_ROOT,),
)
ASSEMBLY = ("specdec.assembly", "specdec.draft_methods", "specdec.memory_plan", "specdec.engines")  # these names exactly


def layer(module: str) -> int:
    for rank in range(len(LAYERS) - 1, 0, -1):
        for prefix in LAYERS[rank]:
            if module == prefix or (prefix not in ASSEMBLY and _within(module, prefix)):
                return rank
    return 0


def imports_upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{importer} -> {imported}" for importer, imports in graph.items() for imported in imports if layer(imported) > layer(importer)
    )


def test_no_package_imports_itself_back_through_its_init():
    assert package_cycle() is None


def test_nothing_the_gateway_loads_imports_torch_or_transformers():
    assert any(_within(name, "specdec.serving") for name in module_files())
    assert torch_leaks() == []


def test_no_import_points_up_a_layer():
    graph = import_graph()
    assert layer("specdec.batching.service") == 0 and layer("specdec.engines.hf") == 0 and layer("specdec.serving.config") == 1
    assert imports_upward(graph) == []


def engines_importing_drafters(root: Path = ROOT) -> list[str]:
    """Engine modules that import a drafter: drafters run on engines (a GGUF draft on llama.cpp's sequences),
    never the other way (the reduced-vocabulary architecture an engine registers lives with the engines)."""
    graph = import_graph(root)
    return sorted(
        f"{importer} -> {imported}"
        for importer, imports in graph.items()
        if _within(importer, "specdec.engines")
        for imported in imports
        if _within(imported, "specdec.drafters")
    )


def test_engines_import_no_drafter():
    assert any(_within(name, "specdec.engines") for name in module_files())
    assert engines_importing_drafters() == []


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


def test_an_init_re_exporting_a_module_that_imports_its_package_is_a_package_cycle(fake_tree):
    root = fake_tree(
        {
            "specdec/cli/__init__.py": "from specdec.cli.main import main\n",
            "specdec/cli/main.py": "def main():\n    from specdec.cli import commands\n",
            "specdec/cli/commands.py": "",
        }
    )
    assert find_cycle(import_graph(root)) is None  # no cycle between modules
    assert package_cycle(root) == ["specdec.cli", "specdec.cli.main", "specdec.cli"]


def test_torch_in_serving_or_the_gateway_is_reported_directly_or_through_what_it_loads(fake_tree):
    root = fake_tree(
        {
            "specdec/serving/__init__.py": "",
            "specdec/serving/metrics.py": "def gauges():\n    import torch\n",  # deferred: still a leak
            "specdec/serving/config.py": "from specdec import tree\n",
            "specdec/tree.py": "import torch\n",
            "specdec/serving/ok.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specdec import tree\n",
            "gateway/app.py": "from specdec.batching import service\n",
            "specdec/batching/__init__.py": "from transformers import AutoModel\n",
            "specdec/batching/service.py": "",
        }
    )
    assert torch_leaks(root) == [
        "gateway.app -> specdec.batching",
        "specdec.serving.config -> specdec.tree",
        "specdec.serving.metrics -> torch",
    ]


def test_the_core_importing_the_config_is_an_upward_import(fake_tree):
    root = fake_tree(
        {
            "specdec/batching/service.py": "from specdec.serving.config import SpecdecConfig\n",
            "specdec/serving/config.py": "",
            "specdec/serving/metrics.py": "from specdec.model_services import device_metrics\n",
            "specdec/model_services/device_metrics.py": "",
            "specdec/assembly.py": "from specdec.serving import config\n",  # assembly reads the config: sideways
        }
    )
    assert imports_upward(import_graph(root)) == [
        "specdec.batching.service -> specdec.serving.config",
        "specdec.serving.metrics -> specdec.model_services.device_metrics",
    ]


def test_an_engine_importing_a_drafter_for_a_side_effect_is_reported(fake_tree):
    root = fake_tree(
        {
            "specdec/engines/hf.py": "from specdec.drafters import reduced_vocab  # noqa: F401\n",
            "specdec/drafters/reduced_vocab.py": "",
            "specdec/drafters/gguf.py": "from specdec.engines import hf\n",  # drafters on engines: fine
        }
    )
    assert engines_importing_drafters(root) == ["specdec.engines.hf -> specdec.drafters.reduced_vocab"]
