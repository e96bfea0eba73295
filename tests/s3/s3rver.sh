#!/bin/sh
# tests/s3/s3rver.sh - a real S3 server for the tests: s3rver, the version
# pinned in package.json beside this file (contrib/install-deps.sh installs
# it with npm ci), run by server.js, which also makes it check Content-MD5
# and answer a range GET of an empty object as S3 does (it says how).
#
#   sh s3rver.sh start DIR   start s3rver on 127.0.0.1, on a port the
#                            kernel picks, with its data in DIR/data (DIR is
#                            made; it must not exist or be empty) and one
#                            bucket; return once it serves, printing shell
#                            assignments (also left in DIR/env):
#                              NRS_S3_URL='http://127.0.0.1:PORT/BUCKET'
#                              NRS_S3_ACCESS_KEY='S3RVER'
#                              NRS_S3_SECRET_KEY='S3RVER'
#                              NRS_S3_PID='PID'
#                            Exit 1, with the server's log, if it does not.
#   sh s3rver.sh stop DIR    stop the server started in DIR (TERM, then KILL
#                            after 5 s) and wait until it is gone.  Safe to
#                            run twice, or when start failed.
#   sh s3rver.sh restart DIR start again, after a stop, the server that
#                            start made in DIR: the same port, bucket and
#                            data (the objects stored before the stop are
#                            served again), TLS certificate if any; prints
#                            the same assignments (a new NRS_S3_PID).  For
#                            tests of a store that goes away and comes back.
#                            Exit 1 if the port is taken meanwhile.
#
# A test starts and stops it like this (the trap stops it however the
# script ends; the guard below covers a SIGKILL):
#
#	s3dir=$(mktemp -d) || exit 99
#	trap 'sh "$NRS_S3RVER_SH" stop "$s3dir/s3"; rm -rf "$s3dir"' EXIT
#	out=$(NRS_S3RVER_OWNER=$$ sh "$NRS_S3RVER_SH" start "$s3dir/s3") || exit 99
#	eval "$out"
#
# Environment:
#   NRS_S3RVER        the s3rver package directory (default:
#                     node_modules/s3rver beside this file); node must be
#                     in PATH
#   NRS_S3_BUCKET     the bucket (default: nereus)
#   NRS_S3RVER_TLS=1  serve https with a self-signed certificate for
#                     127.0.0.1, made with openssl in DIR/tls (the URL is
#                     then https://...; NRS_S3_CA names the certificate)
#   NRS_S3RVER_OWNER  a pid: a guard process stops the server once that
#                     process is gone (default: this script's parent)
#   NRS_S3RVER_START_TIMEOUT  seconds to wait for it to serve (default 30)
#
# The server's pid is in DIR/pid and its output in DIR/log (DIR/log.1: the
# run before a restart).  A pid is only signalled while its command line
# still names DIR (pids are reused).
#
# s3rver 3.x takes libs3's signature V2 for object requests, but
# canonicalizes bucket-level requests (a listing) without the trailing '/'
# libs3 signs, so listings fail against it: nothing in nereusfs lists.

set -u

here=$(cd "$(dirname "$0")" && pwd)
NRS_S3RVER=${NRS_S3RVER:-$here/node_modules/s3rver}
export NRS_S3RVER
BUCKET=${NRS_S3_BUCKET:-nereus}

die() {
	echo "s3rver.sh: $*" >&2
	exit 1
}

. "$here/proc.sh"

# launch DIR PORT: run server.js on DIR/data (with DIR/tls's key and
# certificate if there are any) on PORT (0: the kernel picks), with its
# guard; wait until it serves, then print the assignments and leave them in
# DIR/env.  DIR is absolute.
launch() {
	dir=$1
	want_port=$2
	owner=${NRS_S3RVER_OWNER:-$PPID}
	limit=${NRS_S3RVER_START_TIMEOUT:-30}
	scheme=http

	set -- "$dir/data" "$BUCKET"
	if [ -f "$dir/tls/cert.pem" ]; then
		set -- "$@" "$dir/tls/key.pem" "$dir/tls/cert.pem"
		scheme=https
	fi
	NRS_S3RVER_PORT=$want_port node "$here/server.js" "$@" >"$dir/log" 2>&1 </dev/null &
	spid=$!
	echo $spid >"$dir/pid"

	# The guard: stops the server when the owner dies without stopping it.
	guard "$dir" "$spid" "$owner"

	# Up when it says where it listens and the bucket's directory exists.
	n=0 port=
	while :; do
		port=$(sed -n 's/^S3rver listening on 127\.0\.0\.1:\([0-9][0-9]*\).*/\1/p' \
			"$dir/log" 2>/dev/null | head -n 1)
		[ -n "$port" ] && [ -d "$dir/data/$BUCKET" ] && break
		# kill -0, not is_ours: the server is this shell's child (its
		# pid is not reused before the shell reaps it), and its command
		# line can read empty while it execs node
		if ! kill -0 "$spid" 2>/dev/null; then
			wait "$spid"
			echo "s3rver.sh: s3rver exited with status $? before serving; its log:" >&2
			sed 's/^/| /' "$dir/log" >&2
			stop "$dir"
			exit 1
		fi
		if [ $n -ge $((limit * 10)) ]; then
			echo "s3rver.sh: s3rver did not start within ${limit}s; its log:" >&2
			sed 's/^/| /' "$dir/log" >&2
			stop "$dir"
			exit 1
		fi
		sleep 0.1
		n=$((n + 1))
	done
	{
		echo "NRS_S3_URL='$scheme://127.0.0.1:$port/$BUCKET'"
		echo "NRS_S3_ACCESS_KEY='S3RVER'"
		echo "NRS_S3_SECRET_KEY='S3RVER'"
		echo "NRS_S3_PID='$spid'"
		[ "$scheme" = https ] && echo "NRS_S3_CA='$dir/tls/cert.pem'"
	} >"$dir/env"
	cat "$dir/env"
}

start() {
	dir=$1

	[ -f "$NRS_S3RVER/package.json" ] ||
		die "no s3rver at $NRS_S3RVER: run contrib/install-deps.sh (npm ci in tests/s3), or set NRS_S3RVER"
	command -v node >/dev/null 2>&1 || die "node is not in PATH"
	mkdir -p "$dir" || die "cannot make $dir"
	dir=$(cd "$dir" && pwd)
	[ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
	mkdir "$dir/data" || die "cannot make $dir/data"

	if [ "${NRS_S3RVER_TLS:-0}" = 1 ]; then
		command -v openssl >/dev/null 2>&1 || die "openssl is not in PATH"
		mkdir "$dir/tls" || die "cannot make $dir/tls"
		if ! openssl req -x509 -newkey rsa:2048 -nodes -days 2 \
			-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
			-keyout "$dir/tls/key.pem" -out "$dir/tls/cert.pem" \
			>"$dir/tls/openssl.log" 2>&1; then
			die "openssl could not make a certificate: $(cat "$dir/tls/openssl.log")"
		fi
	fi
	launch "$dir" 0
}

restart() {
	dir=$1

	if [ ! -d "$dir/data" ] || [ ! -f "$dir/env" ]; then
		die "$dir holds no server that start made"
	fi
	dir=$(cd "$dir" && pwd)
	[ ! -f "$dir/pid" ] || die "the server in $dir is still running (stop it first)"
	port=$(sed -n "s|^NRS_S3_URL='https*://127\.0\.0\.1:\([0-9][0-9]*\)/.*|\1|p" "$dir/env")
	[ -n "$port" ] || die "no port in $dir/env"
	mv -f "$dir/log" "$dir/log.1" 2>/dev/null
	launch "$dir" "$port"
}

case "${1:-}" in
start)	[ $# -eq 2 ] || die "usage: s3rver.sh start DIR"; start "$2" ;;
stop)	[ $# -eq 2 ] || die "usage: s3rver.sh stop DIR"; stop "$2" ;;
restart) [ $# -eq 2 ] || die "usage: s3rver.sh restart DIR"; restart "$2" ;;
*)	die "usage: s3rver.sh start|stop|restart DIR" ;;
esac
