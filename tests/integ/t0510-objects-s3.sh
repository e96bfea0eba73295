#!/bin/sh
test_description='materialization to S3 (a real s3rver): publish, read back, reclaim, corruption, crashes'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/s3.sh"

# The objects.sh suite, against a bucket of an s3rver of this script's own
# (the provider hooks: s3.sh).
nrs_s3_start

. "$nrs_lib/objects.sh"
test_done
