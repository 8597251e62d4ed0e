#!/usr/bin/env python3
"""Drives headless Chromium over the DevTools protocol (--remote-debugging-pipe)
for tests/deploy/status-page.sh: loads the coordinator's status page while a
job runs and checks what a person would see.

  status_page_browser.py --url URL --job JOB --forktrial BIN --coordinator EP
                         --profile DIR --screenshot FILE.png --log FILE
                         --worker-pid PID --stuck-batch FILE.jsonl [--disk-url URL]

Checks, failing with exit 1 and a line saying what was wrong:
  - before the first answers (held back over the Fetch domain) every table
    says it is loading, none that it is empty; a call answered 503 shows as
    an error, and the next refresh recovers;
  - the page updates live: two readings of one page load, seconds apart,
    show more refreshes and more trials done, without a reload;
  - in every reading the candidates rank by the share of their finished
    trials that completed (checked against their own counts), every
    worker's running trials are at most its slots, the rest of its leases
    prefetched (until a reading shows some prefetched), and every time
    shows as "YYYY-MM-DD HH:MM:SS UTC" in a viewer's zone far from UTC;
  - once the job finished, the job's row shows `forktrial status JOB`'s
    state, done, total and per-outcome and per-status counts, and the
    candidates table shows `forktrial results JOB --by candidate`'s ranking;
  - the recent failures are trials that did not complete, as `results` says;
  - a candidate named with HTML is shown as text: no element made of it,
    no dialog opened;
  - with the worker (PID) killed, a job of FILE.jsonl shows why it waits,
    as `forktrial status` says, and once cancelled shows as cancelled, its
    bar amber, not green;
  - the jobs filter by state and by id or name;
  - on a page whose clock is 11 minutes on, the lost worker is hidden until
    its button is clicked;
  - the coordinator at --disk-url (its store's disk nearly full) shows its
    disk_warning above the tables;
  - every request the page made went to the coordinator; the document came
    with its Content-Security-Policy; nothing was blocked by it, and no
    script error happened (but the 503 the test answered).
The screenshot is taken mid-run. Chromium runs in a process group of its own,
which is killed whatever happens.
"""
import argparse
import base64
import fcntl
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

HOSTILE = "<img src=x onerror=alert(1)>"
STATUSES = ["queued", "leased", "reported", "cancelled", "abandoned"]

READ_PAGE = r"""
(() => {
  if (!document.getElementById("job-select")) return null;  // not loaded yet
  const text = (node) => (node ? node.textContent : null);
  const counts = (root) => Object.fromEntries([...root.querySelectorAll(".counts li")]
    .map((li) => [li.dataset.name, Number(text(li.querySelector(".n")))]));
  const note = (id) => {
    const line = document.getElementById(id + "-note");
    return { state: line.hidden ? "" : line.dataset.state, text: line.hidden ? "" : text(line) };
  };
  const times = [...document.querySelectorAll("td.time time")].map((t) => ({
    iso: t.dateTime, text: t.textContent,
  }));
  const box = (id) => {
    const node = document.getElementById(id);
    const rect = node.getBoundingClientRect();
    return { hidden: node.hidden, shown: node.offsetHeight > 0, top: rect.top,
             text: node.hidden ? "" : text(node) };
  };
  return {
    jobs: [...document.querySelectorAll("#jobs tbody tr")].map((tr) => ({
      job: tr.dataset.job,
      name: text(tr.querySelector(".name-text")),
      done: Number(text(tr.querySelector(".done-n"))),
      total: Number(text(tr.querySelector(".total-n"))),
      bar: [tr.querySelector("progress").value, tr.querySelector("progress").max],
      bar_color: getComputedStyle(tr.querySelector("progress")).getPropertyValue("--bar").trim(),
      counts: counts(tr),
      state: text(tr.querySelector(".state")),
      state_class: tr.querySelector(".state").className,
      state_color: getComputedStyle(tr.querySelector(".state")).color,
      waiting: text(tr.querySelector(".waiting")),
      throughput: text(tr.querySelector(".throughput")),
    })),
    jobs_note: note("jobs"),
    jobs_shown: text(document.getElementById("jobs-shown")),
    selected: document.getElementById("job-select").value,
    candidates: [...document.querySelectorAll("#candidates tbody tr")].map((tr) => ({
      candidate: text(tr.querySelector(".candidate")),
      html: tr.querySelector(".candidate").innerHTML,
      trials: Number(text(tr.querySelector(".trials"))),
      finished: Number(text(tr.querySelector(".finished-n"))),
      share: text(tr.querySelector(".share-n")),
      counts: counts(tr),
    })),
    candidates_note: note("candidates"),
    workers: [...document.querySelectorAll("#workers tbody tr")].map((tr) => ({
      worker: tr.dataset.worker, cells: [...tr.cells].map((td) => td.textContent),
      slots: Number(text(tr.querySelector(".slots"))),
      running: Number(text(tr.querySelector(".running"))),
      prefetched: Number(text(tr.querySelector(".prefetched"))),
    })),
    workers_note: note("workers"),
    workers_summary: text(document.getElementById("workers-summary")),
    workers_toggle: box("workers-toggle"),
    failures: [...document.querySelectorAll("#failures tbody tr")].map((tr) => ({
      trial: tr.dataset.trial,
      candidate: text(tr.querySelector(".candidate")),
      outcome: text(tr.querySelector(".outcome")),
      detail: text(tr.querySelector(".detail")),
    })),
    failures_note: note("failures"),
    times: times,
    updated: text(document.getElementById("updated")),
    disk_warning: box("disk-warning"),
    jobs_top: document.getElementById("jobs").getBoundingClientRect().top,
    body: document.body.innerText,
    refreshes: Number(text(document.getElementById("refreshes"))),
    connection: text(document.getElementById("connection")),
    images: document.images.length,
    elements: document.getElementsByTagName("*").length,
  };
})()
"""

# What the page must not say before it knows: each table's emptiness.
FALSE_EMPTINESS = ["No job has been submitted", "No worker has joined", "No trial has failed",
                   "No job to rank"]
GOOD_GREEN = "#1f8a4c"            # --good: a finished job's bar
WARN_AMBER = "#b7791f"            # --warn: a cancelled or abandoned job's bar
BAD_RED = "rgb(197, 48, 48)"      # --bad: a cancelled job's state
# The viewer's zone, far from UTC: a time shown in it would not match.
VIEWER_ZONE = "Pacific/Chatham"
# The page's clock moved on this far: a worker lost now was lost long ago.
LATER_MS = 11 * 60 * 1000
SHIFT_CLOCK = r"""
(() => {
  const Real = Date;
  const offset = %d;
  class Later extends Real {
    constructor(...args) { if (args.length === 0) super(Real.now() + offset); else super(...args); }
    static now() { return Real.now() + offset; }
  }
  globalThis.Date = Later;
})();
""" % LATER_MS


class Failed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failed(message)


class Browser:
    """Chromium with its DevTools protocol on fds 3 (commands in) and 4
    (answers and events out), messages separated by NUL bytes."""

    def __init__(self, profile, log):
        command_r, command_w = os.pipe()
        answer_r, answer_w = os.pipe()

        def pipes_at_3_and_4():
            # Moved out of the way first: either end may be 3 or 4 already.
            a = fcntl.fcntl(command_r, fcntl.F_DUPFD_CLOEXEC, 10)
            b = fcntl.fcntl(answer_w, fcntl.F_DUPFD_CLOEXEC, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.process = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
             "--remote-debugging-pipe", "--user-data-dir=" + profile,
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
             # Nothing but the coordinator can be reached by name: a request
             # elsewhere is still seen (and failed), never sent out.
             "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=False,
            preexec_fn=pipes_at_3_and_4, start_new_session=True)
        os.close(command_r)
        os.close(answer_w)
        self.commands = command_w
        self.answers = answer_r
        self.buffer = b""
        self.next_id = 0
        self.events = []

    def _read_message(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            check(left > 0, "Chromium did not answer in time")
            ready, _, _ = select.select([self.answers], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.answers, 1 << 20)
            check(chunk, "Chromium closed its DevTools pipe (it died?); its log says why")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method, params=None, session=None, timeout=30, may_fail=False):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self.next_id:
                check(may_fail or "error" not in answer,
                      "%s failed: %s" % (method, answer.get("error")))
                return answer.get("result", {})
            if "method" in answer:
                self.events.append(answer)

    def pump(self, seconds):
        """Takes in the events of the next `seconds`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.answers], [], [], deadline - time.monotonic())
            if not ready:
                break
            chunk = os.read(self.answers, 1 << 20)
            check(chunk, "Chromium closed its DevTools pipe (it died?)")
            self.buffer += chunk
            while b"\0" in self.buffer:
                message, self.buffer = self.buffer.split(b"\0", 1)
                answer = json.loads(message)
                if "method" in answer:
                    self.events.append(answer)

    def close(self):
        try:
            os.write(self.commands, json.dumps(
                {"id": 0, "method": "Browser.close", "params": {}}).encode() + b"\0")
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            # The browser's helpers (zygotes, renderers) share its group.
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            os.close(self.commands)
            os.close(self.answers)


def forktrial(args, binary, endpoint):
    done = subprocess.run([binary] + args + ["--coordinator", endpoint, "--json"],
                          capture_output=True, text=True, timeout=60)
    check(done.returncode == 0, "forktrial %s failed: %s" % (" ".join(args), done.stderr))
    return done.stdout


class Page:
    def __init__(self, browser, session):
        self.browser = browser
        self.session = session
        self.dialogs_handled = 0

    def read(self):
        result = self.browser.send("Runtime.evaluate",
                                   {"expression": READ_PAGE, "returnByValue": True},
                                   self.session)
        check("exceptionDetails" not in result,
              "reading the page failed: %s" % result.get("exceptionDetails"))
        return result["result"]["value"]

    def events(self, method):
        return [e["params"] for e in self.browser.events
                if e.get("method") == method and e.get("sessionId") == self.session]

    def wait_event(self, what, method, condition, seconds, seen=()):
        """The first event `method` matching `condition` not in `seen`."""
        deadline = time.monotonic() + seconds
        while True:
            for event in self.events(method):
                if condition(event) and not any(event is s for s in seen):
                    return event
            check(time.monotonic() < deadline, "Chromium never reported %s" % what)
            self.browser.pump(0.1)

    def evaluate(self, expression):
        result = self.browser.send("Runtime.evaluate",
                                   {"expression": expression, "returnByValue": True},
                                   self.session)
        check("exceptionDetails" not in result,
              "%s failed: %s" % (expression, result.get("exceptionDetails")))
        return result["result"].get("value")

    def problems(self, expected=()):
        """The page's errors and policy violations, but for `expected`
        network errors (URLs the test itself failed)."""
        found = ["%s (%s)" % (e["entry"]["text"], e["entry"].get("url", ""))
                 for e in self.events("Log.entryAdded") if e["entry"]["level"] == "error"
                 and not (e["entry"].get("source") == "network"
                          and e["entry"].get("url") in expected)]
        found += [e["exceptionDetails"].get("text", "") + " " +
                  json.dumps(e["exceptionDetails"].get("exception", {}))
                  for e in self.events("Runtime.exceptionThrown")]
        return found

    def wait_for(self, what, condition, seconds):
        deadline = time.monotonic() + seconds
        while True:
            state = self.read()
            if state is not None and condition(state):
                return state
            check(time.monotonic() < deadline,
                  "the page never showed %s; it showed %s" % (what, json.dumps(state)[:2000]))
            self.browser.pump(0.25)
            self.dismiss_dialogs()

    # A dialog left open would stop the page's script; it is closed (and
    # counted against the page at the end).
    def dismiss_dialogs(self):
        dialogs = self.events("Page.javascriptDialogOpening")
        for _ in dialogs[self.dialogs_handled:]:
            self.browser.send("Page.handleJavaScriptDialog", {"accept": False}, self.session)
        self.dialogs_handled = len(dialogs)


def row_of(state, job):
    rows = [row for row in state["jobs"] if row["job"] == job]
    return rows[0] if rows else None


def utc_text(iso):
    """What the page must show for the API's time `iso`
    ("2026-12-03T14:05:09.125Z"): "2026-12-03 14:05:09 UTC"."""
    return "%s %s UTC" % (iso[:10], iso[11:19])


def open_tab(browser, url, before_load=None, timezone=VIEWER_ZONE, intercept=None):
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget",
                           {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Network", "Page", "Runtime", "Log"):
        browser.send(domain + ".enable", {}, session)
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": 1360, "height": 1180, "deviceScaleFactor": 1, "mobile": False},
                 session)
    browser.send("Emulation.setTimezoneOverride", {"timezoneId": timezone}, session)
    if before_load:
        browser.send("Page.addScriptToEvaluateOnNewDocument", {"source": before_load}, session)
    if intercept:
        browser.send("Fetch.enable", {"patterns": [{"urlPattern": intercept,
                                                    "requestStage": "Request"}]}, session)
    browser.send("Page.navigate", {"url": url}, session)
    return Page(browser, session)


def check_candidates(state, where):
    """The ranking is by the share of each candidate's finished trials that
    completed, its progress apart: checked against the page's own counts."""
    keys = []
    for c in state["candidates"]:
        pending = sum(c["counts"].get(name, 0)
                      for name in ("queued", "leased", "reported", "cancelled"))
        finished = c["trials"] - pending
        check(c["finished"] == finished,
              "%s: candidate %s shows %d finished; its counts %s make %d"
              % (where, c["candidate"], c["finished"], c["counts"], finished))
        share = c["counts"].get("completed", 0) / finished if finished else 0.0
        check(c["share"] == ("%.1f%%" % (100 * share) if finished else "—"),
              "%s: candidate %s shows %s completed; %d of its %d finished trials completed"
              % (where, c["candidate"], c["share"], c["counts"].get("completed", 0), finished))
        keys.append((-share, -finished, c["candidate"]))
    check(keys == sorted(keys), "%s: the candidates are not ranked by the share of their "
          "finished trials that completed, then finished trials, then name: %s"
          % (where, [(c["candidate"], c["finished"], c["trials"], c["share"])
                     for c in state["candidates"]]))


def check_workers(state, where):
    """Running never exceeds the slots; the summary adds up the rows."""
    for w in state["workers"]:
        check(0 <= w["running"] <= w["slots"] and w["prefetched"] >= 0,
              "%s: worker %s shows %d running of %d slots, %d prefetched"
              % (where, w["worker"], w["running"], w["slots"], w["prefetched"]))
    alive = [w for w in state["workers"] if w["cells"][1] == "alive"]
    if alive:
        running = sum(w["running"] for w in alive)
        slots = sum(w["slots"] for w in alive)
        prefetched = sum(w["prefetched"] for w in alive)
        wanted = "%d worker%s alive: %d of %d slot%s running, %d prefetched." % (
            len(alive), "" if len(alive) == 1 else "s", running, slots,
            "" if slots == 1 else "s", prefetched)
        check(state["workers_summary"] == wanted, "%s: the workers' summary says %r, not %r"
              % (where, state["workers_summary"], wanted))


def check_times(state, where):
    """Every time with its date, in UTC, whatever the viewer's zone."""
    check(state["times"], "%s: the page shows no time" % where)
    for t in state["times"]:
        check(t["text"] == utc_text(t["iso"]), "%s: the time %s shows as %r, not %r"
              % (where, t["iso"], t["text"], utc_text(t["iso"])))
    check(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", state["updated"] or ""),
          "%s: the page says it was updated at %r" % (where, state["updated"]))


def check_loading(page):
    """Until the first answers arrive (held by the test), every table says it
    is loading, none that it is empty; then a call that fails says so."""
    held = {}
    for name in ("jobs", "workers", "failures"):
        held[name] = page.wait_event(
            "the page asking for /api/%s" % name, "Fetch.requestPaused",
            lambda e, name=name: urllib.parse.urlparse(e["request"]["url"]).path
            == "/api/" + name, 30)
    state = page.wait_for("the page", lambda s: True, 10)
    for table in ("jobs", "candidates", "workers", "failures"):
        note = state[table + "_note"]
        check(note["state"] == "loading" and note["text"].startswith("Loading the "),
              "before any answer, the %s table says %s" % (table, note))
    said = [text for text in FALSE_EMPTINESS if text in state["body"]]
    check(not said, "before any answer, the page says %s" % said)
    check(not state["jobs"] and not state["workers"], "rows before any answer: %s" % state)
    print("page: loading, before any answer: %s" % state["jobs_note"]["text"])

    # /api/workers fails; the others answer.
    browser = page.browser
    failed_url = held["workers"]["request"]["url"]
    browser.send("Fetch.fulfillRequest", {
        "requestId": held["workers"]["requestId"], "responseCode": 503,
        "responseHeaders": [{"name": "Content-Type", "value": "application/json"}],
        "body": base64.b64encode(b'{"error":"held back by the test"}').decode()}, page.session)
    for name in ("jobs", "failures"):
        browser.send("Fetch.continueRequest", {"requestId": held[name]["requestId"]},
                     page.session)
    candidates = page.wait_event(
        "the page asking for /api/candidates", "Fetch.requestPaused",
        lambda e: "/api/candidates?" in e["request"]["url"], 30)
    state = page.read()
    check(state["jobs_note"]["state"] == "loading" and not state["jobs"],
          "the jobs were drawn before the candidates answered: %s" % state["jobs_note"])
    browser.send("Fetch.continueRequest", {"requestId": candidates["requestId"]}, page.session)
    state = page.wait_for("the workers' error", lambda s: s["workers_note"]["state"] == "error",
                          30)
    # The coordinator's reason, from the answer's body.
    check(state["workers_note"]["text"] ==
          "Could not load the workers (api/workers answered 503: held back by the test). "
          "Retrying every second.",
          "the failed workers' call shows as %r" % state["workers_note"]["text"])
    # Whose jobs the page shows, and why it may.
    check("Shown: every client's jobs: this coordinator has no client keys" in state["body"],
          "the page does not say whose jobs it shows: %r" % state["body"][:300])
    check(state["connection"].startswith("not up to date: api/workers answered 503"),
          "with /api/workers failing the header says %r" % state["connection"])
    check(state["jobs"] and state["jobs_note"]["state"] == "",
          "the jobs did not show once they answered: %s" % state["jobs_note"])
    check("No worker has joined" not in state["body"],
          "a failed call shows as no worker: %s" % state["workers_note"])
    print("page: a failed call: %s" % state["workers_note"]["text"])

    # Let everything through again: the next refresh recovers. What was
    # held meanwhile goes on, before and after interception ends.
    handled = set(e["requestId"] for e in list(held.values()) + [candidates])

    def release():
        for event in page.events("Fetch.requestPaused"):
            if event["requestId"] not in handled:
                handled.add(event["requestId"])
                browser.send("Fetch.continueRequest", {"requestId": event["requestId"]},
                             page.session, may_fail=True)
    browser.pump(0.1)
    release()
    browser.send("Fetch.disable", {}, page.session)
    release()
    page.wait_for("the workers once /api/workers answered", lambda s: (
        s["workers"] and s["workers_note"]["state"] == "" and s["connection"] == "live"), 30)
    return failed_url


def run(options):
    url = options.url
    origin = url.rstrip("/") + "/"
    with open(options.log, "ab") as log:
        browser = Browser(options.profile, log)
        try:
            page = open_tab(browser, url, intercept="*/api/*")
            job = options.job
            failed_url = check_loading(page)

            # Live: two readings of this one load, while the job runs.
            first = page.wait_for("the job running", lambda s: (
                row_of(s, job) is not None and s["refreshes"] >= 1), 30)
            check(row_of(first, job)["done"] < row_of(first, job)["total"],
                  "the job had finished before the page could watch it run; give the batch "
                  "more trials: %s" % row_of(first, job))
            browser.pump(4)
            second = page.wait_for("the page", lambda s: True, 10)
            a, b = row_of(first, job), row_of(second, job)
            print("page: %d refreshes, %d/%d done; %d refreshes, %d/%d done 4 s later"
                  % (first["refreshes"], a["done"], a["total"],
                     second["refreshes"], b["done"], b["total"]))
            # The running job's candidates are ranked, all its trials, no
            # fewer of them done than its row says (they are asked for after
            # the jobs, in the same refresh).
            for where, state in (("first reading", first), ("second reading", second)):
                row = row_of(state, job)
                trials = sum(c["trials"] for c in state["candidates"])
                done = sum(n for c in state["candidates"] for name, n in c["counts"].items()
                           if name not in ("queued", "leased", "reported"))
                check(state["selected"] == job and trials == row["total"] and done >= row["done"],
                      "the candidates of %s count %d trials, %d done; its row says %d, %d done"
                      % (state["selected"], trials, done, row["total"], row["done"]))
                check(row["state"] == "running" and "state-running" in row["state_class"],
                      "%s: the running job's state shows as %r" % (where, row["state"]))
                check_candidates(state, where)
                check_workers(state, where)
                check_times(state, where)
                check(state["disk_warning"]["hidden"],
                      "%s: a disk warning shows with a roomy disk: %s"
                      % (where, state["disk_warning"]))
            check(second["refreshes"] >= first["refreshes"] + 2,
                  "the page did not refresh by itself: %d, then %d refreshes"
                  % (first["refreshes"], second["refreshes"]))
            check(b["done"] > a["done"],
                  "the job's progress did not move on the page: %d, then %d done"
                  % (a["done"], b["done"]))
            check(b["bar"] == [b["done"], b["total"]],
                  "the progress bar shows %s, not done/total %d/%d" % (b["bar"], b["done"], b["total"]))
            check(second["connection"] == "live", "the page says: %s" % second["connection"])
            shot = browser.send("Page.captureScreenshot", {"format": "png"}, page.session)
            with open(options.screenshot, "wb") as out:
                out.write(base64.b64decode(shot["data"]))

            # The worker's leases beyond its slots show as prefetched, never
            # as running: every reading is checked until one shows some.
            def prefetching(state):
                check_workers(state, "while the job runs")
                return any(w["worker"] == "w1" and w["running"] == w["slots"]
                           and w["prefetched"] >= 1 for w in state["workers"])
            busy = page.wait_for("w1 running its slots with assignments prefetched",
                                 prefetching, 60)
            print("page: %s; w1: %s" % (busy["workers_summary"],
                                        [w["cells"] for w in busy["workers"]]))

            # Finished: the page agrees with the command line.
            while True:
                status = json.loads(forktrial(["status", job], options.forktrial,
                                              options.coordinator))
                if status["finished"]:
                    break
                browser.pump(0.5)
            final = page.wait_for("the finished job", lambda s: (
                row_of(s, job) is not None and row_of(s, job)["done"] == status["total"]
                and row_of(s, job)["state"] == status["state"] and s["selected"] == job), 30)
            row = row_of(final, job)
            check(row["total"] == status["total"], "total %d on the page, %d by forktrial status"
                  % (row["total"], status["total"]))
            expected = {name: n for name, n in status["outcomes"].items() if n}
            expected.update({name: status["status"][name] for name in STATUSES
                             if status["status"][name]})
            check(row["counts"] == expected, "the job's counts on the page are %s; forktrial "
                  "status says %s" % (row["counts"], expected))
            if status["state"] == "finished":
                check(row["bar_color"] == GOOD_GREEN, "the finished job's bar is %s, not green"
                      % row["bar_color"])
            print("page: job %s: %s, %d/%d done, %s" % (job, row["state"], row["done"],
                                                         row["total"], json.dumps(row["counts"])))
            check_times(final, "the finished job")

            ranking = [json.loads(line) for line in forktrial(
                ["results", job, "--by", "candidate"], options.forktrial,
                options.coordinator).splitlines()]
            shown = [(c["candidate"], c["trials"], c["finished"], c["share"], c["counts"])
                     for c in final["candidates"]]
            wanted = [(r["candidate"], r["trials"], r["finished"],
                       "%.1f%%" % (100 * r["completed_share"]) if r["finished"] else "—",
                       r["outcomes"]) for r in ranking]
            check(shown == wanted, "the candidates on the page are %s; forktrial results --by "
                  "candidate says %s" % (shown, wanted))
            check_candidates(final, "the finished job")

            hostile = [c for c in final["candidates"] if c["candidate"] == HOSTILE]
            check(len(hostile) == 1, "no candidate shows as the text %s" % HOSTILE)
            check(hostile[0]["html"] == "&lt;img src=x onerror=alert(1)&gt;",
                  "the candidate's name became markup: %s" % hostile[0]["html"])
            check(final["images"] == 0, "the page holds %d images: a name became an element"
                  % final["images"])
            check(not page.events("Page.javascriptDialogOpening"),
                  "a dialog opened: a name ran as script")

            results = {r["trial"]: r for r in map(json.loads, forktrial(
                ["results", job], options.forktrial, options.coordinator).splitlines())}
            check(final["failures"], "no recent failure on the page, though the batch has some")
            for failure in final["failures"]:
                result = results.get(failure["trial"])
                check(result is not None and result["outcome"] != "completed",
                      "the page lists %s as failed; forktrial results says %s"
                      % (failure["trial"], result))
                check(failure["outcome"] == (result["outcome"] or result["status"]) and
                      failure["candidate"] == result["candidate"] and
                      failure["detail"] == result["detail"],
                      "failure %s on the page differs from its result %s" % (failure, result))
            check(any(w["worker"] == "w1" for w in final["workers"]),
                  "worker w1 is not on the page: %s" % final["workers"])

            check_stuck_job(page, options)
            check_filters(page, job)
            check_lost_long_ago(browser, url)
            if options.disk_url:
                check_disk_warning(browser, options.disk_url)

            # Nothing but the coordinator, under its policy, without errors.
            urls = [e["request"]["url"] for e in page.events("Network.requestWillBeSent")]
            outside = [u for u in urls if not u.startswith(origin)]
            check(not outside, "the page asked for %s, outside the coordinator" % outside)
            check(sum("/api/jobs" in u for u in urls) >= 3,
                  "the page fetched /api/jobs %d times" % sum("/api/jobs" in u for u in urls))
            documents = [e["response"] for e in page.events("Network.responseReceived")
                         if e["type"] == "Document"]
            check(documents, "no document response was seen")
            headers = {k.lower(): v for k, v in documents[0]["headers"].items()}
            check("default-src 'self'" in headers.get("content-security-policy", ""),
                  "the page came without its policy: %s" % headers)
            problems = page.problems(expected=(failed_url,))
            check(not problems, "the page logged errors: %s" % problems)
            print("page: %d requests, all to %s; no error, no policy violation"
                  % (len(urls), origin))
        finally:
            browser.close()


def check_stuck_job(page, options):
    """A job no worker can run says why, beside it; cancelled, it shows as
    cancelled, not as a finished (green) job."""
    os.kill(options.worker_pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        workers = json.loads(forktrial(["workers"], options.forktrial, options.coordinator))
        if not any(w["alive"] for w in workers["workers"]):
            break
        check(time.monotonic() < deadline,
              "the coordinator still has w1 alive, 60 s after it was killed: %s" % workers)
        page.browser.pump(0.5)
    stuck = json.loads(forktrial(["submit", options.stuck_batch], options.forktrial,
                                 options.coordinator))["job"]
    status = json.loads(forktrial(["status", stuck], options.forktrial, options.coordinator))
    check(status["waiting"], "a job with no worker alive is not waiting: %s" % status)
    state = page.wait_for("the stuck job waiting", lambda s: (
        row_of(s, stuck) is not None and row_of(s, stuck)["waiting"] is not None), 30)
    row = row_of(state, stuck)
    check(row["waiting"] == "Waiting: " + status["waiting"],
          "the stuck job's row says %r; forktrial status says it waits: %r"
          % (row["waiting"], status["waiting"]))
    check(row["state"] == "queued", "the stuck job's state shows as %r" % row["state"])
    lost = [w for w in state["workers"] if w["worker"] == "w1"]
    check(lost and lost[0]["cells"][1] == "lost",
          "w1, lost a moment ago, is not shown lost: %s" % state["workers"])
    print("page: job %s: %s" % (stuck, row["waiting"]))

    forktrial(["cancel", stuck], options.forktrial, options.coordinator)
    state = page.wait_for("the stuck job cancelled", lambda s: (
        row_of(s, stuck) is not None and row_of(s, stuck)["state"] != "queued"), 30)
    row = row_of(state, stuck)
    check(row["state"] == "cancelled" and "state-cancelled" in row["state_class"],
          "the cancelled job's state shows as %r (%s)" % (row["state"], row["state_class"]))
    check(row["state_color"] == BAD_RED, "the cancelled job's state is %s, not red"
          % row["state_color"])
    check(row["bar_color"] == WARN_AMBER, "the cancelled job's bar is %s, not amber (%s)"
          % (row["bar_color"], "the finished green" if row["bar_color"] == GOOD_GREEN else ""))
    check(row["waiting"] is None, "the cancelled job still says %r" % row["waiting"])
    print("page: job %s: %s, bar %s" % (stuck, row["state"], row["bar_color"]))


def set_filter(page, state, text):
    page.evaluate("""(() => {
      const select = document.getElementById("job-state");
      select.value = %s;
      select.dispatchEvent(new Event("change"));
      const input = document.getElementById("job-text");
      input.value = %s;
      input.dispatchEvent(new Event("input"));
    })()""" % (json.dumps(state), json.dumps(text)))
    return page.read()


def check_filters(page, job):
    """The jobs filter by state and by text in their id or name."""
    everything = page.read()
    jobs = {row["job"]: row for row in everything["jobs"]}
    check(len(jobs) == 2, "the page shows %d jobs, not the batch and the stuck one" % len(jobs))
    for state in ("queued", "running", "finished", "abandoned", "cancelled"):
        shown = set(row["job"] for row in set_filter(page, state, "")["jobs"])
        wanted = set(j for j, row in jobs.items() if row["state"] == state)
        check(shown == wanted, "the state filter %s shows %s, not %s" % (state, shown, wanted))
    state = set_filter(page, "", job[-6:].upper())
    check([row["job"] for row in state["jobs"]] == [job],
          "the text filter %s shows %s" % (job[-6:].upper(), [r["job"] for r in state["jobs"]]))
    check(state["jobs_shown"] == "1 of 2 jobs shown", "the filter says %r" % state["jobs_shown"])
    state = set_filter(page, "", "stuck")
    check([row["name"] for row in state["jobs"]] == ["stuck"],
          "the name filter shows %s" % [row["name"] for row in state["jobs"]])
    state = set_filter(page, "running", "")
    check(not state["jobs"] and state["jobs_note"] == {
        "state": "empty", "text": "No job matches the filter (2 jobs hidden)."},
          "with no job running the filter shows %s, %s" % (state["jobs"], state["jobs_note"]))
    # Filtered rows stay filtered as the page refreshes.
    refreshes = state["refreshes"]
    state = page.wait_for("a refresh", lambda s: s["refreshes"] > refreshes + 1, 30)
    check(not state["jobs"], "a refresh brought back filtered jobs: %s" % state["jobs"])
    state = set_filter(page, "", "")
    check(len(state["jobs"]) == 2, "without a filter the page shows %s" % state["jobs"])
    print("page: the filters by state, id and name show the jobs they should")


def check_lost_long_ago(browser, url):
    """Eleven minutes on (the page's clock moved on), the worker lost a
    moment ago is hidden, and shown again when asked for."""
    later = open_tab(browser, url, before_load=SHIFT_CLOCK)
    state = later.wait_for("the workers eleven minutes on", lambda s: (
        s["workers_note"]["state"] != "loading" and s["refreshes"] >= 1), 30)
    check(not state["workers"], "a worker lost 11 minutes ago still shows: %s" % state["workers"])
    check(state["workers_note"]["text"] ==
          "No worker is alive (1 worker lost more than 10 minutes ago hidden).",
          "with its only worker hidden the page says %r" % state["workers_note"]["text"])
    toggle = state["workers_toggle"]
    check(toggle["shown"] and toggle["text"] == "Show 1 worker lost more than 10 minutes ago",
          "the toggle for lost workers is %s" % toggle)
    later.evaluate('document.getElementById("workers-toggle").click()')
    state = later.read()
    check([w["worker"] for w in state["workers"]] == ["w1"] and
          state["workers"][0]["cells"][1] == "lost",
          "asked for, the lost workers show as %s" % state["workers"])
    check(state["workers_toggle"]["text"] == "Hide 1 worker lost more than 10 minutes ago",
          "the toggle then says %r" % state["workers_toggle"]["text"])
    check(not later.problems(), "the page logged errors: %s" % later.problems())
    print("page: a worker lost 11 minutes ago: hidden, then shown by the toggle")


def check_disk_warning(browser, url):
    """A coordinator whose store's disk is nearly full says so at the top."""
    with urllib.request.urlopen(url.rstrip("/") + "/api/jobs", timeout=10) as answer:
        jobs = json.load(answer)
    check(jobs.get("disk_warning"), "the small disk's coordinator gives no disk_warning: %s"
          % jobs)
    page = open_tab(browser, url)
    state = page.wait_for("the disk warning", lambda s: s["disk_warning"]["shown"], 30)
    wanted = "Warning: the coordinator's store is nearly out of room: " + jobs["disk_warning"]
    check(state["disk_warning"]["text"] == wanted, "the disk warning says %r, not %r"
          % (state["disk_warning"]["text"], wanted))
    check(state["disk_warning"]["top"] < state["jobs_top"],
          "the disk warning is not above the jobs: %s" % state["disk_warning"])
    check(state["jobs_note"]["text"] == "No job has been submitted.",
          "the new coordinator's jobs: %s" % state["jobs_note"])
    check(not page.problems(), "the page logged errors: %s" % page.problems())
    print("page: %s" % wanted)


def main():
    parser = argparse.ArgumentParser()
    for name in ("url", "job", "forktrial", "coordinator", "profile", "screenshot", "log",
                 "stuck-batch"):
        parser.add_argument("--" + name, required=True)
    parser.add_argument("--worker-pid", type=int, required=True)
    parser.add_argument("--disk-url", default="")
    options = parser.parse_args()
    try:
        run(options)
    except Failed as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
