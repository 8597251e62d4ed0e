"""A stand-in for activegraph's provider-neutral executor contract
(activegraph.sandbox.executor), for forktrial's tests: the dataclasses with
the contract's fields, the version-1 specification's JSON form and its
validation, and the TrialExecutor protocol. Not activegraph."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

from activegraph.sandbox import PackSource, TrialLimits, TrialReport


@dataclass(frozen=True)
class TrialIsolationGuarantees:
    process: str
    filesystem: str
    network: str
    syscalls: str
    environment: str
    security_sandbox: bool
    notes: tuple = ()


@dataclass(frozen=True)
class TrialBudgetUse:
    events_appended: int
    behavior_failures: int
    limits: TrialLimits


@dataclass(frozen=True)
class TrialArtifactReference:
    name: str
    uri: str
    media_type: Optional[str] = None
    digest: Optional[str] = None


@dataclass(frozen=True)
class TrialEventLogReference:
    store_path: str
    run_id: str


@dataclass(frozen=True)
class TrialFailureDetails:
    kind: str
    message: str
    exit_code: Optional[int] = None


@dataclass(frozen=True)
class TrialResult:
    status: str
    budget_use: TrialBudgetUse
    artifacts: tuple
    event_log: TrialEventLogReference
    failure: Optional[TrialFailureDetails]
    isolation: TrialIsolationGuarantees
    detail: str = ""
    exit_code: Optional[int] = None
    warnings: tuple = ()

    def to_report(self) -> TrialReport:
        return TrialReport(self.status, self.event_log.run_id,
                           self.budget_use.events_appended,
                           self.budget_use.behavior_failures, self.detail,
                           self.exit_code, self.warnings)


def _text(payload: dict, key: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"trial specification {key} must be a non-empty string")
    return value


def _source(value: Any, where: str) -> PackSource:
    if not isinstance(value, dict):
        raise ValueError(f"trial specification {where} must be an object")
    root = value.get("root_dir")
    pin = value.get("expected_bundle_hash", "")
    required = value.get("manifest_required", True)
    if not isinstance(root, str) or not root:
        raise ValueError(f"trial specification {where}.root_dir is required")
    if not isinstance(pin, str) or not isinstance(required, bool):
        raise ValueError(f"trial specification {where} is malformed")
    return PackSource(root, pin, required)


def _limits(value: Any) -> TrialLimits:
    if not isinstance(value, dict):
        raise ValueError("trial specification limits must be an object")
    wall = value.get("wall_clock_seconds", 120.0)
    if isinstance(wall, bool) or not isinstance(wall, (int, float)):
        raise ValueError("trial limits wall_clock_seconds must be numeric")
    counts = {}
    for name, default in (("max_rss_bytes", None), ("max_events", 2_000), ("max_llm_calls", 0)):
        item = value.get(name, default)
        if item is not None and (isinstance(item, bool) or not isinstance(item, int)):
            raise ValueError(f"trial limits {name} must be an integer or null")
        counts[name] = item
    env = value.get("env_passthrough", [])
    if not isinstance(env, list) or not all(isinstance(item, str) for item in env):
        raise ValueError("trial limits env_passthrough must be a list of strings")
    return TrialLimits(float(wall), counts["max_rss_bytes"], counts["max_events"],
                       counts["max_llm_calls"], tuple(env))


@dataclass(frozen=True)
class TrialSpecification:
    store_path: str
    parent_run_id: str
    at_event: str
    pack_source: PackSource
    scenario: str = ""
    limits: TrialLimits = TrialLimits()
    label: str = "trial"
    extra_packs: tuple = ()
    schema_version: int = 1

    def to_json(self) -> str:
        def source(s: PackSource) -> dict:
            return {"root_dir": s.root_dir, "expected_bundle_hash": s.expected_bundle_hash,
                    "manifest_required": s.manifest_required}

        limits = self.limits
        return json.dumps({
            "schema_version": self.schema_version,
            "store_path": self.store_path,
            "parent_run_id": self.parent_run_id,
            "at_event": self.at_event,
            "pack_source": source(self.pack_source),
            "scenario": self.scenario,
            "limits": {"wall_clock_seconds": limits.wall_clock_seconds,
                       "max_rss_bytes": limits.max_rss_bytes,
                       "max_events": limits.max_events,
                       "max_llm_calls": limits.max_llm_calls,
                       "env_passthrough": list(limits.env_passthrough)},
            "label": self.label,
            "extra_packs": [source(s) for s in self.extra_packs],
        }, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, serialized: str) -> "TrialSpecification":
        try:
            payload = json.loads(serialized)
        except (TypeError, json.JSONDecodeError) as error:
            raise ValueError("trial specification must be valid JSON") from error
        if not isinstance(payload, dict):
            raise ValueError("trial specification must be a JSON object")
        if payload.get("schema_version") != 1:
            raise ValueError("unsupported trial specification schema_version")
        scenario = payload.get("scenario", "")
        if not isinstance(scenario, str):
            raise ValueError("trial specification scenario must be a string")
        extras = payload.get("extra_packs", [])
        if not isinstance(extras, list):
            raise ValueError("trial specification extra_packs must be a list")
        return cls(_text(payload, "store_path"), _text(payload, "parent_run_id"),
                   _text(payload, "at_event"), _source(payload.get("pack_source"), "pack_source"),
                   scenario, _limits(payload.get("limits")), _text(payload, "label"),
                   tuple(_source(e, f"extra_packs[{i}]") for i, e in enumerate(extras)), 1)


@runtime_checkable
class TrialExecutor(Protocol):
    @property
    def isolation_guarantees(self) -> TrialIsolationGuarantees: ...

    def execute(self, serialized_specification: str) -> TrialResult: ...
