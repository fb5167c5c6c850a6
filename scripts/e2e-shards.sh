#!/usr/bin/env bash
# Runs the end-to-end tests (internal/e2e) in N processes at once, each with
# its own embedded Temporal server. The tests spend most of their time
# waiting on timers, heartbeats and killed processes (one process keeps
# about a third of a core busy), so two processes finish in a little more
# than half the time. Usage: scripts/e2e-shards.sh [N] [extra test flags].
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2}
shift || true
go=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$go" test -c -o "$tmp/e2e.test" ./internal/e2e
mapfile -t tests < <(cd internal/e2e && "$tmp/e2e.test" -test.list '.*' | grep -E '^(Test|Example|Fuzz)')
if [ "${#tests[@]}" -eq 0 ]; then
	echo "e2e-shards: no tests found in internal/e2e" >&2
	exit 1
fi

for ((i = 0; i < n; i++)); do
	names=()
	for j in "${!tests[@]}"; do
		if ((j % n == i)); then names+=("${tests[$j]}"); fi
	done
	[ "${#names[@]}" -gt 0 ] || continue
	re="^($(IFS='|'; echo "${names[*]}"))\$"
	echo "${#names[@]}" >"$tmp/shard$i.count"
	(
		cd internal/e2e
		rc=0
		start=$(date +%s)
		"$tmp/e2e.test" -test.count=1 -test.timeout=30m -test.run "$re" "$@" >"$tmp/shard$i.log" 2>&1 || rc=$?
		echo "$rc" >"$tmp/shard$i.rc"
		echo $(($(date +%s) - start)) >"$tmp/shard$i.secs"
	) &
done
wait

fail=0
for ((i = 0; i < n; i++)); do
	[ -f "$tmp/shard$i.rc" ] || continue
	rc=$(cat "$tmp/shard$i.rc")
	if [ "$rc" != 0 ]; then
		echo "== e2e shard $((i + 1))/$n failed (exit $rc):"
		cat "$tmp/shard$i.log"
		fail=1
	else
		echo "ok  	internal/e2e shard $((i + 1))/$n: $(cat "$tmp/shard$i.count") tests in $(cat "$tmp/shard$i.secs")s"
	fi
done
exit $fail
