#!/bin/sh
test_description='a lost host recovered from the embedded store alone (kept in a directory apart, -o objects=): -o recover'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"

# The "bucket" outlives the data directory.
mkdir -m 700 "$TRASH/bucket"
HL_OPTS=",objects=$TRASH/bucket"
. "$nrs_lib/hostloss.sh"
test_done
