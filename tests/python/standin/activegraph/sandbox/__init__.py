"""The stand-in's sandbox package: the trial child (_child.py), and the
types of activegraph's trial contract that forktrial's Python executor
reads (executor.py), written from the contract's field lists."""

from dataclasses import dataclass
from typing import Optional

TRIAL_OUTCOMES = (
    "completed",
    "scenario_failed",
    "limits_exceeded",
    "materialization_failed",
    "crashed",
)


@dataclass(frozen=True)
class PackSource:
    root_dir: str
    expected_bundle_hash: str = ""
    manifest_required: bool = True


@dataclass(frozen=True)
class TrialLimits:
    wall_clock_seconds: float = 120.0
    max_rss_bytes: Optional[int] = None
    max_events: Optional[int] = 2_000
    max_llm_calls: Optional[int] = 0
    env_passthrough: tuple = ()


@dataclass(frozen=True)
class TrialReport:
    outcome: str
    fork_run_id: str
    events_appended: int
    behavior_failures: int
    detail: str
    exit_code: Optional[int]
    warnings: tuple = ()
