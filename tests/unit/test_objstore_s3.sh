#!/bin/sh
# test_objstore_s3.sh - the S3 half of test_objstore, against real S3
# servers: s3rver over http, and over https with a self-signed certificate
# (which the provider must refuse).  Both are started with
# tests/s3/s3rver.sh and stopped by the EXIT trap, whatever happens; its
# guard stops them if this script is killed outright.  The test binary runs
# under a time limit (NRS_TEST_TIMEOUT, default 300 s).
#
# Never skips: a server that cannot start is an error (99).  make check sets
# NRS_UNIT (the test binaries), NRS_S3RVER_SH and NRS_S3RVER.

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
NRS_UNIT=${NRS_UNIT:-$here}
NRS_S3RVER_SH=${NRS_S3RVER_SH:-$top/tests/s3/s3rver.sh}
limit=${NRS_TEST_TIMEOUT:-300}

s3tmp=$(mktemp -d "${TMPDIR:-/tmp}/nrs-s3.XXXXXX") || exit 99
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	sh "$NRS_S3RVER_SH" stop "$s3tmp/plain"
	sh "$NRS_S3RVER_SH" stop "$s3tmp/tls"
	rm -rf "$s3tmp"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

export NRS_S3RVER_OWNER=$$
if ! plain=$(sh "$NRS_S3RVER_SH" start "$s3tmp/plain"); then
	echo "ERROR: could not start s3rver (see above)"
	exit 99
fi
eval "$plain"
if ! tls=$(NRS_S3RVER_TLS=1 sh "$NRS_S3RVER_SH" start "$s3tmp/tls"); then
	echo "ERROR: could not start s3rver over TLS (see above)"
	exit 99
fi
NRS_S3_TLS_URL=$(echo "$tls" | sed -n "s/^NRS_S3_URL='\(.*\)'$/\1/p")
NRS_S3_TLS_CA=$(echo "$tls" | sed -n "s/^NRS_S3_CA='\(.*\)'$/\1/p")
echo "# s3rver at $NRS_S3_URL (pid $NRS_S3_PID), over TLS at $NRS_S3_TLS_URL"

export NRS_S3_URL NRS_S3_ACCESS_KEY NRS_S3_SECRET_KEY NRS_S3_TLS_URL NRS_S3_TLS_CA
timeout -k 10 "$limit" "$NRS_UNIT/test_objstore"
rc=$?
if [ $rc -ne 0 ]; then
	[ $rc -eq 124 ] && echo "FATAL: test_objstore ran over $limit s"
	echo "--- s3rver's log (last lines):"
	tail -n 40 "$s3tmp/plain/log" | sed 's/^/| /'
	[ $rc -eq 124 ] && rc=1
fi
exit $rc
