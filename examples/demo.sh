#!/usr/bin/env bash
# Builds fctrace and the example calculator, then traces it: the program's
# output, then its call tree. The binaries go where cargo puts them
# (CARGO_TARGET_DIR, a configured target-dir, or ./target).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "demo.sh: building fctrace (cargo build --release), a few minutes the first time..." >&2
cargo build --release --quiet -p fctrace
target=$(cargo metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
if [ -z "$target" ]; then
  echo "demo.sh: cannot find cargo's target directory" >&2
  exit 1
fi
mkdir -p "$target/examples"
gcc -O2 -o "$target/examples/calc" examples/calc.c
exec "$target/release/fctrace" "$target/examples/calc" "${1:-2*(3+4)-10/5}"
