#!/bin/sh
test_description='one owner at a time on s3rver (no conditional writes: a lease): refusal, takeover, fencing'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/s3.sh"
nrs_s3_start
. "$nrs_lib/objlib.sh"
OWNER_MODE=lease
. "$nrs_lib/owner.sh"
test_done
