#!/bin/sh
# progress.sh LABEL COMMAND...: runs COMMAND and, while it runs, prints
# "LABEL: still going, 1m30s elapsed, N packages compiled" every
# PROGRESS_INTERVAL seconds (default 30), so a long first build is never
# silent. COMMAND's own lines are shown as they come, except the package
# paths `go build -v` lists as it compiles them, which are only counted
# (a line without a space or a colon). Exits with COMMAND's status.
#
# `make run` builds bin/radar through it; a cold build compiles about 600
# packages and took 1m47s on the reference machine (2 cores).
label=$1
shift
interval=${PROGRESS_INTERVAL:-30}
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
: >"$dir/count"

# The command, its output filtered: messages pass, package paths count.
(
	"$@" 2>&1
	echo $? >"$dir/status"
) | while IFS= read -r line; do
	case $line in
	*" "* | *:*) printf '%s\n' "$line" ;;
	*) echo >>"$dir/count" ;;
	esac
done &
pipeline=$!

start=$(date +%s)
next=$((start + interval))
while kill -0 "$pipeline" 2>/dev/null; do
	now=$(date +%s)
	if [ "$now" -ge "$next" ]; then
		elapsed=$((now - start))
		compiled=$(wc -l <"$dir/count" | tr -d ' ')
		printf '%s: still going, %dm%02ds elapsed, %s packages compiled\n' "$label" $((elapsed / 60)) $((elapsed % 60)) "$compiled"
		next=$((now + interval))
	fi
	sleep 1
done
wait "$pipeline"
status=$(cat "$dir/status" 2>/dev/null || echo 1)
exit "$status"
