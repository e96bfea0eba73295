#!/bin/sh
test_description='a torn tail that hits the newest acknowledged record: only its range reads EIO'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# Issue 12, item 1 (recovery_index.c RC5b).  4 writers append to one stream and
# stop; the daemon is killed; 7 bytes are cut off the end of the last WAL
# record, which the head names.  The commit chain is broken at its newest
# link, and before RC5b the whole stream (objects included) read EIO, and so
# did the appends acknowledged after the remount.  Now: the log and
# nereusfs-fsck name the same range, exactly the lost record's; the index
# serves everything below it (and, after more appends, shows that one gap);
# every byte below it reads and verifies; appends after the remount read
# and verify.  (A read that reaches into the gap fails whole, so a page
# cache read of the page holding its first byte fails too: the reads here
# go through a direct-I/O handle.)
#
# Nothing is materialized before the kill: the default materialize_bytes
# (4 MiB) is reached at about 80% of the appends, and the object the
# materializer then builds covers every record committed when it reads
# them -- often all of them.  Killed after that object is published, the
# daemon leaves the newest record below `materialized`: recovery cuts it
# as a torn tail and rightly loses nothing (its bytes are in the object),
# so there is no broken chain to find.  A slow or loaded machine kills
# late enough for that.  Nor is anything materialized after the remount,
# so that the finding stays F9 (objects above the gap would make it F20's
# "in no object").
nomat=materialize_bytes=1000000000000,materialize_age_ms=100000000

fsck=${NRS_FSCK:-$nrs_top/nereusfs-fsck}
[ -x "$fsck" ] || nrs_error "no $fsck (run make)"
seed=${NRS_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d " ")}
echo "# seed $seed (NRS_SEED)"

# cut_last_record SEG N: cut N bytes off the end of the segment's records
# (the zeros written ahead of them, wal_local_append.c WA7, go first).
cut_last_record () {
	python3 - "$1" "$2" <<-\EOF
	import os, sys
	path, n = sys.argv[1], int(sys.argv[2])
	data = open(path, "rb").read()
	end = len(data.rstrip(b"\0"))
	os.truncate(path, end - n)
	print("# %s: %d bytes of records, cut to %d" % (path, end, end - n))
	EOF
}

# read_range FILE OFF LEN OUT: copy [OFF, OFF+LEN) of FILE to OUT through a
# handle opened O_RDWR (direct I/O: each read asks for exactly its range,
# never a page that reaches into the lost one).
read_range () {
	python3 - "$@" <<-\EOF
	import os, sys
	path, off, n, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
	fd = os.open(path, os.O_RDWR)
	with open(out, "wb") as o:
	    while n > 0:
	        b = os.pread(fd, min(n, 1 << 16), off)
	        if not b:
	            sys.exit("short read at %d" % off)
	        o.write(b); off += len(b); n -= len(b)
	EOF
}

test_expect_success '4 writers, then kill -9 and 7 bytes cut off the newest record' '
	nrs_mount -o $nomat &&
	mkdir "$MNT/k" && : >>"$MNT/k/s" &&
	nrs-appender -t 4 -n 150 -s 33-16384 -S "$seed" -a "$TRASH/ack" \
		"$MNT/k/s" &&
	head=$(nrs_xattr "$MNT/k/s" user.nereus.head) &&
	test "$(nrs_xattr "$MNT/k/s" user.nereus.materialized)" = 0 &&
	nrs_kill9 &&
	seg=$(ls "$DATA/wal"/*.seg | tail -n 1) &&
	cut_last_record "$seg" 7
'

test_expect_success 'remount: only the lost record range is missing, and the log says so' '
	nrs_mount -o $nomat &&
	nrs_log_since_mount >"$TRASH/log.1" &&
	grep "commit chain broken" "$TRASH/log.1" &&
	range=$(sed -n "s/.*stream 1: commit chain broken at LSN [0-9]*; committed range \[\([0-9]*\), \([0-9]*\)) has no copy.*/\1 \2/p" "$TRASH/log.1") &&
	set -- $range &&
	miss_start=$1 miss_end=$2 &&
	echo "# missing [$miss_start, $miss_end) of [0, $head)" &&
	test "$miss_end" = "$head" &&
	test "$miss_start" -gt 0 &&
	test $((miss_end - miss_start)) -le 16384 &&
	test "$(nrs_xattr "$MNT/k/s" user.nereus.head)" = "$head" &&
	nrs_xattr "$MNT/k/s" user.nereus.index >"$TRASH/index" &&
	cat "$TRASH/index" &&
	! grep missing "$TRASH/index" &&
	test "$(tail -n 1 "$TRASH/index" | cut -d" " -f2)" = "$miss_start"
'

test_expect_success 'every byte below the lost record reads and verifies' '
	mkdir "$TRASH/below" &&
	read_range "$MNT/k/s" 0 "$miss_start" "$TRASH/below/s" &&
	test "$(stat -c %s "$TRASH/below/s")" = "$miss_start" &&
	nrs-verify -c "$TRASH/below/s"
'

test_expect_success 'the lost range reads EIO' '
	expect_errno EIO pread "$MNT/k/s" "$miss_start" 1 &&
	expect_errno EIO pread "$MNT/k/s" $((miss_end - 1)) 1
'

test_expect_success 'appends after the remount read and verify' '
	nrs-appender -t 4 -w 10 -n 100 -s 33-16384 -S "$((seed + 1))" \
		-a "$TRASH/ack.2" "$MNT/k/s" &&
	mkdir "$TRASH/after" &&
	new_head=$(nrs_xattr "$MNT/k/s" user.nereus.head) &&
	read_range "$MNT/k/s" "$head" $((new_head - head)) "$TRASH/after/s" &&
	nrs-verify -c -a "$TRASH/ack.2" "$TRASH/after/s" &&
	nrs_xattr "$MNT/k/s" user.nereus.index >"$TRASH/index.2" &&
	cat "$TRASH/index.2" &&
	test "$(grep -c missing "$TRASH/index.2")" = 1 &&
	grep "^$miss_start $miss_end .*missing" "$TRASH/index.2" &&
	nrs_umount
'

test_expect_success 'nereusfs-fsck names exactly that range' '
	{ "$fsck" "$DATA" >"$TRASH/fsck.out" 2>&1; rc=$?; } ;
	cat "$TRASH/fsck.out" &&
	test "$rc" = 1 &&
	grep "F9 stream 1 (/k/s): commit chain broken: LSN [0-9]* is not in the WAL: committed bytes \[$miss_start, $miss_end) cannot be reached" "$TRASH/fsck.out" &&
	test "$(grep -c "^error:" "$TRASH/fsck.out")" = 1
'

test_expect_success 'a second remount serves the same' '
	nrs_mount -o $nomat &&
	read_range "$MNT/k/s" 0 "$miss_start" "$TRASH/below.2" &&
	cmp "$TRASH/below.2" "$TRASH/below/s" &&
	read_range "$MNT/k/s" "$head" $((new_head - head)) "$TRASH/after.2" &&
	cmp "$TRASH/after.2" "$TRASH/after/s" &&
	expect_errno EIO pread "$MNT/k/s" "$miss_start" 1 &&
	nrs_umount
'

# mat_worker.c MZ9: with materialization on, the stream is due but its
# next byte has no copy.  The materializer must neither spin on it nor
# hold up other streams; a trim past the lost range lets it go on.
fast=materialize_bytes=65536,materialize_age_ms=200,object_size=262144
cpu_ticks () {
	awk '{ print $14 + $15 }' "/proc/$NRS_PID/stat"
}

test_expect_success 'materialization stops at the lost range, without spinning, and other streams go on' '
	nrs_mount -o $fast &&
	sleep 1 &&
	t0=$(cpu_ticks) && sleep 2 && t1=$(cpu_ticks) &&
	echo "# $((t1 - t0)) ticks of CPU in 2 s" &&
	test $((t1 - t0)) -lt $(( $(getconf CLK_TCK) )) &&
	head -c 300000 /dev/urandom >"$TRASH/other" &&
	cp "$TRASH/other" "$MNT/k/other" &&
	nrs_wait_for 20 nrs_materialized "$MNT/k/other" &&
	cmp "$MNT/k/other" "$TRASH/other" &&
	grep -q "stream 1: committed bytes from $miss_start have no copy" "$LOG" &&
	test "$(nrs_xattr "$MNT/k/s" user.nereus.materialized)" -le "$miss_start"
'

test_expect_success 'a trim past the lost range: the rest of the stream materializes' '
	setfattr -n user.nereus.trim -v "$miss_end" "$MNT/k/s" &&
	nrs_wait_for 20 nrs_materialized "$MNT/k/s" &&
	read_range "$MNT/k/s" "$head" $((new_head - head)) "$TRASH/after.3" &&
	cmp "$TRASH/after.3" "$TRASH/after/s" &&
	nrs_umount
'

test_done
