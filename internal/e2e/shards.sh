#!/usr/bin/env bash
# shards.sh N — runs the end-to-end tests as N+1 processes of one test
# binary at once. Each process starts its own Temporal dev server (a child
# process: FASTAGENT_DEVSERVER, else found or built once); tests already use
# their own task queues and session names. The tests mostly wait (timers,
# retries, killed workers), so N processes on a 2-core machine take about
# 1/N of the time of one. The tests that call t.Parallel() first thing (the
# worker-kill tests, which mostly wait out a dead worker's timeouts, and the
# chat channels' tests) run in one more process, E2E_PARALLEL (default 12)
# at a time, from the start: in a shard of their own they do not wait for
# the sequential tests to end. The N sequential shards are balanced by the
# seconds each test takes (testdata/seconds.txt; a test not listed there
# counts 2 s): longest first, each to the shard with the fewest seconds so
# far. Prints each shard's verdict as it finishes and the output of any
# shard that failed; exits non-zero if any did; then the slowest tests.
set -uo pipefail
n=${1:-3}
timeout=${E2E_TIMEOUT:-30m}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# E2E_TEST_BIN names a test binary built already (make test builds it before
# lint); else the script builds its own.
bin=${E2E_TEST_BIN:-}
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
	bin=$work/e2e.test
	go test -c -o "$bin" "$here" || exit 1
fi
mapfile -t tests < <(cd "$here" && "$bin" -test.list '.*' | grep -E '^(Test|Example)')
if [ "${#tests[@]}" -eq 0 ]; then
	echo "no end-to-end tests found" >&2
	exit 1
fi
# The parallel tests: a top-level test whose first statement is t.Parallel().
mapfile -t parallel < <(awk '
	match($0, /^func (Test|Example)[A-Za-z0-9_]*\(/) { name = substr($0, 6, RLENGTH - 6); getline; if ($1 == "t.Parallel()") print name }
' "$here"/*_test.go | sort -u)
declare -A is_parallel
for name in "${parallel[@]}"; do is_parallel[$name]=1; done
load=()
for s in $(seq 0 "$n"); do
	load[s]=0
	: >"$work/shard$s"
done
# Shard n (the last) holds the parallel tests.
for name in "${tests[@]}"; do
	if [ -n "${is_parallel[$name]:-}" ]; then echo "$name" >>"$work/shard$n"; fi
done
while read -r secs name; do
	if [ -n "${is_parallel[$name]:-}" ]; then continue; fi
	best=0
	for s in $(seq 1 $((n - 1))); do
		if [ "${load[s]}" -lt "${load[best]}" ]; then best=$s; fi
	done
	echo "$name" >>"$work/shard$best"
	load[best]=$((load[best] + secs))
done < <(printf '%s\n' "${tests[@]}" | awk -v file="$here/testdata/seconds.txt" '
	BEGIN { while ((getline line < file) > 0) if (split(line, f) >= 2 && f[1] ~ /^[0-9]+$/) secs[f[2]] = f[1] }
	{ print ($1 in secs ? secs[$1] : 2), $1 }' | sort -k1,1nr -k2,2)
if [ "$(cat "$work"/shard* | wc -l)" -ne "${#tests[@]}" ]; then
	echo "shards.sh: the shards hold $(cat "$work"/shard* | wc -l) of ${#tests[@]} tests" >&2
	exit 1
fi

# failed_only filters a -test.v log to the output of the tests that failed
# (or never finished) and the lines outside any test.
failed_only() {
	awk '
		/^=== (RUN|CONT|NAME) / { cur = $3; sub(/\/.*/, "", cur); next }
		/^=== PAUSE / { next }
		/^[ \t]+--- (PASS|SKIP): / && cur == "" { next }
		/^--- (PASS|SKIP): / { delete buf[$3]; cur = ""; next }
		/^--- FAIL: / { printf "%s", buf[$3]; print; delete buf[$3]; cur = ""; next }
		cur == "" { print; next }
		{ buf[cur] = buf[cur] $0 "\n" }
		END { for (t in buf) printf "%s", buf[t] }'
}

declare -A shard_of
for s in $(seq 0 "$n"); do
	[ -s "$work/shard$s" ] || continue
	re="^($(paste -sd'|' "$work/shard$s"))\$"
	par=()
	if [ "$s" -eq "$n" ]; then par=(-test.parallel "${E2E_PARALLEL:-12}"); fi
	(
		cd "$here" || exit 1
		start=$(date +%s)
		"$bin" -test.count=1 -test.v -test.timeout "$timeout" "${par[@]}" -test.run "$re" >"$work/log$s" 2>&1
		rc=$?
		echo "$rc $(($(date +%s) - start))" >"$work/rc$s"
		exit "$rc"
	) &
	shard_of[$!]=$s
done

failed=0
while [ "${#shard_of[@]}" -gt 0 ]; do
	wait -n -p pid
	s=${shard_of[$pid]}
	unset "shard_of[$pid]"
	read -r rc took <"$work/rc$s" || { rc=1; took=?; }
	label="shard $((s + 1))/$n"
	if [ "$s" -eq "$n" ]; then label="parallel shard"; fi
	count=$(wc -l <"$work/shard$s")
	if [ "$rc" -eq 0 ]; then
		echo "e2e $label: ok ($count tests, ${took}s)"
	else
		failed=1
		echo "e2e $label: FAILED ($count tests, ${took}s); its output:"
		# The shard ran with -test.v (for the durations): print only the
		# failed tests' output and what no test printed, as without -v.
		# (-a: a test may log bytes that are not text; grep would then
		# print only "binary file matches".) The whole log is kept.
		keep=$(mktemp -t "fastagent-e2e-shard$((s + 1)).XXXXXX") && cp "$work/log$s" "$keep"
		out=$(grep -a -v -e '^20[0-9][0-9][-/][0-9][0-9][-/][0-9][0-9] ' "$work/log$s" | failed_only)
		if [ -z "$out" ]; then
			# Nothing but log lines: the process died outside a test (the
			# dev server's own fatal log is in the temporal.log of the
			# fastagent-e2e-* directory it left in the temp dir).
			out=$(tail -n 20 "$work/log$s"; echo "(no test output; see temporal.log under ${TMPDIR:-/tmp}/fastagent-e2e-*)")
		fi
		printf '%s\n' "$out" | sed "s/^/[shard $((s + 1))] /"
		echo "e2e $label: its whole log (-test.v) is $keep"
	fi
done
# The slowest tests (-test.v's "--- PASS: TestX (Ns)" lines), to keep
# testdata/seconds.txt, which balances the shards, up to date.
echo "e2e slowest tests (seconds, shard):"
for s in $(seq 0 "$n"); do
	[ -f "$work/log$s" ] || continue
	sed -n "s/^--- PASS: \([A-Za-z0-9_]*\) (\([0-9]*\)\.[0-9]*s)$/\2 \1 $((s + 1))/p" "$work/log$s"
done | sort -k1,1nr | head -n "${E2E_SLOWEST:-12}" | awk '{ printf "  %4d %s (shard %d)\n", $1, $2, $3 }'
exit "$failed"
