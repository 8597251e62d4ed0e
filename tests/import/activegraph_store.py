#!/usr/bin/env python3
"""Writes SQLite stores the way activegraph writes them, and the bytes its
`export-trace --format jsonl` prints for them: the fixture of forktrial's
import and export tests (tests/import/activegraph_fixture_test.cc).

Written from activegraph's documented formats (store/sqlite.py's schema,
store/serde.py's payload encoding, core/ids.py's ULID run ids,
store/retention.py's compaction, core/event.py's to_dict order); standard
library only.

    activegraph_store.py STORE.db [--nan] [--compacted] [--schema-version V]
                                  [--export-dir DIR]

Prints one line per run: "<role> <run_id>" (roles: root, fork, compacted).
With --export-dir, writes DIR/<role>.jsonl: what export-trace prints for that
run (json.dumps(event.to_dict()) per line, default separators, ASCII only).
"""

import argparse
import hashlib
import json
import sqlite3
import sys

SCHEMA_VERSION = "1"

# The tables, indexes and meta row activegraph's SQLite store creates on open.
SCHEMA = [
    """CREATE TABLE IF NOT EXISTS events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL,
        type TEXT NOT NULL,
        actor TEXT,
        payload TEXT NOT NULL,
        frame_id TEXT,
        caused_by TEXT,
        timestamp TEXT NOT NULL,
        run_id TEXT NOT NULL,
        UNIQUE(id, run_id))""",
    "CREATE INDEX IF NOT EXISTS idx_events_run ON events(run_id, seq)",
    "CREATE INDEX IF NOT EXISTS idx_events_type ON events(type)",
    """CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        parent_run_id TEXT,
        forked_at_event_id TEXT,
        label TEXT,
        created_at TEXT NOT NULL,
        goal TEXT,
        frame_id TEXT)""",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS events_archive (
        seq INTEGER,
        id TEXT NOT NULL,
        type TEXT NOT NULL,
        actor TEXT,
        payload TEXT NOT NULL,
        frame_id TEXT,
        caused_by TEXT,
        timestamp TEXT NOT NULL,
        run_id TEXT NOT NULL,
        archived_at TEXT NOT NULL,
        UNIQUE(id, run_id))""",
    "CREATE INDEX IF NOT EXISTS idx_archive_run ON events_archive(run_id, seq)",
    """CREATE TABLE IF NOT EXISTS snapshots (
        state_hash TEXT PRIMARY KEY,
        blob TEXT NOT NULL,
        created_at TEXT NOT NULL)""",
]

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid(ms, entropy):
    """A 26-character Crockford base32 ULID: 48 bits of milliseconds, then 80
    bits of entropy (fixed here, so the fixture is reproducible)."""
    n = ((ms & ((1 << 48) - 1)) << 80) | (entropy & ((1 << 80) - 1))
    return "".join(CROCKFORD[(n >> (5 * i)) & 0x1F] for i in reversed(range(26)))


def encode_payload(payload):
    # The store's payload column: insertion order, spaced separators, raw
    # UTF-8, NaN/Infinity allowed, integers of any width.
    return json.dumps(payload, sort_keys=False, ensure_ascii=False)


class Run:
    def __init__(self, conn, run_id, frame_id, start_second):
        self.conn = conn
        self.run_id = run_id
        self.frame_id = frame_id
        self.counter = 0
        self.second = start_second

    def timestamp(self):
        self.second += 1
        return "2026-03-01T10:%02d:%02dZ" % (self.second // 60, self.second % 60)

    def emit(self, type_, payload, actor=None, caused_by=None, frame=True):
        self.counter += 1
        event_id = "evt_%03d" % self.counter
        self.conn.execute(
            "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp, run_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (event_id, type_, actor, encode_payload(payload), self.frame_id if frame else None,
             caused_by, self.timestamp(), self.run_id))
        return event_id


def provenance(run, actor, caused_by, timestamp):
    return {"created_by": actor, "caused_by_event": caused_by, "frame_id": run.frame_id,
            "timestamp": timestamp, "evidence": [], "run_id": run.run_id}


def object_created(run, object_id, type_, data, actor, caused_by):
    stamp = "2026-03-01T10:00:%02dZ" % (run.second + 1)
    payload = {"object": {"id": object_id, "type": type_, "data": data, "version": 1,
                          "provenance": provenance(run, actor, caused_by, stamp)},
               "id": object_id}
    return run.emit("object.created", payload, actor, caused_by)


def insert_run(conn, run_id, created_at, label, goal, frame_id, parent=None, at=None):
    conn.execute(
        "INSERT INTO runs (run_id, parent_run_id, forked_at_event_id, label, created_at, goal,"
        " frame_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (run_id, parent, at, label, created_at, goal, frame_id))


def write_root(conn, run_id, nan):
    insert_run(conn, run_id, "2026-03-01T10:00:00.000000+00:00", "recorded session",
               "summarize the café notes", "frame_001")
    run = Run(conn, run_id, "frame_001", 0)
    goal = run.emit("goal.created", {"goal": "summarize the café notes"}, "user")
    object_created(run, "note#1", "note", {"text": "naïve café ☕", "tags": ["a", "b"]},
                   "notes.collector", goal)
    object_created(run, "claim#2", "claim", {"text": "ok"}, "notes.collector", goal)
    run.emit("relation.created", {
        "relation": {"id": "rel_001", "source": "note#1", "target": "claim#2", "type": "supports",
                     "data": {}, "provenance": provenance(run, "notes.collector", goal,
                                                          "2026-03-01T10:00:04Z")},
        "id": "rel_001", "source": "note#1", "target": "claim#2"}, "notes.collector", goal)
    run.emit("behavior.started", {"behavior": "notes.collector", "event_id": goal,
                                  "triggering_event_type": "goal.created",
                                  "triggering_object_id": None}, "runtime", goal)
    # Edge values: an integer wider than 64 bits, a float, non-ASCII text
    # (accents, CJK, an emoji outside the BMP, a right-to-left mark, DEL and
    # a line break), nesting, a quote and a backslash.
    edge = {"wide": 123456789012345678901234567890, "negative": -18446744073709551617,
            "ratio": 0.1, "exp": 1e+300, "text": "Zürich 東京 😀 \u200f \x7f line\nbreak",
            "quote": "say \"hi\" \\ /", "nested": {"list": [1, [2, [3, {"deep": True}]], None],
                                                 "empty": {}, "none": []}}
    run.emit("custom.measured", edge, "notes.collector", goal)
    patch = {"id": "patch_001", "target": "claim#2", "op": "update", "value": {"text": "better"},
             "expected_version": 1, "proposed_by": "notes.collector", "rationale": "clearer",
             "evidence": [], "status": "applied", "rejection_reason": None,
             "provenance": provenance(run, "notes.collector", goal, "2026-03-01T10:00:07Z")}
    run.emit("patch.applied", {"patch": patch, "target": "claim#2",
                               "diff": {"text": {"old": "ok", "new": "better"}}},
             "notes.collector", goal)
    if nan:
        run.emit("custom.measured", {"score": float("nan"), "limit": float("inf"),
                                     "floor": float("-inf")}, "notes.collector", goal)
    run.emit("behavior.completed", {"behavior": "notes.collector", "event_id": goal,
                                    "objects_created": 2, "relations_created": 1,
                                    "patches_applied": 1, "patches_proposed": 0,
                                    "events_emitted": 0}, "runtime", goal)
    run.emit("runtime.idle", {"snapshot": {"used": {"events": 9.0}, "limits": {"events": None},
                                           "cost_used_usd": 0.0, "cost_limit_usd": None}},
             "runtime", frame=False)
    return run


def write_fork(conn, run_id, parent, at):
    # A fork copies its parent's rows up to the fork point into its own rows
    # (new seqs, same ids and payload text) and inherits goal and frame.
    goal, frame_id = conn.execute("SELECT goal, frame_id FROM runs WHERE run_id = ?",
                                  (parent.run_id,)).fetchone()
    insert_run(conn, run_id, "2026-03-01T11:00:00.000000+00:00", "what-if", goal, frame_id,
               parent.run_id, at)
    cut = conn.execute("SELECT seq FROM events WHERE id = ? AND run_id = ?",
                       (at, parent.run_id)).fetchone()[0]
    rows = conn.execute("SELECT id, type, actor, payload, frame_id, caused_by, timestamp"
                        " FROM events WHERE run_id = ? AND seq <= ? ORDER BY seq",
                        (parent.run_id, cut)).fetchall()
    for row in rows:
        conn.execute(
            "INSERT INTO events (id, type, actor, payload, frame_id, caused_by, timestamp,"
            " run_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row + (run_id,))
    run = Run(conn, run_id, frame_id, 30)
    run.counter = len(rows)
    object_created(run, "note#3", "note", {"text": "fork-only – ‘quoted’"}, "notes.collector",
                   "evt_001")
    run.emit("behavior.failed", {"behavior": "notes.collector", "event_id": "evt_001",
                                 "exception_type": "ValueError", "message": "bad ☹",
                                 "traceback": "Traceback...\n  ValueError"}, "runtime", "evt_001")
    return run


def write_compacted(conn, run_id):
    # Compaction: a runtime.snapshot marker appended after the last event,
    # the projected state in `snapshots`, the prefix moved to events_archive.
    insert_run(conn, run_id, "2026-03-01T12:00:00.000000+00:00", "long session",
               "keep going", None)
    run = Run(conn, run_id, None, 40)
    goal = run.emit("goal.created", {"goal": "keep going"}, "user")
    object_created(run, "task#1", "task", {"n": 1}, "system", goal)
    blob = json.dumps({"objects": [], "relations": []}, sort_keys=True, separators=(",", ":"))
    state_hash = "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()
    snapshot = run.emit("runtime.snapshot", {
        "state_hash": state_hash, "covers_through": "evt_002", "events_covered": 2,
        "id_counters": {"object": 1, "event": 2, "relation": 0, "patch": 0, "frame": 0}},
        "runtime", frame=False)
    conn.execute("INSERT OR REPLACE INTO snapshots(state_hash, blob, created_at)"
                 " VALUES (?, ?, ?)", (state_hash, blob, "2026-03-01T12:10:00+00:00"))
    snapshot_seq = conn.execute("SELECT seq FROM events WHERE id = ? AND run_id = ?",
                                (snapshot, run_id)).fetchone()[0]
    conn.execute(
        "INSERT OR IGNORE INTO events_archive (seq, id, type, actor, payload, frame_id,"
        " caused_by, timestamp, run_id, archived_at) SELECT seq, id, type, actor, payload,"
        " frame_id, caused_by, timestamp, run_id, ? FROM events WHERE run_id = ? AND seq < ?",
        ("2026-03-01T12:10:00+00:00", run_id, snapshot_seq))
    conn.execute("DELETE FROM events WHERE run_id = ? AND seq < ?", (run_id, snapshot_seq))
    run.emit("note.added", {"text": "after the snapshot"}, "system")
    return run


def export_trace(conn, run_id):
    # export-trace: each stored row decoded (json.loads of the payload text)
    # into the event's to_dict(), then json.dumps with default arguments.
    lines = []
    for row in conn.execute("SELECT id, type, payload, actor, frame_id, caused_by, timestamp"
                            " FROM events WHERE run_id = ? ORDER BY seq", (run_id,)):
        event = {"id": row[0], "type": row[1], "payload": json.loads(row[2]), "actor": row[3],
                 "frame_id": row[4], "caused_by": row[5], "timestamp": row[6]}
        lines.append(json.dumps(event) + "\n")
    return "".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("store")
    parser.add_argument("--nan", action="store_true")
    parser.add_argument("--compacted", action="store_true")
    parser.add_argument("--schema-version", default=SCHEMA_VERSION)
    parser.add_argument("--export-dir")
    args = parser.parse_args()

    conn = sqlite3.connect(args.store, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    for statement in SCHEMA:
        conn.execute(statement)
    conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)",
                 (args.schema_version,))
    conn.execute("BEGIN")
    runs = {"root": write_root(conn, ulid(1772359200000, 0x1F2E3D4C5B6A79880706), args.nan)}
    runs["fork"] = write_fork(conn, ulid(1772362800000, 0x0123456789ABCDEF0123), runs["root"],
                              "evt_004")
    if args.compacted:
        runs["compacted"] = write_compacted(conn, ulid(1772366400000, 0x00FF00FF00FF00FF00FF))
    conn.execute("COMMIT")
    for role, run in runs.items():
        print(role, run.run_id)
        if args.export_dir:
            with open("%s/%s.jsonl" % (args.export_dir, role), "w", encoding="ascii",
                      newline="") as out:
                out.write(export_trace(conn, run.run_id))
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
