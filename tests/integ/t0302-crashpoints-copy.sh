#!/bin/sh
# t0300 with -o write_once=off: since write once is the default, t0300's
# 1 MiB records are adopted in place (t0301 does so in small segments);
# this run keeps the copying path of large records (materializer.c,
# mat_object.c: a copy into a per-stream object) under the same crash
# points, as S3 and a store on another file system take it.
NRS_MOUNT_OPTS="-o write_once=off"
NRS_TEST_NAME=t0302-crashpoints-copy
export NRS_MOUNT_OPTS NRS_TEST_NAME
exec "${SHELL:-/bin/sh}" "$(dirname "$0")/t0300-crashpoints.sh" "$@"
