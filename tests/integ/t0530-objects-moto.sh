#!/bin/sh
test_description='materialization to S3 on moto_server, which checks V4 signatures: publish, read back, reclaim, corruption, crashes'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/moto.sh"

# The objects.sh suite, against a bucket of a moto_server of this script's
# own with authentication enforced (the provider hooks: moto.sh): every
# request is signed V4 by libcurl and checked by moto.
nrs_moto_start

. "$nrs_lib/objects.sh"
test_done
