#!/bin/sh
# tests/s3/moto.sh - an S3 server that verifies signatures, for the tests:
# moto_server (moto 5), with authentication enforced.  s3rver (s3rver.sh)
# checks V2 signatures only and takes any V4 one; moto checks V4 (and
# answers V2 with a 500), so the tests that must see a signature refused
# run here.
#
# moto and boto3 come with the image's Python (pyenv: `which moto_server`
# is /root/.pyenv/shims/moto_server; neither is a Debian package, and PyPI
# is not reachable from these machines, so contrib/install-deps.sh cannot
# install them: it checks they are there).  The tests use that Python.
#
#   sh moto.sh start DIR   start moto_server on 127.0.0.1, on a free port,
#                          with INITIAL_NO_AUTH_ACTION_COUNT=3: the first
#                          three requests (moto_setup.py's IAM user, access
#                          key and policy) go unsigned, every later one must
#                          be signed right; then make the bucket with that
#                          key; print shell assignments (also in DIR/env):
#                            NRS_S3_URL='http://127.0.0.1:PORT/BUCKET'
#                            NRS_S3_ACCESS_KEY='AKIA...'
#                            NRS_S3_SECRET_KEY='...'
#                            NRS_S3_PID='PID'
#                          Exit 1, with the server's log, if it does not.
#   sh moto.sh stop DIR    stop it (TERM, then KILL after 5 s), wait until it
#                          is gone.  Safe to run twice, or when start failed.
#
# moto keeps everything in memory: a stopped server's objects are gone, so
# there is no restart (outage tests stop a proxy in front of it, or run on
# s3rver only).  A guard process stops the server once NRS_S3RVER_OWNER
# (default: this script's parent) is gone, so a SIGKILLed test leaves no
# server behind.  A pid is only signalled while its command line still
# names DIR (pids are reused).
#
# Environment: NRS_S3_BUCKET (default nereus), NRS_PYTHON (default
# python3), NRS_S3RVER_OWNER, NRS_S3RVER_START_TIMEOUT (seconds, 30).

set -u

here=$(cd "$(dirname "$0")" && pwd)
BUCKET=${NRS_S3_BUCKET:-nereus}
PY=${NRS_PYTHON:-python3}

die() {
	echo "moto.sh: $*" >&2
	exit 1
}

. "$here/proc.sh"

# A port nothing listens on now (moto_server cannot take 0); a race with
# another process taking it meanwhile makes the start fail, and start
# tries again.
free_port() {
	"$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# launch DIR: one try; 0 when it serves, 2 when the port was taken.
launch() {
	dir=$1
	owner=${NRS_S3RVER_OWNER:-$PPID}
	limit=${NRS_S3RVER_START_TIMEOUT:-30}
	port=$(free_port) || die "$PY cannot pick a port"

	INITIAL_NO_AUTH_ACTION_COUNT=3 "$PY" "$here/moto_run.py" "$dir" "$port" \
		>"$dir/log" 2>&1 </dev/null &
	spid=$!
	echo $spid >"$dir/pid"
	guard "$dir" "$spid" "$owner"

	n=0
	until grep -q "Running on http://127.0.0.1:$port" "$dir/log" 2>/dev/null; do
		if ! kill -0 "$spid" 2>/dev/null; then
			wait "$spid"
			grep -q 'Address already in use' "$dir/log" && { stop "$dir"; return 2; }
			echo "moto.sh: moto_server exited before serving; its log:" >&2
			sed 's/^/| /' "$dir/log" >&2
			stop "$dir"
			exit 1
		fi
		if [ $n -ge $((limit * 10)) ]; then
			echo "moto.sh: moto_server did not start within ${limit}s; its log:" >&2
			sed 's/^/| /' "$dir/log" >&2
			stop "$dir"
			exit 1
		fi
		sleep 0.1
		n=$((n + 1))
	done
	if ! keys=$("$PY" "$here/moto_setup.py" "http://127.0.0.1:$port" "$BUCKET" 2>"$dir/setup.log"); then
		echo "moto.sh: could not make the IAM user and bucket:" >&2
		sed 's/^/| /' "$dir/setup.log" "$dir/log" >&2
		stop "$dir"
		exit 1
	fi
	{
		echo "NRS_S3_URL='http://127.0.0.1:$port/$BUCKET'"
		echo "$keys"
		echo "NRS_S3_PID='$spid'"
	} >"$dir/env"
	cat "$dir/env"
	return 0
}

start() {
	dir=$1
	"$PY" -c 'import moto, boto3' 2>/dev/null ||
		die "$PY has no moto or boto3 (the image's Python has both; see the top of this file)"
	mkdir -p "$dir" || die "cannot make $dir"
	dir=$(cd "$dir" && pwd)
	[ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
	for _ in 1 2 3; do
		launch "$dir" && return 0
	done
	die "no free port after three tries"
}

case "${1:-}" in
start)	[ $# -eq 2 ] || die "usage: moto.sh start DIR"; start "$2" ;;
stop)	[ $# -eq 2 ] || die "usage: moto.sh stop DIR"; stop "$2" ;;
*)	die "usage: moto.sh start|stop DIR" ;;
esac
