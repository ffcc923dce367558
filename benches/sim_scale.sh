#!/usr/bin/env bash
# Simulator scale benchmark: N = 2^4 .. 2^20, BMG and chord, one crash on
# 2 µs links, plus 32 random crashes at N = 65536; release build.
# Prints a table and writes target/bench/sim_scale.json.
# Knobs: SIM_SCALE_MAX_LOG2 (default 20), SIM_SCALE_STRESS=0, SIM_SCALE_SEED.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p ffd-cli --bench sim_scale "$@"
# The commit, date, command and machine, for benches/report.py.
benches/stamp.py target/bench/sim_scale.json "benches/sim_scale.sh $*"
