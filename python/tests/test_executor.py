"""forktrial as activegraph's TrialExecutor: the contract's checks, and
each field of TrialResult mapped from forktrial's report, on this machine
and on a cluster. Run against the stand-in of activegraph's child and
contract (see conftest.py)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from forktrial import ForktrialError, ForktrialTrialExecutor
from forktrial.executor import forktrial_specification

from activegraph.sandbox import TRIAL_OUTCOMES, PackSource, TrialLimits
from activegraph.sandbox.executor import (
    TrialExecutor,
    TrialResult,
    TrialSpecification,
)


def specification(pack: Path, scenario: str = "complete", **limits) -> TrialSpecification:
    return TrialSpecification(
        store_path="/nonexistent/activegraph.db",  # activegraph's; forktrial reads its own
        parent_run_id="run_chat",
        at_event="evt_031",
        pack_source=PackSource(str(pack)),
        scenario=f"scenarios.py::{scenario}",
        limits=TrialLimits(**{"wall_clock_seconds": 20.0, **limits}),
        label=f"py-{scenario}",
    )


def report_of(result: TrialResult) -> dict:
    """forktrial's whole report, from the result's artifact."""
    (artifact,) = result.artifacts
    assert artifact.name == "forktrial-report"
    assert artifact.media_type == "application/json"
    prefix = "data:application/json;base64,"
    assert artifact.uri.startswith(prefix)
    document = base64.b64decode(artifact.uri[len(prefix):])
    assert artifact.digest == "sha256:" + hashlib.sha256(document).hexdigest()
    return json.loads(document)


class TestConformance:
    """The checks activegraph's conformance suite makes of an adapter."""

    @pytest.fixture(autouse=True)
    def _setup(self, store, ag_pack):
        self.store = store
        self.pack = ag_pack

    def make_executor(self) -> ForktrialTrialExecutor:
        return ForktrialTrialExecutor(self.store)

    def make_serialized_specification(self) -> str:
        return specification(self.pack).to_json()

    def test_protocol_and_isolation_are_declared(self):
        executor = self.make_executor()
        assert isinstance(executor, TrialExecutor)
        guarantees = executor.isolation_guarantees
        for claim in ("process", "filesystem", "network", "syscalls", "environment"):
            assert getattr(guarantees, claim)
        assert guarantees.security_sandbox is False

    def test_specification_round_trip_is_canonical(self):
        serialized = self.make_serialized_specification()
        parsed = TrialSpecification.from_json(serialized)
        assert TrialSpecification.from_json(parsed.to_json()) == parsed
        assert parsed.to_json() == TrialSpecification.from_json(parsed.to_json()).to_json()

    def test_execute_returns_complete_provider_neutral_result(self):
        executor = self.make_executor()
        result = executor.execute(self.make_serialized_specification())
        assert isinstance(result, TrialResult)
        assert result.status in TRIAL_OUTCOMES
        assert result.budget_use.events_appended >= 0
        assert result.budget_use.behavior_failures >= 0
        assert isinstance(result.artifacts, tuple)
        assert result.event_log.store_path and result.event_log.run_id
        assert result.isolation == executor.isolation_guarantees
        assert (result.failure is None) == (result.status == "completed")
        report = result.to_report()
        assert report.outcome == result.status
        assert report.fork_run_id == result.event_log.run_id

    def test_malformed_specification_fails_before_execution(self):
        with pytest.raises(ValueError):
            self.make_executor().execute("{}")


@pytest.mark.parametrize(
    "scenario, limits, status, events, limit",
    [
        ("complete", {}, "completed", 2, None),
        ("fail", {}, "scenario_failed", 1, None),
        ("lie", {}, "crashed", 1, None),
        ("sleep", {"wall_clock_seconds": 1.0}, "limits_exceeded", 1, "wall_clock"),
        ("allocate", {"max_rss_bytes": 32 << 20}, "limits_exceeded", 0, "memory"),
    ],
)
def test_every_field_of_the_result_maps_from_forktrials_report(
    binary, store, ag_pack, scenario, limits, status, events, limit
):
    spec = specification(ag_pack, scenario, **limits)
    executor = ForktrialTrialExecutor(store)
    result = executor.execute(spec.to_json())
    # Every field of the contract's result is set from the report.
    assert {f.name for f in dataclasses.fields(TrialResult)} == {
        "status", "budget_use", "artifacts", "event_log", "failure", "isolation", "detail",
        "exit_code", "warnings"}
    report = report_of(result)
    assert result.status == status == report["outcome"]
    assert result.budget_use.events_appended == events == report["events_appended"]
    assert result.budget_use.behavior_failures == report["behavior_failures"]
    assert result.budget_use.limits == spec.limits
    assert result.detail == report["detail"]
    assert result.exit_code == report["exit_code"]
    assert result.warnings == tuple(report["warnings"])
    if status == "completed":
        assert result.failure is None
    else:
        assert result.failure.kind == status
        assert result.failure.message == report["detail"]
        assert result.failure.exit_code == report["exit_code"]
    # What the report adds beyond the contract travels in the artifact.
    assert report["executor"] == {"name": "activegraph", "version": "0.0.0+standin"}
    assert "behavior_failures_after_fork" in report
    assert report["limit"] == limit  # which net stopped it, by name
    assert {net["name"] for net in report["isolation"]["nets"]} >= {"memory", "wall_clock"}
    # The fork's events are in the forktrial store the event log names.
    assert result.event_log.store_path == str(store.resolve())
    shown = subprocess.run(
        [binary, "run", "show", result.event_log.run_id, "--store", str(store), "--json"],
        capture_output=True, text=True, check=True)
    assert json.loads(shown.stdout)["events"] == 31 + events


def test_a_setup_problem_raises_and_records_nothing(store, ag_pack):
    spec = specification(ag_pack)
    broken = dataclasses.replace(spec, parent_run_id="run_nope")
    with pytest.raises(ForktrialError) as raised:
        ForktrialTrialExecutor(store).execute(broken.to_json())
    assert raised.value.status == 1
    assert "run_nope" in raised.value.message


def test_an_executor_is_local_or_on_a_cluster_never_both(store):
    with pytest.raises(ValueError):
        ForktrialTrialExecutor()
    with pytest.raises(ValueError):
        ForktrialTrialExecutor(store, coordinator="ipc:///x")
    with pytest.raises(ValueError):
        ForktrialTrialExecutor(store, isolation="paranoid")


def test_the_specification_becomes_a_forktrial_batch_line(ag_pack):
    spec = specification(ag_pack, "fail", max_rss_bytes=1 << 30)
    line = forktrial_specification(spec)
    assert line["candidate"] == {"root_dir": str(ag_pack.resolve()), "manifest_required": True}
    assert "store_path" not in line
    assert line["limits"]["max_rss_bytes"] == 1 << 30
    assert line["scenario"] == "scenarios.py::fail"


def test_on_a_cluster_the_trial_runs_on_a_worker_that_offers_activegraph(cluster, ag_pack):
    cluster.start_worker("w1")
    executor = ForktrialTrialExecutor(coordinator=cluster.endpoint)
    result = executor.execute(specification(ag_pack, "fail").to_json())
    assert result.status == "scenario_failed", cluster.log_text()
    assert result.failure.kind == "scenario_failed"
    assert result.budget_use.events_appended == 1
    assert result.event_log.store_path == f"forktrial+{cluster.endpoint}"
    report = report_of(result)
    assert report["worker"] == "w1"
    assert report["executor"]["name"] == "activegraph"
    assert result.isolation == executor.isolation_guarantees
