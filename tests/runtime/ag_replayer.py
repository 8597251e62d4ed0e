#!/usr/bin/env python3
"""An independent replayer of activegraph's event projection.

Written from activegraph's documented projector (core/graph.py apply_event,
the in-memory GraphStore's dict semantics, Patch.to_dict) and nothing of
forktrial's, so forktrial's runtime/graph.cc can be checked against it.

Usage: ag_replayer.py EVENTS.jsonl
Each line is an event with at least "type" and "payload" (an activegraph
export line works as is). Prints the projected state as one JSON object:
{"objects": [...], "relations": [...], "patches": [...]}, each list in the
order a Python dict keeps its keys (first insertion; overwriting keeps the
place, removing forgets it). Exits 1 with the reason on stderr where
activegraph's projector would raise.
"""

import copy
import json
import sys

OPS = ("update", "replace")


def patch_record(d):
    # The six keys Patch's constructor needs; the rest defaulted.
    for key in ("id", "target", "op", "value", "expected_version", "proposed_by"):
        if key not in d:
            raise KeyError(key)
    if d["op"] not in OPS:
        raise ValueError("unsupported patch operation: %r" % (d["op"],))
    return {
        "id": d["id"],
        "target": d["target"],
        "op": d["op"],
        "value": copy.deepcopy(d["value"]),
        "expected_version": d["expected_version"],
        "proposed_by": d["proposed_by"],
        "rationale": d.get("rationale"),
        "evidence": list(d.get("evidence", [])),
        "status": d.get("status", "proposed"),
        "rejection_reason": d.get("rejection_reason"),
        "provenance": copy.deepcopy(d.get("provenance", {})),
    }


class State:
    def __init__(self):
        self.objects = {}
        self.relations = {}
        self.patches = {}

    def apply(self, kind, p):
        if kind == "object.created":
            o = p["object"]
            self.objects[o["id"]] = {
                "id": o["id"],
                "type": o["type"],
                "data": copy.deepcopy(o["data"]),
                "version": o["version"],
                "provenance": copy.deepcopy(o["provenance"]),
            }
        elif kind == "object.removed":
            gone = p["id"]
            self.objects.pop(gone, None)
            for rid in [r["id"] for r in self.relations.values()
                        if r["source"] == gone or r["target"] == gone]:
                self.relations.pop(rid, None)
        elif kind == "relation.created":
            r = p["relation"]
            self.relations[r["id"]] = {
                "id": r["id"],
                "source": r["source"],
                "target": r["target"],
                "type": r["type"],
                "data": copy.deepcopy(r["data"]),
                "provenance": copy.deepcopy(r["provenance"]),
            }
        elif kind == "relation.removed":
            self.relations.pop(p["id"], None)
        elif kind == "patch.proposed":
            patch = patch_record(p["patch"])
            self.patches[patch["id"]] = patch
        elif kind == "patch.applied":
            patch = patch_record(dict(p["patch"], status="applied"))
            self.patches[patch["id"]] = patch
            obj = self.objects.get(patch["target"])
            if obj is not None:
                if patch["op"] == "update":
                    obj["data"].update(patch["value"])
                else:
                    obj["data"] = copy.deepcopy(patch["value"])
                obj["version"] += 1
        elif kind == "patch.rejected":
            existing = self.patches.get(p["patch_id"])
            if existing is not None:
                existing["status"] = "rejected"
                existing["rejection_reason"] = p["reason"]

    def dump(self):
        return {
            "objects": list(self.objects.values()),
            "relations": list(self.relations.values()),
            "patches": list(self.patches.values()),
        }


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: ag_replayer.py EVENTS.jsonl\n")
        return 2
    state = State()
    with open(argv[1], encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            event = json.loads(line)
            try:
                state.apply(event["type"], event["payload"])
            except (KeyError, ValueError, TypeError, AttributeError) as e:
                sys.stderr.write("line %d (%s): %s: %s\n"
                                 % (number, event.get("type"), type(e).__name__, e))
                return 1
    sys.stdout.write(json.dumps(state.dump(), ensure_ascii=False))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
