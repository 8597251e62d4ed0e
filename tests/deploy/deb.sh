#!/usr/bin/env bash
# The Debian package: built by scripts/package from the build tree under
# test (build/PRESET/tools holds the binaries; or the .deb named by
# FORKTRIAL_DEB), installed on this machine
# with dpkg (through apt-get, which waits for the dpkg lock other installs may
# hold), then:
#  - /usr/bin/forktrial runs, loading no library but the C library's; it
#    runs forktrial-full from /usr/libexec/forktrial, which finds its child
#    there, records a trial and runs a batch;
#  - the relink kit in /usr/lib/forktrial/relink: its script links the child
#    again from the installed kit and this machine's archives (and takes a
#    libseccomp.a given with --lib-dir); it names the Debian packages of a
#    missing compiler or archives with the apt-get install that adds them; it
#    replaces no existing file, the package's child included, without
#    --force; the relinked child, stripped,
#    is the package's (when the package was built here), and a trial run with
#    it (FORKTRIAL_CHILD) reports what the shipped child's did;
#  - a man page for every command `forktrial --help` lists, the units
#    (systemd-analyze verify, which also looks up their man pages), the
#    example environment files, the Prometheus alerting rules;
#  - the bash completion, checked against every command's --help: its
#    subcommands, options, which options take a value, the words a value may
#    be, and paths where a file or a directory goes;
#  - the control fields: version, Maintainer (FORKTRIAL_MAINTAINER's, or the
#    project's default; never an address at .invalid), Depends (the shared
#    libraries, but no prometheus-cpp: the package carries its own in
#    /usr/lib/forktrial, which the installed forktrial-full loads);
#  - Debian's copyright file (machine-readable, every license it names
#    given) and changelog (this version, signed by the Maintainer, gzip -9n);
#  - the Slurm scripts and the Grafana dashboard under /usr/share/forktrial;
#  - the units' state: the postinst records it with deb-systemd-helper; a
#    removal keeps units enabled (systemctl enable, deb-systemd-helper
#    enable), and the purge removes their symlinks and the helper's state;
#  - dpkg -r, then dpkg --purge, leave none of the package's files, and the
#    purge deletes the workers' cache.
# The package is removed when the test ends, however it ends. It skips when
# forktrial is already installed here (it would replace and then remove it).
source "$(dirname "$0")/lib.sh"
set -e
need_root
for tool in dpkg dpkg-deb apt-get flock man systemd-analyze unshare python3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/install-deps)"
done

# One run of this test at a time on a machine: the lock is on the dpkg
# database directory itself (flock, which dpkg's own fcntl locks ignore).
exec {dpkg_dir}</var/lib/dpkg
flock -w 600 "$dpkg_dir" || fail "another run of this test held the lock for 10 minutes"

if dpkg-query -W -f='${Status}' forktrial 2>/dev/null | grep -qv "not-installed"; then
  skip "the forktrial package is installed on this machine; this test would replace, then remove it"
fi
# What enabling the units makes (deb-systemd-helper's state and symlinks),
# which the purge deletes.
dsh_state=/var/lib/systemd/deb-systemd-helper-enabled
timer_link=/etc/systemd/system/timers.target.wants/forktrial-gc.timer
worker_link=/etc/systemd/system/multi-user.target.wants/forktrial-worker@deb-test.service
for path in /usr/bin/forktrial /usr/libexec/forktrial /var/cache/forktrial /var/cache/private/forktrial \
  /usr/lib/forktrial /usr/share/forktrial "$timer_link" "$worker_link"; do
  [ ! -e "$path" ] && [ ! -L "$path" ] || skip "$path exists already; this test would overwrite or delete it"
done
if [ -n "$(find "$dsh_state" -name 'forktrial*' 2>/dev/null | head -n 1)" ]; then
  skip "$dsh_state holds a forktrial unit's state; this test's purge would delete it"
fi

deb=${FORKTRIAL_DEB:-}
if [ -z "$deb" ]; then
  tree=$(dirname "$FORKTRIAL_BIN_DIR")
  [ "$(dirname "$tree")" = "$FORKTRIAL_SOURCE/build" ] ||
    fail "the binaries are not in a preset's tree (build/PRESET/tools): give the package as FORKTRIAL_DEB"
  # A Maintainer not of the form "Name <address>" is refused before the
  # build tree is configured with it.
  if out=$(FORKTRIAL_MAINTAINER=forktrial@localhost "$FORKTRIAL_SOURCE/scripts/package" \
    "$(basename "$tree")" 2>&1); then
    fail "scripts/package accepted FORKTRIAL_MAINTAINER=forktrial@localhost (no name)"
  fi
  grep -q 'must be "Name <address>"' <<<"$out" ||
    fail "scripts/package refused FORKTRIAL_MAINTAINER=forktrial@localhost without saying why: $out"
  say "building the package (scripts/package $(basename "$tree"))"
  deb=$("$FORKTRIAL_SOURCE/scripts/package" "$(basename "$tree")" 2>"$TMPDIR/package.log" | tail -n 1) || {
    tail -n 20 "$TMPDIR/package.log" >&2
    fail "scripts/package failed"
  }
  rm -f "$TMPDIR/package.log"
fi
[ -f "$deb" ] || fail "no package at $deb"
say "package: $deb"

version=$(ft --version)
project_version=$(awk '{ print $2; exit }' <<<"$version")
[ "$(dpkg-deb -f "$deb" Package)" = forktrial ] || fail "$deb is not the forktrial package"
[ "$(dpkg-deb -f "$deb" Version)" = "$project_version-1" ] ||
  fail "the package's version is $(dpkg-deb -f "$deb" Version), not $project_version-1 ($version)"
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libc6 libstdc++6 libzmq5 liblmdb0 libseccomp2; do
  grep -q "\b$lib\b" <<<"$depends" || fail "Depends lacks $lib: $depends"
done
# prometheus-cpp's library is not in Debian 12: the package carries its own
# (docs/decisions/0084-prometheus-cpp-shipped-privately.md).
! grep -qi prometheus <<<"$depends" || fail "Depends names prometheus-cpp, which Debian 12 lacks: $depends"
dpkg-deb -c "$deb" >"$TMPDIR/contents"
grep -q ' \./usr/lib/forktrial/libprometheus-cpp-core\.so\.1\.0$' "$TMPDIR/contents" ||
  fail "$deb holds no /usr/lib/forktrial/libprometheus-cpp-core.so.1.0"
rm -f "$TMPDIR/contents"
maintainer=$(dpkg-deb -f "$deb" Maintainer)
if [ -z "${FORKTRIAL_DEB:-}" ]; then
  want=${FORKTRIAL_MAINTAINER:-"forktrial developers <forktrial@localhost>"}
  [ "$maintainer" = "$want" ] || fail "the package's Maintainer is \"$maintainer\", not \"$want\""
fi
maintainer_form='^[^<>]*[^<> ] <[^<>@ ]+@[^<>@ ]+>$'
[[ $maintainer =~ $maintainer_form ]] ||
  fail "the package's Maintainer \"$maintainer\" is not \"Name <address>\""
[[ $maintainer != *.invalid\> && $maintainer != *@invalid\> ]] ||
  fail "the package's Maintainer \"$maintainer\" has an address nobody can write to"
say "control: forktrial $(dpkg-deb -f "$deb" Version), Maintainer: $maintainer, Depends: $depends"

purge() {
  local status
  status=$(dpkg-query -W -f='${Status}' forktrial 2>/dev/null || true)
  [ -z "$status" ] || [[ $status == *not-installed* ]] && return 0
  apt-get purge -y -q -o DPkg::Lock::Timeout=300 forktrial >"$TMPDIR/purge.log" 2>&1 ||
    { cat "$TMPDIR/purge.log" >&2; return 1; }
  rm -f "$TMPDIR/purge.log"
}
on_exit "purge"
on_exit "rm -f '$timer_link' '$worker_link'"
# What a failed purge would leave of deb-systemd-helper's state (none was
# there before: checked above).
on_exit "find '$dsh_state' -name 'forktrial*' -delete 2>/dev/null || true"
on_exit "rm -rf /var/cache/forktrial /var/cache/private/forktrial"
apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "$(realpath "$deb")" \
  >"$TMPDIR/install.log" 2>&1 || {
  tail -n 20 "$TMPDIR/install.log" >&2
  fail "installing $deb failed"
}
rm -f "$TMPDIR/install.log"
dpkg-query -W -f='${Status}' forktrial | grep -q "install ok installed" ||
  fail "dpkg does not list forktrial as installed after the install"
dpkg-query -L forktrial >"$TMPDIR/files"
on_exit "rm -f '$TMPDIR/files'"
say "installed: $(grep -c . "$TMPDIR/files") paths"

# ---- the binaries, from their installed paths

unset FORKTRIAL_CHILD FORKTRIAL_STORE FORKTRIAL_COORDINATOR FORKTRIAL_ISOLATION
[ "$(/usr/bin/forktrial --version)" = "$version" ] ||
  fail "/usr/bin/forktrial --version says \"$(/usr/bin/forktrial --version)\", the build \"$version\""
[ -x /usr/libexec/forktrial/forktrial-child ] || fail "no /usr/libexec/forktrial/forktrial-child"
[ -x /usr/libexec/forktrial/forktrial-full ] || fail "no /usr/libexec/forktrial/forktrial-full"
# The front end starts lean: the C library's own libraries, nothing else
# (docs/decisions/0085-a-lean-front-end-for-the-client-commands.md).
extra=$(ldd /usr/bin/forktrial |
  awk '{ name = $1; sub(/.*\//, "", name) } name !~ /^(linux-vdso|libc|libm|ld-linux-x86-64)\.so/ { print $1 }')
[ -z "$extra" ] || fail "/usr/bin/forktrial loads libraries beyond the C library's: $extra"
work=$TMPDIR/work
mkdir -p "$work"
on_exit "rm -rf '$work'"
cd "$work"
/usr/bin/forktrial preflight --json >preflight.json || fail "forktrial preflight failed: $(cat preflight.json)"
child=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["child"])' preflight.json)
[ "$child" = /usr/libexec/forktrial/forktrial-child ] ||
  fail "the installed forktrial starts its trials with $child, not /usr/libexec/forktrial/forktrial-child"
examples=$FORKTRIAL_SOURCE/examples
# The Python package is installed with it, for Debian's interpreter; it finds
# the installed command on PATH.
found=$(cd / && env -u FORKTRIAL_BINARY /usr/bin/python3 -c 'import forktrial; print(forktrial.find_binary())') ||
  fail "Debian's python3 cannot import the installed forktrial package"
[ "$found" = /usr/bin/forktrial ] || fail "the Python package finds $found, not /usr/bin/forktrial"
/usr/bin/forktrial run import "$examples/runs/chat.jsonl" --store store --id run_chat \
  --label "recorded chat" >/dev/null
pin=$(/usr/bin/forktrial pack hash "$examples/packs/chat_echo")
/usr/bin/forktrial trial --store store --run run_chat --at evt_031 --pack "$examples/packs/chat_echo" \
  --expect "$pin" --scenario scenarios/replay.lua --json >trial.json ||
  fail "the trial did not complete (exit $?): $(cat trial.json)"
outcome=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["outcome"])' trial.json)
[ "$outcome" = completed ] || fail "the trial ended $outcome, not completed"
say "installed forktrial: child $child, a trial of chat_echo completed"
write_batch batch.jsonl 5
/usr/bin/forktrial batch batch.jsonl --store store --workers 1 --json >batch.jsonl.out ||
  fail "forktrial batch from the installed binaries failed: $(tail -n 3 batch.jsonl.out)"
reconciled=$(python3 -c 'import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(sum(1 for l in lines if "trial" in l and l.get("status") == "reconciled"))' batch.jsonl.out)
[ "$reconciled" = 5 ] || fail "the installed batch reconciled $reconciled of 5 trials"
say "installed forktrial batch: 5 of 5 trials reconciled"
cd "$FORKTRIAL_SOURCE"

# ---- the relink kit: the child linked again from what the package installed

# libseccomp and the C library are linked into the child statically, under
# the LGPL 2.1, so the package ships forktrial's object code and a script
# that links it again (docs/decisions/0090-lgpl-libraries-in-the-static-child.md).
# Here it links from the installed kit alone, with this machine's archives,
# and the relinked child must run the same trial as the shipped one.
kit=/usr/lib/forktrial/relink
relink=$kit/relink-forktrial-child
[ -x "$relink" ] || fail "no executable $relink"
kit_files=$(grep "^$kit/." "$TMPDIR/files" | sort)
for file in relink-forktrial-child child_main.o built-with libforktrial_base.a; do
  grep -qx "$kit/$file" <<<"$kit_files" || fail "dpkg does not list $kit/$file as the package's: $kit_files"
done
[ "$(grep -c '\.a$' <<<"$kit_files")" -ge 2 ] || fail "the kit has too few archives: $kit_files"
grep -q '^libseccomp-dev .*(source: libseccomp ' "$kit/built-with" &&
  grep -q '^libc6-dev .*(source: glibc ' "$kit/built-with" ||
  fail "$kit/built-with does not name the libseccomp and glibc the child was linked with: $(cat "$kit/built-with")"
"$relink" --help | grep -q -- '--lib-dir' || fail "$relink --help does not describe --lib-dir"
cd "$work"
here=$(pwd -P) # the script names the paths it writes and links with their links resolved
# Run as a user would: from a directory of theirs, with nothing of the
# source tree or the build on its paths.
env -i PATH=/usr/bin:/bin HOME="$work" "$relink" >relink.out 2>relink.err ||
  fail "$relink failed (exit $?): $(tail -n 20 relink.err)"
relinked=$here/forktrial-child
[ -f "$relinked" ] && [ -x "$relinked" ] || fail "$relink wrote no executable $relinked: $(cat relink.out)"
grep -qx "relink-forktrial-child: wrote $relinked" relink.out ||
  fail "$relink does not say it wrote $relinked: $(cat relink.out)"
grep -q '^libseccomp\.a: /' relink.out || fail "$relink does not say which libseccomp.a it linked: $(cat relink.out)"
! readelf -l "$relinked" | grep -q INTERP || fail "the relinked child is not static: it names a dynamic loader"
# An existing file is not replaced without --force, nor is the package's child.
before=$(sha256sum <"$relinked")
if "$relink" >relink.again 2>&1; then fail "$relink replaced the existing $relinked without --force"; fi
grep -q -- '--force' relink.again || fail "$relink refused to replace $relinked without saying how: $(cat relink.again)"
[ "$(sha256sum <"$relinked")" = "$before" ] || fail "$relink changed $relinked although it refused"
shipped=/usr/libexec/forktrial/forktrial-child
before=$(sha256sum <"$shipped")
if "$relink" --output "$shipped" >relink.again 2>&1; then fail "$relink wrote over $shipped without --force"; fi
[ "$(sha256sum <"$shipped")" = "$before" ] || fail "$relink changed $shipped although it refused"
# What is missing is named with the Debian package that has it: no compiler,
# then a compiler (a stand-in for g++) that finds no archive at all.
if out=$(CXX=no-such-compiler "$relink" --output missing 2>&1); then fail "$relink linked without a compiler"; fi
grep -q 'apt-get install g++' <<<"$out" || fail "$relink without a compiler does not say to install g++: $out"
printf '#!/bin/sh\ncase "$1" in -print-file-name=*) echo "${1#*=}" ;; -dumpversion) echo 12 ;; *) exit 1 ;; esac\n' \
  >bare-cxx
chmod +x bare-cxx
if out=$(CXX=$here/bare-cxx "$relink" --output missing 2>&1); then fail "$relink linked without archives"; fi
want="apt-get install liblua5.4-dev libutf8proc-dev libssl-dev libcapnp-dev liblmdb-dev zlib1g-dev libseccomp-dev libc6-dev libstdc++-12-dev"
grep -qx "  $want" <<<"$out" || fail "$relink without the libraries' archives does not say \"$want\": $out"
[ ! -e missing ] || fail "$relink wrote missing although it failed"
# A modified library is given with --lib-dir: a copy of the system's
# libseccomp.a stands for one, and the link must take it.
mkdir libs
cp "$(sed -n 's/^libseccomp\.a: //p' relink.out)" libs/libseccomp.a
"$relink" --lib-dir libs --output forktrial-child.own >relink.own 2>&1 ||
  fail "$relink --lib-dir libs failed: $(tail -n 20 relink.own)"
grep -qx "libseccomp.a: $here/libs/libseccomp.a" relink.own ||
  fail "$relink --lib-dir libs did not link libs/libseccomp.a: $(cat relink.own)"
[ -x forktrial-child.own ] || fail "$relink --lib-dir libs wrote no executable forktrial-child.own"
# The package strips its child; stripped, the relinked one is the same file
# when the package was built on this machine (the same archives, the same link).
same_bytes="not compared with the package's (built elsewhere)"
if [ -z "${FORKTRIAL_DEB:-}" ]; then
  strip -o stripped "$relinked"
  cmp -s stripped "$shipped" || fail "the relinked child, stripped, differs from the package's $shipped"
  rm -f stripped
  same_bytes="stripped, the package's byte for byte"
fi

# The relinked child is the one a trial starts, through FORKTRIAL_CHILD.
FORKTRIAL_CHILD=$relinked /usr/bin/forktrial preflight --json >preflight.relinked.json ||
  fail "forktrial preflight with the relinked child failed: $(cat preflight.relinked.json)"
child=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["child"])' preflight.relinked.json)
[ "$child" = "$relinked" ] || fail "FORKTRIAL_CHILD=$relinked: forktrial starts its trials with $child"
# The same trial, under standard isolation and under strict (whose filter
# libseccomp builds), with each child: the reports must agree in all but the
# trial's own ids, times and resource use.
same_trial() {
  python3 - "$1" "$2" <<'PY'
import json, sys
shipped, relinked = (json.load(open(path)) for path in sys.argv[1:3])
keys = ["outcome", "events_appended", "behavior_failures", "behavior_failures_after_fork",
        "exit_code", "detail", "warnings", "limit", "executor", "isolation"]
problems = [f"the report has no {key}" for key in keys if key not in shipped]
problems += [f"{key}: shipped {shipped.get(key)!r}, relinked {relinked.get(key)!r}"
             for key in keys if shipped.get(key) != relinked.get(key)]
for problem in problems:
    print(problem, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
}
for isolation in standard strict; do
  for which in shipped relinked; do
    chosen=$shipped
    [ "$which" = shipped ] || chosen=$relinked
    FORKTRIAL_CHILD=$chosen /usr/bin/forktrial trial --store store --run run_chat --at evt_031 \
      --pack "$examples/packs/chat_echo" --expect "$pin" --scenario scenarios/replay.lua \
      --isolation "$isolation" --json >"trial.$isolation.$which.json" ||
      fail "the $isolation trial with the $which child did not complete (exit $?): $(cat "trial.$isolation.$which.json")"
  done
done
for isolation in standard strict; do
  same_trial "trial.$isolation.shipped.json" "trial.$isolation.relinked.json" ||
    fail "under $isolation isolation, the relinked child's trial differs from the shipped child's"
done
seccomp=$(python3 -c 'import json, sys
print(next(n["state"] for n in json.load(open(sys.argv[1]))["isolation"]["nets"] if n["name"] == "seccomp"))' \
  trial.strict.relinked.json)
say "relink kit: $relink linked $relinked from $kit (libseccomp from --lib-dir too; $same_bytes);" \
  "its standard and strict trials (seccomp $seccomp) report what the shipped child's do"
cd "$FORKTRIAL_SOURCE"

# ---- man pages: one for every command --help lists

# The commands under PATH... ("" is forktrial itself), each a line.
subcommands_of() {
  /usr/bin/forktrial "$@" --help |
    awk '/^Subcommands:$/ { on = 1; next } on && /^[^ ]/ { on = 0 }
         on && /^  [a-z]/ { print $1 }'
}
command_paths() {
  local queue=("") path sub
  while [ ${#queue[@]} -gt 0 ]; do
    path=${queue[0]}
    queue=("${queue[@]:1}")
    printf '%s\n' "$path"
    # shellcheck disable=SC2086 # the path is its words
    for sub in $(subcommands_of $path); do queue+=("${path:+$path }$sub"); done
  done
}
command_paths >"$TMPDIR/commands"
on_exit "rm -f '$TMPDIR/commands'"
[ "$(grep -c . "$TMPDIR/commands")" -gt 20 ] || fail "forktrial --help lists too few commands"
while read -r path; do
  page=forktrial${path:+-${path// /-}}
  where=$(man -w "$page" 2>/dev/null) || fail "no man page $page(1) for \`forktrial $path\`"
  [ "$where" = "/usr/share/man/man1/$page.1.gz" ] || fail "$page(1) is $where, not the package's"
done <"$TMPDIR/commands"
man -P cat forktrial-coordinator 2>/dev/null | grep -q -- "--listen" ||
  fail "forktrial-coordinator(1) does not render its options"
man -P cat forktrial 2>/dev/null | grep -q "forktrial 0" || fail "forktrial(1) names no version"
say "man pages: $(wc -l <"$TMPDIR/commands") commands (forktrial itself included), each with its page"

# ---- systemd units and their examples, as installed

for unit in forktrial-coordinator.service forktrial-worker@.service forktrial-gc.service \
  forktrial-gc.timer; do
  cmp -s "/lib/systemd/system/$unit" "$FORKTRIAL_SOURCE/deploy/systemd/$unit" ||
    fail "/lib/systemd/system/$unit is missing or not deploy/systemd's (which systemd.sh starts)"
done
out=$(unshare --mount --propagation private sh -c \
  'mount -t tmpfs tmpfs /run/systemd && exec systemd-analyze verify "$@"' sh \
  forktrial-coordinator.service forktrial-worker@ci.service forktrial-gc.service \
  forktrial-gc.timer 2>&1) ||
  fail "systemd-analyze verify of the installed units failed: $out"
[ -z "$out" ] || fail "systemd-analyze verify of the installed units: $out"
for example in coordinator.env worker.env gc.env forktrial-coordinator-curve.conf \
  forktrial-worker-curve.conf; do
  cmp -s "/usr/share/doc/forktrial/examples/$example" "$FORKTRIAL_SOURCE/deploy/systemd/$example" ||
    fail "/usr/share/doc/forktrial/examples/$example is missing or not deploy/systemd's"
done
say "units installed and verified (their man pages found); examples in /usr/share/doc/forktrial/examples"
rules=/usr/share/forktrial/prometheus/forktrial-alerts.yml
cmp -s "$rules" "$FORKTRIAL_SOURCE/deploy/prometheus/forktrial-alerts.yml" ||
  fail "$rules is missing or not deploy/prometheus's"
grep -qx "$rules" "$TMPDIR/files" || fail "dpkg does not list $rules as the package's"
say "alerting rules installed: $rules"
for script in forktrial-slurm forktrial-workers.sbatch; do
  installed=/usr/share/forktrial/slurm/$script
  cmp -s "$installed" "$FORKTRIAL_SOURCE/deploy/slurm/$script" ||
    fail "$installed is missing or not deploy/slurm's"
  [ -x "$installed" ] || fail "$installed is not executable"
done
/usr/share/forktrial/slurm/forktrial-slurm --help | grep -q forktrial-workers.sbatch ||
  fail "the installed forktrial-slurm --help does not describe its batch script"
dashboard=/usr/share/forktrial/grafana/forktrial-dashboard.json
cmp -s "$dashboard" "$FORKTRIAL_SOURCE/deploy/grafana/forktrial-dashboard.json" ||
  fail "$dashboard is missing or not deploy/grafana's"
say "Slurm scripts in /usr/share/forktrial/slurm (executable), Grafana dashboard: $dashboard"

# ---- prometheus-cpp: the package's own copy is the one the command loads

private_lib=/usr/lib/forktrial/libprometheus-cpp-core.so.1.0
full=/usr/libexec/forktrial/forktrial-full
loaded=$(ldd "$full" | awk '$1 == "libprometheus-cpp-core.so.1.0" { print $3 }')
[ -n "$loaded" ] || fail "ldd $full finds no libprometheus-cpp-core.so.1.0"
[ "$(realpath "$loaded")" = "$private_lib" ] ||
  fail "$full loads prometheus-cpp from $loaded, not the package's $private_lib"
grep -qx "$private_lib" "$TMPDIR/files" || fail "dpkg does not list $private_lib as the package's"
[ "$(stat -c %a "$private_lib")" = 644 ] ||
  fail "$private_lib is mode $(stat -c %a "$private_lib"), not 644"
say "prometheus-cpp: $full loads the package's $loaded"

# ---- Debian's copyright file and changelog

copyright=/usr/share/doc/forktrial/copyright
cmp -s "$copyright" "$FORKTRIAL_SOURCE/deploy/debian/copyright" ||
  fail "$copyright is missing or not deploy/debian/copyright"
python3 "$FORKTRIAL_SOURCE/tests/deploy/check_copyright.py" "$copyright" ||
  fail "$copyright is not a valid machine-readable copyright file"
changelog=/usr/share/doc/forktrial/changelog.Debian.gz
[ -f "$changelog" ] || fail "no $changelog"
# gzip -9n: no file name (flag bit 3) and no time stamp (zero) in its header.
header=$(od -An -tx1 -N8 "$changelog" | tr -d ' \n')
[ "${header:0:6}" = 1f8b08 ] || fail "$changelog is not gzip (its header: $header)"
[ $((16#${header:6:2} & 8)) -eq 0 ] && [ "${header:8:8}" = 00000000 ] ||
  fail "$changelog keeps a file name or a time stamp (flags ${header:6:2}, mtime ${header:8:8}): not gzip -n"
zcat "$changelog" >"$TMPDIR/changelog"
on_exit "rm -f '$TMPDIR/changelog'"
entry() { dpkg-parsechangelog -l "$TMPDIR/changelog" -S "$1"; }
out=$(dpkg-parsechangelog -l "$TMPDIR/changelog" 2>&1) || fail "dpkg-parsechangelog refuses $changelog: $out"
[ "$(entry Source)" = forktrial ] || fail "$changelog's entry is of $(entry Source), not forktrial"
[ "$(entry Version)" = "$project_version-1" ] ||
  fail "$changelog's entry is version $(entry Version), not $project_version-1"
[ "$(entry Maintainer)" = "$maintainer" ] ||
  fail "$changelog's entry is signed by $(entry Maintainer), not by the Maintainer $maintainer"
say "copyright file machine-readable; changelog: forktrial $(entry Version), by $(entry Maintainer), gzip -9n"

# ---- the units' state, recorded for the purge

for unit in forktrial-coordinator.service forktrial-worker@.service forktrial-gc.service \
  forktrial-gc.timer; do
  [ -f "$dsh_state/$unit.dsh-also" ] ||
    fail "the postinst recorded no state for $unit ($dsh_state/$unit.dsh-also)"
done
grep -qx "$timer_link" "$dsh_state/forktrial-gc.timer.dsh-also" ||
  fail "the state of forktrial-gc.timer does not name $timer_link: $(cat "$dsh_state/forktrial-gc.timer.dsh-also")"
[ ! -e "$timer_link" ] && [ ! -L "$timer_link" ] || fail "the install enabled forktrial-gc.timer"
say "units: deb-systemd-helper's state recorded for each, none enabled"

# ---- bash completion, against --help

completion=/usr/share/bash-completion/completions/forktrial
[ -f "$completion" ] || fail "no $completion"
cmp -s "$completion" "$FORKTRIAL_SOURCE/deploy/completion/forktrial.bash" ||
  fail "$completion is not deploy/completion/forktrial.bash"
mkdir -p "$TMPDIR/paths/a-dir"
touch "$TMPDIR/paths/a-file.jsonl"
on_exit "rm -rf '$TMPDIR/paths'"
bash -s "$completion" "$TMPDIR/commands" "$TMPDIR/paths" <<'EOF' || fail "the bash completion does not match forktrial --help"
set -uo pipefail
source "$1"
commands=$2
cd "$3"
problems=0
problem() {
  echo "completion: $*" >&2
  problems=$((problems + 1))
}
# What the completion offers for the words after "forktrial", sorted.
offered() {
  COMP_WORDS=(forktrial "$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _forktrial
  printf '%s\n' "${COMPREPLY[@]}" | sort | paste -sd' '
}
# A section of `forktrial PATH --help`: the lines under HEADING.
help_section() {
  local heading=$1
  shift
  /usr/bin/forktrial "$@" --help | awk -v h="$heading" '$0 == h { on = 1; next }
    on && /^[^ ]/ { on = 0 } on'
}
while read -r path; do
  # shellcheck disable=SC2206 # the path is its words
  words=($path)
  name="forktrial${path:+ $path}"
  subs=$(help_section Subcommands: "${words[@]}" | awk '/^  [a-z]/ { print $1 }' | sort | paste -sd' ')
  if [ -n "$subs" ] && [ "$(offered "${words[@]}" "")" != "$subs" ]; then
    problem "$name: offers subcommands \"$(offered "${words[@]}" "")\", --help lists \"$subs\""
  fi
  options=$(help_section Options: "${words[@]}" | grep -E '^  (-[a-zA-Z],)?--' || true)
  longs=$(grep -oE '^  (-[a-zA-Z],)?--[a-z0-9-]+' <<<"$options" | sed 's/.*,//; s/^ *//' | sort | paste -sd' ')
  [ "$(offered "${words[@]}" --)" = "$longs" ] ||
    problem "$name: offers options \"$(offered "${words[@]}" --)\", --help lists \"$longs\""
  while read -r line; do
    option=$(grep -oE -- '--[a-z0-9-]+' <<<"$line" | head -n 1)
    rest=${line#*"$option"}
    # CLI11 notes the options an option excludes or needs after its value's
    # type: "--all Excludes: --job" takes no value, "--job TEXT Excludes: --all" one.
    rest=${rest%% Excludes:*}
    rest=${rest%% Needs:*}
    if [[ $rest =~ ^\ [A-Z] ]]; then
      _forktrial_is_flag "$option" && problem "$name $option takes a value, the completion says it does not"
      # The words a value may be, where --help lists them: {a,b} or {a->0,b->1}.
      if [[ $rest =~ \{([a-z,>0-9-]+)\} ]]; then
        values=$(tr ',' '\n' <<<"${BASH_REMATCH[1]}" | sed 's/->.*//' | sort | paste -sd' ')
        [ "$(offered "${words[@]}" "$option" "")" = "$values" ] ||
          problem "$name $option: offers \"$(offered "${words[@]}" "$option" "")\", --help allows \"$values\""
      fi
    else
      _forktrial_is_flag "$option" || problem "$name $option takes no value, the completion says it does"
    fi
  done <<<"$options"
  positional=$(help_section Positionals: "${words[@]}" | awk '/^  [A-Z]/ { print $1; exit }')
  case $positional in
    FILE) want=file ;;
    DIR) want=dir ;;
    *) want="" ;;
  esac
  [ "$(_forktrial_positional "$path")" = "$want" ] ||
    problem "$name: its argument ${positional:-(none)} completes as \"$(_forktrial_positional "$path")\", not \"$want\""
done <"$commands"
# Paths: a file argument offers files and directories, a directory option or
# argument directories only; so does --opt=VALUE.
expect() {
  local want=$1
  shift
  [ "$(offered "$@")" = "$want" ] || problem "forktrial $*: offers \"$(offered "$@")\", not \"$want\""
}
expect "a-dir a-file.jsonl" submit ""
expect "a-file.jsonl" run import --store a-dir a-f
expect "a-dir" coordinator --store ""
expect "a-dir" coordinator --store = ""
expect "a-dir" pack hash ""
expect "a-dir a-file.jsonl" worker --key ""
expect "a-dir a-file.jsonl" run export x --output ""
expect "" status --coordinator ""
expect "--job --json" run ls --store a-dir --j
exit $((problems > 0))
EOF
say "bash completion: every command's subcommands, options and values match its --help"

# ---- removal and purge

# Enabled units, as an administrator enables them: `systemctl enable` (which,
# where systemd is not running, only makes the symlinks) for the timer and a
# worker instance; then deb-systemd-helper records the timer as enabled, as
# a maintainer script's `deb-systemd-helper enable` does for a unit with
# links (it runs only for a maintainer script, which
# DPKG_MAINTSCRIPT_PACKAGE stands for; on a unit with no links and a state
# already recorded, it enables nothing). A removal keeps both units
# enabled; the purge removes their symlinks and the helper's state.
out=$(systemctl enable forktrial-gc.timer forktrial-worker@deb-test.service 2>&1) ||
  fail "systemctl enable forktrial-gc.timer forktrial-worker@deb-test.service failed: $out"
[ "$(readlink "$timer_link")" = /lib/systemd/system/forktrial-gc.timer ] ||
  fail "systemctl enable made no $timer_link to /lib/systemd/system/forktrial-gc.timer: $out"
[ "$(readlink "$worker_link")" = /lib/systemd/system/forktrial-worker@.service ] ||
  fail "systemctl enable made no $worker_link to the template: $out"
DPKG_MAINTSCRIPT_PACKAGE=forktrial deb-systemd-helper enable forktrial-gc.timer ||
  fail "deb-systemd-helper enable forktrial-gc.timer failed"
[ -e "$dsh_state/timers.target.wants/forktrial-gc.timer" ] ||
  fail "deb-systemd-helper enable recorded no $dsh_state/timers.target.wants/forktrial-gc.timer"
dpkg -r forktrial >"$TMPDIR/remove.log" 2>&1 || {
  cat "$TMPDIR/remove.log" >&2
  fail "dpkg -r forktrial failed"
}
rm -f "$TMPDIR/remove.log"
[ ! -e /usr/bin/forktrial ] && [ ! -e /usr/libexec/forktrial ] && [ ! -e /usr/lib/forktrial/relink ] ||
  fail "dpkg -r left /usr/bin/forktrial, /usr/libexec/forktrial or the relink kit in /usr/lib/forktrial/relink"
[ -L "$timer_link" ] && [ -L "$worker_link" ] ||
  fail "dpkg -r disabled the units (their symlinks are gone); only the purge should"
# What a worker's unit leaves (its cache under DynamicUser): a purge deletes it.
mkdir -p /var/cache/private/forktrial/w1 /var/cache/forktrial
ln -s ../private/forktrial/w1 /var/cache/forktrial/w1
touch /var/cache/private/forktrial/w1/blob
dpkg --purge forktrial >"$TMPDIR/purge.log" 2>&1 || {
  cat "$TMPDIR/purge.log" >&2
  fail "dpkg --purge forktrial failed"
}
rm -f "$TMPDIR/purge.log"
status=$(dpkg-query -W -f='${Status}' forktrial 2>/dev/null || true)
[ -z "$status" ] || [[ $status == *not-installed* ]] ||
  fail "dpkg still knows forktrial after the purge: $status"
left=()
while read -r path; do
  case $path in
    /. | /usr | /usr/bin | /usr/libexec | /usr/share | /usr/share/man | /usr/share/man/man1 | \
      /usr/share/doc | /usr/share/bash-completion | /usr/share/bash-completion/completions | \
      /lib | /lib/systemd | /lib/systemd/system | /usr/lib | /usr/lib/python3 | \
      /usr/lib/python3/dist-packages) continue ;;
  esac
  [ -e "$path" ] || [ -L "$path" ] && left+=("$path")
done <"$TMPDIR/files"
[ ${#left[@]} -eq 0 ] || fail "the purge left: ${left[*]}"
[ ! -e /var/cache/forktrial ] && [ ! -e /var/cache/private/forktrial ] ||
  fail "the purge left the workers' cache in /var/cache"
[ ! -L "$timer_link" ] && [ ! -L "$worker_link" ] ||
  fail "the purge left the units' symlinks: $(ls -l "$timer_link" "$worker_link" 2>&1)"
state=$(find "$dsh_state" -name 'forktrial*' 2>/dev/null)
[ -z "$state" ] || fail "the purge left deb-systemd-helper's state: $state"
say "removed and purged: none of the $(grep -c . "$TMPDIR/files") paths is left, nor the workers' cache, nor the units' symlinks and state"
