#!/usr/bin/env bash
# fenceline's executor against Taskflow, oneTBB and OpenMP on Taskflow's own
# benchmark programs: runs ../shared/peers/taskflow/run.sh (the peers,
# unchanged, 2 threads) and examples/taskflow.rs (the same graphs on
# fenceline, 2 workers) one after the other, and prints one table of ms per
# graph (build + submit + wait, mean of ROUNDS rounds; lower is better) with
# Taskflow's time over fenceline's (above 1: fenceline faster).
#
# usage: scripts/taskflow-peer.sh [ROUNDS]   (default 5; the peers' build,
# g++ and libtbb-dev, is installed and cached by run.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
peer=${TASKFLOW_PEER:-../shared/peers/taskflow}
[ -x "$peer/run.sh" ] || [ -f "$peer/run.sh" ] || { echo "no peer at $peer (set TASKFLOW_PEER)"; exit 1; }
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
cargo build --release --example taskflow >&2
./target/release/examples/taskflow "$rounds" | tee -a "$lines" >&2
bash "$peer/run.sh" "$rounds" | tee -a "$lines" >&2
awk '
  $1 == "fenceline" { t[$2 " " $3 " fl"] = $4; key[$2 " " $3] = 1; order[++n] = $2 " " $3 }
  $1 == "PEER"      { t[$3 " " $4 " " $2] = $5 }
  END {
    print "| benchmark | size | fenceline | Taskflow | oneTBB | OpenMP | Taskflow / fenceline |"
    print "|---|---|---|---|---|---|---|"
    for (i = 1; i <= n; i++) {
      k = order[i]; split(k, p, " ")
      fl = t[k " fl"]; tf = t[k " tf"]
      r = (fl > 0 && tf != "") ? sprintf("%.2fx", tf / fl) : "-"
      printf "| %s | %s | %.2f | %s | %s | %s | %s |\n", p[1], p[2], fl, tf, t[k " tbb"], t[k " omp"], r
    }
  }' "$lines"
