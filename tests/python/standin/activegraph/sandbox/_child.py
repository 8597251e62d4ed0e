"""A stand-in for activegraph's trial child, from its contract.

Reads one JSON job on stdin ({"preflight": true}, or a trial job: store_path,
fork_run_id, initial_events, pack_root, expected_bundle_hash,
manifest_required, extra_packs, scenario, limits), applies RLIMIT_AS and
RLIMIT_CPU, imports the packs (each pack root's __init__.py), runs the
scenario ("path.py" or "path.py::func", default main) with a runtime that
appends activegraph-shaped rows to the fork's run in the SQLite store, and
prints one JSON tail line, exiting 0 completed, 30 scenario_failed,
40 limits_exceeded, 50 materialization_failed.

The scenario gets a runtime with emit(type, payload, actor=None,
caused_by=None), events() (the fork's rows), run_row() (the fork's goal and
frame_id) and fail(behavior, message) (a behavior.failed row). Standard library only; no activegraph semantics.
"""

import importlib.util
import json
import sqlite3
import sys
import traceback
from datetime import datetime, timedelta, timezone
from pathlib import Path


def report(outcome, fork_run_id, events, failures, detail, code):
    print(json.dumps({"outcome": outcome, "fork_run_id": fork_run_id,
                      "events_appended": events, "behavior_failures": failures,
                      "detail": detail[:500]}), flush=True)
    raise SystemExit(code)


class Runtime:
    """Appends rows to the fork's run, as activegraph's store does."""

    def __init__(self, store_path, run_id, initial):
        self.conn = sqlite3.connect(store_path, isolation_level=None)
        self.run_id = run_id
        self.initial = initial
        last = self.conn.execute(
            "SELECT timestamp FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1",
            (run_id,)).fetchone()
        stamp = last[0] if last else "2026-01-01T00:00:00Z"
        self.clock = datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    def count(self):
        return self.conn.execute("SELECT count(*) FROM events WHERE run_id = ?",
                                 (self.run_id,)).fetchone()[0]

    def events(self):
        return self.conn.execute(
            "SELECT id, type, actor, payload FROM events WHERE run_id = ? ORDER BY seq",
            (self.run_id,)).fetchall()

    def emit(self, type_, payload, actor=None, caused_by=None):
        self.clock += timedelta(milliseconds=1)
        stamp = self.clock.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        event_id = "evt_t%04d" % (self.count() - self.initial + 1)
        self.conn.execute(
            "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp,"
            " run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (event_id, type_, actor, json.dumps(payload, ensure_ascii=False), None,
             caused_by, stamp, self.run_id))
        return event_id

    def fail(self, behavior, message, caused_by):
        return self.emit("behavior.failed", {"behavior": behavior, "event_id": caused_by,
                                             "exception_type": "ValueError",
                                             "message": message, "traceback": ""},
                         "runtime", caused_by)

    def run_row(self):
        """The fork's goal and frame_id, as activegraph's runtime reads them."""
        row = self.conn.execute("SELECT goal, frame_id FROM runs WHERE run_id = ?",
                                (self.run_id,)).fetchone()
        return {"goal": row[0], "frame_id": row[1]} if row else None

    def failures(self):
        return self.conn.execute(
            "SELECT count(*) FROM events WHERE run_id = ? AND type = 'behavior.failed'",
            (self.run_id,)).fetchone()[0]


def import_pack(source):
    root = Path(source["pack_root"])
    spec = importlib.util.spec_from_file_location(
        root.name, root / "__init__.py", submodule_search_locations=[str(root)])
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import pack module at {root}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def scenario_of(root, scenario):
    if not scenario:
        return None
    path, _, name = scenario.partition("::")
    spec = importlib.util.spec_from_file_location("_trial_scenario", (root / path).resolve())
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot import scenario at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name or "main", None)
    if not callable(fn):
        raise RuntimeError(f"scenario {scenario!r} has no callable {name or 'main'!r}")
    return fn


def main():
    job = json.loads(sys.stdin.read())
    if job.get("preflight"):
        print(json.dumps({"preflight": "ok"}), flush=True)
        raise SystemExit(0)
    fork_run_id = str(job["fork_run_id"])
    initial = int(job.get("initial_events", 0))
    limits = job.get("limits", {})
    import resource
    if limits.get("max_rss_bytes"):
        resource.setrlimit(resource.RLIMIT_AS, (limits["max_rss_bytes"],) * 2)
    if limits.get("cpu_seconds"):
        resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"],) * 2)
    try:
        for extra in job.get("extra_packs", []):
            import_pack(extra)
        import_pack(job)
    except Exception as e:  # an outcome, not a crash
        report("materialization_failed", fork_run_id, 0, 0, f"{type(e).__name__}: {e}", 50)

    rt = Runtime(job["store_path"], fork_run_id, initial)
    appended = lambda: max(0, rt.count() - initial)
    try:
        fn = scenario_of(Path(job["pack_root"]), job.get("scenario", ""))
        if fn is not None:
            fn(rt)
    except MemoryError:
        report("limits_exceeded", fork_run_id, appended(), rt.failures(),
               "MemoryError under RLIMIT_AS", 40)
    except Exception as e:
        report("scenario_failed", fork_run_id, appended(), rt.failures(),
               f"{type(e).__name__}: {e}\n" + traceback.format_exc(limit=3), 30)
    if appended() > int(limits.get("max_events") or 0) > 0:
        report("limits_exceeded", fork_run_id, appended(), rt.failures(),
               "trial budget exhausted (see runtime.budget_exhausted)", 40)
    report("completed", fork_run_id, appended(), rt.failures(), "", 0)


if __name__ == "__main__":
    main()
