#!/bin/sh
test_description='the object WAL on S3 on moto_server, which checks V4 signatures: profile, ack boundary, remount, kill -9, crash points, reclaim'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/moto.sh"

nrs_moto_start
. "$nrs_lib/objwal.sh"
test_done
