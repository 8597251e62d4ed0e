"""forktrial from Python: a client for a coordinator, and an activegraph
TrialExecutor that runs trials through forktrial.

- ``forktrial.Client``: submit a batch, follow its progress, iterate its
  results, cancel it, list the workers, import a run into the coordinator's
  store (``forktrial.client``).
- ``forktrial.ForktrialTrialExecutor``: activegraph's provider-neutral
  ``TrialExecutor`` contract, on this machine or on a cluster
  (``forktrial.executor``). activegraph is imported only when an executor
  runs, so everything else works without it.
- ``forktrial.import_run``: import an activegraph JSON Lines run into a
  store on this machine.

The client speaks the coordinator's wire protocol itself for status,
progress, results, cancel and the workers (ZeroMQ, through Debian's
``python3-zmq``; ``forktrial.wire``). Submitting a batch, importing a run and
running a local trial drive the ``forktrial`` command's JSON interface
(``--json``), which pins, archives and uploads packs; it is found on PATH or
named by ``FORKTRIAL_BINARY``.
"""

from forktrial.command import ForktrialError, find_binary, import_run
from forktrial.client import Client
from forktrial.executor import ForktrialTrialExecutor

__all__ = [
    "Client",
    "ForktrialError",
    "ForktrialTrialExecutor",
    "find_binary",
    "import_run",
]
