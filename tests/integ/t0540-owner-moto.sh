#!/bin/sh
test_description='one owner at a time on moto (conditional writes: compare-and-set): refusal, takeover, fencing'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/moto.sh"
nrs_moto_start
. "$nrs_lib/objlib.sh"
OWNER_MODE=cas
. "$nrs_lib/owner.sh"
test_done
