"""Running the ``forktrial`` command and reading its JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

#: The command's own exit statuses, apart from a trial's outcome codes
#: (0, 30, 40, 50, 60): 1 an error, 2 a usage error, 3 a wait that ran out.
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_WAIT_EXPIRED = 3


class ForktrialError(RuntimeError):
    """A request failed. ``message`` says what failed, why and what to do;
    ``code`` is forktrial's error category when the coordinator refused
    (``not_found``, ``invalid_argument``, ``unavailable``, ...); ``status``
    the ``forktrial`` command's exit status when it was the command that
    failed (``command`` its arguments)."""

    def __init__(self, message: str, *, status: int = 1, code: Optional[str] = None,
                 command: Optional[Sequence[str]] = None) -> None:
        self.message = message.strip()
        self.status = status
        self.code = code
        self.command = list(command) if command else []
        what = f"forktrial {self.command[1]} exited {status}" if len(self.command) > 1 else (
            f"the coordinator refused ({code})" if code else "forktrial")
        super().__init__(f"{what}: {self.message}")


def find_binary(binary: Optional[str] = None) -> str:
    """The ``forktrial`` command: ``binary``, else ``$FORKTRIAL_BINARY``,
    else ``forktrial`` on PATH. Raises FileNotFoundError saying where it
    looked."""

    candidate = binary or os.environ.get("FORKTRIAL_BINARY") or "forktrial"
    found = shutil.which(candidate)
    if found is None:
        raise FileNotFoundError(
            f"no forktrial command at {candidate!r}: install forktrial, put it on "
            "PATH, or name it with FORKTRIAL_BINARY"
        )
    return found


class Command:
    """One ``forktrial`` binary, with options added to every call."""

    def __init__(self, binary: Optional[str] = None, extra: Sequence[str] = ()) -> None:
        self.binary = find_binary(binary)
        self.extra = list(extra)

    def run(
        self,
        args: Sequence[str],
        *,
        ok: Sequence[int] = (0,),
        input: Optional[str] = None,
        env: Optional[dict[str, str]] = None,
    ) -> subprocess.CompletedProcess:
        """Runs ``forktrial ARGS...`` (with the extra options); raises
        ForktrialError unless it exits with one of ``ok``."""

        command = [self.binary, *args, *self.extra]
        done = subprocess.run(
            command,
            input=input,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode not in ok:
            raise ForktrialError(done.stderr, status=done.returncode, command=command)
        return done

    def json(self, args: Sequence[str], **kwargs: Any) -> Any:
        """The one JSON document the command prints."""

        return json.loads(self.run(args, **kwargs).stdout)

    def json_lines(self, args: Sequence[str], **kwargs: Any) -> Iterator[Any]:
        """Each line the command prints, as JSON."""

        for line in self.run(args, **kwargs).stdout.splitlines():
            if line.strip():
                yield json.loads(line)


def import_run(
    file: str | os.PathLike[str],
    store: str | os.PathLike[str],
    *,
    run_id: Optional[str] = None,
    label: Optional[str] = None,
    binary: Optional[str] = None,
) -> dict[str, Any]:
    """Imports an activegraph JSON Lines run into the store at ``store`` on
    this machine (``forktrial run import``); returns what the command says
    of the new run."""

    args = ["run", "import", str(Path(file)), "--store", str(Path(store)), "--json"]
    if run_id is not None:
        args += ["--id", run_id]
    if label is not None:
        args += ["--label", label]
    return Command(binary).json(args)
