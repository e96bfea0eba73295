#!/bin/sh
test_description='a lost host recovered from the bucket alone (a real s3rver): -o recover'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/s3.sh"

nrs_s3_start
HL_OPTS=$OBJ_OPTS
. "$nrs_lib/hostloss.sh"
test_done
