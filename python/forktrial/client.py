"""A coordinator's client: submit, follow, read, cancel."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from forktrial.command import EXIT_ERROR, EXIT_WAIT_EXPIRED, Command, ForktrialError


class Client:
    """The client of the coordinator at ``coordinator`` (a ZeroMQ endpoint,
    ``tcp://host:7600``; default ``$FORKTRIAL_COORDINATOR``, else the
    command's default). ``timeout`` bounds each answer, in seconds. With
    ``key`` (this client's keypair file) and ``coordinator_key`` (the
    coordinator's public key or its .pub file) the connection is
    authenticated and encrypted.

    Every method raises ``forktrial.ForktrialError`` with the coordinator's
    or the command's message when a request fails."""

    def __init__(
        self,
        coordinator: Optional[str] = None,
        *,
        timeout: float = 30.0,
        key: Optional[str | os.PathLike[str]] = None,
        coordinator_key: Optional[str | os.PathLike[str]] = None,
        binary: Optional[str] = None,
    ) -> None:
        extra = ["--timeout", repr(float(timeout))]
        coordinator = coordinator or os.environ.get("FORKTRIAL_COORDINATOR")
        if coordinator:
            extra += ["--coordinator", coordinator]
        if key is not None:
            extra += ["--key", str(key)]
        if coordinator_key is not None:
            extra += ["--coordinator-key", str(coordinator_key)]
        self.coordinator = coordinator
        self._command = Command(binary, extra)

    def submit(self, batch: str | os.PathLike[str]) -> str:
        """Submits the batch file (TOML, or JSON Lines of trial
        specifications), uploading the bundles the coordinator lacks; the
        job's id."""

        return self._command.json(["submit", str(Path(batch)), "--json"])["job"]

    def status(self, job: Optional[str] = None) -> dict[str, Any]:
        """The job's status (``total``, ``done``, ``finished``, ``status``
        and ``outcomes`` counts, ``waiting``: why its queued trials are not
        leased, or None), or every job's (``{"jobs": [...]}``) without one."""

        return self._command.json(["status", *([job] if job else []), "--json"])

    def progress(self, job: str, interval: float = 0.5) -> Iterator[dict[str, Any]]:
        """The job's status every ``interval`` seconds, the last one
        finished."""

        while True:
            status = self.status(job)
            yield status
            if status["finished"]:
                return
            time.sleep(interval)

    def wait(self, job: str, max_wait: Optional[float] = None) -> dict[str, Any]:
        """Waits for the job to finish; its summary (counts by status and
        outcome). Raises TimeoutError when ``max_wait`` seconds pass first
        (the job goes on)."""

        args = ["wait", job, "--json"]
        if max_wait is not None:
            args += ["--max-wait", repr(float(max_wait))]
        done = self._command.run(args, ok=(0, EXIT_ERROR, EXIT_WAIT_EXPIRED))
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        if done.returncode == EXIT_WAIT_EXPIRED:
            raise TimeoutError(f"job {job} did not finish within {max_wait} s; it goes on")
        if not lines:
            raise ForktrialError(self._command_line("wait"), done.returncode, done.stderr)
        return json.loads(lines[-1])

    def results(self, job: str) -> Iterator[dict[str, Any]]:
        """One result per trial, in index order: its outcome, fork run,
        counts, detail, worker, isolation and executor."""

        return self._command.json_lines(["results", job, "--json"])

    def cancel(self, job: str) -> None:
        """Cancels the job: its queued trials are dropped, its running ones
        killed on their workers."""

        self._command.run(["cancel", job, "--json"])

    def import_run(
        self,
        file: str | os.PathLike[str],
        *,
        run_id: Optional[str] = None,
        label: Optional[str] = None,
        fork_of: Optional[str] = None,
        at: Optional[str] = None,
    ) -> dict[str, Any]:
        """Imports an activegraph JSON Lines run into the coordinator's store
        (a fork of its run ``fork_of`` at event ``at`` when given), so jobs
        can fork it; the run (``id``, ``label``, ``events``, ``parent``)."""

        args = ["import", str(Path(file)), "--json"]
        if run_id is not None:
            args += ["--id", run_id]
        if label is not None:
            args += ["--label", label]
        if (fork_of is None) != (at is None):
            raise ValueError("a fork names both fork_of and at")
        if fork_of is not None:
            args += ["--fork-of", fork_of, "--at", at]
        return self._command.json(args)

    def workers(self) -> dict[str, Any]:
        """The workers the coordinator knows, with the executors each
        offers."""

        return self._command.json(["workers", "--json"])

    def _command_line(self, verb: str) -> list[str]:
        return [self._command.binary, verb, *self._command.extra]
