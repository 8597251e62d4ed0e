#!/usr/bin/env bash
# The coordinator's status page in a real browser: Debian's Chromium,
# headless, loads http://127.0.0.1:PORT/ from a coordinator (and one worker)
# on loopback while a batch of 3000 short trials runs, one of its
# candidates named with HTML. tests/deploy/status_page_browser.py drives it
# over the DevTools protocol and checks that:
#   - before the first answers (held back by the browser) every table says it
#     is loading, none that it is empty, and a call that fails says so;
#   - the page updates by itself; while the job runs, candidates rank by the
#     share of their finished trials that completed, a worker's running
#     trials never exceed its slots (the rest of its leases show prefetched),
#     and every time shows with its date in UTC (the viewer being in another
#     zone);
#   - once the job finished it shows what `forktrial status` and `forktrial
#     results --by candidate` print, the HTML name as text;
#   - with its worker killed, a job submitted then shows why it waits, and
#     once cancelled it shows as cancelled, not finished;
#   - the jobs filter by state and by id or name; a worker lost more than
#     10 minutes ago (the page's clock moved on) is hidden until asked for;
#   - a second coordinator, its store on a 256 MiB tmpfs (in a mount
#     namespace of its own), shows its disk warning above everything;
#   - nothing was fetched from anywhere but the coordinator, under its
#     policy, without a script error.
# The screenshot it takes mid-run is kept in TMPDIR;
# FORKTRIAL_UPDATE_SCREENSHOT=1 copies it to docs/status-page.png.
# Chromium leaves no process behind: checked at the end.
source "$(dirname "$0")/lib.sh"

command -v chromium >/dev/null 2>&1 ||
  skip "chromium is not installed (scripts/install-deps installs it)"

store=$TMPDIR/store
profile=$TMPDIR/chromium-profile
hostile="$TMPDIR/<img src=x onerror=alert(1)>"
small=$TMPDIR/small-disk
on_exit 'rm -rf "$store" "$TMPDIR/cache" "$profile" "$hostile" "$small" "$TMPDIR"/*.jsonl "$TMPDIR"/*.log "$TMPDIR"/status-page.png'
import_chat "$store" || fail "cannot import the chat run into $store"

zmq_port=$(free_port)
http_port=$(free_port)
endpoint=tcp://127.0.0.1:$zmq_port
# The binary itself, not the ft function: $! must be the daemon's own pid.
# A short lease, so that a killed worker is lost within seconds.
"$FORKTRIAL_BIN_DIR/forktrial" coordinator --store "$store" --listen "$endpoint" --http "127.0.0.1:$http_port" \
  --lease 5 --log-level warn 2>"$TMPDIR/coordinator.log" &
coordinator=$!
on_exit "kill $coordinator 2>/dev/null; wait $coordinator 2>/dev/null"
"$FORKTRIAL_BIN_DIR/forktrial" worker --connect "$endpoint" --cache "$TMPDIR/cache" --slots 2 --id w1 \
  --log-level warn 2>"$TMPDIR/worker.log" &
worker=$!
on_exit "kill $worker 2>/dev/null; wait $worker 2>/dev/null"
http_ok() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "$1"; }
wait_until 30 http_ok "http://127.0.0.1:$http_port/readyz" ||
  fail "the coordinator's /readyz never answered 200 on 127.0.0.1:$http_port; $(tail -n 5 "$TMPDIR/coordinator.log")"
wait_until 60 sh -c "'$FORKTRIAL_BIN_DIR/forktrial' workers --coordinator '$endpoint' --json | grep -q '\"alive\":true'" ||
  fail "worker w1 never joined; $(tail -n 5 "$TMPDIR/worker.log")"

# The mixed batch of scripts/soak, its greeter read from a directory named
# with HTML (a JSON Lines batch names a candidate after its directory).
cp -r "$FORKTRIAL_SOURCE/examples/packs/greeter" "$hostile"
write_batch "$TMPDIR/mixed.jsonl" 3000
python3 - "$TMPDIR/mixed.jsonl" "$hostile" >"$TMPDIR/batch.jsonl" <<'PY' ||
import json, sys
for line in open(sys.argv[1]):
    spec = json.loads(line)
    if spec["candidate"]["root_dir"].endswith("/packs/greeter"):
        spec["candidate"]["root_dir"] = sys.argv[2]
    print(json.dumps(spec))
PY
  fail "cannot write the batch"
# The job submitted once no worker is alive: a few trials that wait.
write_batch "$TMPDIR/stuck.jsonl" 4 || fail "cannot write the stuck batch"

# A coordinator whose store's disk is nearly full: a 256 MiB tmpfs, under
# the 1 GiB the coordinator warns at, mounted in a namespace of its own (it
# goes with the process). unshare execs, and so does sh: $! is the daemon.
mkdir -p "$small"
disk_port=$(free_port)
disk_http=$(free_port)
unshare --mount --propagation private sh -c \
  'mount -t tmpfs -o size=256m tmpfs "$1" && exec "$2" coordinator --store "$1/store" \
     --listen "$3" --http "$4" --log-level warn' sh \
  "$small" "$FORKTRIAL_BIN_DIR/forktrial" "tcp://127.0.0.1:$disk_port" "127.0.0.1:$disk_http" \
  2>"$TMPDIR/small-coordinator.log" &
small_coordinator=$!
on_exit "kill $small_coordinator 2>/dev/null; wait $small_coordinator 2>/dev/null"
wait_until 30 http_ok "http://127.0.0.1:$disk_http/readyz" ||
  fail "the coordinator on a 256 MiB tmpfs never answered (unshare and mount need root); $(tail -n 5 "$TMPDIR/small-coordinator.log")"

job=$(ft submit "$TMPDIR/batch.jsonl" --coordinator "$endpoint") || fail "the batch was not submitted"
say "job $job: 3000 trials on one worker of 2 slots; the page at http://127.0.0.1:$http_port/"

python3 "$FORKTRIAL_SOURCE/tests/deploy/status_page_browser.py" --url "http://127.0.0.1:$http_port/" \
  --job "$job" --forktrial "$FORKTRIAL_BIN_DIR/forktrial" --coordinator "$endpoint" \
  --profile "$profile" --screenshot "$TMPDIR/status-page.png" --log "$TMPDIR/chromium.log" \
  --worker-pid "$worker" --stuck-batch "$TMPDIR/stuck.jsonl" --disk-url "http://127.0.0.1:$disk_http/"
rc=$?
left=$(pgrep -f -- "--user-data-dir=$profile" || true)
if [ -n "$left" ]; then
  kill -9 $left 2>/dev/null || true
  fail "Chromium left processes behind: $left"
fi
if [ $rc -ne 0 ]; then
  tail -n 20 "$TMPDIR/chromium.log" >&2 || true
  fail "the status page did not pass (above)"
fi
if [ "${FORKTRIAL_UPDATE_SCREENSHOT:-0}" = 1 ]; then
  cp "$TMPDIR/status-page.png" "$FORKTRIAL_SOURCE/docs/status-page.png" ||
    fail "cannot copy the screenshot to docs/status-page.png"
  say "screenshot copied to docs/status-page.png"
fi
say "passed: the page showed the job live and as forktrial reports it"
