"""The deployment artifacts (Dockerfile, docker-compose.yml, deploy/) against the real program.

Without a container engine (tests/test_compose.py runs the compose file on a real one), these
tests check what an engine would rely on: the image runs a real subcommand as a non-root user,
every CRAWLER_* variable the artifacts set is a real setting and every node's environment loads
into valid Settings (the same code the daemon runs), each fixed compose node finds itself in
the shared peers list, the DNS-found ones (the scalable compose service, the StatefulSet) name
what every node answers to, names and ports line up
(headless service, probes, proxy, volumes), and the compose stack's commands, environment and
health checks work when run as plain processes on loopback. The Kubernetes manifests are also
checked against the Kubernetes JSON schemas where kubernetes-validate is installed, and
.ci/validate-deploy adds the compose-spec schema (check-jsonschema), hadolint and a wheel
build from the emulated build context (CRAWLER_DEPLOY_BUILD=1).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import pytest
import yaml  # PyYAML, from the test extra

from crawler_node.cli import build_parser
from crawler_node.cluster.peerdns import parse_peer_dns
from crawler_node.settings import Settings, SettingsError, settings_fields
from crawler_node.settings_sources import load_settings

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE = ROOT / "docker-compose.yml"
DEPLOY = ROOT / "deploy"

SETTING_ENV_NAMES = {"CRAWLER_" + field.name.upper() for field in settings_fields()}
ACCEPTED_ENV_NAMES = SETTING_ENV_NAMES | {"CRAWLER_CONFIG"}


def parses_as_cli(argv: list[str]) -> None:
    """argv (what follows `crawler-node`) is accepted by the real argument parser."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse reports and exits
        pytest.fail(f"`crawler-node {shlex.join(argv)}` is rejected by the CLI (exit {exc.code})")
    assert callable(args.handler)


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


# --- Dockerfile ------------------------------------------------------------------------------


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, backslash continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue  # comment lines are dropped, also inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line = (pending + stripped).strip()
        pending = ""
        if line:
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def dockerfile_values(instructions: list[tuple[str, str]], keyword: str) -> list[str]:
    return [rest for key, rest in instructions if key == keyword]


def exec_form(rest: str) -> list[str]:
    value = json.loads(rest)
    assert isinstance(value, list) and all(isinstance(item, str) for item in value), rest
    return value


def dockerfile_env(instructions: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in dockerfile_values(instructions, "ENV"):
        for item in shlex.split(rest):
            key, sep, value = item.partition("=")
            assert sep, f"use the ENV KEY=VALUE form: {rest!r}"
            env[key] = value
    return env


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return dockerfile_instructions(DOCKERFILE.read_text())


def test_dockerfile_runs_the_console_script_as_a_non_root_user(dockerfile):
    froms = dockerfile_values(dockerfile, "FROM")
    assert froms == ["python:3.11-slim"], "one stage, on python:3.11-slim"

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    entrypoint = exec_form(dockerfile_values(dockerfile, "ENTRYPOINT")[-1])
    assert entrypoint == ["crawler-node"]
    assert entrypoint[0] in pyproject["project"]["scripts"], "ENTRYPOINT names the console script"
    cmd = exec_form(dockerfile_values(dockerfile, "CMD")[-1])
    assert cmd == ["run"]
    parses_as_cli(cmd)

    users = dockerfile_values(dockerfile, "USER")
    assert users, "the image must not run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    assert user.isdigit(), "a numeric USER lets Kubernetes' runAsNonRoot verify it"

    installs = [rest for rest in dockerfile_values(dockerfile, "RUN") if "pip install" in rest]
    assert installs and "--no-cache-dir" in installs[0]
    assert re.search(r"pip install( --?[\w-]+)* \.(\s|$)", installs[0]), "installs the project (pip install .)"


def test_dockerfile_data_volume_port_and_environment(dockerfile):
    volumes = [path for rest in dockerfile_values(dockerfile, "VOLUME") for path in exec_form(rest)]
    assert volumes == ["/data"]
    assert dockerfile_values(dockerfile, "EXPOSE") == ["8080"]
    env = dockerfile_env(dockerfile)
    crawler_env = {key for key in env if key.startswith("CRAWLER_")}
    assert crawler_env <= ACCEPTED_ENV_NAMES, f"not settings: {crawler_env - ACCEPTED_ENV_NAMES}"
    assert port_of(env["CRAWLER_LISTEN"]) == 8080 and env["CRAWLER_LISTEN"].startswith("0.0.0.0:")
    assert env["CRAWLER_DATA_DIR"] == "/data"
    # /data is handed to the runtime user before VOLUME (later changes to a volume path are lost)
    volume_at = next(i for i, (key, _) in enumerate(dockerfile) if key == "VOLUME")
    uid = dockerfile_values(dockerfile, "USER")[-1].split(":")[0]
    assert any(
        key == "RUN" and "chown" in rest and uid in rest and "/data" in rest for key, rest in dockerfile[:volume_at]
    ), "chown /data to the USER before VOLUME"


# --- .dockerignore and the build context ------------------------------------------------------


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(is_exception, regex) per line, following Docker's rules: patterns are relative to the
    context root, `*` and `?` stay within one path segment, `**` spans any number of them,
    `!` re-includes, the last matching line wins, and a match on a directory covers its files."""
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            char = pattern[i]
            if pattern.startswith("**/", i):
                regex += "(?:.*/)?"
                i += 3
                continue
            if pattern.startswith("**", i):
                regex += ".*"
                i += 2
                continue
            if char == "*":
                regex += "[^/]*"
            elif char == "?":
                regex += "[^/]"
            elif char == "[":
                end = pattern.index("]", i)
                regex += pattern[i : end + 1]
                i = end
            else:
                regex += re.escape(char)
            i += 1
        rules.append((exception, re.compile(regex + r"\Z")))
    return rules


def excluded(rel: str, rules) -> bool:
    parts = PurePosixPath(rel).parts
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    result = False
    for exception, regex in rules:
        if any(regex.match(prefix) for prefix in prefixes):
            result = not exception
    return result


def build_context() -> list[str]:
    """The files `docker build .` would send, as paths relative to the repo root."""
    rules = dockerignore_rules()
    files = []
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.is_file() and not excluded(rel, rules):
            files.append(rel)
    return files


def test_dockerignore_keeps_build_inputs_and_drops_the_rest(dockerfile):
    context = set(build_context())
    for rest in dockerfile_values(dockerfile, "COPY"):
        sources = [item for item in shlex.split(rest) if not item.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY source {source} does not exist"
            inside = {f for f in context if f == source or f.startswith(source.rstrip("/") + "/")}
            assert inside, f"COPY source {source} is excluded from the build context"
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("readme")
    if isinstance(readme, str):
        assert readme in context, "pyproject's readme must reach the build"
    assert "crawler_node/cli.py" in context and "crawler_node/testweb/server.py" in context
    rules = dockerignore_rules()
    for private in (
        ".env",
        ".git/config",
        "data/n1/frontier.sqlite3",
        "tests/test_api.py",
        "crawler_node/__pycache__/cli.cpython-311.pyc",
        ".ci/venv/bin/python",
    ):
        assert excluded(private, rules), f"{private} would be sent to the Docker daemon"


@pytest.mark.skipif(
    os.environ.get("CRAWLER_DEPLOY_BUILD") != "1",
    reason="builds a wheel (needs PyPI for build deps); .ci/validate-deploy sets CRAWLER_DEPLOY_BUILD=1",
)
def test_the_dockerfile_copies_are_enough_for_pip_install(dockerfile, tmp_path):
    """Emulate the build: the context after .dockerignore, the COPY lines into WORKDIR, then
    build the wheel `pip install .` would install, and look for the code and the script in it."""
    context = tmp_path / "context"
    for rel in build_context():
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, context / rel)
    image = tmp_path / "image"
    workdir = image
    for key, rest in dockerfile:
        if key == "WORKDIR":
            workdir = image / rest.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif key == "COPY":
            *sources, dest = [item for item in shlex.split(rest) if not item.startswith("--")]
            target = image / dest.lstrip("/") if dest.startswith("/") else workdir / dest
            for source in sources:
                src = context / source
                assert src.exists(), f"COPY {source}: not in the build context"
                if src.is_dir():
                    shutil.copytree(src, target, dirs_exist_ok=True)
                else:
                    to = target / src.name if dest.endswith("/") or len(sources) > 1 else target
                    to.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, to)
        elif key == "RUN" and "pip install" in rest:
            break
    wheels = tmp_path / "wheels"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(workdir)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = wheels.glob("crawler_node-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert {"crawler_node/cli.py", "crawler_node/daemon.py", "crawler_node/testweb/server.py"} <= names
    assert re.search(r"^crawler-node\s*=\s*crawler_node\.cli:main$", entry_points, re.MULTILINE)


# --- docker-compose.yml ----------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err} and $$."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name", "op", "arg")
        current = env.get(name)
        unset = (not current) if op in (":-", ":?") else (current is None)
        if op is not None and unset:
            if op.endswith("?"):
                raise AssertionError(f"${{{name}}} is required: {arg}")
            return arg
        return current or ""

    return _INTERPOLATION.sub(replace, value)


@pytest.fixture(scope="module")
def compose() -> dict:
    document = yaml.safe_load(COMPOSE.read_text())  # also resolves the << merges of x-node
    assert isinstance(document, dict)
    return document


def node_services(compose: dict) -> dict[str, dict]:
    """The fixed nodes (node1..node3, no profile: what `docker compose up` starts)."""
    return {name: svc for name, svc in compose["services"].items()
            if svc.get("command") == ["run"] and not svc.get("profiles")}


def network_aliases(service: dict) -> set[str]:
    return set(((service.get("networks") or {}).get("default") or {}).get("aliases") or [])


def compose_env(service: dict, host_env: dict[str, str] | None = None) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {key: interpolate(str(value), host_env or {}) for key, value in environment.items()}


def healthcheck_code(service: dict) -> str:
    test = service["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"], "exec form, with the image's python (no curl in slim)"
    return test[3]


def test_compose_services_run_real_subcommands(compose):
    services = compose["services"]
    assert set(services) == {"testweb", "node1", "node2", "node3", "node"}
    images = {(svc.get("image"), json.dumps(svc.get("build"), sort_keys=True)) for svc in services.values()}
    assert len(images) == 1, "every service runs the one image built from the Dockerfile"
    assert all(svc["build"]["context"] == "." for svc in services.values())
    for svc in services.values():
        parses_as_cli(svc["command"])
    testweb = services["testweb"]
    assert testweb["command"][0] == "testweb"
    listen = testweb["command"][testweb["command"].index("--listen") + 1]
    assert listen.startswith("0.0.0.0:")
    code = healthcheck_code(testweb)
    assert f"http://127.0.0.1:{port_of(listen)}/_testweb/stats" in code


def test_compose_environment_names_are_settings(compose):
    for name, svc in compose["services"].items():
        names = set(compose_env(svc))
        assert names <= ACCEPTED_ENV_NAMES, f"{name}: not crawler settings: {sorted(names - ACCEPTED_ENV_NAMES)}"


def test_compose_nodes_load_valid_settings_and_find_themselves(compose):
    nodes = node_services(compose)
    assert set(nodes) == {"node1", "node2", "node3"}
    services = compose["services"]
    testweb_listen = services["testweb"]["command"][services["testweb"]["command"].index("--listen") + 1]
    peer_lists = set()
    seeded = []
    for name, svc in nodes.items():
        env = compose_env(svc)
        try:
            settings = load_settings({}, env=env)
        except SettingsError as exc:
            pytest.fail(f"{name}: the environment is not valid settings: {exc}")
        peers = settings.peer_map()
        peer_lists.add(env["CRAWLER_PEERS"])
        assert settings.node_id == name, "node id = service name = peer id"
        assert peers.get(name) == settings.advertise_url, f"{name} must find itself in CRAWLER_PEERS"
        assert set(peers) == set(nodes), "one peer per node service"
        for peer_id, url in peers.items():
            parts = urlsplit(url)
            assert parts.hostname == peer_id and parts.port == port_of(settings.listen)
        assert settings.listen.startswith("0.0.0.0:"), "listen on all container interfaces"
        assert str(settings.data_dir) == "/data"
        proxy = urlsplit(settings.proxy or "")
        assert proxy.hostname == "testweb" and proxy.port == port_of(testweb_listen)
        assert settings.secret, "nodes share a cluster token"
        if settings.seeds:
            seeded.append(name)
        assert settings.peer_dns in network_aliases(svc), "fixed nodes also find DNS-found replicas"
        code = healthcheck_code(svc)
        assert f"http://127.0.0.1:{port_of(settings.listen)}/healthz" in code
    assert len(peer_lists) == 1, "the same CRAWLER_PEERS on every node"
    assert seeded == ["node1"], "seeds on node1 only"


def test_compose_scalable_node_finds_its_peers_by_dns(compose):
    """The `node` service (profile dns) has no id, no address and no peer list to edit: its id
    is the container's hostname, its URL its address, its peers what CRAWLER_PEER_DNS names,
    an alias every node (fixed or scaled) carries on the compose network."""
    services = compose["services"]
    scalable = services["node"]
    assert scalable["profiles"] == ["dns"] and scalable["command"] == ["run"]
    env = compose_env(scalable)
    assert not {"CRAWLER_NODE_ID", "CRAWLER_ADVERTISE", "CRAWLER_SEEDS"} & set(env)
    settings = load_settings({}, env=env)
    assert settings.peer_map() == {} and settings.peer_dns
    name, port = parse_peer_dns(settings.peer_dns, port_of(settings.listen))
    assert port == port_of(settings.listen)
    for node_name in [*node_services(compose), "node"]:
        assert name in network_aliases(services[node_name]), f"{node_name} answers to {name}"
    assert "volumes" not in scalable, "one anonymous /data per replica (the image's VOLUME)"
    assert scalable["ports"] == ["127.0.0.1::8080"], "replicas publish on free loopback ports"
    assert scalable["stop_grace_period"] == "30s" and "healthcheck" in scalable


def test_compose_secret_comes_from_the_users_environment(compose):
    raw = {svc["environment"]["CRAWLER_SECRET"] for svc in node_services(compose).values()}
    assert len(raw) == 1
    (template,) = raw
    assert template.startswith("${CRAWLER_SECRET")
    assert compose_env(compose["services"]["node2"], {"CRAWLER_SECRET": "s3"})["CRAWLER_SECRET"] == "s3"


def test_compose_nodes_have_distinct_volumes_healthchecks_and_graceful_stop(compose):
    nodes = node_services(compose)
    declared = set(compose.get("volumes") or {})
    seen: dict[str, str] = {}
    for name, svc in nodes.items():
        mounts = [v.split(":") if isinstance(v, str) else [v["source"], v["target"]] for v in svc["volumes"]]
        data = [source for source, target, *_ in mounts if target == "/data"]
        assert len(data) == 1, f"{name}: one volume at /data"
        assert data[0] in declared, f"{name}: /data is a named volume declared under volumes:"
        assert data[0] not in seen, f"{name} and {seen.get(data[0])} share the volume {data[0]}"
        seen[data[0]] = name
        assert svc["depends_on"]["testweb"]["condition"] == "service_healthy"
        assert svc["stop_grace_period"] == "30s"
        assert "healthcheck" in svc
    published = [interpolate(str(p), {}) for p in nodes["node1"].get("ports", [])]
    assert published == ["127.0.0.1:8080:8080"], "node1 publishes the dashboard on 8080 (DASHBOARD_PORT)"
    assert interpolate(str(nodes["node1"]["ports"][0]), {"DASHBOARD_PORT": ""}) == "127.0.0.1::8080", \
        "DASHBOARD_PORT= (empty) picks a free port"


def _start(argv: list[str], env: dict[str, str], cwd: Path, ready_prefix: str, timeout: float = 30.0):
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawler_node", *argv],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + timeout
    output = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while True:
            for line in output.decode(errors="replace").split("\n")[:-1]:  # complete lines
                if line.startswith(ready_prefix):
                    return proc, line[len(ready_prefix) :].strip()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or proc.poll() is not None:
                _stop(proc)
                pytest.fail(f"{argv[0]} did not get ready: {output.decode(errors='replace')[-2000:]}")
            if selector.select(min(remaining, 0.5)):
                chunk = os.read(proc.stdout.fileno(), 65536)
                if chunk:
                    output += chunk


def _stop(proc: subprocess.Popen, timeout: float = 10.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def test_compose_stack_commands_env_and_healthchecks_work_as_processes(compose, tmp_path):
    """testweb and node1 started exactly as compose starts them, addresses moved to loopback:
    both health checks pass, and node1 stops on SIGTERM with exit 0 inside stop_grace_period."""
    services = compose["services"]
    # a container has neither our CRAWLER_* settings nor a proxy for its own loopback
    base_env = {
        k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_") and not k.lower().endswith("_proxy")
    }

    command = list(services["testweb"]["command"])
    command[command.index("--listen") + 1] = "127.0.0.1:0"
    testweb, testweb_url = _start(command, base_env, tmp_path, "testweb listening on ")
    try:
        testweb_port = urlsplit(testweb_url).port
        testweb_code = healthcheck_code(services["testweb"]).replace(":8900/", f":{testweb_port}/")
        check = subprocess.run(
            [sys.executable, "-c", testweb_code], env=base_env, check=False, capture_output=True, timeout=30
        )
        assert check.returncode == 0, check.stderr

        node = services["node1"]
        env = compose_env(node)
        data_dir = tmp_path / "node1-data"
        data_dir.mkdir()
        env.update(
            {
                "CRAWLER_LISTEN": "127.0.0.1:0",
                "CRAWLER_DATA_DIR": str(data_dir),
                "CRAWLER_PROXY": f"http://127.0.0.1:{testweb_port}",
            }
        )
        proc, url = _start(node["command"], {**base_env, **env}, data_dir, "crawler-node node1 listening on ")
        try:
            port = urlsplit(url).port
            node_code = healthcheck_code(node).replace(":8080/", f":{port}/")
            check = subprocess.run(
                [sys.executable, "-c", node_code], env=base_env, check=False, capture_output=True, timeout=30
            )
            assert check.returncode == 0, check.stderr
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                f"http://127.0.0.1:{port}/healthz", timeout=5
            ) as response:
                assert json.loads(response.read())["node_id"] == "node1"
            grace = float(node["stop_grace_period"].rstrip("s"))
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=grace) == 0, "SIGTERM is a graceful stop with exit 0"
        finally:
            _stop(proc)
    finally:
        _stop(testweb)


# --- Kubernetes (deploy/) --------------------------------------------------------------------


@pytest.fixture(scope="module")
def kustomization() -> dict:
    return yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())


@pytest.fixture(scope="module")
def manifests(kustomization) -> list[dict]:
    documents = []
    for resource in kustomization["resources"]:
        for document in yaml.safe_load_all((DEPLOY / resource).read_text()):
            if document is not None:
                document["__file__"] = resource
                documents.append(document)
    return documents


def find(manifests: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [m for m in manifests if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]


def one(manifests: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(manifests, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def container_port(container: dict, port) -> int:
    if isinstance(port, int):
        assert any(p["containerPort"] == port for p in container["ports"]), port
        return port
    named = [p["containerPort"] for p in container["ports"] if p.get("name") == port]
    assert named, f"container {container['name']} has no port named {port}"
    return named[0]


def pod_env(manifests: list[dict], container: dict, pod_name: str) -> dict[str, str]:
    """The container's environment as the kubelet would set it for pod `pod_name`: downward API
    metadata.name, secretKeyRef from the Secret manifests, $(VAR) expanded from earlier vars."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), str(item["value"]))
        elif "fieldRef" in item["valueFrom"]:
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            value = pod_name
        elif "secretKeyRef" in item["valueFrom"]:
            ref = item["valueFrom"]["secretKeyRef"]
            secret = one(manifests, "Secret", ref["name"])
            data = secret.get("stringData") or {}
            assert ref["key"] in data or ref["key"] in (secret.get("data") or {}), (
                f"no key {ref['key']} in {ref['name']}"
            )
            value = data.get(ref["key"], "from-data")
        else:
            pytest.fail(f"unexpected env source {item}")
        env[item["name"]] = value
    return env


def test_kustomization_lists_every_manifest(kustomization, manifests):
    assert kustomization["kind"] == "Kustomization"
    listed = set(kustomization["resources"])
    on_disk = {p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml"} | {
        p.name for p in DEPLOY.glob("*.yml")
    }
    assert listed == on_disk, "kustomization.yaml lists exactly the manifests in deploy/"
    assert "namespace" not in kustomization, "namespace-less: apply with -n"
    keys = set()
    for m in manifests:
        assert m.get("apiVersion") and m.get("kind"), m["__file__"]
        assert m.get("metadata", {}).get("name"), f"{m['__file__']}: metadata.name"
        assert "namespace" not in m["metadata"], f"{m['__file__']}: no namespace in the manifests"
        key = (m["kind"], m["metadata"]["name"])
        assert key not in keys, f"duplicate {key}"
        keys.add(key)
    assert (DEPLOY / "README.md").exists()


def test_manifests_match_the_kubernetes_schemas(manifests):
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (.ci/validate-deploy does)")
    from kubernetes_validate import utils

    for manifest in manifests:
        document = {k: v for k, v in manifest.items() if k != "__file__"}
        try:
            kv.validate(document, utils.latest_version(), strict=True)
        except utils.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            pytest.fail(
                f"{manifest['__file__']} {manifest['kind']}/{manifest['metadata']['name']}: {where}: {exc.message}"
            )
        except utils.SchemaNotFoundError as exc:
            pytest.fail(f"{manifest['__file__']}: {exc.message}")


def test_statefulset_services_and_probes_line_up(manifests):
    sts = one(manifests, "StatefulSet", "crawler")
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert selects(spec["selector"]["matchLabels"], labels)

    headless = one(manifests, "Service", spec["serviceName"])
    assert headless["spec"].get("clusterIP") == "None", "serviceName must be the headless service"
    assert headless["spec"].get("publishNotReadyAddresses") is True
    services = [s for s in find(manifests, "Service") if selects(s["spec"].get("selector", {}), labels)]
    assert {s["metadata"]["name"] for s in services} == {"crawler", "crawler-api"}

    assert spec["replicas"] == 3
    assert spec["podManagementPolicy"] == "Parallel"
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    uid = dockerfile_values(dockerfile_instructions(DOCKERFILE.read_text()), "USER")[-1].split(":")[0]
    assert pod["securityContext"]["runAsUser"] == int(uid), "same uid as the image's USER"
    assert pod["securityContext"].get("fsGroup") == int(uid), "the data volume must be writable"

    (container,) = pod["containers"]
    parses_as_cli(container.get("command", [])[1:] + container["args"])
    for service in services:
        for port in service["spec"]["ports"]:
            assert container_port(container, port.get("targetPort", port["port"])) == 8080
    for probe in ("readinessProbe", "livenessProbe"):
        assert probe in container, probe
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if probe in container:
            get = container[probe]["httpGet"]
            assert get["path"] == "/healthz"
            assert container_port(container, get["port"]) == 8080
    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and {"cpu", "memory"} <= set(resources["limits"])
    assert container["securityContext"]["allowPrivilegeEscalation"] is False

    (claim,) = spec["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/data"
    assert claim["spec"]["resources"]["requests"]["storage"]

    pdb = one(manifests, "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)


def test_statefulset_env_is_real_settings_for_every_replica(manifests):
    sts = one(manifests, "StatefulSet", "crawler")
    spec = sts["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    names = [item["name"] for item in container["env"]]
    assert set(names) <= ACCEPTED_ENV_NAMES, f"not crawler settings: {sorted(set(names) - ACCEPTED_ENV_NAMES)}"
    assert len(names) == len(set(names))
    port = container_port(container, "http")
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    pods = [f"{sts['metadata']['name']}-{i}" for i in range(spec["replicas"])]
    service = one(manifests, "Service", spec["serviceName"])
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    for pod_name in pods:
        env = pod_env(manifests, container, pod_name)
        try:
            settings: Settings = load_settings({}, env=env)
        except SettingsError as exc:
            pytest.fail(f"{pod_name}: the environment is not valid settings: {exc}")
        assert settings.node_id == pod_name
        assert settings.peer_map() == {}, "no peer list to edit: the members are found by DNS"
        assert settings.peer_dns is not None
        assert parse_peer_dns(settings.peer_dns, port) == (spec["serviceName"], port), \
            "CRAWLER_PEER_DNS names the headless service (its A records: every pod)"
        assert settings.advertise_url == f"http://{pod_name}.{spec['serviceName']}:{port}"
        assert port_of(settings.listen) == port and settings.listen.startswith("0.0.0.0:")
        assert str(settings.data_dir) in mounts
        assert settings.secret
        if settings.proxy:
            proxy = urlsplit(settings.proxy)
            proxy_service = one(manifests, "Service", proxy.hostname)
            assert proxy.port in [p["port"] for p in proxy_service["spec"]["ports"]]


def test_testweb_deployment_runs_testweb_behind_its_service(manifests):
    deployment = one(manifests, "Deployment", "crawler-testweb")
    pod = deployment["spec"]["template"]
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    (container,) = pod["spec"]["containers"]
    args = container.get("command", [])[1:] + container["args"]
    assert args[0] == "testweb"
    parses_as_cli(args)
    listen_port = port_of(args[args.index("--listen") + 1])
    for probe in ("readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/_testweb/stats" and container_port(container, get["port"]) == listen_port
    service = one(manifests, "Service", "crawler-testweb")
    assert selects(service["spec"]["selector"], pod["metadata"]["labels"])
    sts_labels = one(manifests, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert not selects(service["spec"]["selector"], sts_labels)
    for port in service["spec"]["ports"]:
        assert container_port(container, port["targetPort"]) == listen_port
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_images_agree_with_the_kustomization(kustomization, manifests):
    images = {i["name"]: f"{i.get('newName', i['name'])}:{i['newTag']}" for i in kustomization.get("images", [])}
    for m in manifests:
        if m["kind"] in ("StatefulSet", "Deployment"):
            for container in m["spec"]["template"]["spec"]["containers"]:
                name = container["image"].rsplit(":", 1)[0]
                assert name in images, f"{m['metadata']['name']}: image {name} not under images: in kustomization.yaml"
                assert container["image"] == images[name]


def test_the_scrape_targets_are_every_node_and_the_job_the_alerts_select(manifests):
    """The ServiceMonitor (Prometheus Operator) and the annotations (annotation discovery) both
    reach each node's /metrics on its http port; the ServiceMonitor's job is the service's name,
    which CrawlerNodeUnreachable selects (up{job=~"crawler.*"})."""
    monitor = yaml.safe_load((DEPLOY / "prometheus" / "servicemonitor.yaml").read_text())
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "ServiceMonitor")
    headless = one(manifests, "Service", "crawler")
    api = one(manifests, "Service", "crawler-api")
    wanted = monitor["spec"]["selector"]["matchLabels"]
    selected = [svc for svc in (headless, api) if wanted.items() <= svc["metadata"]["labels"].items()]
    # both services carry the labels; the job takes the name of each selected service
    assert headless in selected and all(re.fullmatch("crawler.*", svc["metadata"]["name"]) for svc in selected)
    ports = {port["name"]: port for port in headless["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    pod = one(manifests, "StatefulSet", "crawler")["spec"]["template"]
    for annotated in (pod["metadata"], headless["metadata"]):
        notes = annotated["annotations"]
        assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/path"] == "/metrics"
        assert int(notes["prometheus.io/port"]) == ports["http"]["port"]
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    unreachable = [rule for group in rules["groups"] for rule in group["rules"]
                   if rule.get("alert") == "CrawlerNodeUnreachable"]
    assert unreachable and 'job=~"crawler.*"' in unreachable[0]["expr"]

