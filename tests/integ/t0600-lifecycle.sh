#!/bin/sh
test_description='lifecycle on the embedded store: retention by bytes and by time trims at object boundaries; GC deletes unneeded objects after the grace period; unlink waits for the last handle; a crash in GC converges'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"

# The lifecycle.sh suite on the embedded store: its objects are the files
# under $DATA/objects (the hooks: dirstore.sh).
. "$nrs_lib/lifecycle.sh"
test_done
