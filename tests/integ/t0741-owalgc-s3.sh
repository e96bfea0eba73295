#!/bin/sh
test_description='GC of the object WAL on S3 (a real s3rver): a crash at each step of a reclaim deletes nothing needed; recover after it'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/s3.sh"

nrs_s3_start
GC_OPTS=$OBJ_OPTS
. "$nrs_lib/owalgc.sh"
test_done
