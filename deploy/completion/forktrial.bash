# bash completion for forktrial(1): its subcommands, each one's options, the
# values of options that take one of a few words, and paths where an option
# or argument names a file or a directory.
#
# Installed as /usr/share/bash-completion/completions/forktrial (bash-completion
# loads it on the first <TAB> after "forktrial"); without bash-completion,
# `source` it from ~/.bashrc. tests/deploy/deb.sh checks every list here
# against `forktrial ... --help`, so a subcommand or option added there and
# not here fails that test.

# The subcommands under a command path ("" is forktrial itself).
_forktrial_subcommands() {
  case $1 in
    "") echo "pack run trial preflight keygen coordinator worker submit status wait cancel results workers import batch gc compact store" ;;
    pack) echo "hash verify check" ;;
    store) echo "check" ;;
    run) echo "new ls show events graph fork export import import-sqlite" ;;
  esac
}

# The long options of a command path.
_forktrial_options() {
  local client="--coordinator --timeout --json --key --coordinator-key"
  case $1 in
    "") echo "--help --version" ;;
    pack | run | store) echo "--help" ;;
    "pack hash") echo "--help --content --json" ;;
    "pack verify") echo "--help --expect --json" ;;
    "pack check") echo "--help --executable --json" ;;
    "run new") echo "--help --store --json --label --id" ;;
    "run ls") echo "--help --store --json --all --job" ;;
    "run show" | "run import-sqlite") echo "--help --store --json" ;;
    "run events") echo "--help --store --json --from --type --limit" ;;
    "run graph") echo "--help --store --json --at" ;;
    "run fork") echo "--help --store --json --at --label --id" ;;
    "run export") echo "--help --store --output" ;;
    "run import") echo "--help --store --json --label --id --fork-of --at" ;;
    trial) echo "--help --store --spec --run --at --pack --expect --extra-pack --scenario" \
      "--wall-clock --max-rss --max-events --max-cpu --max-appended-events" \
      "--max-appended-bytes --env-pass --label --isolation --python --json" ;;
    preflight) echo "--help --max-rss --wall-clock --isolation --python --json" ;;
    keygen) echo "--help --force --json" ;;
    coordinator) echo "--help --store --listen --lease --max-attempts --commit-window" \
      "--max-queued --max-worker-slots --key --allow-workers --allow-clients --admin-clients" \
      "--insecure --http --compact-log-after --log-level --log-json --max-queued-bytes" \
      "--max-client-bytes --http-private" ;;
    worker) echo "--help --connect --cache --cache-size --slots --prefetch --id --send-queue" \
      "--isolation --python --http --key --coordinator-key --log-level --log-json" ;;
    submit) echo "--help --wait --max-wait --no-cache $client" ;;
    wait) echo "--help --max-wait $client" ;;
    status) echo "--help --state --since --limit $client" ;;
    cancel | workers) echo "--help $client" ;;
    import) echo "--help --id --label --fork-of --at $client" ;;
    results) echo "--help --csv --by --sqlite $client" ;;
    batch) echo "--help --store --workers --slots --by --json --log-level --isolation --python --no-cache" ;;
    gc) echo "--help --store --keep --older-than --blob-grace --batch --dry-run --json" ;;
    compact) echo "--help --store --output --json" ;;
    "store check") echo "--help --store --repair --json" ;;
  esac
}

# Options that take no value; every other option takes one.
_forktrial_is_flag() {
  case $1 in
    -h | --help | --version | --json | --csv | --content | --executable | --force | --wait | \
      --insecure | --log-json | --all | --dry-run | --no-cache | --repair | --http-private) return 0 ;;
  esac
  return 1
}

# What a command path's positional argument is: file, dir, or nothing.
_forktrial_positional() {
  case $1 in
    keygen | submit | batch | import | "run import" | "run import-sqlite") echo file ;;
    "pack hash" | "pack verify" | "pack check") echo dir ;;
  esac
}

_forktrial_files() {
  compopt -o filenames 2>/dev/null
  mapfile -t COMPREPLY < <(compgen -f -- "$1")
}

_forktrial_dirs() {
  compopt -o filenames 2>/dev/null
  mapfile -t COMPREPLY < <(compgen -d -- "$1")
}

_forktrial_words() {
  mapfile -t COMPREPLY < <(compgen -W "$1" -- "$2")
}

_forktrial() {
  COMPREPLY=()
  local cword=$COMP_CWORD
  local cur=${COMP_WORDS[cword]}
  local prev=""
  ((cword > 0)) && prev=${COMP_WORDS[cword - 1]}
  # "--store=DIR": bash splits the word at "=" (COMP_WORDBREAKS).
  if [ "$cur" = "=" ]; then
    prev=${COMP_WORDS[cword - 1]}
    cur=""
  elif [ "$prev" = "=" ] && ((cword > 1)); then
    prev=${COMP_WORDS[cword - 2]}
  fi

  # The command path: the subcommands among the words before the cursor,
  # skipping options and the values they take.
  local path="" word i=1 skip_value=0
  while ((i < cword)); do
    word=${COMP_WORDS[i]}
    if ((skip_value)); then
      skip_value=0
    elif [ "$word" = "=" ]; then
      skip_value=1
    elif [[ $word == -* ]]; then
      _forktrial_is_flag "$word" || skip_value=1
      [[ ${COMP_WORDS[i + 1]:-} == "=" ]] && skip_value=0
    elif [[ " $(_forktrial_subcommands "$path") " == *" $word "* ]]; then
      path=${path:+$path }$word
    fi
    ((i++))
  done

  if [[ $prev == -* ]] && ! _forktrial_is_flag "$prev" && ((cword > 1)); then
    case $prev in
      --isolation) _forktrial_words "standard strict" "$cur" ;;
      --log-level) _forktrial_words "debug info warn error" "$cur" ;;
      --by) _forktrial_words "candidate" "$cur" ;;
      --state) _forktrial_words "queued running finished abandoned cancelled" "$cur" ;;
      --keep) _forktrial_words "all failures none" "$cur" ;;
      --store | --cache | --pack | --extra-pack) _forktrial_dirs "$cur" ;;
      --spec | --key | --coordinator-key | --allow-workers | --allow-clients | --admin-clients | --sqlite | \
        --output | -o)
        _forktrial_files "$cur"
        ;;
    esac
    return 0
  fi

  if [[ $cur == -* ]]; then
    _forktrial_words "$(_forktrial_options "$path")" "$cur"
    return 0
  fi
  local subcommands
  subcommands=$(_forktrial_subcommands "$path")
  if [ -n "$subcommands" ]; then
    _forktrial_words "$subcommands" "$cur"
    return 0
  fi
  case $(_forktrial_positional "$path") in
    file) _forktrial_files "$cur" ;;
    dir) _forktrial_dirs "$cur" ;;
    *) _forktrial_words "$(_forktrial_options "$path")" "$cur" ;;
  esac
  return 0
}

complete -F _forktrial forktrial
