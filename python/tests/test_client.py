"""The Python client against a real coordinator and worker."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from forktrial import Client, ForktrialError, import_run

from conftest import ROOT, eventually


def lua_batch(directory: Path, trials: int) -> Path:
    line = json.dumps({
        "schema_version": 1, "parent_run_id": "run_chat", "at_event": "evt_031",
        "label": "greeter", "candidate": {"root_dir": str(ROOT / "examples/packs/greeter")},
        "extra_packs": [], "scenario": "scenarios/smoke.lua",
        "limits": {"wall_clock_seconds": 20}})
    path = directory / "batch.jsonl"
    path.write_text((line + "\n") * trials)
    return path


def test_submit_follow_and_read_a_job(cluster, tmp_path):
    cluster.start_worker("w1")
    client = Client(cluster.endpoint)
    job = client.submit(lua_batch(tmp_path, 5))
    seen = list(client.progress(job, interval=0.05))
    assert seen[-1]["finished"] is True
    assert seen[-1]["done"] == 5
    assert all(s["job"] == job for s in seen)
    final = client.wait(job)
    assert final["status"]["reconciled"] == 5 and final["outcomes"]["completed"] == 5
    results = list(client.results(job))
    assert [r["index"] for r in results] == [0, 1, 2, 3, 4]
    assert {r["executor"]["name"] for r in results} == {"lua"}
    workers = client.workers()["workers"]
    assert [w["worker"] for w in workers] == ["w1"]
    assert {e["name"] for e in workers[0]["executors"]} == {"lua", "activegraph"}
    assert job in [j["job"] for j in client.status()["jobs"]]


def test_a_job_no_worker_can_run_says_why_and_can_be_cancelled(cluster, tmp_path):
    client = Client(cluster.endpoint)
    job = client.submit(lua_batch(tmp_path, 3))
    status = client.status(job)
    assert status["waiting"] == "no worker is alive: its 3 queued trials wait for one to join"
    with pytest.raises(TimeoutError):
        client.wait(job, max_wait=0.2)
    assert client.cancel(job)["cancelled"] is True
    status = eventually(lambda: (s := client.status(job))["finished"] and s)
    assert status["cancelled"] is True
    assert status["status"]["cancelled"] == 3


def test_a_held_status_is_answered_when_its_job_finishes(cluster, tmp_path):
    client = Client(cluster.endpoint)
    job = client.submit(lua_batch(tmp_path, 2))
    # No worker: nothing but the cancellation, from another client, can
    # finish the job while the first one's status is held.
    other = Client(cluster.endpoint)
    cancelling = threading.Timer(0.3, lambda: other.cancel(job))
    cancelling.start()
    try:
        status = client.status(job, hold=10)
    finally:
        cancelling.join()
        other.close()
    assert status["finished"] is True and status["cancelled"] is True
    # A finished job's status is not held.
    assert client.status(job, hold=10)["finished"] is True


def test_errors_carry_the_coordinators_message(cluster):
    client = Client(cluster.endpoint)
    with pytest.raises(ForktrialError) as raised:
        client.status("job_nope")
    assert "no job job_nope" in raised.value.message
    assert raised.value.code == "not_found"


def test_a_host_that_does_not_resolve_is_said_at_once():
    with pytest.raises(ForktrialError) as raised:
        Client("tcp://no-such-host.invalid:7600").status()
    assert "does not resolve" in raised.value.message


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_port_nothing_listens_on_is_said_refused():
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(ForktrialError) as raised:
        Client(endpoint, timeout=0.5).status()
    assert raised.value.code == "unavailable"
    assert f"nothing listens at {endpoint}: every connection was refused" in raised.value.message
    # With a long timeout, said after the refusals' grace rather than at the end.
    with pytest.raises(ForktrialError) as raised:
        Client(endpoint, timeout=60).status()
    assert "every connection was refused for 2 s" in raised.value.message


def test_a_silent_endpoint_is_unavailable_after_the_timeout():
    # A socket that takes connections and never speaks.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        client = Client(f"tcp://127.0.0.1:{silent.getsockname()[1]}", timeout=0.3)
        with pytest.raises(ForktrialError) as raised:
            client.status()
    assert raised.value.code == "unavailable"
    assert "did not answer within 0.3 s" in raised.value.message


def test_a_client_without_keys_facing_a_keyed_coordinator_is_told_of_keys(binary, store,
                                                                            tmp_path):
    for name in ("coordinator", "client", "worker"):
        subprocess.run([binary, "keygen", str(tmp_path / f"{name}.key")], check=True,
                       capture_output=True)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    coordinator = subprocess.Popen(
        [binary, "coordinator", "--store", str(store), "--listen", endpoint,
         "--key", str(tmp_path / "coordinator.key"),
         "--allow-clients", str(tmp_path / "client.key.pub"),
         "--allow-workers", str(tmp_path / "worker.key.pub")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Said as soon as the handshake fails (a coordinator that does not
        # listen yet is tried again), not after the timeout.
        with pytest.raises(ForktrialError) as raised:
            Client(endpoint, timeout=60).status()
        assert raised.value.code == "failed_precondition"
        assert "speaks CurveZMQ and this client has no keys" in raised.value.message
        # A key the coordinator does not list: said at once, not after the timeout.
        subprocess.run([binary, "keygen", str(tmp_path / "stranger.key")], check=True,
                       capture_output=True)
        with pytest.raises(ForktrialError) as raised:
            Client(endpoint, timeout=60, key=tmp_path / "stranger.key",
                   coordinator_key=tmp_path / "coordinator.key.pub").status()
        assert raised.value.code == "failed_precondition"
        assert "refused this client's key" in raised.value.message
    finally:
        coordinator.kill()
        coordinator.wait()


def test_a_client_with_keys_facing_a_plain_coordinator_is_told_it_has_none(cluster, binary,
                                                                          tmp_path):
    for name in ("coordinator", "client"):
        subprocess.run([binary, "keygen", str(tmp_path / f"{name}.key")], check=True,
                       capture_output=True)
    client = Client(cluster.endpoint, timeout=60, key=tmp_path / "client.key",
                    coordinator_key=tmp_path / "coordinator.key.pub")
    with pytest.raises(ForktrialError) as raised:
        client.status()
    assert raised.value.code == "failed_precondition"
    assert "has no keys (it speaks plain ZeroMQ) and this client speaks CurveZMQ" in \
        raised.value.message


def test_results_of_a_large_job_come_in_pages_across_segments(cluster, tmp_path):
    cluster.start_worker("w1")
    client = Client(cluster.endpoint)
    job = client.submit(lua_batch(tmp_path, 150))
    client.wait(job)
    results = list(client.results(job))
    assert [r["index"] for r in results] == list(range(150))
    assert {r["outcome"] for r in results} == {"completed"}


def test_a_run_is_imported_into_the_coordinators_store_and_forked(cluster, tmp_path):
    cluster.start_worker("w1")
    client = Client(cluster.endpoint)
    run = client.import_run(ROOT / "examples/runs/chat.jsonl", run_id="run_remote")
    assert run == {"id": "run_remote", "label": "chat.jsonl", "events": 31, "parent": None}
    fork = client.import_run(ROOT / "examples/runs/chat-whatif.jsonl", run_id="run_whatif",
                             fork_of="run_remote", at="evt_009")
    assert fork["parent"] == {"run": "run_remote", "at": "evt_009"}
    batch = lua_batch(tmp_path, 2)
    batch.write_text(batch.read_text().replace("run_chat", "run_remote"))
    job = client.submit(batch)
    assert client.wait(job)["outcomes"]["completed"] == 2
    with pytest.raises(ValueError):
        client.import_run(ROOT / "examples/runs/chat.jsonl", fork_of="run_remote")


def test_a_run_is_imported_into_a_store(binary, tmp_path):
    made = import_run(ROOT / "examples/runs/chat.jsonl", tmp_path / "s", run_id="run_x")
    assert made["id"] == "run_x"
    assert made["events"] == 31
