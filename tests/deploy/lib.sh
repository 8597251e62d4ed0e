# Sourced by the tests/deploy/*.sh scripts (scripts/test-deploy runs them):
# what every one of them needs, so each says only what it tests.
#   ft ARGS...             the forktrial binary under test
#   say MSG / fail MSG     progress on stdout / a failure (exit 1)
#   skip WHY               prints "WARN: skipped: WHY" and exits 77
#   need_root              skip unless root (the components install and run as root)
#   wait_until SECONDS CMD...  runs CMD every 0.2 s until it succeeds; fails after SECONDS
#   free_port              a TCP port on 127.0.0.1 nothing listens on now
#   import_chat STORE      imports examples/runs/chat.jsonl as run_chat into STORE
#   write_batch FILE N     a JSON Lines batch of N mixed trials against run_chat
#   trial_count JOB EP     the trials of JOB the coordinator at EP reports (forktrial results)
#   on_exit CMD            runs CMD when the script ends, last registered first
set -uo pipefail

: "${FORKTRIAL_BIN_DIR:?run me through scripts/test-deploy}"
: "${FORKTRIAL_SOURCE:?run me through scripts/test-deploy}"
deploy_name=$(basename "$0" .sh)

ft() { "$FORKTRIAL_BIN_DIR/forktrial" "$@"; }
say() { printf '%s: %s\n' "$deploy_name" "$*"; }
fail() {
  printf '%s: FAIL: %s\n' "$deploy_name" "$*" >&2
  exit 1
}
skip() {
  printf 'WARN: skipped: %s\n' "$*"
  exit 77
}
need_root() { [ "$(id -u)" -eq 0 ] || skip "needs root (it installs and runs system daemons)"; }

wait_until() {
  local seconds=$1
  shift
  local end=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    sleep 0.2
  done
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

import_chat() {
  ft run import "$FORKTRIAL_SOURCE/examples/runs/chat.jsonl" --store "$1" --id run_chat \
    --label "recorded chat" >/dev/null
}

write_batch() {
  python3 "$FORKTRIAL_SOURCE/scripts/soak-check" batch "$1" "$2" "$FORKTRIAL_SOURCE/examples"
}

trial_count() {
  ft results "$1" --coordinator "$2" --json | grep -c '"trial"'
}

deploy_exit_actions=()
on_exit() { deploy_exit_actions=("$1" "${deploy_exit_actions[@]}"); }
deploy_run_exit_actions() {
  local rc=$? action
  for action in "${deploy_exit_actions[@]}"; do eval "$action" || true; done
  exit $rc
}
trap deploy_run_exit_actions EXIT
