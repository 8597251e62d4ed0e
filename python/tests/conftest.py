"""Fixtures of the Python package's tests: the forktrial command of the
build ($FORKTRIAL_BINARY), a store holding the example chat run, an
activegraph-shaped pack, and a real coordinator with a worker.

activegraph cannot be installed here: the tests put the stand-in of its
trial child and of its executor contract (tests/python/standin, written
from the contract) on the path. They say nothing about a real activegraph
installation; there, run `forktrial preflight --python PY` first."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "tests" / "python" / "standin"
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(STANDIN))
# The trial children find the stand-in where a user's activegraph would be.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(STANDIN), *filter(None, [os.environ.get("PYTHONPATH")])]
)


@pytest.fixture(scope="session")
def binary() -> str:
    found = shutil.which(os.environ.get("FORKTRIAL_BINARY", "forktrial"))
    if found is None:
        pytest.skip("no forktrial command: build it and set FORKTRIAL_BINARY")
    os.environ["FORKTRIAL_BINARY"] = found
    return found


def forktrial(binary: str, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([binary, *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def store(binary: str, tmp_path: Path) -> Path:
    path = tmp_path / "store"
    forktrial(binary, "run", "import", str(ROOT / "examples" / "runs" / "chat.jsonl"),
              "--store", str(path), "--id", "run_chat")
    return path


@pytest.fixture
def ag_pack(binary: str, tmp_path: Path) -> Path:
    """An activegraph pack whose scenarios end every way a child can."""
    root = tmp_path / "ag_pack"
    root.mkdir()
    (root / "__init__.py").write_text("PACK = 'ag'\n")
    shutil.copy(ROOT / "tests" / "python" / "outcome_scenarios.py", root / "scenarios.py")
    content = forktrial(binary, "pack", "hash", "--content", str(root)).stdout.strip()
    (root / "manifest.toml").write_text(
        '[pack]\nname = "ag_pack"\nversion = "0.1.0"\ndescription = "a stand-in pack"\n'
        '[pack.provenance]\nauthors = ["forktrial tests"]\nauthored_by = "human"\n'
        f'[pack.integrity]\ncontent_hash = "{content}"\n'
        '[dependencies]\nactivegraph = ">=1.4,<2.0"\n[surface]\n'
    )
    return root


class Cluster:
    """A coordinator on an ipc endpoint and workers, killed at the end."""

    def __init__(self, binary: str, store: Path, directory: Path) -> None:
        self.binary = binary
        self.store = store
        self.directory = directory
        self.endpoint = f"ipc://{directory / 'coordinator.sock'}"
        self.log = open(directory / "daemons.log", "ab")
        self.processes: list[subprocess.Popen] = []
        self.start("coordinator", "--store", str(store), "--listen", self.endpoint)

    def start(self, *args: str) -> None:
        self.processes.append(subprocess.Popen([self.binary, *args], stdout=subprocess.DEVNULL,
                                               stderr=self.log))

    def start_worker(self, name: str) -> None:
        self.start("worker", "--connect", self.endpoint, "--id", name, "--cache",
                   str(self.directory / f"cache-{name}"))

    def log_text(self) -> str:
        return (self.directory / "daemons.log").read_text(errors="replace")

    def close(self) -> None:
        for process in reversed(self.processes):
            process.kill()
            process.wait()
        self.log.close()


@pytest.fixture
def cluster(binary: str, store: Path, tmp_path: Path):
    running = Cluster(binary, store, tmp_path)
    try:
        yield running
    finally:
        running.close()


def eventually(check, seconds: float = 30.0):
    """Polls `check` until it returns something true; that value."""
    until = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > until:
            return value
        time.sleep(0.05)
