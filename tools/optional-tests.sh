#!/bin/sh
# Prints, in one line, which optional tests `make test` skipped on this
# machine and what to install to run them. Each check is the one its test
# makes before it skips (chromium, Prometheus and Alertmanager, promtool,
# amtool, PgBouncer, Node.js and npm).
missing=""
add() { missing="${missing:+$missing; }$1"; }
command -v chromium >/dev/null 2>&1 || add "TestConsole_Browser (apt-get install chromium)"
if ! command -v prometheus >/dev/null 2>&1 || { ! command -v prometheus-alertmanager >/dev/null 2>&1 && ! command -v alertmanager >/dev/null 2>&1; }; then
	add "TestAlertRouting_* (apt-get install prometheus prometheus-alertmanager)"
fi
command -v promtool >/dev/null 2>&1 || add "the promtool rule tests (apt-get install prometheus)"
command -v amtool >/dev/null 2>&1 || add "the amtool config check (apt-get install prometheus-alertmanager)"
[ -x /usr/sbin/pgbouncer ] || add "the PgBouncer tests (apt-get install pgbouncer)"
{ command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; } || add "TestTSClientWalkthrough (apt-get install nodejs npm)"
if [ -n "$missing" ]; then
	echo "optional tests skipped: $missing"
else
	echo "optional tests: none skipped"
fi
