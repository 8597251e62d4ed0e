"""forktrial as activegraph's ``TrialExecutor`` (activegraph/sandbox/executor.py).

``ForktrialTrialExecutor(store=...)`` runs each trial on this machine
(``forktrial trial --spec``) against a forktrial store holding the parent
run; ``ForktrialTrialExecutor(coordinator=...)`` submits it to a cluster
and waits for its result. activegraph is imported when a trial runs, not
when this module is.

How forktrial's result maps onto activegraph's ``TrialResult``:

- ``status``: the outcome; ``failure``: None when completed, else
  ``TrialFailureDetails(kind=<the outcome>, message=<the detail>,
  exit_code)``, since the contract requires the kind to be the status;
  which net stopped a limits_exceeded trial (``wall_clock``, ``cpu``,
  ``memory``, ``event_budget``, ``write_budget``) is the report's
  ``limit``, in the artifact.
- ``budget_use``: the store's ``events_appended`` and
  ``behavior_failures`` (the fork's whole log, as activegraph counts
  them), and the specification's limits.
- ``event_log``: where the fork's events are: the forktrial store's
  directory (locally) or the coordinator's endpoint (on a cluster), and the
  fork's run id. They are read with ``forktrial run events`` (locally) or
  ``forktrial results`` (on a cluster), not by activegraph's Runtime.
- ``isolation``: the executor's declared guarantees, as the contract
  requires; the nets as they held for this trial are in the artifact.
- ``detail``, ``exit_code``, ``warnings``: as forktrial reports them.
- ``artifacts``: one, ``forktrial-report``: forktrial's whole report as a
  ``data:`` URI of JSON with its SHA-256 digest (the per-trial nets, the
  executor and its version, the worker, ``behavior_failures_after_fork``,
  the ``limit``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

from forktrial.client import Client
from forktrial.command import Command


def _contract():
    """activegraph's executor contract, imported when first needed."""

    from activegraph.sandbox import executor

    return executor


def forktrial_specification(specification: Any) -> dict[str, Any]:
    """activegraph's TrialSpecification as a line of a forktrial JSON Lines
    batch: the candidate is its ``pack_source``, and its ``store_path`` is
    left out (the coordinator's store holds the parent run)."""

    def pack(source: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "root_dir": str(Path(source.root_dir).resolve()),
            "manifest_required": bool(source.manifest_required),
        }
        if source.expected_bundle_hash:
            out["expected_bundle_hash"] = source.expected_bundle_hash
        return out

    limits = specification.limits
    return {
        "schema_version": 1,
        "parent_run_id": specification.parent_run_id,
        "at_event": specification.at_event,
        "label": specification.label,
        "candidate": pack(specification.pack_source),
        "extra_packs": [pack(source) for source in specification.extra_packs],
        "scenario": specification.scenario,
        "limits": {
            "wall_clock_seconds": limits.wall_clock_seconds,
            "max_rss_bytes": limits.max_rss_bytes,
            "max_events": limits.max_events,
            "max_llm_calls": limits.max_llm_calls,
            "env_passthrough": list(limits.env_passthrough),
        },
    }


class ForktrialTrialExecutor:
    """Runs activegraph trial specifications through forktrial.

    Give ``store`` (a forktrial store directory holding the parent runs) to
    run trials on this machine, or ``coordinator`` (an endpoint) to run them
    on a cluster whose coordinator's store holds them. ``python`` is the
    interpreter activegraph packs run with locally (default ``python3``);
    ``isolation`` is ``standard`` or ``strict``. ``client_options`` go to
    ``forktrial.Client`` (timeout, keys)."""

    def __init__(
        self,
        store: Optional[str | os.PathLike[str]] = None,
        *,
        coordinator: Optional[str] = None,
        python: Optional[str] = None,
        isolation: str = "standard",
        binary: Optional[str] = None,
        **client_options: Any,
    ) -> None:
        if (store is None) == (coordinator is None):
            raise ValueError("give a forktrial store (local trials) or a coordinator (a cluster)")
        if isolation not in ("standard", "strict"):
            raise ValueError(f"isolation is 'standard' or 'strict', not {isolation!r}")
        self.store = str(Path(store).resolve()) if store is not None else None
        self.coordinator = coordinator
        self.python = python
        self.isolation = isolation
        self._command = Command(binary)
        self._client = (
            Client(coordinator, binary=binary, **client_options) if coordinator else None
        )

    @property
    def isolation_guarantees(self) -> Any:
        """forktrial's claims for every trial it runs: a fresh process with
        rlimits, a wall clock and a write budget; with ``strict``, a Lua
        pack's child also gets namespaces, a read-only file system, seccomp
        and a cgroup where the host allows them. Not a claim for activegraph
        packs beyond standard isolation."""

        contract = _contract()
        strict = self.isolation == "strict"
        where = f"on the cluster at {self.coordinator}" if self.coordinator else "on this machine"
        return contract.TrialIsolationGuarantees(
            process="fresh_process_per_trial_with_rlimits_and_wall_clock",
            filesystem="read_only_binds_for_lua_packs" if strict else "shared_host_filesystem",
            network="no_network_for_lua_packs" if strict else "unconfined",
            syscalls="seccomp_allow_list_for_lua_packs" if strict else "unconfined",
            environment="closed_allowlist_plus_explicit_code_paths",
            security_sandbox=False,
            notes=(
                f"forktrial ({self.isolation} isolation) {where}",
                "the store's numbers win over the child's claims",
                "activegraph packs run under standard isolation; the nets each trial had are "
                "in its forktrial-report artifact",
            ),
        )

    def execute(self, serialized_specification: str) -> Any:
        """Runs one serialized specification (refused with ValueError, before
        anything runs, when it is not a valid version-1 specification)."""

        contract = _contract()
        specification = contract.TrialSpecification.from_json(serialized_specification)
        if self._client is None:
            report = self._run_here(specification)
            log_location = self.store
        else:
            report = self._run_on_cluster(specification)
            log_location = f"forktrial+{self.coordinator}"
        return result_of(report, specification, self.isolation_guarantees, log_location)

    def _run_here(self, specification: Any) -> dict[str, Any]:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
            file.write(specification.to_json())
            path = file.name
        try:
            args = ["trial", "--spec", path, "--store", self.store, "--json",
                    "--isolation", self.isolation]
            if self.python:
                args += ["--python", self.python]
            # A trial's outcome is its exit status; 1 and 2 are errors.
            return self._command.json(args, ok=(0, 30, 40, 50, 60))
        finally:
            os.unlink(path)

    def _run_on_cluster(self, specification: Any) -> dict[str, Any]:
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as file:
            file.write(json.dumps(forktrial_specification(specification)) + "\n")
            path = file.name
        try:
            job = self._client.submit(path)
        finally:
            os.unlink(path)
        self._client.wait(job)
        results = list(self._client.results(job))
        if len(results) != 1 or results[0].get("status") != "reconciled":
            raise RuntimeError(
                f"the cluster did not reconcile the trial of job {job}: "
                f"{json.dumps(results)[:2000]}"
            )
        return results[0]


def result_of(report: dict[str, Any], specification: Any, isolation: Any,
              log_location: str) -> Any:
    """activegraph's TrialResult for forktrial's report of the trial."""

    contract = _contract()
    outcome = report["outcome"]
    document = json.dumps(report, sort_keys=True, separators=(",", ":")).encode()
    artifact = contract.TrialArtifactReference(
        name="forktrial-report",
        uri="data:application/json;base64," + base64.b64encode(document).decode(),
        media_type="application/json",
        digest="sha256:" + hashlib.sha256(document).hexdigest(),
    )
    failure = None
    if outcome != "completed":
        failure = contract.TrialFailureDetails(
            kind=outcome, message=report.get("detail", ""), exit_code=report.get("exit_code")
        )
    return contract.TrialResult(
        status=outcome,
        budget_use=contract.TrialBudgetUse(
            events_appended=int(report["events_appended"]),
            behavior_failures=int(report["behavior_failures"]),
            limits=specification.limits,
        ),
        artifacts=(artifact,),
        event_log=contract.TrialEventLogReference(
            store_path=log_location, run_id=report["fork_run_id"]
        ),
        failure=failure,
        isolation=isolation,
        detail=report.get("detail", ""),
        exit_code=report.get("exit_code"),
        warnings=tuple(report.get("warnings", ())),
    )
