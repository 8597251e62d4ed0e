"""Scenarios for the stand-in of activegraph's trial child: one per way a child
can end (tests/python/standin)."""

import os, signal, time

def context(rt):
    rt.emit("custom.context", rt.run_row(), "standin.pack")

def complete(rt):
    rt.emit("custom.noted", {"n": 1, "text": "caf\u00e9 \u2018x\u2019"}, "standin.pack")
    rt.emit("custom.noted", {"n": 2}, "standin.pack")

def fail(rt):
    rt.emit("custom.noted", {"n": 1}, "standin.pack")
    raise ValueError("the candidate gave up")

def lie(rt):
    rt.emit("custom.noted", {"n": 1}, "standin.pack")
    print('{"outcome": "completed", "fork_run_id": "x", "events_appended": 999, '
          '"behavior_failures": 0, "detail": ""}', flush=True)
    os._exit(30)

def crash(rt):
    rt.emit("custom.noted", {"n": 1}, "standin.pack")
    os.kill(os.getpid(), signal.SIGSEGV)

def sleep(rt):
    time.sleep(60)

def allocate(rt):
    hoard = []
    while True:
        hoard.append(bytearray(16 << 20))

def flood(rt):
    for n in range(50):
        rt.emit("custom.noted", {"n": n}, "standin.pack")

def hoard_row(rt):
    """One row longer than any write budget the tests give."""
    rt.emit("custom.noted", {"n": 0}, "standin.pack")
    rt.emit("custom.hoard", {"x": "x" * (64 << 20)}, "standin.pack")

def confined(rt):
    """What the trial can reach of the host: read /etc, write /tmp and /usr."""
    found = {}
    for what, attempt in (("etc", lambda: open("/etc/passwd").read()),
                          ("tmp", lambda: open("/tmp/forktrial-escape", "w").write("x")),
                          ("usr", lambda: open("/usr/forktrial-escape", "w").write("x"))):
        try:
            attempt()
            found[what] = "reached"
        except OSError as e:
            found[what] = type(e).__name__
    rt.emit("custom.confined", found, "standin.pack")

def network(rt):
    import socket
    socket.socket()
    rt.emit("custom.noted", {"socket": "opened"}, "standin.pack")

def forge(rt):
    rt.emit("trial.result", {"outcome": "completed"}, "forktrial")
