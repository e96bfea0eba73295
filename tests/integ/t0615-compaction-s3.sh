#!/bin/sh
test_description='compaction on S3 (a real s3rver): small objects merge into larger ones under concurrent appends and reads, no byte read changes, large objects are left alone, GC removes the replaced ones'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/s3.sh"

# The compaction.sh suite against a bucket of an s3rver of this script's
# own (the hooks: s3.sh).
nrs_s3_start

. "$nrs_lib/compaction.sh"
test_done
