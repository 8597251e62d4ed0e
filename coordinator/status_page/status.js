// The coordinator's status page: fetches the JSON API once a second and
// redraws the tables. Every value from the API is written with textContent
// (never as HTML): names and details are chosen by whoever submitted the
// trials, and must show as text whatever they hold.
"use strict";

(() => {
  const REFRESH_MS = 1000;
  const OUTCOMES = ["completed", "scenario_failed", "limits_exceeded",
    "materialization_failed", "crashed"];
  // Statuses shown beside the outcomes: the trials not (yet) reconciled.
  const STATUSES = ["queued", "leased", "reported", "cancelled", "abandoned"];

  let selectedJob = null;  // the job whose candidates are ranked
  let chosen = false;      // whether a person picked it
  let refreshes = 0;

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

  // A time cell: the local time of day, the full timestamp on hover.
  function timeCell(iso) {
    const td = cell("", "time");
    if (!iso) {
      td.textContent = "—";
      return td;
    }
    const when = new Date(iso);
    const time = el("time", Number.isNaN(when.getTime()) ? iso :
      `${pad(when.getHours())}:${pad(when.getMinutes())}:${pad(when.getSeconds())}`);
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

  // The table's body becomes `rows`; its "nothing here" line shows when
  // there are none.
  function fill(table, rows) {
    $(table).tBodies[0].replaceChildren(...rows);
    $(`${table}-empty`).hidden = rows.length > 0;
  }

  async function getJson(path) {
    const response = await fetch(path, { cache: "no-store", credentials: "same-origin" });
    if (!response.ok) throw new Error(`${path} answered ${response.status}`);
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

  function renderJobs(doc, jobs) {
    const rows = jobs.map((job) => {
      const tr = el("tr");
      tr.dataset.job = job.job;
      if (job.finished) tr.classList.add(job.cancelled ? "cancelled" : "finished");
      const done = cell("", "num done");
      done.append(el("span", job.done, "done-n"), " / ", el("span", job.total, "total-n"));
      const outcomes = cell();
      const named = Object.assign({}, job.status, job.outcomes);
      outcomes.append(counts(named, OUTCOMES.concat(STATUSES)));
      // A cancelled job's dropped trials are done, and fill none of the bar.
      const bar = cell("", "progress-cell");
      bar.append(progress(job.done - ((job.status && job.status.cancelled) || 0), job.total));
      if (job.state) {
        done.append(" ", el("span", job.state, `state state-${job.state}`));
      }
      const rate = Number(job.throughput) || 0;
      tr.append(cell(job.job, "id"), cell(job.name), bar, done, outcomes,
        cell(`${rate.toFixed(1)} /s`, "num throughput"), timeCell(job.submitted_at),
        timeCell(job.finished_at));
      return tr;
    });
    fill("jobs", rows);

    const banner = $("store-full");
    banner.hidden = !doc.store_full;
    banner.textContent = doc.store_full ?
      `The coordinator's store is full (${doc.store_full}): nothing is leased or submitted ` +
      "until its disk has room. Nothing committed is lost." : "";

    const select = $("job-select");
    const options = jobs.map((job) => {
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

  function renderCandidates(doc) {
    const rows = (doc ? doc.candidates : []).map((candidate, i) => {
      const tr = el("tr");
      const share = Number(candidate.completed_share) || 0;
      const completed = cell("", "progress-cell share");
      completed.append(progress(share * 1000, 1000),
        el("span", `${(100 * share).toFixed(1)}%`, "share-n"));
      const outcomes = cell();
      outcomes.append(counts(candidate.outcomes || {},
        OUTCOMES.concat(STATUSES, Object.keys(candidate.outcomes || {})
          .filter((name) => !OUTCOMES.includes(name) && !STATUSES.includes(name)))));
      tr.append(cell(i + 1, "num rank"), cell(candidate.candidate, "candidate"),
        cell(candidate.trials, "num trials"), completed, outcomes);
      return tr;
    });
    fill("candidates", rows);
  }

  function renderWorkers(doc) {
    const rows = (doc.workers || []).map((worker) => {
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
      tr.append(cell(worker.worker, "id"),
        cell(worker.alive ? "alive" : "lost", worker.alive ? "state-alive" : "state-lost"),
        cell(worker.slots, "num"), cell(worker.running, "num"),
        cell(`${worker.cached_digests} blobs`, "num"), nets, timeCell(worker.last_seen));
      return tr;
    });
    fill("workers", rows);
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
    fill("failures", rows);
  }

  // Everything is fetched first and drawn at once, so the tables never show
  // two moments side by side.
  async function refresh() {
    const connection = $("connection");
    try {
      const [jobs, workers, failures] = await Promise.all([
        getJson("api/jobs"), getJson("api/workers"), getJson("api/failures")]);
      const sorted = (jobs.jobs || []).slice().sort(byNewest);
      chooseJob(sorted);
      const candidates = selectedJob === null ? null :
        await getJson(`api/candidates?job=${encodeURIComponent(selectedJob)}`);
      renderJobs(jobs, sorted);
      renderWorkers(workers);
      renderFailures(failures);
      renderCandidates(candidates);
      refreshes += 1;
      $("refreshes").textContent = String(refreshes);
      const now = new Date();
      $("updated").textContent =
        `${pad(now.getHours())}:${pad(now.getMinutes())}:${pad(now.getSeconds())}`;
      connection.textContent = "live";
      connection.className = "connection ok";
    } catch (error) {
      connection.textContent = `cannot reach the coordinator (${error.message}); retrying`;
      connection.className = "connection lost";
    } finally {
      setTimeout(refresh, REFRESH_MS);
    }
  }

  // A job picked is ranked at once, not at the next refresh.
  $("job-select").addEventListener("change", (event) => {
    selectedJob = event.target.value;
    chosen = true;
    getJson(`api/candidates?job=${encodeURIComponent(selectedJob)}`)
      .then(renderCandidates, () => {});
  });

  refresh();
})();
