"""A fake podman for the sandbox's unit tests: a script in tmp_path that keeps its state in a JSON file.

It keeps containers, networks and volumes with their labels (``labels`` in its
state holds the networks' and volumes'), answers ps/inspect/ls with them as
podman does, refuses a second resource of the same name, and logs every call.
``block_real_engines`` makes every way to a real engine, apt, debootstrap or
SSH fail the test; ``wire`` puts a FakeEngine where gpuclus picks engines.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import pytest

from gpuclus.sandbox import engine as engine_module
from gpuclus.sandbox import hostprep, lifecycle, network
from gpuclus.sandbox.engine import Engine
from gpuclus.sandbox.hostprep import EnginePick
from gpuclus.sandbox.image import PACKAGES, SUITE, ImageRecipe
from gpuclus.sandbox.layout import SandboxNode
from gpuclus.sandbox.nodes import NodeStatus
from gpuclus.state import StateDir

RECIPE = ImageRecipe(SUITE, "http://mirror.example/debian", PACKAGES, (("sources.list", "deb x bookworm main\n"),))

FAKE_ENGINE = r"""
import json, os, sys
from pathlib import Path

home = Path(HOME)
state_file = home / "state.json"
state = json.loads(state_file.read_text()) if state_file.exists() else {}
state.setdefault("networks", {"podman": "10.88.0.0/16"})
state.setdefault("volumes", [])
state.setdefault("containers", {})
state.setdefault("labels", {})  # "network/NAME" or "volume/NAME": that resource's labels
args = sys.argv[1:]
with open(home / "calls.log", "a") as log:
    log.write(json.dumps(args) + "\n")
if args[:1] == ["--runtime"]:
    args = args[2:]


def save():
    temporary = home / f"state.{os.getpid()}"
    temporary.write_text(json.dumps(state))
    os.replace(temporary, state_file)


def value(flag, words):
    return words[words.index(flag) + 1]


def labels_of(words):
    return dict(v.split("=", 1) for v in [words[i + 1] for i, w in enumerate(words) if w == "--label"])


def selector(words):
    # NAME in --filter label=gpuclus.sandbox=NAME; None for --filter label=gpuclus.sandbox (any
    # sandbox) or no filter (every container)
    if "--filter" not in words:
        return None
    parts = value("--filter", words).split("=", 2)
    return parts[2] if len(parts) == 3 else None


def fail(message, code=125):
    sys.stderr.write("level=error msg=\"failed to connect to syslog\"\n" + message + "\n")
    sys.exit(code)


command, rest = args[0], args[1:]
if command == "network":
    sub, names = rest[0], rest[1:]
    if sub == "ls":
        labelled = "--filter" in names
        print("\n".join(n for n in state["networks"] if not labelled or f"network/{n}" in state["labels"]))
    elif sub == "inspect":
        missing = [name for name in names if name not in state["networks"]]
        if missing:
            fail(f"Error: unable to find network with name or ID {missing[0]}: network not found")
        print(json.dumps([
            {
                "name": n,
                "subnets": [{"subnet": state["networks"][n]}],
                "labels": state["labels"].get(f"network/{n}", {}),
            }
            for n in names
        ]))
    elif sub == "create":
        if names[-1] in state["networks"]:
            fail(f"Error: network name {names[-1]} already used: network already exists")
        state["networks"][names[-1]] = value("--subnet", names)
        state["labels"][f"network/{names[-1]}"] = labels_of(names)
        save()
    elif sub == "rm":
        state["networks"].pop(names[-1])
        state["labels"].pop(f"network/{names[-1]}", None)
        save()
elif command == "volume":
    sub, names = rest[0], rest[1:]
    if sub == "ls":
        cluster = selector(names)
        print("\n".join(
            v for v in state["volumes"] if cluster in (None, state["labels"][f"volume/{v}"]["gpuclus.sandbox"])
        ))
    elif sub == "inspect":
        missing = [name for name in names if name not in state["volumes"]]
        if missing:
            fail(f"Error: inspecting object: no such volume {missing[0]}")
        print(json.dumps([{"Name": v, "Labels": state["labels"].get(f"volume/{v}", {})} for v in names]))
    elif sub == "create":
        if names[-1] in state["volumes"]:
            fail(f"Error: volume with name {names[-1]} already exists: volume already exists")
        state["volumes"].append(names[-1])
        state["labels"][f"volume/{names[-1]}"] = labels_of(names)
        save()
    elif sub == "rm":
        state["volumes"] = [v for v in state["volumes"] if v not in names]
        for name in names:
            state["labels"].pop(f"volume/{name}", None)
        save()
elif command == "image":
    if rest[0] == "inspect" and not state.get("image", True):
        fail("Error: no such image")
elif command == "images":
    pass
elif command == "ps":
    cluster = selector(rest)
    print("\n".join(n for n, c in state["containers"].items() if cluster in (None, c["cluster"])))
elif command == "inspect":
    missing = [name for name in rest if name not in state["containers"]]
    if missing:
        fail(f"Error: no such object: {missing[0]}")
    print(json.dumps([
        {
            "Name": n,
            "State": {"Status": state["containers"][n]["state"]},
            "Config": {"Labels": state["containers"][n].get("labels", {})},
        }
        for n in rest
    ]))
elif command == "run":
    labels = labels_of(rest)
    # "storage": names a `run` killed half-way left in podman's storage, which no listing shows.
    if value("--name", rest) in state["containers"] or value("--name", rest) in state.get("storage", []):
        fail(f"Error: creating container storage: the container name \"{value('--name', rest)}\" is already in use")
    state["containers"][value("--name", rest)] = {
        "cluster": labels["gpuclus.sandbox"], "labels": labels, "state": "running", "argv": args
    }
    save()
elif command == "start":
    for name in rest:
        state["containers"][name]["state"] = "running"
    save()
elif command == "rm":
    for name in rest[1:]:
        state["containers"].pop(name, None)
        if name in state.get("storage", []):
            state["storage"].remove(name)
    save()
elif command == "exec":
    if rest[0] == "--interactive":
        rest = rest[1:]
    name, inner = rest[0], rest[1:]
    if inner[:2] == ["systemctl", "is-system-running"]:
        print("running")
    elif inner == ["sh", "-s"]:
        (home / f"setup-{name}.sh").write_text(sys.stdin.read())
        print("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFAKEHOSTKEY" + name.replace("-", ""))
    else:
        fail(f"fake engine: unexpected exec {inner}", 2)
else:
    fail(f"fake engine: unexpected command {args}", 2)
"""


class FakeEngine:
    """A fake podman: a script in tmp_path, its state, and the calls it got."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.script = home / "podman"
        self.script.write_text(f"#!{sys.executable} -S\nHOME = {str(home)!r}\n{FAKE_ENGINE}")
        self.script.chmod(0o755)
        self.engine = Engine("podman", str(self.script))
        self.ssh_checks: list[list[str]] = []  # the nodes each SSH check was asked to reach (see wire)

    @property
    def state(self) -> dict[str, Any]:
        path = self.home / "state.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def calls(self) -> list[list[str]]:
        log = self.home / "calls.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def setup_script(self, node: str) -> str:
        return (self.home / f"setup-{node}.sh").read_text()

    def save(self, state: dict[str, Any]) -> None:
        (self.home / "state.json").write_text(json.dumps(state))


def refuse(*_args: object, **_kwargs: object) -> NoReturn:
    raise AssertionError("the test reached for a real container engine, apt, debootstrap or SSH")


def block_real_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every road to a real engine, apt, debootstrap, the host's routes or SSH fails the test at once."""
    for module in (engine_module, hostprep, lifecycle):
        for name in ("podman_engine", "docker_engine"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)
    for name in ("_podman_usable", "_docker_usable", "apt_install", "ensure_debootstrap", "check_disk"):
        monkeypatch.setattr(hostprep, name, refuse)
    monkeypatch.setattr(hostprep, "pick_engine", refuse)
    monkeypatch.setattr(lifecycle, "engine_named", refuse)
    monkeypatch.setattr(lifecycle, "build_image", refuse)
    monkeypatch.setattr(lifecycle, "check_ssh", refuse)
    monkeypatch.setattr(
        lifecycle,
        "host_recipe",
        lambda mirror=None, suite=SUITE: RECIPE if suite == SUITE else replace(RECIPE, suite=suite),
    )
    monkeypatch.setattr(network, "host_routes", lambda: [])
    # Never the host's own setting: a path that does not exist reads as nothing to check.
    monkeypatch.setattr(hostprep, "INOTIFY_INSTANCES_FILE", Path("/nonexistent/gpuclus-test/max_user_instances"))


def wire(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine) -> None:
    """The fake engine where gpuclus picks engines, and SSH checks that pass (logged in engine.ssh_checks)."""
    monkeypatch.setattr(hostprep, "pick_engine", lambda *a, **k: EnginePick(engine.engine, "fake engine"))
    monkeypatch.setattr(lifecycle, "engine_named", lambda kind: engine.engine)

    def ssh_ok(nodes: Sequence[SandboxNode], state: StateDir, attempts: int = 10) -> list[NodeStatus]:
        assert state.private_key.exists() and state.known_hosts.exists()
        engine.ssh_checks.append([n.name for n in nodes])
        return [
            NodeStatus(n.name, n.address, "controller" if n.controller else "compute", n.gpus, "running", True, os=n.os)
            for n in nodes
        ]

    monkeypatch.setattr(lifecycle, "check_ssh", ssh_ok)
