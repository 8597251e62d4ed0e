#!/bin/sh
# The Python package's pytest suite (python/tests), run by ctest with
# Debian's interpreter against the forktrial command of this build:
#   tests/python/pytest.sh FORKTRIAL_BINARY SOURCE_DIR
# Exits 77 (skipped) when Debian's pytest is not installed
# (scripts/install-deps --test installs python3-pytest). Its temporary files
# go under $TMPDIR and are removed; nothing is written in the source tree.
set -eu
binary=$1
source_dir=$2
python=/usr/bin/python3
if ! "$python" -c 'import pytest' 2>/dev/null; then
  echo "skipped: Debian's python3-pytest is not installed (scripts/install-deps --test)"
  exit 77
fi
base=$(mktemp -d "${TMPDIR:-/tmp}/forktrial-pytest-XXXXXX")
trap 'rm -rf "$base"' EXIT
cd "$source_dir"
FORKTRIAL_BINARY=$binary PYTHONDONTWRITEBYTECODE=1 \
  "$python" -m pytest -q -p no:cacheprovider --basetemp="$base/t" python/tests
