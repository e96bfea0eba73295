#!/bin/sh
test_description='the object WAL on S3 on moto_server, which checks V4 signatures: profile, ack boundary, remount, kill -9, crash points, reclaim'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/moto.sh"

nrs_moto_start
# moto answers a few hundred HEADs and GETs a second at most, so each
# mount's scan takes seconds; under ASan on a loaded machine all five
# crash points ran this script past its 300 s.  The store is not what the
# points test (t0700 and t0710 run all five): here the three of before.
OWAL_CRASH_POINTS="owal.before_put owal.after_put pipeline.before_reply"
. "$nrs_lib/objwal.sh"
test_done
