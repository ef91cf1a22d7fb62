"""Static checks of the container deployment: compose.yaml and its overrides (merged the way Docker Compose
merges them, then validated against the Compose Specification's JSON schema), their semantics (GPUs, start
order, health checks, secrets, read-only models, rollback by one variable), every specdec command line in
them parsed by the real CLI parser. No Docker engine is needed. The image: test_dockerfile.py."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from compose_support import COMPOSE, OVERRIDES, VARIANTS, duration_s, environment, load_variant, load_yaml, plain
from deploy_support import DRAIN_S, METRICS_PORTS, PORTS, ROLES, ROOT, parse_cli

try:
    import jsonschema  # noqa: F401 - a dev dependency, used through jsonschema.validators below
except ImportError:  # pragma: no cover
    pytest.fail("jsonschema is not installed: pip install 'jsonschema>=4.18' (a dev dependency)", pytrace=False)

# A copy of ../shared/schemas/compose-spec.json (Apache-2.0, see deploy/schemas/SOURCE.md): a clean clone
# must validate on its own.
SCHEMA = ROOT / "deploy" / "schemas" / "compose-spec.json"

IMAGE_RE = re.compile(r"^\$\{SPECDEC_IMAGE(:-[^}]+)?\}:\$\{SPECDEC_TAG(:[-?][^}]*)?\}$")


@pytest.fixture(scope="module", params=VARIANTS)
def variant(request) -> tuple[str, dict]:
    return request.param, load_variant(request.param)


@pytest.fixture(scope="module")
def base() -> dict:
    return load_variant("base")


@pytest.fixture(scope="module")
def compose_schema() -> dict:
    if not SCHEMA.is_file():
        pytest.fail(f"the Compose Specification schema is missing: expected {SCHEMA} (see deploy/schemas/SOURCE.md)", pytrace=False)
    return json.loads(SCHEMA.read_text(encoding="utf-8"))


# --- schema -----------------------------------------------------------------------------------------


def schema_validator(schema: dict):
    """The validator for the draft the schema declares. compose-spec.json says
    "https://json-schema.org/draft-07/schema", which jsonschema knows as "http://json-schema.org/draft-07/schema#"."""
    from jsonschema import validators

    declared = schema.get("$schema", "")
    bare = declared.rstrip("#").removeprefix("https://").removeprefix("http://")
    for candidate in (declared, f"http://{bare}#", f"https://{bare}", f"http://{bare}", f"https://{bare}#"):
        validator_class = validators.validator_for({"$schema": candidate}, default=None)
        if validator_class is not None:
            validator_class.check_schema(schema)
            return validator_class(schema)
    pytest.fail(f"{SCHEMA} declares $schema {declared!r}, which jsonschema does not know", pytrace=False)


def test_compose_schema_is_draft_07(compose_schema):
    from jsonschema import Draft7Validator

    assert isinstance(schema_validator(compose_schema), Draft7Validator)


def test_compose_files_validate_against_the_compose_spec(variant, compose_schema):
    name, document = variant
    validator = schema_validator(compose_schema)
    errors = sorted(validator.iter_errors(document), key=lambda error: [str(part) for part in error.absolute_path])
    assert not errors, f"compose ({name}) does not match the Compose Specification:\n" + "\n".join(
        f"  {'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}" for error in errors
    )


def test_override_files_only_touch_services_of_the_base_file(base):
    for path in OVERRIDES.values():
        override = load_yaml(path)
        assert set(override) <= {"services"}, f"{path.name}: only services are overridden"
        unknown = set(override["services"]) - set(base["services"])
        assert not unknown, f"{path.name} overrides services compose.yaml does not have: {unknown}"


def test_expected_services(base):
    assert set(base["services"]) >= {"draft", "verify", "gateway", "prometheus", "grafana", "jaeger"}


# --- the specdec roles -------------------------------------------------------------------------------


def test_commands_parse_with_the_specdec_cli(variant):
    name, document = variant
    services = document["services"]
    for role in ROLES:
        args = parse_cli(services[role]["command"])
        assert (args.command, args.service) == ("serve", role), f"{name}: {role} runs `specdec serve {role}`"
        assert args.port == PORTS[role], f"{name}: {role} listens on {PORTS[role]}"
        if role != "gateway":
            assert args.metrics_port == METRICS_PORTS[role], f"{name}: {role} metrics on {METRICS_PORTS[role]} (prometheus.yml)"
    draft = parse_cli(services["draft"]["command"])
    assert draft.draft and draft.draft.startswith("/models/") or draft.draft_method in ("layer_skip", "ngram")
    verify = parse_cli(services["verify"]["command"])
    assert verify.target.startswith("/models/"), "the target comes from the read-only models mount"
    assert verify.draft_endpoint == "draft:50051"
    gateway = parse_cli(services["gateway"]["command"])
    assert gateway.verify_endpoint == "verify:50052"


def test_cpu_override_runs_everything_on_the_cpu():
    document = load_variant("cpu")
    services = document["services"]
    for name, service in services.items():
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")
        assert not devices, f"compose.cpu.yaml: {name} still reserves devices {devices}"
        assert "gpus" not in service
    assert parse_cli(services["draft"]["command"]).draft_device == "cpu"
    assert parse_cli(services["verify"]["command"]).device == "cpu"
    gateway = parse_cli(services["gateway"]["command"])
    assert gateway.max_concurrent_requests and gateway.max_concurrent_requests < 64, "smaller defaults on the CPU"


def gpu_ids(service: dict) -> list[str]:
    devices = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices") or []
    ids = []
    for device in devices:
        assert device.get("driver") == "nvidia" and "gpu" in device.get("capabilities", []), device
        ids += [str(i) for i in device.get("device_ids", [])]
    return ids


def test_draft_and_verify_get_distinct_gpus(base):
    services = base["services"]
    draft, verify = gpu_ids(services["draft"]), gpu_ids(services["verify"])
    assert draft and verify, "draft and verify each reserve a GPU by id"
    assert not set(draft) & set(verify), f"draft {draft} and verify {verify} must not share a GPU in compose.yaml"
    assert gpu_ids(services["gateway"]) == [], "the gateway needs no GPU"


def test_single_gpu_override_puts_both_on_gpu_0():
    services = load_variant("single-gpu")["services"]
    assert gpu_ids(services["draft"]) == ["0"]
    assert gpu_ids(services["verify"]) == ["0"], "devices must be replaced (!override), not appended to"


def test_every_role_has_a_specdec_healthcheck(variant):
    name, document = variant
    for role in ROLES:
        check = document["services"][role].get("healthcheck")
        assert check, f"{name}: {role} has no healthcheck"
        test = check["test"]
        assert test[:4] == ["CMD", "specdec", "healthcheck", role], f"{name}: {role} uses `specdec healthcheck {role}`: {test}"
        args = parse_cli(test[2:])  # without CMD and the program name
        assert (args.command, args.service) == ("healthcheck", role)
        for key in ("interval", "timeout", "retries", "start_period"):
            assert key in check, f"{name}: {role} healthcheck sets {key}"
        assert duration_s(check["timeout"]) > args.timeout, f"{name}: {role}: the container timeout exceeds the probe's own"
        if role != "gateway":
            assert duration_s(check["start_period"]) >= 120, f"{name}: {role} needs a long start_period to load its model"


def test_start_order_is_draft_then_verify_then_gateway(variant):
    name, document = variant
    services = document["services"]

    def depends(role: str) -> dict:
        value = services[role].get("depends_on") or {}
        assert isinstance(value, dict), f"{name}: {role}: depends_on needs the long form (with condition)"
        return value

    assert not set(depends("draft")) & set(ROLES), f"{name}: draft starts first"
    assert depends("verify").get("draft", {}).get("condition") == "service_healthy", f"{name}: verify waits for a healthy draft"
    assert depends("gateway").get("verify", {}).get("condition") == "service_healthy", f"{name}: gateway waits for a healthy verify"


def test_restart_policies(variant):
    name, document = variant
    for service_name, service in document["services"].items():
        assert service.get("restart") in ("unless-stopped", "always", "on-failure"), f"{name}: {service_name} sets restart"


def test_stop_grace_period_covers_the_drain(variant):
    name, document = variant
    for role in ROLES:
        period = document["services"][role].get("stop_grace_period")
        assert period, f"{name}: {role} sets stop_grace_period"
        assert duration_s(period) >= DRAIN_S[role] + 5, (
            f"{name}: {role}: stop_grace_period {period} leaves no margin over its {DRAIN_S[role]} s drain"
        )


def test_image_tag_comes_from_one_variable(base):
    images = {base["services"][role]["image"] for role in ROLES}
    assert len(images) == 1, f"the three roles run one image: {images}"
    (image,) = images
    assert IMAGE_RE.match(image), f"image must be ${{SPECDEC_IMAGE...}}:${{SPECDEC_TAG...}}, got {image!r}"
    text = COMPOSE.read_text(encoding="utf-8")
    header = text.split("\nservices:", 1)[0]
    assert "SPECDEC_TAG" in header and "roll back" in header.lower(), "compose.yaml's header explains rollback by SPECDEC_TAG"
    for path in OVERRIDES.values():
        assert "image" not in json.dumps(plain(load_yaml(path))), f"{path.name} must not pin another image"


def test_third_party_images_are_pinned(base):
    for name, service in base["services"].items():
        if name in ROLES:
            continue
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest" and re.search(r"\d", tag), f"{name}: pin a version, not {image}"


def model_paths(command: list[str]) -> set[str]:
    args = parse_cli(command)
    return {path for path in (getattr(args, "draft", None), getattr(args, "target", None)) if path and path.startswith("/models/")}


def test_each_role_mounts_the_models_it_serves_read_only_and_never_creates_them(variant):
    """A missing model directory must stop the start at once, with the engine's one line naming it
    ("bind source path does not exist: ..."), not start a service that crash-loops on an empty mount."""
    name, document = variant
    for role in ("draft", "verify"):
        service = document["services"][role]
        mounts = {volume["target"]: volume for volume in service.get("volumes", []) if isinstance(volume, dict)}
        needed = model_paths(service["command"])
        assert needed, f"{name}: {role} serves a model from /models"
        for path in needed:
            mount = mounts.get(path)
            assert mount, f"{name}: {role} reads {path} but does not mount it"
            assert mount["type"] == "bind" and mount.get("read_only") is True, f"{name}: {role}: {path} must be a read-only bind"
            assert mount.get("bind", {}).get("create_host_path") is False, f"{name}: {role}: {path}: create_host_path: false"
            assert mount["source"] == "${SPECDEC_MODELS_DIR:-./models}/" + path.removeprefix("/models/"), mount["source"]
        assert not [v for v in service.get("volumes", []) if isinstance(v, str)], f"{name}: {role}: long-syntax mounts only"


def test_specdec_roles_build_the_image_from_this_checkout(variant):
    name, document = variant
    for role in ROLES:
        build = document["services"][role].get("build")
        assert build, f"{name}: {role} has no build: (`docker compose up --build` from a clone)"
        context = ROOT / (build["context"] if isinstance(build, dict) else build)
        dockerfile = context / (build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile")
        assert context.resolve() == ROOT and dockerfile.is_file(), f"{name}: {role} builds {dockerfile}"
    images = {document["services"][role]["image"] for role in ROLES}
    assert images == {"${SPECDEC_IMAGE:-localhost/specdec}:${SPECDEC_TAG:-local}"}, (
        f"{name}: one local default image, overridable for a registry: {images}"
    )


def test_health_checks_keep_start_interval_except_for_podman():
    for name in VARIANTS:
        for role in ROLES:
            check = load_variant(name)["services"][role]["healthcheck"]
            if name == "podman":
                assert "start_interval" not in check, f"podman 4.x refuses start_interval ({role})"
            else:
                assert duration_s(check["start_interval"]) <= 10, f"{name}: {role}"
    header = COMPOSE.read_text(encoding="utf-8").split("\nservices:", 1)[0]
    assert "Docker Engine >= 25" in header and "compose.podman.yaml" in header


def test_every_bind_mount_is_read_only(variant):
    name, document = variant
    for service_name, service in document["services"].items():
        for volume in service.get("volumes", []):
            if isinstance(volume, dict) and volume.get("type") == "bind":
                assert volume.get("read_only") is True, f"{name}: {service_name}: bind mount {volume['target']} is writable"
            elif isinstance(volume, str) and volume.startswith((".", "/", "$")):
                assert volume.endswith(":ro"), f"{name}: {service_name}: bind mount {volume} is writable"


def test_repository_paths_mounted_exist(base):
    for service_name, service in base["services"].items():
        for volume in service.get("volumes", []):
            if isinstance(volume, dict) and volume.get("type") == "bind" and volume["source"].startswith("./deploy/"):
                assert (ROOT / volume["source"]).exists(), f"{service_name} mounts {volume['source']}, which is not in the repo"


def test_prometheus_targets_are_the_compose_services(base):
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    targets = {target for job in config["scrape_configs"] for group in job["static_configs"] for target in group["targets"]}
    services = base["services"]
    for target in targets:
        host, port = target.rsplit(":", 1)
        assert host in ROLES, f"prometheus scrapes {target}, not a specdec service"
        args = parse_cli(services[host]["command"])
        assert int(port) == (args.port if host == "gateway" else args.metrics_port), f"{target} is not {host}'s metrics port"


def test_api_keys_come_from_a_secret_file(base):
    gateway = base["services"]["gateway"]
    args = parse_cli(gateway["command"])
    assert args.api_keys_file == "/run/secrets/api_keys"
    names = [secret if isinstance(secret, str) else secret["source"] for secret in gateway.get("secrets", [])]
    assert "api_keys" in names
    assert "file" in base["secrets"]["api_keys"], "the api_keys secret is a file on the host"
    assert "SPECDEC_API_KEYS" not in environment(gateway), "no keys in the environment"


SECRET_NAME_RE = re.compile(r"(API_KEYS?|SECRET|PASSWORD|PASSWD|TOKEN|PRIVATE_KEY)", re.IGNORECASE)


def test_no_literal_secrets():
    files = [COMPOSE, *OVERRIDES.values(), ROOT / "Dockerfile"]
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\bsk-[A-Za-z0-9_-]{8,}", text), f"{path.name} contains something like an OpenAI-style key"
        assert not re.search(r"SPECDEC_API_KEYS\s*[:=]\s*[\"']?[^\s\"'#}]", text), f"{path.name} sets SPECDEC_API_KEYS to a literal"
        assert not re.search(r"Bearer\s+[A-Za-z0-9]{16,}", text), f"{path.name} contains a bearer token"
    for name in VARIANTS:
        for service_name, service in load_variant(name)["services"].items():
            for key, value in environment(service).items():
                if SECRET_NAME_RE.search(key) and value not in (None, ""):
                    assert key.endswith("_FILE"), f"{name}: {service_name} sets {key} literally; use a secrets: file and {key}__FILE"


def test_tracing_goes_to_jaeger(variant):
    name, document = variant
    for role in ROLES:
        env = environment(document["services"][role])
        assert env.get("OTEL_EXPORTER_OTLP_ENDPOINT") == "http://jaeger:4317", f"{name}: {role}"
        assert str(env.get("OTEL_EXPORTER_OTLP_INSECURE")).lower() == "true", f"{name}: {role}"
        assert env.get("OTEL_SERVICE_NAME") == f"specdec-{role}", f"{name}: {role}"
    jaeger = document["services"]["jaeger"]
    assert any(str(port).split(":")[-1] == "16686" for port in jaeger.get("ports", [])), "Jaeger's UI is published"
    assert "4317" in [str(port) for port in jaeger.get("expose", [])] or any("4317" in str(p) for p in jaeger.get("ports", []))


def test_specdec_environment_variables_name_real_config_keys(variant):
    from specdec.serving.config import SpecdecConfig

    name, document = variant
    for role in ROLES:
        for key in environment(document["services"][role]):
            if not key.startswith("SPECDEC_") or key in ("SPECDEC_CONFIG", "SPECDEC_API_KEYS"):
                continue
            section, _, field = key.removeprefix("SPECDEC_").lower().partition("__")
            assert section in SpecdecConfig.model_fields, f"{name}: {role}: {key}: no config section {section!r}"
            section_model = SpecdecConfig.model_fields[section].annotation
            assert field in section_model.model_fields, f"{name}: {role}: {key}: no key {section}.{field}"


def test_monitoring_services_mount_the_repo_config(base):
    services = base["services"]
    prometheus_mounts = {v["target"]: v for v in services["prometheus"]["volumes"] if isinstance(v, dict)}
    assert prometheus_mounts["/etc/prometheus"]["source"] == "./deploy/prometheus"
    grafana_targets = {v["target"] for v in services["grafana"]["volumes"] if isinstance(v, dict)}
    assert {"/etc/grafana/provisioning/datasources", "/etc/grafana/provisioning/dashboards"} <= grafana_targets
    provider = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/specdec.yml").read_text(encoding="utf-8"))
    dashboards_dir = provider["providers"][0]["options"]["path"]
    assert any(target.startswith(dashboards_dir + "/") and target.endswith(".json") for target in grafana_targets), (
        f"the dashboard is mounted where the provider looks ({dashboards_dir})"
    )
    assert environment(services["grafana"]).get("GF_SECURITY_ADMIN_PASSWORD__FILE", "").startswith("/run/secrets/")
