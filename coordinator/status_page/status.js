// The coordinator's status page: fetches the JSON API once a second and
// redraws the tables. Every value from the API is written with textContent
// (never as HTML): names and details are chosen by whoever submitted the
// trials, and must show as text whatever they hold.
//
// Each table says what it knows: "Loading…" until the first answer of its
// API call, its emptiness only once an answer said so, and an error (beside
// the last rows it had) when its call failed.
"use strict";

(() => {
  const REFRESH_MS = 1000;
  // Workers lost longer ago than this are hidden until asked for.
  const LOST_HIDDEN_AFTER_MS = 10 * 60 * 1000;
  const OUTCOMES = ["completed", "scenario_failed", "limits_exceeded",
    "materialization_failed", "crashed"];
  // Statuses shown beside the outcomes: the trials not (yet) reconciled.
  const STATUSES = ["queued", "leased", "reported", "cancelled", "abandoned"];

  let selectedJob = null;  // the job whose candidates are ranked
  let chosen = false;      // whether a person picked it
  let refreshes = 0;
  let jobsDoc = null;      // the last answers, redrawn when a filter changes
  let workersDoc = null;
  let showOldLost = false;

  const $ = (id) => document.getElementById(id);

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function cell(text, className) {
    return el("td", text, className);
  }

  function pad(n) {
    return String(n).padStart(2, "0");
  }

  // "2026-12-03 14:05:09 UTC": the same form for every time on the page,
  // whatever the viewer's time zone, with its date.
  function utcText(when) {
    return `${when.getUTCFullYear()}-${pad(when.getUTCMonth() + 1)}-${pad(when.getUTCDate())} ` +
      `${pad(when.getUTCHours())}:${pad(when.getUTCMinutes())}:${pad(when.getUTCSeconds())} UTC`;
  }

  // A time cell: the time in UTC to the second, the API's own timestamp on
  // hover.
  function timeCell(iso) {
    const td = cell("", "time");
    if (!iso) {
      td.textContent = "—";
      return td;
    }
    const when = new Date(iso);
    const time = el("time", Number.isNaN(when.getTime()) ? iso : utcText(when));
    time.dateTime = iso;
    time.title = iso;
    td.append(time);
    return td;
  }

  function progress(value, max) {
    const bar = document.createElement("progress");
    bar.max = Math.max(Number(max) || 0, 1);
    bar.value = Math.min(Number(value) || 0, bar.max);
    return bar;
  }

  function plural(n, one, many) {
    return `${n} ${n === 1 ? one : many}`;
  }

  // A list of "name count" chips, in the order of `names`, nonzero ones only.
  function counts(named, names) {
    const list = el("ul", null, "counts");
    for (const name of names) {
      const n = named[name];
      if (!n) continue;
      const item = el("li");
      item.dataset.name = name;
      item.append(el("span", n, "n"), " " + name.replace(/_/g, " "));
      list.append(item);
    }
    return list;
  }

  // The line under a table: "loading", "empty", "error" or "" (hidden).
  function note(table, state, text) {
    const line = $(`${table}-note`);
    line.dataset.state = state;
    line.textContent = text || "";
    line.hidden = state === "";
  }

  // The table's body becomes `rows`; `empty` shows when there are none.
  function fill(table, rows, empty) {
    $(table).tBodies[0].replaceChildren(...rows);
    if (rows.length > 0) note(table, "", "");
    else note(table, "empty", empty);
  }

  // A failed call: the table keeps the rows of its last answer, if any, and
  // says they are not fresh.
  function failed(table, what, error) {
    const rows = $(table).tBodies[0].rows.length;
    note(table, "error", rows > 0 ?
      `Could not refresh the ${what} (${error.message}); the rows above are from the last ` +
      "answer. Retrying every second." :
      `Could not load the ${what} (${error.message}). Retrying every second.`);
  }

  async function getJson(path) {
    let response;
    try {
      response = await fetch(path, { cache: "no-store", credentials: "same-origin" });
    } catch (error) {
      throw new Error(`${path}: the coordinator did not answer`);
    }
    if (!response.ok) {
      // The coordinator's reason, when it gives one (a status API it does
      // not serve on this address says why).
      let reason = "";
      try {
        reason = (await response.json()).error || "";
      } catch (error) {
        reason = "";
      }
      throw new Error(`${path} answered ${response.status}${reason ? `: ${reason}` : ""}`);
    }
    return response.json();
  }

  function byNewest(a, b) {
    return String(b.submitted_at).localeCompare(String(a.submitted_at)) ||
      String(a.job).localeCompare(String(b.job));
  }

  // The job whose candidates to rank: the one picked, while it exists;
  // else the first running one, else the newest.
  function chooseJob(jobs) {
    if (!jobs.some((job) => job.job === selectedJob)) {
      chosen = false;
      selectedJob = null;
    }
    if (!chosen) {
      const running = jobs.find((job) => !job.finished);
      selectedJob = running ? running.job : (jobs.length > 0 ? jobs[0].job : null);
    }
  }

  // The job filters: a state, and text found in the job's id or name.
  function jobShown(job) {
    const state = $("job-state").value;
    const text = $("job-text").value.trim().toLowerCase();
    if (state && job.state !== state) return false;
    return !text || String(job.job).toLowerCase().includes(text) ||
      String(job.name || "").toLowerCase().includes(text);
  }

  function jobRow(job) {
    const tr = el("tr");
    tr.dataset.job = job.job;
    tr.dataset.state = job.state || "";
    const name = cell("", "name");
    name.append(el("span", job.name, "name-text"));
    // Why its queued trials are not leased, as `forktrial status` says.
    if (job.waiting) name.append(el("p", `Waiting: ${job.waiting}`, "waiting"));
    const done = cell("", "num done");
    done.append(el("span", job.done, "done-n"), " / ", el("span", job.total, "total-n"));
    // Trials answered from the result cache were not run: said apart.
    const cached = Number(job.cached) || 0;
    if (cached > 0) {
      const note = el("span", ` (${cached} cached)`, "cached-n");
      note.title = `${plural(cached, "trial was", "trials were")} answered from the result ` +
        "cache: the recorded result and fork of an earlier trial with the same inputs, not run";
      done.append(note);
    }
    const outcomes = cell();
    const named = Object.assign({}, job.status, job.outcomes);
    outcomes.append(counts(named, OUTCOMES.concat(STATUSES)));
    // A cancelled job's dropped trials are done, and fill none of the bar.
    const bar = cell("", "progress-cell");
    bar.append(progress(job.done - ((job.status && job.status.cancelled) || 0), job.total));
    const state = cell("", "state-cell");
    state.append(el("span", job.state, `state state-${job.state}`));
    const rate = Number(job.throughput) || 0;
    tr.append(cell(job.job, "id"), name, state, bar, done, outcomes,
      cell(`${rate.toFixed(1)} /s`, "num throughput"), timeCell(job.submitted_at),
      timeCell(job.finished_at));
    return tr;
  }

  function renderJobs() {
    const jobs = jobsDoc.sorted;
    const shown = jobs.filter(jobShown);
    fill("jobs", shown.map(jobRow), jobs.length === 0 ? "No job has been submitted." :
      `No job matches the filter (${plural(jobs.length, "job", "jobs")} hidden).`);
    $("jobs-shown").textContent = shown.length === jobs.length ?
      plural(jobs.length, "job", "jobs") : `${shown.length} of ${jobs.length} jobs shown`;
  }

  function renderBanners(doc) {
    // Whose jobs this page shows, and why it may.
    $("view").textContent = doc.view ? `Shown: ${doc.view}.` : "";
    const full = $("store-full");
    full.hidden = !doc.store_full;
    full.textContent = doc.store_full ?
      `The coordinator's store is full (${doc.store_full}): nothing is leased or submitted ` +
      "until its disk has room. Nothing committed is lost." : "";
    const disk = $("disk-warning");
    disk.hidden = !doc.disk_warning;
    disk.textContent = doc.disk_warning ?
      `Warning: the coordinator's store is nearly out of room: ${doc.disk_warning}` : "";
  }

  function renderJobSelect() {
    const select = $("job-select");
    const options = jobsDoc.sorted.map((job) => {
      const option = el("option", job.name ? `${job.name} (${job.job})` : job.job);
      option.value = job.job;
      return option;
    });
    const same = select.options.length === options.length &&
      options.every((option, i) => select.options[i].value === option.value &&
        select.options[i].textContent === option.textContent);
    if (!same) select.replaceChildren(...options);
    select.value = selectedJob === null ? "" : selectedJob;
  }

  // Ranked by the share of its finished trials that completed; its progress
  // (finished of all its trials) apart.
  function candidateRow(candidate, i) {
    const tr = el("tr");
    const trials = Number(candidate.trials) || 0;
    const finished = Number(candidate.finished) || 0;
    const progressCell = cell("", "progress-cell finished");
    progressCell.append(progress(finished, trials), " ", el("span", finished, "finished-n"),
      " / ", el("span", trials, "trials"));
    const share = Number(candidate.completed_share) || 0;
    const completed = cell("", "progress-cell share");
    completed.append(progress(share * 1000, 1000),
      el("span", finished > 0 ? `${(100 * share).toFixed(1)}%` : "—", "share-n"));
    if (finished === 0) completed.title = "no trial of it has finished yet";
    const outcomes = cell();
    outcomes.append(counts(candidate.outcomes || {},
      OUTCOMES.concat(STATUSES, Object.keys(candidate.outcomes || {})
        .filter((name) => !OUTCOMES.includes(name) && !STATUSES.includes(name)))));
    tr.append(cell(i + 1, "num rank"), cell(candidate.candidate, "candidate"), progressCell,
      completed, outcomes);
    return tr;
  }

  function renderCandidates(doc) {
    if (doc === null) {
      fill("candidates", [], "No job to rank: none has been submitted.");
      return;
    }
    fill("candidates", (doc.candidates || []).map(candidateRow), "This job has no trials.");
  }

  // A worker lost this long ago is hidden unless asked for. Measured by this
  // browser's clock against when the coordinator last heard of it.
  function lostLongAgo(worker, now) {
    const seen = Date.parse(worker.last_seen);
    return !worker.alive && !Number.isNaN(seen) && now - seen > LOST_HIDDEN_AFTER_MS;
  }

  function workerRow(worker) {
    const tr = el("tr");
    tr.dataset.worker = worker.worker;
    const nets = cell();
    if ((worker.degraded_nets || []).length > 0) {
      const list = el("ul", null, "nets");
      for (const net of worker.degraded_nets) list.append(el("li", net));
      nets.append(list);
    } else {
      nets.textContent = "none";
    }
    const running = cell(worker.running, "num running");
    running.title = `${plural(worker.leases, "lease", "leases")} held`;
    tr.append(cell(worker.worker, "id"),
      cell(worker.alive ? "alive" : "lost", worker.alive ? "state-alive" : "state-lost"),
      cell(worker.slots, "num slots"), running, cell(worker.prefetched, "num prefetched"),
      cell(`${worker.cached_digests} blobs`, "num"), nets, timeCell(worker.last_seen));
    return tr;
  }

  function renderWorkers() {
    const workers = workersDoc.workers || [];
    const now = Date.now();
    const old = workers.filter((worker) => lostLongAgo(worker, now));
    const shown = showOldLost ? workers : workers.filter((worker) => !lostLongAgo(worker, now));
    fill("workers", shown.map(workerRow), workers.length === 0 ? "No worker has joined." :
      `No worker is alive (${plural(old.length, "worker", "workers")} lost more than ` +
      "10 minutes ago hidden).");
    const toggle = $("workers-toggle");
    toggle.hidden = old.length === 0;
    toggle.textContent = `${showOldLost ? "Hide" : "Show"} ` +
      `${plural(old.length, "worker", "workers")} lost more than 10 minutes ago`;
    // Over the live workers, so that running never exceeds the slots.
    const alive = workers.filter((worker) => worker.alive);
    const sum = (key) => alive.reduce((total, worker) => total + (Number(worker[key]) || 0), 0);
    $("workers-summary").textContent = alive.length === 0 ? "" :
      `${plural(alive.length, "worker", "workers")} alive: ${sum("running")} of ` +
      `${plural(sum("slots"), "slot", "slots")} running, ${sum("prefetched")} prefetched.`;
  }

  function renderFailures(doc) {
    const rows = (doc.failures || []).map((failure) => {
      const tr = el("tr");
      tr.dataset.trial = failure.trial;
      const detail = cell();
      detail.append(el("pre", failure.detail || "", "detail"));
      tr.append(timeCell(failure.ended_at), cell(failure.trial, "id"),
        cell(failure.candidate, "candidate"), cell(failure.outcome || failure.status, "outcome"),
        cell(failure.worker, "id"), detail);
      return tr;
    });
    fill("failures", rows, "No trial has failed.");
  }

  // Everything is fetched first and drawn at once, so the tables never show
  // two moments side by side; a call that failed leaves its table as it was,
  // saying so.
  async function refresh() {
    const connection = $("connection");
    try {
      const [jobs, workers, failures] = await Promise.allSettled([
        getJson("api/jobs"), getJson("api/workers"), getJson("api/failures")]);
      let candidates = { status: "fulfilled", value: null };
      if (jobs.status === "fulfilled") {
        const sorted = (jobs.value.jobs || []).slice().sort(byNewest);
        chooseJob(sorted);
        jobsDoc = { doc: jobs.value, sorted };
        if (selectedJob !== null) {
          [candidates] = await Promise.allSettled([
            getJson(`api/candidates?job=${encodeURIComponent(selectedJob)}`)]);
        }
        renderJobs();
        renderBanners(jobs.value);
        renderJobSelect();
      } else {
        failed("jobs", "jobs", jobs.reason);
        candidates = { status: "rejected", reason: jobs.reason };
      }
      if (candidates.status === "fulfilled") renderCandidates(candidates.value);
      else failed("candidates", "candidates", candidates.reason);
      if (workers.status === "fulfilled") {
        workersDoc = workers.value;
        renderWorkers();
      } else {
        failed("workers", "workers", workers.reason);
      }
      if (failures.status === "fulfilled") renderFailures(failures.value);
      else failed("failures", "recent failures", failures.reason);

      const errors = [jobs, workers, failures, candidates]
        .filter((answer) => answer.status === "rejected")
        .map((answer) => answer.reason.message);
      if (errors.length === 0) {
        refreshes += 1;
        $("refreshes").textContent = String(refreshes);
        $("updated").textContent = utcText(new Date());
        connection.textContent = "live";
        connection.className = "connection ok";
      } else {
        connection.textContent = `not up to date: ${errors.join("; ")}; retrying`;
        connection.className = "connection lost";
      }
    } finally {
      setTimeout(refresh, REFRESH_MS);
    }
  }

  // A job picked is ranked at once, not at the next refresh.
  $("job-select").addEventListener("change", (event) => {
    selectedJob = event.target.value;
    chosen = true;
    $("candidates").tBodies[0].replaceChildren();
    note("candidates", "loading", "Loading the candidates…");
    const asked = selectedJob;
    getJson(`api/candidates?job=${encodeURIComponent(asked)}`).then((doc) => {
      if (selectedJob === asked) renderCandidates(doc);
    }, (error) => {
      if (selectedJob === asked) failed("candidates", "candidates", error);
    });
  });

  const refilter = () => {
    if (jobsDoc !== null) renderJobs();
  };
  $("job-state").addEventListener("change", refilter);
  $("job-text").addEventListener("input", refilter);
  $("workers-toggle").addEventListener("click", () => {
    showOldLost = !showOldLost;
    if (workersDoc !== null) renderWorkers();
  });

  refresh();
})();
