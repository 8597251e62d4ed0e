#!/usr/bin/env python3
"""Drives headless Chromium over the DevTools protocol (--remote-debugging-pipe)
for tests/deploy/status-page.sh: loads the coordinator's status page while a
job runs and checks what a person would see.

  status_page_browser.py --url URL --job JOB --forktrial BIN --coordinator EP
                         --profile DIR --screenshot FILE.png --log FILE

Checks, failing with exit 1 and a line saying what was wrong:
  - the page updates live: two readings of one page load, seconds apart,
    show more refreshes and more trials done, without a reload;
  - once the job finished, the job's row shows `forktrial status JOB`'s done,
    total and per-outcome and per-status counts, and the candidates table
    shows `forktrial results JOB --by candidate`'s ranking;
  - the recent failures are trials that did not complete, as `results` says;
  - a candidate named with HTML is shown as text: no element made of it,
    no dialog opened;
  - every request the page made went to the coordinator; the document came
    with its Content-Security-Policy; nothing was blocked by it, and no
    script error happened.
The screenshot is taken mid-run. Chromium runs in a process group of its own,
which is killed whatever happens.
"""
import argparse
import base64
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time

HOSTILE = "<img src=x onerror=alert(1)>"
STATUSES = ["queued", "leased", "reported", "cancelled", "abandoned"]

READ_PAGE = r"""
(() => {
  if (!document.getElementById("job-select")) return null;  // not loaded yet
  const text = (node) => (node ? node.textContent : null);
  const counts = (root) => Object.fromEntries([...root.querySelectorAll(".counts li")]
    .map((li) => [li.dataset.name, Number(text(li.querySelector(".n")))]));
  return {
    jobs: [...document.querySelectorAll("#jobs tbody tr")].map((tr) => ({
      job: tr.dataset.job,
      done: Number(text(tr.querySelector(".done-n"))),
      total: Number(text(tr.querySelector(".total-n"))),
      bar: [tr.querySelector("progress").value, tr.querySelector("progress").max],
      counts: counts(tr),
      throughput: text(tr.querySelector(".throughput")),
    })),
    selected: document.getElementById("job-select").value,
    candidates: [...document.querySelectorAll("#candidates tbody tr")].map((tr) => ({
      candidate: text(tr.querySelector(".candidate")),
      html: tr.querySelector(".candidate").innerHTML,
      trials: Number(text(tr.querySelector(".trials"))),
      counts: counts(tr),
    })),
    workers: [...document.querySelectorAll("#workers tbody tr")].map((tr) => ({
      worker: tr.dataset.worker, cells: [...tr.cells].map((td) => td.textContent),
    })),
    failures: [...document.querySelectorAll("#failures tbody tr")].map((tr) => ({
      trial: tr.dataset.trial,
      candidate: text(tr.querySelector(".candidate")),
      outcome: text(tr.querySelector(".outcome")),
      detail: text(tr.querySelector(".detail")),
    })),
    refreshes: Number(text(document.getElementById("refreshes"))),
    connection: text(document.getElementById("connection")),
    images: document.images.length,
    elements: document.getElementsByTagName("*").length,
  };
})()
"""


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

    def send(self, method, params=None, session=None, timeout=30):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self.next_id:
                check("error" not in answer, "%s failed: %s" % (method, answer.get("error")))
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


def run(options):
    url = options.url
    origin = url.rstrip("/") + "/"
    with open(options.log, "ab") as log:
        browser = Browser(options.profile, log)
        try:
            target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = browser.send("Target.attachToTarget",
                                   {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Network", "Page", "Runtime", "Log"):
                browser.send(domain + ".enable", {}, session)
            browser.send("Emulation.setDeviceMetricsOverride",
                         {"width": 1360, "height": 1180, "deviceScaleFactor": 1,
                          "mobile": False}, session)
            page = Page(browser, session)
            browser.send("Page.navigate", {"url": url}, session)
            job = options.job

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
            for state in (first, second):
                row = row_of(state, job)
                trials = sum(c["trials"] for c in state["candidates"])
                done = sum(n for c in state["candidates"] for name, n in c["counts"].items()
                           if name not in ("queued", "leased", "reported"))
                check(state["selected"] == job and trials == row["total"] and done >= row["done"],
                      "the candidates of %s count %d trials, %d done; its row says %d, %d done"
                      % (state["selected"], trials, done, row["total"], row["done"]))
            check(second["refreshes"] >= first["refreshes"] + 2,
                  "the page did not refresh by itself: %d, then %d refreshes"
                  % (first["refreshes"], second["refreshes"]))
            check(b["done"] > a["done"],
                  "the job's progress did not move on the page: %d, then %d done"
                  % (a["done"], b["done"]))
            check(b["bar"] == [b["done"], b["total"]],
                  "the progress bar shows %s, not done/total %d/%d" % (b["bar"], b["done"], b["total"]))
            check(second["connection"] == "live", "the page says: %s" % second["connection"])
            shot = browser.send("Page.captureScreenshot", {"format": "png"}, session)
            with open(options.screenshot, "wb") as out:
                out.write(base64.b64decode(shot["data"]))

            # Finished: the page agrees with the command line.
            while True:
                status = json.loads(forktrial(["status", job], options.forktrial,
                                              options.coordinator))
                if status["finished"]:
                    break
                browser.pump(0.5)
            final = page.wait_for("the finished job", lambda s: (
                row_of(s, job) is not None and row_of(s, job)["done"] == status["total"]
                and s["selected"] == job), 30)
            row = row_of(final, job)
            check(row["total"] == status["total"], "total %d on the page, %d by forktrial status"
                  % (row["total"], status["total"]))
            expected = {name: n for name, n in status["outcomes"].items() if n}
            expected.update({name: status["status"][name] for name in STATUSES
                             if status["status"][name]})
            check(row["counts"] == expected, "the job's counts on the page are %s; forktrial "
                  "status says %s" % (row["counts"], expected))
            print("page: job %s: %d/%d done, %s" % (job, row["done"], row["total"],
                                                     json.dumps(row["counts"])))

            ranking = [json.loads(line) for line in forktrial(
                ["results", job, "--by", "candidate"], options.forktrial,
                options.coordinator).splitlines()]
            shown = [(c["candidate"], c["trials"], c["counts"]) for c in final["candidates"]]
            wanted = [(r["candidate"], r["trials"], r["outcomes"]) for r in ranking]
            check(shown == wanted, "the candidates on the page are %s; forktrial results --by "
                  "candidate says %s" % (shown, wanted))

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
            problems = ["%s (%s)" % (e["entry"]["text"], e["entry"].get("url", ""))
                        for e in page.events("Log.entryAdded") if e["entry"]["level"] == "error"]
            problems += [e["exceptionDetails"].get("text", "") + " " +
                         json.dumps(e["exceptionDetails"].get("exception", {}))
                         for e in page.events("Runtime.exceptionThrown")]
            check(not problems, "the page logged errors: %s" % problems)
            print("page: %d requests, all to %s; no error, no policy violation"
                  % (len(urls), origin))
        finally:
            browser.close()


def main():
    parser = argparse.ArgumentParser()
    for name in ("url", "job", "forktrial", "coordinator", "profile", "screenshot", "log"):
        parser.add_argument("--" + name, required=True)
    options = parser.parse_args()
    try:
        run(options)
    except Failed as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
