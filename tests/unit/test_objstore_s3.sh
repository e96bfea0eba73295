#!/bin/sh
# test_objstore_s3.sh - the S3 half of test_objstore, against real S3
# servers: s3rver over http, and over https with a self-signed certificate
# (which the provider must refuse); then moto_server (tests/fixtures/s3/moto.sh),
# which checks V4 signatures, in path and virtual-hosted style.  Both are started with
# tests/fixtures/s3/s3rver.sh and stopped by the EXIT trap, whatever happens; its
# guard stops them if this script is killed outright.  The test binary runs
# under a time limit (NRS_TEST_TIMEOUT, default 300 s).
#
# Never skips: a server that cannot start is an error (99).  make check sets
# NRS_UNIT (the test binaries), NRS_S3RVER_SH and NRS_S3RVER.

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
NRS_UNIT=${NRS_UNIT:-$here}
NRS_S3RVER_SH=${NRS_S3RVER_SH:-$top/tests/fixtures/s3/s3rver.sh}
NRS_MOTO_SH=${NRS_MOTO_SH:-$top/tests/fixtures/s3/moto.sh}
limit=${NRS_TEST_TIMEOUT:-300}

s3tmp=$(mktemp -d "${TMPDIR:-/tmp}/nrs-s3.XXXXXX") || exit 99
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
	sh "$NRS_S3RVER_SH" stop "$s3tmp/plain"
	sh "$NRS_S3RVER_SH" stop "$s3tmp/tls"
	sh "$NRS_MOTO_SH" stop "$s3tmp/moto"
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

# run_unit NAME LOG: run test_objstore and test_objstore_cond under the time limit; on a failure
# show the server's LOG and exit with its status.
run_unit() {
	timeout -k 10 "$limit" "$NRS_UNIT/test_objstore" &&
		timeout -k 10 "$limit" "$NRS_UNIT/test_objstore_cond"
	rc=$?
	[ $rc -eq 0 ] && return 0
	[ $rc -eq 124 ] && echo "FATAL: test_objstore ran over $limit s"
	echo "--- $1's log (last lines):"
	tail -n 40 "$2" | sed 's/^/| /'
	[ $rc -eq 124 ] && rc=1
	exit $rc
}

export NRS_S3_URL NRS_S3_ACCESS_KEY NRS_S3_SECRET_KEY NRS_S3_TLS_URL NRS_S3_TLS_CA
run_unit s3rver "$s3tmp/plain/log"

# The same contract against moto_server, which checks V4 signatures
# (tests/fixtures/s3/moto.sh), path style and then virtual-hosted
# (BUCKET.localhost).
if ! moto=$(sh "$NRS_MOTO_SH" start "$s3tmp/moto"); then
	echo "ERROR: could not start moto_server (see above)"
	exit 99
fi
eval "$moto"
echo "# moto_server at $NRS_S3_URL (pid $NRS_S3_PID)"
unset NRS_S3_TLS_URL NRS_S3_TLS_CA
export NRS_S3_URL NRS_S3_ACCESS_KEY NRS_S3_SECRET_KEY NRS_S3_CHECKS=v4
for style in path virtual; do
	url=$NRS_S3_URL
	[ $style = virtual ] && url=$(echo "$NRS_S3_URL" | sed 's|//127\.0\.0\.1:|//localhost:|')
	echo "# moto, $style style: $url"
	NRS_S3_URL=$url NRS_S3_STYLE=$style run_unit moto_server "$s3tmp/moto/log"
done
exit 0
