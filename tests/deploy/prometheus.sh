# A real Prometheus (Debian's, scripts/install-deps) scrapes a coordinator and
# two workers through their --http /metrics while a batch runs, every second:
#   - promtool's lint passes on each daemon's exposition;
#   - after the batch, PromQL through Prometheus's HTTP API gives the trial
#     counts `forktrial results JOB --json` gives, per outcome and in total,
#     and the workers' own counts add up to them;
#   - every target is up; forktrial_build_info says what `forktrial --version`
#     says;
#   - deploy/prometheus/forktrial-alerts.yml passes `promtool check rules`
#     and its unit tests (`promtool test rules`, synthetic series), and the
#     Prometheus that scrapes the batch loads it and evaluates every rule
#     without error;
#   - every PromQL expression of deploy/grafana/forktrial-dashboard.json, with
#     Grafana's variables put in, runs without error over the batch's time
#     and finds data (a misspelt metric finds none).
# Everything runs from TMPDIR on loopback ports and is stopped at the end.
source "$(dirname "$0")/lib.sh"
set -euo pipefail

command -v prometheus >/dev/null && command -v promtool >/dev/null ||
  skip "Debian's prometheus is not installed (no prometheus or promtool on PATH): run scripts/install-deps"

work=$(mktemp -d "$TMPDIR/prometheus.XXXXXX")
on_exit "rm -rf '$work'"
# A failure, with the end of every daemon's log (they go with $work).
die() {
  local log
  for log in "$work"/*.log; do
    [ -s "$log" ] || continue
    printf -- '--- %s\n' "${log##*/}"
    tail -n 15 "$log"
  done
  fail "$@"
}
dashboard="$FORKTRIAL_SOURCE/deploy/grafana/forktrial-dashboard.json"
alerts="$FORKTRIAL_SOURCE/deploy/prometheus/forktrial-alerts.yml"
alert_tests="$FORKTRIAL_SOURCE/deploy/prometheus/forktrial-alerts.test.yml"

# Stops a process of this test: TERM, then KILL after 10 s; reaps it.
stop() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# The Prometheus HTTP API and the checks on its answers (python3, standard
# library only): promapi PORT COMMAND ARGS..., exit status 0 when it holds.
promapi() {
  python3 - "$@" <<'PY'
import json, sys, time, urllib.error, urllib.parse, urllib.request

port, command, args = sys.argv[1], sys.argv[2], sys.argv[3:]
base = "http://127.0.0.1:%s" % port

def get(path, **params):
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)

def query(expr):
    doc = get("/api/v1/query", query=expr)
    if doc.get("status") != "success":
        sys.exit("query %s failed: %s" % (expr, doc))
    return doc["data"]["result"]

def scalar(expr):
    result = query(expr)
    return float(result[0]["value"][1]) if result else None

if command == "ready":
    with urllib.request.urlopen(base + "/-/ready", timeout=5) as answer:
        sys.exit(0 if answer.status == 200 else 1)
elif command == "equals":  # EXPR VALUE
    value = scalar(args[0])
    sys.exit(0 if value == float(args[1]) else "%s is %s, not %s" % (args[0], value, args[1]))
elif command == "atleast":  # EXPR VALUE: every series of EXPR is at least VALUE
    result = query(args[0])
    low = [s for s in result if float(s["value"][1]) < float(args[1])]
    sys.exit(0 if result and not low else "%s: %s" % (args[0], result))
elif command == "history":  # EXPR: each series' samples of the last minute
    for series in query(args[0] + "[60s]"):
        print(series["metric"].get("instance", ""), " ".join(
            "%.1f=%s" % (float(t) % 100, v) for t, v in series["values"]))
elif command == "rules":  # COUNT: COUNT alerting rules loaded, each evaluated without error
    rules = [r for g in get("/api/v1/rules")["data"]["groups"] for r in g["rules"]]
    unevaluated = [r["name"] for r in rules
                   if r.get("health") != "ok" or r.get("lastEvaluation", "").startswith("0001")]
    if len(rules) != int(args[0]) or unevaluated:
        sys.exit("%d rules loaded, not %s; not evaluated or failing: %s" % (
            len(rules), args[0], [(r["name"], r.get("health"), r.get("lastError")) for r in rules
                                  if r["name"] in unevaluated]))
elif command == "value":  # EXPR
    value = scalar(args[0])
    print("none" if value is None else "%g" % value)
elif command == "by":  # EXPR LABEL: label=value lines, sorted
    for series in sorted(query(args[0]), key=lambda s: s["metric"].get(args[1], "")):
        print("%s=%g" % (series["metric"].get(args[1], ""), float(series["value"][1])))
elif command == "dashboard":  # FILE START: every expression over [START, now]
    dashboard = json.load(open(args[0]))
    start, end = float(args[1]), time.time()
    problems, checked = [], 0
    if not 36 <= dashboard.get("schemaVersion", 0) <= 41:
        problems.append("schemaVersion %s" % dashboard.get("schemaVersion"))
    inputs = [i.get("name") for i in dashboard.get("__inputs", [])]
    if inputs != ["DS_PROMETHEUS"]:
        problems.append("__inputs are %s, not DS_PROMETHEUS alone" % inputs)
    ids = [p["id"] for p in dashboard["panels"]]
    if len(ids) != len(set(ids)):
        problems.append("panel ids repeat: %s" % ids)
    substitutions = {"$__rate_interval": "10s", "$__interval": "1s",
                     "$__range": "%ds" % max(60, int(end - start) + 10)}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            if target.get("datasource", {}).get("uid") != "${DS_PROMETHEUS}":
                problems.append("%s: datasource %s" % (panel["title"], target.get("datasource")))
            expr = target["expr"]
            for name, value in substitutions.items():
                expr = expr.replace(name, value)
            if "$" in expr:
                problems.append("%s: a variable is left in %s" % (panel["title"], expr))
                continue
            try:
                doc = get("/api/v1/query_range", query=expr, start=start, end=end, step=1)
            except urllib.error.HTTPError as e:
                problems.append("%s: %s: %s" % (panel["title"], expr, e.read().decode()))
                continue
            checked += 1
            if doc.get("status") != "success":
                problems.append("%s: %s: %s" % (panel["title"], expr, doc))
            elif not doc["data"]["result"]:
                problems.append("%s: %s found no data" % (panel["title"], expr))
    print("%d expressions checked" % checked)
    for problem in problems:
        print("problem: " + problem)
    sys.exit(1 if problems or checked == 0 else 0)
else:
    sys.exit("promapi: no command " + command)
PY
}

store="$work/store"
import_chat "$store" || die "cannot import the recorded chat run into $store"
ep="tcp://127.0.0.1:$(free_port)"
coordinator_http=$(free_port)
worker_http=("$(free_port)" "$(free_port)")
prometheus_port=$(free_port)

# The daemons run from the binary itself, not through `ft` (a function, which
# in the background is a subshell): $! must be the daemon's pid for stop().
forktrial="$FORKTRIAL_BIN_DIR/forktrial"
"$forktrial" coordinator --store "$store" --listen "$ep" --http "127.0.0.1:$coordinator_http" \
  >"$work/coordinator.log" 2>&1 &
on_exit "stop $!"

# The alerting rules, checked and unit-tested before a Prometheus loads them.
promtool check rules "$alerts" >"$work/promtool-rules.log" 2>&1 ||
  die "promtool check rules refuses $alerts: $(cat "$work/promtool-rules.log")"
(cd "$(dirname "$alert_tests")" && promtool test rules "$(basename "$alert_tests")") \
  >"$work/promtool-test-rules.log" 2>&1 ||
  die "promtool test rules fails on $alert_tests: $(cat "$work/promtool-test-rules.log")"
rule_count=$(grep -c '^      - alert: ' "$alerts")
say "promtool: the $rule_count alerting rules pass check rules and their unit tests"

cat >"$work/prometheus.yml" <<EOF
rule_files:
  - $alerts
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: forktrial-coordinator
    static_configs:
      - targets: ["127.0.0.1:$coordinator_http"]
  - job_name: forktrial-worker
    static_configs:
      - targets: ["127.0.0.1:${worker_http[0]}", "127.0.0.1:${worker_http[1]}"]
EOF
promtool check config "$work/prometheus.yml" >"$work/promtool-config.log" 2>&1 ||
  die "promtool refuses the scrape configuration: $(cat "$work/promtool-config.log")"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prometheus_port" >"$work/prometheus.log" 2>&1 &
on_exit "stop $!"
wait_until 60 promapi "$prometheus_port" ready ||
  die "Prometheus did not get ready on 127.0.0.1:$prometheus_port: $(tail -n 5 "$work/prometheus.log")"
say "Prometheus $(prometheus --version 2>&1 | head -n 1 | cut -d' ' -f3) listens on 127.0.0.1:$prometheus_port"

ready() {
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/readyz', timeout=2)"
}
wait_until 60 ready "$coordinator_http" || die "the coordinator never got ready"
wait_until 30 promapi "$prometheus_port" equals 'sum(up{job="forktrial-coordinator"})' 1 ||
  die "Prometheus does not see the coordinator up"
# Each target's first scrape comes in its own time: wait for both workers'
# to have been scraped, and found down.
wait_until 30 promapi "$prometheus_port" equals 'count(up{job="forktrial-worker"} == 0)' 2 ||
  die "Prometheus does not see both workers' targets down before any was started"
promapi "$prometheus_port" equals 'sum(up{job="forktrial-worker"})' 0 ||
  die "Prometheus sees a worker up before any was started"

# The batch goes in before any worker runs, so its whole queue is scraped:
# the job's gauge is seen at 40 before the workers drain it.
start=$(date +%s)
write_batch "$work/batch.jsonl" 40 || die "cannot write the batch"
ft submit "$work/batch.jsonl" --coordinator "$ep" --json >"$work/submitted.json" 2>"$work/submit.log" ||
  die "forktrial submit failed: $(tail -n 5 "$work/submit.log")"
job=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["job"])' "$work/submitted.json")
wait_until 30 promapi "$prometheus_port" equals "forktrial_job_queued_trials{job_id=\"$job\"}" 40 ||
  die "Prometheus never saw the 40 queued trials of job $job"
say "job $job: Prometheus sees its 40 trials queued"

for n in 1 2; do
  "$forktrial" worker --connect "$ep" --cache "$work/cache-$n" --slots 2 --id "w$n" \
    --http "127.0.0.1:${worker_http[$((n - 1))]}" >"$work/worker-$n.log" 2>&1 &
  on_exit "stop $!"
done
for port in "${worker_http[@]}"; do
  wait_until 60 ready "$port" || die "the worker on HTTP port $port never got ready"
done
wait_until 30 promapi "$prometheus_port" equals 'count(up == 1)' 3 ||
  die "Prometheus does not see its three targets up: $(promapi "$prometheus_port" by up instance)"
say "the coordinator and both workers are up as Prometheus targets"
version=$("$forktrial" --version | sed -n 's/^forktrial \([^ ]*\) (wire protocol \([0-9]*\), store schema \([0-9]*\))$/version="\1",wire_protocol="\2",store_schema="\3"/p')
[ -n "$version" ] || die "cannot read forktrial --version: $("$forktrial" --version)"
promapi "$prometheus_port" equals "count(forktrial_build_info{$version} == 1)" 1 ||
  die "forktrial_build_info is not 1 with {$version}: $(promapi "$prometheus_port" by forktrial_build_info version)"
wait_until 30 promapi "$prometheus_port" rules "$rule_count" ||
  die "Prometheus's alerting rules: $(promapi "$prometheus_port" rules "$rule_count" 2>&1)"
say "forktrial_build_info{$version}; Prometheus evaluates the $rule_count alerting rules"

# promtool's lint of each daemon's exposition (names, types, units, _total).
for port in "$coordinator_http" "${worker_http[@]}"; do
  python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=5).read().decode())" \
    >"$work/metrics-$port.txt"
  if ! promtool check metrics <"$work/metrics-$port.txt" >"$work/lint-$port.txt" 2>&1; then
    die "promtool check metrics finds problems in the /metrics of port $port: $(cat "$work/lint-$port.txt")"
  fi
done
say "promtool check metrics passes on all three /metrics"

ft wait "$job" --coordinator "$ep" >"$work/wait.log" 2>&1 || die "waiting for job $job failed: $(tail -n 5 "$work/wait.log")"
ft results "$job" --coordinator "$ep" --json >"$work/results.jsonl" 2>"$work/results.log" ||
  die "forktrial results failed: $(tail -n 5 "$work/results.log")"
total=$(trial_count "$job" "$ep")
[ "$total" -eq 40 ] || die "forktrial results lists $total trials of job $job, not 40"
# outcome=count lines, sorted, from the results (the last line is the summary).
python3 -c '
import collections, json, sys
counts = collections.Counter(json.loads(l)["outcome"] for l in open(sys.argv[1]) if "\"trial\"" in l)
print("\n".join("%s=%d" % kv for kv in sorted(counts.items())))' "$work/results.jsonl" >"$work/expected.txt"
say "job $job: $(tr '\n' ' ' <"$work/expected.txt")"

# Prometheus has the batch once a scrape after its end came in.
wait_until 30 promapi "$prometheus_port" equals 'sum(forktrial_trials_reconciled_total)' "$total" ||
  die "Prometheus counts $(promapi "$prometheus_port" value 'sum(forktrial_trials_reconciled_total)') reconciled trials, not $total"
promapi "$prometheus_port" by 'sum by (outcome) (forktrial_trials_reconciled_total) > 0' outcome \
  >"$work/scraped.txt"
diff -u "$work/expected.txt" "$work/scraped.txt" >"$work/outcomes.diff" ||
  die "per outcome, Prometheus and forktrial results disagree: $(cat "$work/outcomes.diff")"
promapi "$prometheus_port" equals 'sum(forktrial_trials{status="reconciled"})' "$total" ||
  die "forktrial_trials{status=\"reconciled\"} is not $total"
# The workers ran and reported every trial, and a fenced report besides.
fenced=$(promapi "$prometheus_port" value 'sum(forktrial_reports_fenced_total)')
promapi "$prometheus_port" equals 'sum(forktrial_worker_trials_total)' "$((total + ${fenced%.*}))" ||
  die "the workers count $(promapi "$prometheus_port" value 'sum(forktrial_worker_trials_total)') trials, not $total + $fenced fenced"
promapi "$prometheus_port" equals 'count(up{job="forktrial-worker"} == 1)' 2 ||
  die "the two worker targets are not both up"
say "PromQL agrees with forktrial results: $total trials, by outcome as above; both workers up"

# Each worker target's scrapes of the last minute, for a failure's message.
worker_scrapes() {
  promapi "$prometheus_port" history 'up{job="forktrial-worker"}'
}
# A rate over the dashboard's 10 s needs two samples of a series within 10 s:
# the workers ran for a few seconds only, so their counters are waited for
# until each has three (a scrape that failed in between adds none).
wait_until 30 promapi "$prometheus_port" atleast \
  'count_over_time(forktrial_worker_cache_misses_total[10s])' 3 ||
  die "the workers' counters have fewer than 3 samples in 10 s; their targets' scrapes: $(worker_scrapes)"
promapi "$prometheus_port" dashboard "$dashboard" "$start" >"$work/dashboard.txt" ||
  die "the dashboard's queries: $(cat "$work/dashboard.txt"); the workers' scrapes: $(worker_scrapes)"
say "dashboard: $(head -n 1 "$work/dashboard.txt"), each ran and found data"
say "passed"
