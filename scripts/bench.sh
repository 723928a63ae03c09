#!/usr/bin/env bash
# Runs every benchmark in bench/ with settings that keep the whole run under 10 minutes on a
# two-core machine, and prints each one's figures and wall time. Needs what scripts/install.sh
# installs (the lab's servers and .venv); each benchmark starts its own servers on loopback.
# bench/README.md says what each one measures and the larger settings its figures were taken with.
set -euo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python

run() {
  local started=$SECONDS
  echo "== $*"
  "$python" "$@"
  echo "   ($((SECONDS - started)) s)"
  echo
}

run bench/lock_cycle.py --seconds 1 --fanout 2000
run bench/lock_topologies.py --seconds 0.5 --rounds 2
run bench/fence_cost.py --rounds 50
run bench/ssh_costs.py --rounds 20 --opens 300
run bench/inventory_load.py --fleets 1000,10000 --rounds 1
run bench/inventory_queries.py --rounds 2
run bench/web_view.py --rounds 3
run bench/runs_where_page.py --renders 5
# "before": main before the bounded per-Marquee series (issue 39)
run bench/metrics_scrape.py --scrapes 3 --before b49599b
run bench/dispatch.py --fleets 100,1000,10000
run bench/scale_out.py --fleet 1000 --replicas 1,2,4
run bench/start_offsets.py --shares 12500,50000
# "before": the code before a window set's answers were kept (issue 42)
run bench/windows.py --cycles 20 --rounds 1 --before ef89b90
run bench/fleet_simulation.py --short
# "before": the code before compose's answers were kept on the host (issue 29's cold start); a
# ref from before the package's folders cannot run today's benchmarks (bench/code_versions.py)
run bench/converged_marquee.py --playgrounds 20 --cycles 2 --cold --fleet 10 --ticks 1 --before 3ced5ed
run bench/change_latency.py --short --before 0a52ce1
