#!/bin/sh
test_description='compaction on the embedded store: small objects merge into larger ones under concurrent appends and reads, no byte read changes, large objects are left alone, GC removes the replaced ones'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"

# The compaction.sh suite on the embedded store (the hooks: dirstore.sh).
. "$nrs_lib/compaction.sh"
test_done
