#!/bin/sh
test_description='stream ids, heads and LSNs from a damaged disk: the daemon mounts, the damaged stream is offline or the record an orphan, the rest works, fsck reports each (issue 12 item 3)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# The damage is written offline with the sqlite3 shell, every changed row
# resealed (lib.sh reseal: its checksum holds, so the row reaches the value
# checks of recovery.c RD1 instead of failing CK3), and with nrs-walrec, which
# appends a record formatted by the project's own encoder (all its CRCs
# verify) to the last WAL segment.  Every wait is bounded: a daemon that
# spins or hangs fails a step, it does not stall the suite.

command -v sqlite3 >/dev/null 2>&1 ||
	nrs_error "missing tool sqlite3 (contrib/ has the dependency installer)"

K=$MNT/k
big=4611686018427387904		# 2^62: a possible id, far above any count
lsn_bad=18446744073709551614	# UINT64_MAX - 1: its +1 would wrap (RC6)
lsn_max=9223372036854775807	# NRS_WALREC_LSN_MAX: the last one issued

q () {
	sqlite3 "$DATA/meta.db" "$@"
}

# col STREAM_ID COLUMN: one column of a stream's row
col () {
	q "SELECT $2 FROM streams WHERE id = $1"
}

last_seg () {
	ls "$DATA"/wal/*.seg | tail -n 1
}

# cpu_ticks: user + system clock ticks the daemon used so far
cpu_ticks () {
	awk '{ print $14 + $15 }' "/proc/$NRS_PID/stat"
}

test_expect_success 'streams a..e, written, then unmounted' '
	nrs_mount &&
	mkdir "$K" &&
	for s in a b e; do
		printf "%s-one|" $s >>"$K/$s" &&
		printf "%s-two|" $s >>"$K/$s" || return 1
	done &&
	: >"$K/c" && : >"$K/d" &&
	cat "$K/a" >"$TRASH/a.want" &&
	for s in a b c d e; do
		eval "id_$s=\$(nrs_xattr \"\$K/\$s\" user.nereus.id)" || return 1
	done &&
	nrs_umount
'

test_expect_success 'damage: huge id, negative id, head past off_t, start past head, huge sequence, an inverted object row, a record at LSN 2^64 - 2' '
	q "UPDATE streams SET id = $big WHERE id = $id_c;
	   UPDATE inodes SET stream_id = $big WHERE stream_id = $id_c;
	   UPDATE streams SET id = -5 WHERE id = $id_d;
	   UPDATE inodes SET stream_id = -5 WHERE stream_id = $id_d;
	   UPDATE streams SET head = -16 WHERE id = $id_b;
	   UPDATE streams SET start = head + 100 WHERE id = $id_e;
	   UPDATE sqlite_sequence SET seq = $big + 5 WHERE name = '"'streams'"';
	   INSERT INTO objects(stream_id, start, end, length, sha256, state,
			       ctime_ns, mtime_ns)
		VALUES($id_a, 10, 5, 0, zeroblob(32), 2, 0, 0);" &&
	gen_bad=$(q "SELECT max(gen) FROM objects") &&
	reseal "$DATA/meta.db" &&
	test "$(q "SELECT seq FROM sqlite_sequence WHERE name = '"'streams'"'")" = $((big + 5)) &&
	head_a=$(col $id_a head) && lsn_a=$(col $id_a last_lsn) &&
	epoch_a=$(col $id_a epoch) &&
	nrs-walrec "$(last_seg)" $lsn_bad $id_a $head_a $lsn_a $epoch_a orphan-bytes
'

# Before any mount: once the daemon materializes stream a, the segment
# holding the orphan may be reclaimed, and the record with it.
test_expect_success 'fsck reports each damage: F28, F7, F29, F20; nothing pending' '
	fsck_expect 1 "$DATA" -- \
		"F28 stream $id_b (/k/b): its head is out of range" \
		"F28 stream 18446744073709551611 (/k/d): its id is out of range" \
		"F7 stream $id_e (/k/e): start" \
		"record LSN $lsn_bad of stream $id_a, bytes [$head_a, +12): its LSN is above the largest possible" \
		"F20 " "an impossible row (gen $gen_bad" &&
	grep "F29 wal/" "$TRASH/fsck.out" &&
	! grep "F13" "$TRASH/fsck.out" &&
	! grep "F[0-9]* stream $big " "$TRASH/fsck.out"
'

test_expect_success 'remount: the daemon comes up, within the mount timeout' '
	nrs_mount &&
	kill -0 "$NRS_PID"
'

test_expect_success 'the record with the impossible LSN is an orphan, logged' '
	timeout 20 cmp "$K/a" "$TRASH/a.want" &&
	test "$(stat -c %s "$K/a")" = "$head_a" &&
	grep "LSN $lsn_bad, bytes \[$head_a, +12)): its LSN is above the largest possible: damage, ignored as an orphan" "$LOG"
'

test_expect_success 'the inverted object row is not indexed (not "Invalid argument" for the mount), logged' '
	grep "stream $id_a: object generation $gen_bad \[10, 5) length 0 is impossible" "$LOG" &&
	! grep "recovery failed" "$LOG"
'

test_expect_success 'stream a appends and reads on (no wrapped LSN)' '
	for i in 1 2 3; do
		timeout 20 sh -c "printf \"a-more$i|\" >>\"$K/a\"" || return 1
		printf "a-more$i|" >>"$TRASH/a.want"
	done &&
	timeout 20 cmp "$K/a" "$TRASH/a.want" &&
	nrs_check_head "$K/a"
'

test_expect_success 'the stream with id 2^62 works' '
	test "$(nrs_xattr "$K/c" user.nereus.id)" = $big &&
	timeout 20 sh -c "printf c-data >>\"$K/c\"" &&
	test "$(timeout 20 cat "$K/c")" = c-data
'

test_expect_success 'a stream created after the huge sequence gets id 2^62 + 6 and works' '
	timeout 20 sh -c "printf f-data >>\"$K/f\"" &&
	test "$(nrs_xattr "$K/f" user.nereus.id)" = $((big + 6)) &&
	test "$(timeout 20 cat "$K/f")" = f-data
'

test_expect_success 'the impossible rows are offline (EIO), each logged with what is wrong' '
	for s in b d e; do
		expect_errno EIO pread "$K/$s" 0 10 || return 1
	done &&
	test_must_fail timeout 20 cat "$K/b" 2>"$TRASH/err" &&
	grep "Input/output error" "$TRASH/err" &&
	grep "stream $id_b is offline: its metadata row in .* is damaged (its head is out of range)" "$LOG" &&
	grep "stream 18446744073709551611 is offline: .* is damaged (its id is out of range)" "$LOG" &&
	grep "stream $id_e is offline: .* is damaged (its start is above its head)" "$LOG" &&
	ls "$K" >"$TRASH/ls" && grep -x b "$TRASH/ls" && grep -x d "$TRASH/ls"
'

test_expect_success 'the idle daemon does not spin' '
	t0=$(cpu_ticks) && sleep 2 && t1=$(cpu_ticks) &&
	echo "# $((t1 - t0)) ticks in 2 s" &&
	test $((t1 - t0)) -lt $(( $(getconf CLK_TCK) ))
'

test_expect_success 'remount: the same again, the new bytes kept' '
	nrs_remount &&
	timeout 20 cmp "$K/a" "$TRASH/a.want" &&
	test "$(timeout 20 cat "$K/c")" = c-data &&
	test "$(timeout 20 cat "$K/f")" = f-data &&
	expect_errno EIO pread "$K/b" 0 10 &&
	nrs_umount
'

test_expect_success 'fsck after the mounts: the same rows, and the new streams clean' '
	fsck_expect 1 "$DATA" -- \
		"F28 stream $id_b (/k/b): its head is out of range" \
		"F28 stream 18446744073709551611 (/k/d): its id is out of range" \
		"F7 stream $id_e (/k/e): start" \
		"F20 " "an impossible row (gen $gen_bad" &&
	! grep "F13" "$TRASH/fsck.out" &&
	! grep "F[0-9]* stream $big " "$TRASH/fsck.out" &&
	! grep "F[0-9]* stream $((big + 6)) " "$TRASH/fsck.out"
'

test_expect_success 'a sequence below an id it issued, or at the largest rowid: F30' '
	D=$TRASH/seq && cp -a "$DATA" "$D" &&
	sqlite3 "$D/meta.db" "UPDATE sqlite_sequence SET seq = 3 WHERE name = '"'streams'"'" &&
	fsck_expect 1 "$D" -- \
		"F30 sqlite_sequence streams: at 3, below id $((big + 6)) that a streams row holds" &&
	sqlite3 "$D/meta.db" "UPDATE sqlite_sequence SET seq = $lsn_max WHERE name = '"'streams'"'" &&
	fsck_expect 1 "$D" -- \
		"F30 sqlite_sequence streams: at $lsn_max, the largest rowid" &&
	rm -rf "$D"
'

test_expect_success 'no stream id left: creating fails ENOSPC, the rest works; an offline stream can be removed' '
	q "UPDATE sqlite_sequence SET seq = $lsn_max WHERE name = '"'streams'"'" &&
	nrs_mount &&
	expect_errno ENOSPC append "$K/new" x &&
	test ! -e "$K/new" &&
	rm "$K/d" && test ! -e "$K/d" &&
	timeout 20 sh -c "printf c-more >>\"$K/c\"" &&
	test "$(timeout 20 cat "$K/c")" = c-datac-more &&
	nrs_umount &&
	test "$(q "SELECT count(*) FROM streams WHERE id = -5")" = 0
'

# ---- the last LSN ---------------------------------------------------------
#
# A record at exactly NRS_WALREC_LSN_MAX is possible and continues a's
# head: recovery publishes it, and the next LSN would be past the bound.
# Appends are then refused (EOVERFLOW, logged), never issued a wrapped
# LSN; reads go on.

test_expect_success 'a record at the last LSN: published, then appends fail EOVERFLOW, reads work' '
	head_a=$(col $id_a head) && lsn_a=$(col $id_a last_lsn) &&
	epoch_a=$(col $id_a epoch) &&
	nrs-walrec "$(last_seg)" $lsn_max $id_a $head_a $lsn_a $epoch_a last-bytes &&
	printf last-bytes >>"$TRASH/a.want" &&
	nrs_mount &&
	timeout 20 cmp "$K/a" "$TRASH/a.want" &&
	expect_errno EOVERFLOW append "$K/a" more &&
	expect_errno EOVERFLOW append "$K/c" more &&
	grep "appends fail EOVERFLOW" "$LOG" &&
	timeout 20 cmp "$K/a" "$TRASH/a.want" &&
	test "$(timeout 20 cat "$K/c")" = c-datac-more &&
	nrs_umount
'

test_done
