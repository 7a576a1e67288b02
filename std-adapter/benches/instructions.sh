#!/usr/bin/env bash
# Instructions per iteration of each path in benches/instructions.rs, counted by callgrind
# inside the harness's `measured` function only (what a path sets up is left out). Counts do not
# depend on the machine's load, so two builds (two commits, two checkouts) compare in one
# sitting:
#
#   bash std-adapter/benches/instructions.sh [PATH...]     (needs valgrind)
#
# Prints one "path instructions-per-iteration" line per path. A path that reads a real clock
# (quanta, tokio) varies by a few instructions between runs: the clock's own upkeep.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
N=${N:-100000}
bin=$(cargo bench --locked -p stormguard-std --features quanta --bench instructions --no-run \
    --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*instructions[^"]*\)".*/\1/p' | tail -1)
[[ -x $bin ]] || { echo "no harness binary built" >&2; exit 1; }
paths=("$@")
[[ ${#paths[@]} -gt 0 ]] || mapfile -t paths < <("$bin")
for p in "${paths[@]}"; do
    out=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$out" --toggle-collect='*instructions*measured*' \
        "$bin" "$p" "$N" >/dev/null 2>&1
    total=$(sed -n 's/^summary: //p' "$out")
    rm -f "$out"
    echo "$p $(( total / N ))"
done
