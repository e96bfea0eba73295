#!/bin/sh
# t0400 over write once (issue 16): every phase mounts with -o
# write_once=auto in 8 MiB WAL segments (t0400's writers append a 1 MiB
# record every 40), materializing soon, so that segments are adopted in
# place -- linked into the store (nrs-powerfail.c records the link, and
# the replay keeps both names as one inode: nrs-powerreplay.c PR6) -- and
# phases 1-3 end by a crash at the materializer's points (obj.before_put:
# before the link; obj.after_put; obj.before_publish: linked, not yet
# published), then every cut is recovered from adopted rows and verified.
NRS_MOUNT_OPTS="-o write_once=auto -o wal_segment_size=8388608 -o materialize_age_ms=200"
NRS_TEST_NAME=t0401-powerloss-write-once
NRS_POWER_CRASH_FIRST=${NRS_POWER_CRASH_FIRST:-11}
NRS_TEST_TIMEOUT=${NRS_TEST_TIMEOUT:-600}
export NRS_MOUNT_OPTS NRS_TEST_NAME NRS_POWER_CRASH_FIRST NRS_TEST_TIMEOUT
exec "${SHELL:-/bin/sh}" "$(dirname "$0")/t0400-powerloss.sh" "$@"
