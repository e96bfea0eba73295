#!/bin/sh
test_description='write once: large records become generations in place in the embedded store (mat_adopt.c MZ10-MZ12, recovery_index.c RD5, core_obj.c CO2)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# Small segments, so that they rotate (and are adopted) while the writers
# write; no compaction (CP1 would copy the adopted generations: it
# does not leave them alone yet); materialize soon.
WO="-o write_once=auto -o wal_segment_size=8388608 -o compact_size=0 -o materialize_age_ms=200"
N=4			# streams, one writer each
R=12			# 1 MiB records per writer
MIB=1048576
TOTAL=$((N * R * MIB))
STREAMS=
for i in $(seq 0 $((N - 1))); do STREAMS="$STREAMS $MNT/s$i"; done

# objects.FIELD of /.nereus/status, as python prints it (lower-case bools)
status_obj () {
	python3 -c 'import json,sys; print(str(json.load(sys.stdin)["objects"][sys.argv[1]]).lower())' \
		"$1" <"$MNT/.nereus/status"
}

# every stream's index names no WAL record: all of it is adopted
no_wal_left () {
	for s in $STREAMS; do
		nrs_xattr "$s" user.nereus.index | grep -q "wal:" && return 1
	done
	return 0
}

# every stream's index has adopt: entries and nothing else
all_adopted () {
	nrs_all_adopted w/ $STREAMS
}

# bytes the daemon wrote with write(2)-like calls (/proc/PID/io wchar)
wchar () {
	sed -n 's/^wchar: //p' "/proc/$NRS_PID/io"
}

# the WAL holds at most one segment (the current one)
wal_drained () {
	test "$(find "$DATA/wal" -name '*.seg' | wc -l)" -le 1
}

test_expect_success 'write_once takes auto or off, nothing else; auto by default' '
	test_must_fail nrs_mount -o write_once=always &&
	nrs_mount &&
	test "$(status_obj write_once)" = auto &&
	test "$(status_obj adopting)" = true &&
	nrs_remount -o write_once=off &&
	test "$(status_obj adopting)" = false &&
	test "$(status_obj write_once)" = off &&
	nrs_umount
'

test_expect_success 'write_once=auto with objects on another file system: copying' '
	other=$(nrs_other_fs) &&
	nrs_mount -o write_once=auto -o "objects=$other" &&
	test "$(status_obj write_once)" = auto &&
	test "$(status_obj adopting)" = false &&
	nrs_umount
'

test_expect_success 'write_once=auto on the WAL file system: adopting' '
	nrs_mount $WO &&
	test "$(status_obj write_once)" = auto &&
	test "$(status_obj adopting)" = true &&
	grep "records are adopted in place" "$LOG" >/dev/null
'

test_expect_success '1 MiB records of 4 writers are adopted, each byte written once' '
	w0=$(wchar) &&
	nrs-appender -t $N -n $R -s $MIB -a "$TRASH/ack" $STREAMS &&
	nrs_wait_for 60 no_wal_left &&
	all_adopted &&
	test "$(nrs_metric object_adopted_total)" -eq $((N * R)) &&
	test "$(nrs_metric object_adopted_bytes_total)" -eq $TOTAL &&
	test "$(status_obj adopted)" -eq $((N * R)) &&
	test "$(find "$DATA/objects/s" -type f 2>/dev/null | wc -l)" -eq 0 &&
	w1=$(wchar) &&
	echo "daemon wrote $((w1 - w0)) bytes for $TOTAL" &&
	test $((w1 - w0)) -lt $((TOTAL * 5 / 4))
'

test_expect_success 'the WAL lets go of its names; the data dir holds the bytes once' '
	nrs_wait_for 60 wal_drained &&
	test "$(find "$DATA/objects/w" -type f | wc -l)" -ge 1 &&
	kib=$(du -sk "$DATA" | cut -f1) &&
	echo "du: $kib KiB for $((TOTAL / 1024)) KiB" &&
	test "$kib" -lt $((TOTAL / 1024 * 5 / 4)) &&
	test "$kib" -ge $((TOTAL / 1024))
'

test_expect_success 'reads verify every record' '
	nrs_verify_records -c -u 0 -a "$TRASH/ack" $STREAMS &&
	for i in $(seq 0 $((N - 1))); do
		cat "$MNT/s$i" >"$TRASH/s$i.before" || return 1
	done
'

test_expect_success 'kill -9, remount: the index comes back from the rows, every byte the same' '
	nrs_kill9 &&
	nrs_mount $WO &&
	all_adopted &&
	for i in $(seq 0 $((N - 1))); do
		cmp "$TRASH/s$i.before" "$MNT/s$i" || return 1
	done &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack" $STREAMS
'

test_expect_success 'small records are copied beside adopted ones' '
	nrs-appender -t 1 -n 200 -s 4096 -w 100 -a "$TRASH/ack2" "$MNT/small" &&
	nrs_wait_for 60 sh -c "getfattr --absolute-names --only-values -n user.nereus.index $MNT/small | grep -q obj:" &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack2" "$MNT/small"
'

# CO3: a WAL with no segment left (here removed by hand, once everything
# was materialized) numbers its next segment above the adopted ones.
test_expect_success 'a WAL that starts afresh numbers above the adopted segments' '
	nrs_wait_for 60 no_wal_left &&
	nrs_wait_for 60 sh -c "! getfattr --absolute-names --only-values -n user.nereus.index $MNT/small | grep -q wal:" &&
	nrs_umount &&
	rm -f "$DATA"/wal/*.seg &&
	nrs_mount $WO &&
	a0=$(nrs_metric object_adopted_total) &&
	nrs-appender -t 1 -n 4 -s $MIB -w 200 -a "$TRASH/ack3" "$MNT/again" &&
	nrs_wait_for 60 sh -c "! getfattr --absolute-names --only-values -n user.nereus.index $MNT/again | grep -q wal:" &&
	test "$(nrs_metric object_adopted_total)" -eq $((a0 + 4)) &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack3" "$MNT/again"
'

test_expect_success 'write_once=off still reads what was adopted' '
	nrs_remount -o write_once=off &&
	for i in $(seq 0 $((N - 1))); do
		cmp "$TRASH/s$i.before" "$MNT/s$i" || return 1
	done &&
	nrs_umount
'

test_done
