#!/bin/sh
test_description='lifecycle on S3 (a real s3rver): retention by bytes and by time trims at object boundaries; GC deletes unneeded objects after the grace period; unlink waits for the last handle; a crash in GC converges'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/s3.sh"

# The lifecycle.sh suite against a bucket of an s3rver of this script's
# own: its objects are the files s3rver keeps them in (the hooks: s3.sh).
nrs_s3_start

. "$nrs_lib/lifecycle.sh"
test_done
