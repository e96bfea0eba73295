#!/bin/sh
test_description='GC of the object WAL on the embedded store (kept in a directory apart): a crash at each step of a reclaim deletes nothing needed; recover after it'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"

# The "bucket" outlives the data directory.
mkdir -m 700 "$TRASH/bucket"
GC_OPTS=",objects=$TRASH/bucket"
GC_FSCK="--objects=$TRASH/bucket"
. "$nrs_lib/owalgc.sh"
test_done
