#!/bin/sh
test_description='lifecycle on S3 on moto_server (V4 signatures checked): retention trims at object boundaries; GC deletes unneeded objects after the grace period; unlink waits for the last handle; a crash in GC converges'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/moto.sh"

# The lifecycle.sh suite against a bucket of a moto_server of this
# script's own, seen through boto3 (the hooks: moto.sh).
nrs_moto_start

. "$nrs_lib/lifecycle.sh"
test_done
