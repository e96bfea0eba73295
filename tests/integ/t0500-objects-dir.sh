#!/bin/sh
test_description='materialization to the embedded object directory: publish, read back, reclaim, corruption, crashes'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"

. "$nrs_lib/objects.sh"
test_done
