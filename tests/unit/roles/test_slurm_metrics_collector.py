"""The Slurm metrics collector (roles/slurm_metrics/files/slurm_metrics.py) on real Slurm 22.05 outputs.

tests/unit/data/slurm_metrics/<scenario>/ holds what the collector's four
commands printed on a gpuclus sandbox (Debian 12, slurm-wlm 22.05.8; one
compute node slm-gpu01 with 2 fake GPUs and 2 CPUs; partitions gpu, debug
(the same node) and spare (no node), made with `scontrol create`), run with
exactly the collector's argv:

- idle: no jobs;
- busy: job 1 `--gres=gpu:1` and job 2 `--gpus=1` running (account unset),
  job 3 `--gres=gpu:2` pending, job 4 `-p gpu,debug --gpus=2` and job 5
  `-p debug -c 1` pending (account research);
- draining: as busy, the node drained with the reason `GPU "1" fell off\\bus`;
- drained: the running jobs cancelled, the pending ones left;
- not_responding: slurmd stopped on the node, a minute later;
- down: the same, after SlurmdTimeout (Slurm's own reason "Not responding");
- mixed: slurmctld restarted (the runtime partitions gone: gpu only), slurmd
  back, one job `-c 1 --gres=gpu:1` running on the 2-CPU node.

The exposition text is parsed back here (escapes included) and checked
against docs/monitoring.md's table, and with promtool where it is available.
"""

from __future__ import annotations

import importlib.util
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from prometheus_tools import require

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "roles" / "slurm_metrics" / "files" / "slurm_metrics.py"
DATA = Path(__file__).resolve().parents[1] / "data" / "slurm_metrics"
SCENARIOS = ("idle", "busy", "draining", "drained", "not_responding", "down", "mixed")
NODE = "slm-gpu01"
MIB = 1024 * 1024

Labels = frozenset[tuple[str, str]]


@pytest.fixture(scope="module")
def collector() -> ModuleType:
    spec = importlib.util.spec_from_file_location("slurm_metrics", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["slurm_metrics"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def fixture_runner(collector: ModuleType, scenario: str) -> Any:
    """A runner that answers each of the collector's commands with the captured output."""
    files = {
        tuple(collector.NODES_COMMAND): "nodes.txt",
        tuple(collector.PARTITIONS_COMMAND): "partitions.txt",
        tuple(collector.JOBS_COMMAND): "jobs.txt",
        tuple(collector.SDIAG_COMMAND): "sdiag.txt",
    }

    def run(argv: Iterable[str]) -> str:
        return (DATA / scenario / files[tuple(argv)]).read_text()

    return run


def exposition(collector: ModuleType, scenario: str) -> str:
    snapshot = collector.collect(fixture_runner(collector, scenario))
    return str(collector.render(snapshot, 0.25, 1795527776.5))


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


def parse(text: str) -> dict[tuple[str, Labels], float]:
    """Samples of the text exposition format: (name, labels) → value. Fails on a malformed line."""
    samples: dict[tuple[str, Labels], float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_]+ .+$", line), line
            continue
        match = SAMPLE.match(line)
        assert match is not None, line
        labels = match.group(2) or ""
        pairs = LABEL.findall(labels)
        assert "".join(f'{k}="{v}",' for k, v in pairs).rstrip(",") == labels.rstrip(","), line
        key = (match.group(1), frozenset((name, unescape(value)) for name, value in pairs))
        assert key not in samples, f"duplicate series {line}"
        samples[key] = float(match.group(3))
    return samples


def series(samples: dict[tuple[str, Labels], float], name: str) -> dict[Labels, float]:
    return {labels: value for (metric, labels), value in samples.items() if metric == name}


def one(samples: dict[tuple[str, Labels], float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def contract() -> dict[str, set[str]]:
    """docs/monitoring.md's "Slurm metrics" table: metric → its label names."""
    text = (REPO / "docs" / "monitoring.md").read_text()
    section = text.split("## Slurm metrics", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`slurm_"):
            # "`node`, `status` = `alloc`/`total`": the label names, without the values after "=".
            names = re.sub(r"=\s*`[^`]*`(?:\s*/\s*`[^`]*`)*", "", cells[1])
            table[cells[0].strip("`")] = set(re.findall(r"`([a-z_]+)`", names))
    assert len(table) > 20, table
    return table


# --- the captured outputs, parsed ---------------------------------------------------------------------------


def test_an_idle_node_in_two_partitions_and_an_empty_partition(collector: ModuleType) -> None:
    samples = parse(exposition(collector, "idle"))
    assert series(samples, "slurm_node_state") == {frozenset({("node", NODE), ("state", "idle")}): 1}
    assert one(samples, "slurm_node_not_responding", node=NODE) == 0
    assert series(samples, "slurm_node_reason_info") == {}
    assert one(samples, "slurm_node_cpus", node=NODE, status="total") == 2
    assert one(samples, "slurm_node_cpus", node=NODE, status="alloc") == 0
    assert one(samples, "slurm_node_gpus", node=NODE, status="total") == 2
    assert one(samples, "slurm_node_gpus", node=NODE, status="alloc") == 0
    assert one(samples, "slurm_node_memory_bytes", node=NODE, status="total") == 23622 * MIB
    for partition in ("gpu", "debug"):
        assert one(samples, "slurm_partition_nodes", partition=partition, state="idle") == 1
        assert one(samples, "slurm_partition_gpus", partition=partition, status="total") == 2
    # spare has no node: every state and figure is there, as 0.
    spare = {
        labels: value
        for labels, value in series(samples, "slurm_partition_nodes").items()
        if ("partition", "spare") in labels
    }
    assert sorted(dict(labels)["state"] for labels in spare) == sorted(collector.NODE_STATES)
    assert set(spare.values()) == {0}
    assert one(samples, "slurm_partition_cpus", partition="spare", status="total") == 0
    # No job: pending and running are written, 0, for every partition; no user series.
    assert series(samples, "slurm_jobs") == {
        frozenset({("partition", p), ("state", s)}): 0
        for p in ("gpu", "debug", "spare")
        for s in ("pending", "running")
    }
    assert series(samples, "slurm_user_jobs") == {}
    assert series(samples, "slurm_user_gpus") == {}


def test_running_jobs_count_their_gpus_whether_asked_with_gres_or_gpus(collector: ModuleType) -> None:
    jobs = collector.parse_jobs((DATA / "busy" / "jobs.txt").read_text())
    # squeue lists jobs 5, 3, 1, 2, 4: 1 asked --gres=gpu:1, 2 --gpus=1.
    assert [(job.partition, job.account, job.state, job.gpus) for job in jobs] == [
        ("debug", "research", "pending", 0),
        ("gpu", "", "pending", 2),
        ("gpu", "", "running", 1),
        ("gpu", "", "running", 1),
        ("gpu", "research", "pending", 2),
    ]
    samples = parse(exposition(collector, "busy"))
    assert one(samples, "slurm_user_gpus", user="gpuclus", account="") == 2
    assert one(samples, "slurm_user_gpus", user="gpuclus", account="research") == 0
    assert one(samples, "slurm_node_gpus", node=NODE, status="alloc") == 2
    assert one(samples, "slurm_partition_gpus", partition="gpu", status="alloc") == 2
    assert one(samples, "slurm_node_cpus", node=NODE, status="alloc") == 2
    assert one(samples, "slurm_node_memory_bytes", node=NODE, status="alloc") == 23622 * MIB
    assert series(samples, "slurm_node_state") == {frozenset({("node", NODE), ("state", "allocated")}): 1}


def test_without_gres_accounting_the_gpus_come_from_the_request(collector: ModuleType) -> None:
    """AccountingStorageTRES without gres/gpu: squeue's tres-alloc has no gres/gpu."""
    text = re.sub(r",gres/gpu=\d+", "", (DATA / "busy" / "jobs.txt").read_text())
    assert "gres/gpu" not in text
    assert [job.gpus for job in collector.parse_jobs(text)] == [0, 2, 1, 1, 2]
    values = dict.fromkeys(collector.JOB_FIELDS, "N/A") | {
        "tres-alloc": "cpu=8,node=2",
        "NumNodes": "2",
        "NumTasks": "4",
        "tres-per-task": "gres/gpu:1",
    }
    assert collector.job_gpus(values) == 4
    assert collector.job_gpus(values | {"tres-per-task": "N/A", "tres-per-node": "gres:gpu:a100:2"}) == 4


def test_jobs_are_counted_per_partition_and_per_user(collector: ModuleType) -> None:
    samples = parse(exposition(collector, "busy"))
    # Job 4 pends in gpu,debug: it counts in its first partition only.
    assert series(samples, "slurm_jobs") == {
        frozenset({("partition", "gpu"), ("state", "pending")}): 2,
        frozenset({("partition", "gpu"), ("state", "running")}): 2,
        frozenset({("partition", "debug"), ("state", "pending")}): 1,
        frozenset({("partition", "debug"), ("state", "running")}): 0,
        frozenset({("partition", "spare"), ("state", "pending")}): 0,
        frozenset({("partition", "spare"), ("state", "running")}): 0,
    }
    assert series(samples, "slurm_user_jobs") == {
        frozenset({("user", "gpuclus"), ("account", ""), ("state", "pending")}): 1,
        frozenset({("user", "gpuclus"), ("account", ""), ("state", "running")}): 2,
        frozenset({("user", "gpuclus"), ("account", "research"), ("state", "pending")}): 2,
    }


def test_a_drained_node_with_running_jobs_is_draining_then_drained(collector: ModuleType) -> None:
    for scenario, state, alloc in (("draining", "draining", 2), ("drained", "drained", 0)):
        samples = parse(exposition(collector, scenario))
        assert series(samples, "slurm_node_state") == {frozenset({("node", NODE), ("state", state)}): 1}
        assert one(samples, "slurm_partition_nodes", partition="gpu", state=state) == 1
        assert one(samples, "slurm_partition_nodes", partition="gpu", state="idle") == 0
        assert one(samples, "slurm_node_gpus", node=NODE, status="alloc") == alloc
        # The reason as the admin gave it, without Slurm's [root@time] stamp.
        assert series(samples, "slurm_node_reason_info") == {
            frozenset({("node", NODE), ("reason", 'GPU "1" fell off\\bus')}): 1
        }


def test_the_reason_label_is_escaped_in_the_file(collector: ModuleType) -> None:
    text = exposition(collector, "draining")
    assert 'slurm_node_reason_info{node="slm-gpu01",reason="GPU \\"1\\" fell off\\\\bus"} 1\n' in text


def test_a_node_whose_slurmd_stopped_is_not_responding_then_down(collector: ModuleType) -> None:
    samples = parse(exposition(collector, "not_responding"))
    assert series(samples, "slurm_node_state") == {frozenset({("node", NODE), ("state", "idle")}): 1}
    assert one(samples, "slurm_node_not_responding", node=NODE) == 1
    assert series(samples, "slurm_node_reason_info") == {}
    samples = parse(exposition(collector, "down"))
    assert series(samples, "slurm_node_state") == {frozenset({("node", NODE), ("state", "down")}): 1}
    assert one(samples, "slurm_node_not_responding", node=NODE) == 1
    assert series(samples, "slurm_node_reason_info") == {frozenset({("node", NODE), ("reason", "Not responding")}): 1}
    assert one(samples, "slurm_partition_nodes", partition="debug", state="down") == 1


def test_a_node_with_part_of_its_cpus_allocated_is_mixed(collector: ModuleType) -> None:
    samples = parse(exposition(collector, "mixed"))
    assert series(samples, "slurm_node_state") == {frozenset({("node", NODE), ("state", "mixed")}): 1}
    assert one(samples, "slurm_node_cpus", node=NODE, status="alloc") == 1
    assert one(samples, "slurm_node_gpus", node=NODE, status="alloc") == 1
    assert one(samples, "slurm_partition_nodes", partition="gpu", state="mixed") == 1
    assert series(samples, "slurm_user_gpus") == {frozenset({("user", "gpuclus"), ("account", "research")}): 1}
    assert {dict(labels)["partition"] for labels in series(samples, "slurm_jobs")} == {"gpu"}


def test_sdiag_figures(collector: ModuleType) -> None:
    values, events = collector.parse_sdiag((DATA / "busy" / "sdiag.txt").read_text())
    assert values == {
        "slurm_scheduler_threads": 3,
        "slurm_scheduler_agent_queue_size": 0,
        "slurm_scheduler_dbd_agent_queue_size": 0,
        "slurm_scheduler_last_cycle_seconds": 105e-6,
        "slurm_scheduler_mean_cycle_seconds": 242e-6,
        "slurm_scheduler_cycles_total": 4,
        "slurm_scheduler_backfill_last_cycle_seconds": 234e-6,
        "slurm_scheduler_backfill_mean_cycle_seconds": 234e-6,
        "slurm_scheduler_backfill_cycles_total": 1,
        "slurm_scheduler_backfilled_jobs_total": 0,
    }
    assert events == {"submitted": 5, "started": 2, "completed": 0, "canceled": 0, "failed": 0}


def test_sdiag_before_the_first_backfill_cycle_has_a_zero_mean(collector: ModuleType) -> None:
    """sdiag prints no backfill "Mean cycle" until a backfill cycle ran (seen on the fresh controller)."""
    text = (DATA / "busy" / "sdiag.txt").read_text()
    before = text.replace("\tMean cycle: 234\n", "")
    assert before.count("Mean cycle:") == 1
    values, _ = collector.parse_sdiag(before)
    assert values["slurm_scheduler_backfill_mean_cycle_seconds"] == 0
    assert values["slurm_scheduler_mean_cycle_seconds"] == 242e-6


# --- the contract -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_series_is_a_contract_metric_with_its_labels(collector: ModuleType, scenario: str) -> None:
    table = contract()
    for name, labels in parse(exposition(collector, scenario)):
        assert name in table, f"{name} is not in docs/monitoring.md"
        assert {label for label, _ in labels} == table[name], (name, labels)


def test_every_contract_metric_is_written_with_jobs_and_a_drained_node(collector: ModuleType) -> None:
    written = {name for name, _ in parse(exposition(collector, "draining"))}
    assert set(contract()) - written == set()


def test_label_values_are_the_contracts(collector: ModuleType) -> None:
    for scenario in SCENARIOS:
        samples = parse(exposition(collector, scenario))
        for (name, labels), value in samples.items():
            found = dict(labels)
            if "state" in found and name in ("slurm_node_state", "slurm_partition_nodes"):
                assert found["state"] in collector.NODE_STATES
            if "state" in found and name in ("slurm_jobs", "slurm_user_jobs"):
                assert found["state"] in ("pending", "running", "completing", "suspended", "configuring")
            if "status" in found:
                assert found["status"] in ("alloc", "total")
            if name == "slurm_user_jobs":
                assert value > 0, "only non-zero per-user counts are written"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_promtool_accepts_the_file(collector: ModuleType, scenario: str) -> None:
    promtool = require("promtool")
    done = subprocess.run(
        [str(promtool), "check", "metrics"],
        input=exposition(collector, scenario),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr


# --- slurmctld down -----------------------------------------------------------------------------------------


def failing_at(collector: ModuleType, command: tuple[str, ...]) -> Any:
    answer = fixture_runner(collector, "busy")

    def run(argv: Iterable[str]) -> str:
        words = tuple(argv)
        if words == tuple(command):
            raise collector.CommandFailed(f"{words[0]}: Unable to contact slurm controller (connect failure)")
        return str(answer(words))

    return run


@pytest.mark.parametrize("which", ["NODES_COMMAND", "PARTITIONS_COMMAND", "JOBS_COMMAND", "SDIAG_COMMAND"])
def test_when_slurmctld_does_not_answer_only_slurm_up_0_and_the_timestamps_remain(
    collector: ModuleType, which: str, tmp_path: Path
) -> None:
    output = tmp_path / "slurm.prom"
    assert collector.run_once(output, fixture_runner(collector, "busy"), clock=lambda: 1700000000.25) is True
    assert one(parse(output.read_text()), "slurm_up") == 1

    assert collector.run_once(output, failing_at(collector, getattr(collector, which))) is False
    samples = parse(output.read_text())
    assert {name for name, _ in samples} == {
        "slurm_up",
        "slurm_collector_last_success_timestamp_seconds",
        "slurm_collector_duration_seconds",
    }
    assert one(samples, "slurm_up") == 0
    # The last success is carried over from the file the previous run wrote.
    assert one(samples, "slurm_collector_last_success_timestamp_seconds") == 1700000000.25


def test_down_from_the_start_has_no_last_success(collector: ModuleType, tmp_path: Path) -> None:
    output = tmp_path / "slurm.prom"
    collector.run_once(output, failing_at(collector, collector.NODES_COMMAND))
    assert {name for name, _ in parse(output.read_text())} == {"slurm_up", "slurm_collector_duration_seconds"}


def test_missing_slurm_commands_give_slurm_up_0_and_exit_0(
    collector: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    output = tmp_path / "slurm.prom"
    assert collector.main(["--output", str(output), "--timeout", "5"]) == 0
    assert parse(output.read_text())[("slurm_up", frozenset())] == 0


def test_a_command_that_hangs_is_stopped_at_the_timeout(collector: ModuleType) -> None:
    run = collector.command_runner(0.3)
    started = time.monotonic()
    with pytest.raises(collector.CommandFailed, match="timed out"):
        run(["sleep", "10"])
    assert time.monotonic() - started < 5


def test_a_failing_command_says_why(collector: ModuleType) -> None:
    run = collector.command_runner(10)
    with pytest.raises(collector.CommandFailed, match="exit 1: slurm_load_node error: Unable to contact"):
        run(["sh", "-c", "echo 'slurm_load_node error: Unable to contact slurm controller' >&2; exit 1"])
    assert run(["sh", "-c", "echo ok"]) == "ok\n"


def test_the_whole_script_runs_against_fake_slurm_commands(tmp_path: Path) -> None:
    """As systemd runs it: the installed script with python3, its commands found on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command, name in (("scontrol", None), ("squeue", "jobs.txt"), ("sdiag", "sdiag.txt")):
        if command == "scontrol":
            body = (
                'case "$*" in *nodes) cat "$DATA/nodes.txt";; *partitions) cat "$DATA/partitions.txt";; '
                "*) exit 1;; esac\n"
            )
        else:
            body = f'cat "$DATA/{name}"\n'
        script = bin_dir / command
        script.write_text("#!/bin/sh\n" + body)
        script.chmod(0o755)
    output = tmp_path / "textfile" / "slurm.prom"
    output.parent.mkdir()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DATA": str(DATA / "draining")}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--output", str(output)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    samples = parse(output.read_text())
    assert one(samples, "slurm_up") == 1
    assert one(samples, "slurm_node_state", node=NODE, state="draining") == 1
    assert [path.name for path in output.parent.iterdir()] == ["slurm.prom"]


# --- the file -----------------------------------------------------------------------------------------------


def test_the_file_is_replaced_whole_through_a_hidden_temporary_file(
    collector: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "slurm.prom"
    output.write_text("old\n")
    renames: list[tuple[Path, Path]] = []
    real_replace = Path.replace

    def replace(self: Path, target: Any) -> Path:
        renames.append((self, Path(target)))
        assert output.read_text() == "old\n", "the old file stays whole until the rename"
        assert self.read_text() == "new\n", "the temporary file is complete before the rename"
        return real_replace(self, target)

    monkeypatch.setattr(Path, "replace", replace)
    collector.write_atomically(output, "new\n")
    assert output.read_text() == "new\n"
    assert stat.S_IMODE(output.stat().st_mode) == 0o644
    [(temporary, target)] = renames
    assert target == output
    assert temporary.parent == output.parent, "same directory, so the rename is atomic"
    assert temporary.name.startswith(".") and not temporary.name.endswith(".prom"), "the exporter skips it"
    assert [path.name for path in tmp_path.iterdir()] == ["slurm.prom"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    collector: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "slurm.prom"
    output.write_text("old\n")

    def broken_fsync(descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        collector.write_atomically(output, "new\n")
    assert output.read_text() == "old\n"
    assert [path.name for path in tmp_path.iterdir()] == ["slurm.prom"]


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain", "plain"),
        ('say "hi"', 'say \\"hi\\"'),
        ("back\\slash", "back\\\\slash"),
        ("two\nlines", "two\\nlines"),
        ('\\"\n', '\\\\\\"\\n'),
    ],
)
def test_label_values_are_escaped_per_the_exposition_format(collector: ModuleType, raw: str, escaped: str) -> None:
    assert collector.escape(raw) == escaped
    assert unescape(escaped) == raw


def test_every_family_has_help_and_type_and_sorted_series(collector: ModuleType) -> None:
    text = exposition(collector, "busy")
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(names) == len(set(names))
    for name in names:
        assert f"# HELP {name} " in text
        kind = "counter" if name.endswith("_total") else "gauge"
        assert f"# TYPE {name} {kind}\n" in text


# --- the pieces ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "base", "not_responding"),
    [
        ("IDLE", "idle", False),
        ("ALLOCATED", "allocated", False),
        ("MIXED", "mixed", False),
        ("ALLOCATED+DRAIN", "draining", False),
        ("MIXED+DRAIN", "draining", False),
        ("IDLE+COMPLETING+DRAIN", "draining", False),
        ("IDLE+DRAIN", "drained", False),
        ("DOWN+DRAIN+NOT_RESPONDING", "drained", True),
        ("IDLE+NOT_RESPONDING", "idle", True),
        ("DOWN+NOT_RESPONDING", "down", True),
        ("DOWN*", "down", True),
        ("IDLE*+DRAIN", "drained", True),
        ("DOWN", "down", False),
        ("IDLE+FAIL", "fail", False),
        ("ALLOCATED+FAIL", "fail", False),
        ("IDLE+MAINTENANCE+RESERVED", "maint", False),
        ("ALLOCATED+MAINTENANCE+RESERVED", "allocated", False),
        ("IDLE+RESERVED", "reserved", False),
        ("IDLE+PLANNED", "planned", False),
        ("ALLOCATED+COMPLETING", "allocated", False),
        ("IDLE+COMPLETING", "completing", False),
        ("MIXED+COMPLETING", "completing", False),
        ("FUTURE", "future", False),
        ("IDLE+CLOUD+POWERED_DOWN", "idle", False),
        ("IDLE+REBOOT_REQUESTED", "idle", False),
        ("UNKNOWN", "unknown", False),
        ("", "unknown", False),
        ("SOMETHING_NEW", "unknown", False),
    ],
)
def test_node_states_map_to_sinfos_names(collector: ModuleType, state: str, base: str, not_responding: bool) -> None:
    assert collector.node_state(state) == (base, not_responding)


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("gpu:2", 2),
        ("gpu:a100:4(S:0-1)", 4),
        ("gpu:a100:1(IDX:0),gpu:v100:2(IDX:0,2)", 3),
        ("gpu:2(IDX:0-1),mps:200", 2),
        ("gpu", 1),
        ("gpu:h100", 1),
        ("gres:gpu:1", 1),
        ("gres:gpu:a100:2", 2),
        ("gres/gpu:3", 3),
        ("gres/gpu:h100:2,gres/mps:100", 2),
        ("gpu:0(IDX:N/A)", 0),
        ("mps:100", 0),
        ("", 0),
    ],
)
def test_gres_strings(collector: ModuleType, text: str, gpus: int) -> None:
    assert collector.gres_gpus(text) == gpus


def test_tres_strings(collector: ModuleType) -> None:
    assert collector.tres_gpus("cpu=2,mem=23622M,billing=2,gres/gpu=2") == 2
    assert collector.tres_gpus("cpu=2,gres/gpu=4,gres/gpu:a100=4") == 4
    assert collector.tres_gpus("cpu=1,mem=11811M,node=1,billing=1") is None
    assert collector.tres_gpus("") is None


def test_a_reason_may_hold_spaces_and_equal_signs(collector: ModuleType) -> None:
    line = (
        "NodeName=n1 CPUTot=4 State=IDLE+DRAIN OS=Linux 6.1.0 #1 SMP  RealMemory=1000 "
        "Reason=ECC errors: count=3 State=bad [admin@2025-01-01T00:00:00] Comment=see ticket 42"
    )
    [record] = collector.scontrol_records(line)
    assert record["State"] == "IDLE+DRAIN"
    assert record["OS"] == "Linux 6.1.0 #1 SMP"
    assert record["RealMemory"] == "1000"
    assert record["Reason"] == "ECC errors: count=3 State=bad [admin@2025-01-01T00:00:00]"
    assert record["Comment"] == "see ticket 42"
    [node] = collector.parse_nodes(line)
    assert node.reason == "ECC errors: count=3 State=bad"
    assert node.state == "drained"


def test_the_captures_are_what_the_collector_asks_for(collector: ModuleType) -> None:
    """Each scenario holds the four outputs; squeue's lines have one field per JOB_FIELDS entry."""
    for scenario in SCENARIOS:
        assert sorted(path.name for path in (DATA / scenario).iterdir()) == [
            "jobs.txt",
            "nodes.txt",
            "partitions.txt",
            "sdiag.txt",
        ]
        for line in (DATA / scenario / "jobs.txt").read_text().splitlines():
            assert line.count(collector.FIELD_END) == len(collector.JOB_FIELDS), line
        assert "Version=22.05.8" in (DATA / scenario / "nodes.txt").read_text()
    assert collector.JOBS_COMMAND[-1].startswith("--Format=JobID:0\x1f,Partition:0\x1f,")
