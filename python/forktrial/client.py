"""A coordinator's client: submit, follow, read, cancel, import.

Status, progress, results, cancel and the workers go over the wire itself
(ZeroMQ, with Debian's python3-zmq: ``forktrial.wire``), one connection
held open, so following a job costs no process per poll. Submitting a batch
and importing a run drive the ``forktrial`` command, which pins, archives
and uploads the packs and the file."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from forktrial import wire
from forktrial.command import Command, ForktrialError

DEFAULT_ENDPOINT = "tcp://127.0.0.1:7600"
_MAX_HOLD_SECONDS = 10.0  # the most a coordinator holds a status
_RESEND_SECONDS = 1.0  # as the command's client: a request unanswered is sent again
# As the command's client: a client that never connected gives up on an
# endpoint refusing every connection after this long, whatever its timeout
# (a coordinator starting binds its endpoint well within it).
_REFUSED_GRACE_SECONDS = 2.0
_RESULTS_PAGE = 2000


def _check_host(endpoint: str) -> None:
    """Says at once that a tcp:// endpoint's host does not resolve, which
    ZeroMQ would retry silently until the timeout."""

    if not endpoint.startswith("tcp://"):
        return
    host = endpoint[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
    if not host or host == "*":
        return
    import socket

    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        raise ForktrialError(f'the coordinator\'s host "{host}" does not resolve ({error.strerror}); '
                             f"check the endpoint {endpoint}", code="not_found") from error


class Connection:
    """One DEALER connection to a coordinator, one request at a time, each
    answered or timed out (``timeout`` seconds). Not thread-safe."""

    def __init__(self, endpoint: str, timeout: float,
                 keys: Optional[tuple[str, str, str]] = None) -> None:
        import zmq  # Debian's python3-zmq

        self._zmq = zmq
        self.endpoint = endpoint
        self.timeout = timeout
        self._curve = keys is not None
        _check_host(endpoint)
        # Its socket's monitor says what the system can tell at once (a
        # refused connection, a handshake of the other security mechanism)
        # rather than after the timeout, as the command's client does. The
        # process's one context is never ended here: a connection collected
        # with others in a cycle cannot make it wait for their sockets.
        self._context = zmq.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            public, secret, server = keys
            self._socket.curve_publickey = public.encode()
            self._socket.curve_secretkey = secret.encode()
            self._socket.curve_serverkey = server.encode()
        self._monitor = self._socket.get_monitor_socket(
            zmq.EVENT_CONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_HANDSHAKE_SUCCEEDED
            | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
        self._connected = False
        self._refused = False
        self._refused_since: Optional[float] = None
        self._hopeless: Optional[ForktrialError] = None
        try:
            self._socket.connect(endpoint)
            self.call("clientHello")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._socket.closed:
            return
        self._socket.disable_monitor()
        self._monitor.close(0)
        self._socket.close(0)

    def __del__(self) -> None:
        if hasattr(self, "_monitor"):
            self.close()

    def _read_events(self) -> None:
        from zmq.utils.monitor import recv_monitor_message

        zmq = self._zmq
        while self._monitor.poll(0):
            event = recv_monitor_message(self._monitor)
            kind = event["event"]
            if kind in (zmq.EVENT_CONNECTED, zmq.EVENT_HANDSHAKE_SUCCEEDED):
                self._connected = True
                self._refused = False
                self._refused_since = None
            elif kind == zmq.EVENT_CONNECT_RETRIED:
                self._refused = True
                if not self._connected and self._refused_since is None:
                    self._refused_since = time.monotonic()
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                # The coordinator's ZAP handler refused this client's key;
                # every later handshake would be refused too.
                self._hopeless = ForktrialError(
                    f"the coordinator at {self.endpoint} refused this client's key: its public "
                    "key is not in the coordinator's --allow-clients or --admin-clients (its "
                    "log names the key it refused); add it there and restart the coordinator, "
                    "or give key the keypair of a listed client",
                    code="failed_precondition")
            elif (kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                  and event["value"] == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH):
                self._hopeless = ForktrialError(
                    f"the coordinator at {self.endpoint} has no keys (it speaks plain ZeroMQ) "
                    "and this client speaks CurveZMQ: leave out key and coordinator_key, or "
                    "start the coordinator with its keys" if self._curve else
                    f"the coordinator at {self.endpoint} speaks CurveZMQ and this client has "
                    "no keys: give key (this client's keypair, its public key in the "
                    "coordinator's --allow-clients) and coordinator_key (docs/cluster.md, "
                    "\"Keys\")",
                    code="failed_precondition")

    def _nothing_listens(self, seconds: float) -> ForktrialError:
        return ForktrialError(
            f"nothing listens at {self.endpoint}: every connection was refused for {seconds:g} "
            "s; start the coordinator there, or check the endpoint (the coordinator's --listen)",
            code="unavailable")

    def call(self, arm: str, **fields: Any) -> wire.Answer:
        """Sends the request and returns its answer; raises ForktrialError
        with the coordinator's category and message when it refuses, and
        ``unavailable`` when nothing answered in time. A coordinator that
        no longer knows this client (it restarted) is greeted again, once.
        A request the coordinator may hold (``hold_millis``) has that much
        more time, and is sent again that much later."""

        answer = self._exchange(arm, fields)
        if answer.arm == "error" and answer.code == "failed_precondition" and arm != "clientHello":
            self._exchange("clientHello", {})
            answer = self._exchange(arm, fields)
        if answer.arm == "error":
            raise ForktrialError(answer.text, code=answer.code)
        return answer

    def _exchange(self, arm: str, fields: dict[str, Any]) -> wire.Answer:
        request = wire.next_request_id()
        frame = wire.encode(arm, request, **fields)
        held = fields.get("hold_millis", 0) / 1000
        deadline = time.monotonic() + self.timeout + held
        poller = self._zmq.Poller()
        poller.register(self._socket, self._zmq.POLLIN)
        poller.register(self._monitor, self._zmq.POLLIN)
        while True:
            # Never blocking: ZeroMQ holds a message it has no connection for.
            try:
                self._socket.send(frame, self._zmq.NOBLOCK)
            except self._zmq.Again:
                pass
            resend = min(deadline, time.monotonic() + _RESEND_SECONDS + held)
            while (left := resend - time.monotonic()) > 0:
                if self._refused_since is not None and not self._connected:
                    left = min(left, self._refused_since + _REFUSED_GRACE_SECONDS
                               - time.monotonic())
                ready = dict(poller.poll(max(0, int(left * 1000)) + 1))
                if self._monitor in ready:
                    self._read_events()
                    if self._hopeless is not None:
                        raise self._hopeless
                if (self._refused_since is not None and not self._connected
                        and time.monotonic() >= self._refused_since + _REFUSED_GRACE_SECONDS):
                    raise self._nothing_listens(_REFUSED_GRACE_SECONDS)
                if self._socket not in ready:
                    continue
                answer = wire.decode(self._socket.recv())
                if answer.request_id == request:
                    return answer
                # An answer to a request given up on before, or a message of
                # the coordinator's own: not this one's.
            if time.monotonic() >= deadline:
                self._read_events()
                if self._refused and not self._connected:
                    # Nothing listens there; a coordinator starting would
                    # have bound its socket by now.
                    raise self._nothing_listens(self.timeout)
                raise ForktrialError(
                    f"the coordinator at {self.endpoint} did not answer within "
                    f"{self.timeout:g} s; is a coordinator listening there?",
                    code="unavailable")


class Client:
    """The client of the coordinator at ``coordinator`` (a ZeroMQ endpoint,
    ``tcp://host:7600``; default ``$FORKTRIAL_COORDINATOR``, else
    ``tcp://127.0.0.1:7600``). ``timeout`` bounds each answer, in seconds.
    With ``key`` (this client's keypair file, from ``forktrial keygen``)
    and ``coordinator_key`` (the coordinator's public key or its .pub file)
    the connection is authenticated and encrypted (CurveZMQ).

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
        self.coordinator = coordinator or os.environ.get("FORKTRIAL_COORDINATOR") \
            or DEFAULT_ENDPOINT
        if (key is None) != (coordinator_key is None):
            raise ValueError("give both key (this client's keypair) and coordinator_key, or "
                             "neither")
        extra = ["--timeout", repr(float(timeout)), "--coordinator", self.coordinator]
        keys = None
        if key is not None:
            public, secret = wire.read_keypair(key)
            keys = (public, secret, wire.read_public_key(coordinator_key))
            extra += ["--key", str(key), "--coordinator-key", str(coordinator_key)]
        self._timeout = timeout
        self._keys = keys
        self._connection: Optional[Connection] = None
        self._binary = binary
        self._extra = extra

    def _wire(self) -> Connection:
        if self._connection is None:
            self._connection = Connection(self.coordinator, self._timeout, self._keys)
        return self._connection

    def _command(self) -> Command:
        return Command(self._binary, self._extra)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def submit(self, batch: str | os.PathLike[str]) -> str:
        """Submits the batch file (TOML, or JSON Lines of trial
        specifications), uploading the bundles the coordinator lacks; the
        job's id. (Through the ``forktrial`` command, which pins and
        archives the packs.)"""

        return self._command().json(["submit", str(Path(batch)), "--json"])["job"]

    def status(self, job: Optional[str] = None, hold: float = 0.0) -> dict[str, Any]:
        """The job's status (``total``, ``done``, ``finished``, ``status``
        and ``outcomes`` counts, ``waiting``: why its queued trials are not
        leased, or None), or every job's (``{"jobs": [...]}``) without one.
        With ``hold`` (seconds, at most 10), the coordinator answers when the
        job finishes or after ``hold``, whichever comes first."""

        hold_millis = int(min(max(hold, 0.0), _MAX_HOLD_SECONDS) * 1000)
        return json.loads(
            self._wire().call("statusRequest", job=job or "", hold_millis=hold_millis).text)

    def progress(self, job: str, interval: float = 0.5) -> Iterator[dict[str, Any]]:
        """The job's status every ``interval`` seconds, the last one
        finished."""

        while True:
            status = self.status(job)
            yield status
            if status["finished"]:
                return
            time.sleep(interval)

    def wait(self, job: str, max_wait: Optional[float] = None,
             interval: float = 0.2) -> dict[str, Any]:
        """Waits for the job to finish; its final status. Raises
        TimeoutError when ``max_wait`` seconds pass first (the job goes
        on)."""

        # The coordinator holds each status until the job finishes (a second
        # at most): the end is heard in the turn that brings it, and a long
        # job costs a request a second. ``interval`` spaces the requests to a
        # coordinator that answers at once.
        until = None if max_wait is None else time.monotonic() + max_wait
        while True:
            asked = time.monotonic()
            hold = 1.0 if until is None else max(0.0, min(1.0, until - asked))
            status = self.status(job, hold=hold)
            if status["finished"]:
                return status
            if until is not None and time.monotonic() >= until:
                raise TimeoutError(f"job {job} did not finish within {max_wait} s; it goes on")
            time.sleep(max(0.0, asked + interval - time.monotonic()))

    def results(self, job: str) -> Iterator[dict[str, Any]]:
        """One result per trial, in index order: its outcome, fork run,
        counts, detail, worker, isolation, executor and limit; read a page
        at a time."""

        after = 0
        while True:
            page = self._wire().call("resultsRequest", job=job, after=after, limit=_RESULTS_PAGE)
            for line in page.lines:
                yield json.loads(line)
            if page.next >= page.total or page.next <= after:
                return
            after = page.next

    def cancel(self, job: str) -> dict[str, Any]:
        """Cancels the job: its queued trials are dropped, its running ones
        killed on their workers; its status after."""

        return json.loads(self._wire().call("cancelJob", job=job).text)

    def workers(self) -> dict[str, Any]:
        """The workers the coordinator knows, with the executors each
        offers."""

        return json.loads(self._wire().call("workersRequest").text)

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

        if (fork_of is None) != (at is None):
            raise ValueError("a fork names both fork_of and at")
        args = ["import", str(Path(file)), "--json"]
        if run_id is not None:
            args += ["--id", run_id]
        if label is not None:
            args += ["--label", label]
        if fork_of is not None:
            args += ["--fork-of", fork_of, "--at", at]
        return self._command().json(args)
