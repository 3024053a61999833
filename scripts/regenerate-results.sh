#!/usr/bin/env bash
# Regenerates results/: the thesis's benchmark section (SPEC section 5) as charts (PNG and
# SVG), sweep.json with every measured point, and README.md with the headline table.
#
# Every point runs on the embedded store in simulated time, so the same seed gives the same
# files, and the whole sweep takes well under three minutes of wall time on two cores (the
# points run in parallel on two threads). Extra arguments go to `bench-harness sweep`, e.g.
#   scripts/regenerate-results.sh --seed 2 --jobs 4
#   scripts/regenerate-results.sh --quick --out /tmp/results-check
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -p bench-harness
start=$(date +%s)
./target/release/bench-harness sweep --out results "$@"
echo "regenerate-results.sh: the sweep took $(( $(date +%s) - start )) s of wall time" >&2
