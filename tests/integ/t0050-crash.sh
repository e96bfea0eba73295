#!/bin/sh
test_description='kill -9 under load, torn WAL tails: every acknowledged record survives'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

cycles=${NRS_CRASH_CYCLES:-5}
seed=$(od -An -N4 -tu4 /dev/urandom | tr -d " ")
echo "# seed $seed, $cycles kill -9 cycles (NRS_CRASH_CYCLES)"

streams="$MNT/k/s0 $MNT/k/s1 $MNT/k/s2"
acks=			# "-a FILE" for every ack log so far

# A random number in [lo, hi] from /dev/urandom.
random_between () {
	echo $(($1 + $(od -An -N2 -tu2 /dev/urandom | tr -d " ") % ($2 - $1 + 1)))
}

# Every acknowledged record present, whole, once and in order; at most the
# one in-flight write of each writer not acknowledged (I1, I3); st_size ==
# head (I4); version == records (each record was one append).
verify_all () {
	nrs_verify_records -c -u 1 $acks $streams
}

test_expect_success 'mount, create the streams' '
	nrs_mount &&
	mkdir "$MNT/k" &&
	for s in $streams; do : >>"$s" || return 1; done
'

cycle=1
while [ $cycle -le "$cycles" ]; do
	test_expect_success "kill -9 under load, cycle $cycle of $cycles" '
		arc= &&
		ack=$TRASH/ack.$cycle &&
		acks="$acks -a $ack" &&
		nrs_bg nrs-appender -t 8 -d 30 -s 33-16416 -E 25 -w $((cycle * 100)) \
			-S $((seed + cycle)) -a "$ack" $streams >"$TRASH/appender.$cycle" 2>&1 &&
		app=$NRS_LAST_BG &&
		ms=$(random_between 200 1000) &&
		echo "# kill -9 after $ms ms" &&
		sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))" &&
		nrs_kill9 &&
		{ nrs_wait $app 30; arc=$?; } &&
		nrs_mount &&
		{ nrs_log_since_mount | grep -i -E "recover|cut|torn|publish" || true; } &&
		cat "$TRASH/appender.$cycle" &&
		echo "appender exit $arc, $(wc -l <"$ack") records acknowledged this cycle" &&
		# 3: writes failed once the daemon was gone (1 would be a short write)
		test "$arc" = 3 &&
		test "$(wc -l <"$ack")" -gt 0 &&
		verify_all
	'
	cycle=$((cycle + 1))
done

test_expect_success 'appends go on after the crashes, and verify after a clean remount' '
	acks="$acks -a $TRASH/ack.after" &&
	nrs-appender -t 4 -n 50 -s 33-4096 -w 9000 -S "$seed" \
		-a "$TRASH/ack.after" $streams &&
	verify_all &&
	nrs_remount &&
	verify_all
'

# The newest WAL segment, and the newest one holding a record.  Segment
# files are DATA/wal/<16 hex digits>.seg with a 64-byte header, then
# records (src/wal/wal_local.c).
last_segment () {
	for f in "$DATA"/wal/*.seg; do :; done
	echo "${f##*/}"
}

last_segment_with_records () {
	last=
	for f in "$DATA"/wal/*.seg; do
		[ "$(stat -c %s "$f")" -gt 64 ] && last=${f##*/}
	done
	[ -n "$last" ] && echo "$last"
}

# tear VARIANT: after a clean unmount, damage the tail of the last segment.
tear () {
	seg=$DATA/wal/$(last_segment) &&
	src=$DATA/wal/$(last_segment_with_records) &&
	size=$(stat -c %s "$src") &&
	echo "# $1: $seg ($(stat -c %s "$seg") bytes; records from $src, $size bytes)" &&
	tail -c +65 "$src" >"$TRASH/records" &&
	case $1 in
	garbage)	head -c 3000 /dev/urandom >>"$seg" ;;
	zeros)		head -c 4096 /dev/zero >>"$seg" ;;
	# what a crash in the middle of the last write leaves: whole records
	# cut short (the segment's own records, minus their last bytes)
	cut-record)	head -c $((size - 64 - 7)) "$TRASH/records" >>"$seg" ;;
	cut-header)	head -c 20 "$TRASH/records" >>"$seg" ;;
	replay)		cat "$TRASH/records" >>"$seg" ;;
	esac
}

tv=0
for variant in garbage cut-record cut-header zeros; do
	tv=$((tv + 1))
	test_expect_success "torn WAL tail ($variant): acknowledged data intact, the tail is cut" '
		acks="$acks -a $TRASH/ack.torn-$variant" &&
		nrs-appender -t 1 -n 1 -s 5000 -w $((9100 + tv)) -S "$seed" \
			-a "$TRASH/ack.torn-$variant" "$MNT/k/s$(random_between 0 2)" &&
		nrs_umount &&
		tear $variant &&
		nrs_mount &&
		nrs_log_since_mount >"$TRASH/recovery.log" &&
		cat "$TRASH/recovery.log" &&
		grep -i -E "torn|cut|truncat" "$TRASH/recovery.log" &&
		verify_all &&
		nrs-appender -t 2 -n 20 -s 33-2000 -w $((9200 + tv * 10)) \
			-a "$TRASH/ack.torn-$variant" $streams &&
		verify_all &&
		nrs_remount &&
		verify_all
	'
done

test_expect_success 'a replayed whole WAL record is not published twice (DESIGN.md 6)' '
	acks="$acks -a $TRASH/ack.replay" &&
	nrs-appender -t 1 -n 3 -s 3000 -w 9300 -S "$seed" -a "$TRASH/ack.replay" "$MNT/k/s0" &&
	for s in $streams; do echo "$(stat -c %s "$s") $(nrs_xattr "$s" user.nereus.version)"; done >"$TRASH/before" &&
	nrs_umount &&
	tear replay &&
	nrs_mount &&
	nrs_log_since_mount &&
	for s in $streams; do echo "$(stat -c %s "$s") $(nrs_xattr "$s" user.nereus.version)"; done >"$TRASH/after" &&
	test_cmp "$TRASH/before" "$TRASH/after" &&
	verify_all &&
	nrs-appender -t 1 -n 3 -s 3000 -w 9301 -a "$TRASH/ack.replay" "$MNT/k/s0" &&
	nrs_remount &&
	verify_all
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
