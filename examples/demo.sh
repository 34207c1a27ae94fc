#!/usr/bin/env bash
# Builds fctrace and the example calculator, then traces it: the program's
# output, then its call tree.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p fctrace
mkdir -p target/examples
gcc -O2 -o target/examples/calc examples/calc.c
exec target/release/fctrace target/examples/calc "${1:-2*(3+4)-10/5}"
