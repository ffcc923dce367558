#!/usr/bin/env bash
# Engine hot-path microbenchmark: one idle rank's heartbeat-period work
# (deadline step + WriteHeartbeat) and one failure notice (duplicate, and
# new + forwarded) at N = 2^10 .. 2^20 with 0, 10, 100, 1000 known
# failures, plus the duplicate notice on cold Engines; release build.
# Prints a table and writes target/bench/engine_hot_path.json.
# Knobs: ENGINE_HOT_PATH_MAX_LOG2 (default 20), ENGINE_HOT_PATH_REPS
# (default 31), ENGINE_HOT_PATH_COLD=0 to skip the cold pool.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p ffd-protocol --bench engine_hot_path "$@"
# The commit, date, command and machine, for benches/report.py.
benches/stamp.py target/bench/engine_hot_path.json "benches/engine_hot_path.sh $*"
