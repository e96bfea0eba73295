#!/bin/sh
# t0300 over write once (issue 16): every mount of it adopts large records
# in place (-o write_once=auto; t0300's writers append a 1 MiB record every
# 25), in 8 MiB WAL segments, so that segments fill and are adopted while
# the writers run, materialized soon after their commit: each crash lands
# among adoptions, and each recovery restores adopted generations from
# their rows (recovery_index.c RD5) before nrs-verify reads every acknowledged
# record back through them.
NRS_MOUNT_OPTS="-o write_once=auto -o wal_segment_size=8388608 -o materialize_age_ms=200"
NRS_TEST_NAME=t0301-crashpoints-write-once
export NRS_MOUNT_OPTS NRS_TEST_NAME
exec "${SHELL:-/bin/sh}" "$(dirname "$0")/t0300-crashpoints.sh" "$@"
