#!/bin/sh
test_description='write once for object-wal streams under power loss: adoption in WAL objects (mat_adopt.c MZ13), their punches and deletes (lifecycle.c G9, G8, G7) lose no acknowledged byte, and no retired slice comes back'
NRS_TEST_TIMEOUT=${NRS_TEST_TIMEOUT:-900}
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

NRS_MOUNT_TIMEOUT=${NRS_MOUNT_TIMEOUT_OWAL:-90}

# The daemon runs under nrs-powerfail.so (t0400 explains the recorder and
# the replay), with the embedded store in $DATA/objects, so that the WAL
# objects, their punches and the SQLite rows are all in the journal.
# Three object-wal streams are written at once, records of 256 KiB-1 MiB
# in WAL objects of up to 4 MiB that linger for more appends, so that
# each WAL object holds slices of several streams: a keeps every byte, t
# is trimmed to its last record and u unlinked, so GC punches their
# slices out of WAL objects a still reads from (G9: once the object WAL's
# floor passed them) and deletes the objects nobody names any more (G7).
# a then appends again, and the run ends by a clean unmount.
#
# Then, for each cut point (NRS_POWER_CUTS random ones, the landmarks
# between the steps and the very end), the replayed directory must hold
# a hole wherever a retired row of an adopted slice says its bytes went
# (G8, before any daemon looks at it), mount, hold every record
# acknowledged before the cut, byte for byte (nrs-verify: a and u whole
# from 0, t from its start, which is 0 or the trim), and pass
# nereusfs-fsck after the unmount.
cuts=${NRS_POWER_CUTS:-10}
seed=${NRS_POWER_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d " ")}
unsynced=${NRS_POWER_UNSYNCED:-0}
echo "# seed $seed (NRS_POWER_SEED), $cuts cut points, unsynced=$unsynced"

WO="write_once=auto,compact_size=0,materialize_age_ms=200,checkpoint_ms=300,gc_grace_ms=500,object_wal_timeout_ms=20000,owner_lease_ms=4000,object_wal_bytes=4194304,object_wal_linger_ms=50"
K=$MNT/k
journal=$TRASH/journal
real_daemon=$NEREUSFS
data0=$DATA
trim=			# the offset t was trimmed to
unlink_at=		# the journal's records when u's unlink began

nrs_powerfail_daemon "$TRASH/nereusfs-pf" "$journal"

journal_records () {
	nrs-powerreplay -c "$journal" 2>/dev/null || echo 0
}

landmarks=
landmark () {
	local k
	k=$(journal_records)
	landmarks="$landmarks $k"
	echo "# landmark: record $k, $1"
}

all_adopted () {
	nrs_all_adopted owal/ "$K/a" "$K/t" "$K/u"
}

# t down to its last record, u gone, nothing draining: every slice of
# theirs (7 + 8 rows) punched, or its WAL object deleted, and its row
# retired.
settled () {
	test "$(nrs_xattr "$K/t" user.nereus.index | wc -l)" -le 1 &&
	[ "$(nrs_metric gc_deleted_objects_total)" -ge 15 ] &&
	[ "$(nrs_metric gc_draining_bytes)" = 0 ]
}

# retired_slices DIR: "seg|off|length" of every retired row of an
# adopted WAL-object slice (objfmt.h NRS_ADOPT_OWAL) in DIR/meta.db.
retired_slices () {
	[ -n "$(sqlite3 "$1/meta.db" "SELECT name FROM sqlite_master
		WHERE type = 'table' AND name = 'objects'")" ] || return 0
	sqlite3 "$1/meta.db" "SELECT seg, off, length FROM objects
		WHERE state = 4 AND seg >= 4611686018427387904"
}

# acks_before STREAM TS: STREAM's acks stamped before TS, stamps stripped,
# into ack.cut.STREAM.
acks_before () {
	awk -v t="$2" '($1 "") < (t "") { print $2, $3, $4, $5 }' \
		"$TRASH/ack.$1" >"$TRASH/ack.cut.$1"
}

all=99999999999999999999

test_expect_success 'recorded: three object-wal streams share WAL objects, adopted' '
	test -z "$(ls -A "$DATA")" &&
	NEREUSFS=$TRASH/nereusfs-pf &&
	nrs_mount -o "$WO" &&
	NEREUSFS=$real_daemon &&
	mkdir "$K" &&
	setfattr -n user.nereus.profile -v object-wal "$K" &&
	: >"$K/a" && : >"$K/t" && : >"$K/u" &&
	landmark "streams made" &&
	nrs_bg nrs-appender -t 2 -n 8 -s 262144-1048576 -w 10 -S $seed -T \
		-a "$TRASH/ack.a" "$K/a" &&
	pa=$NRS_LAST_BG &&
	nrs_bg nrs-appender -t 2 -n 8 -s 262144-1048576 -w 20 -S $((seed + 1)) -T \
		-a "$TRASH/ack.t" "$K/t" &&
	pt=$NRS_LAST_BG &&
	nrs-appender -t 1 -n 8 -s 262144-1048576 -w 30 -S $((seed + 2)) -T \
		-a "$TRASH/ack.u" "$K/u" &&
	nrs_wait $pa 120 && nrs_wait $pt 120 &&
	landmark "appended" &&
	nrs_wait_for 60 all_adopted &&
	landmark "adopted" &&
	test "$(nrs_metric object_adopted_total)" -eq 40 &&
	shared=$(for s in a t u; do
		nrs_xattr "$K/$s" user.nereus.index |
			sed -n "s/.* adopt:\(owal\/[^:]*\):.*/$s \1/p" | sort -u
	done | awk "{ print \$2 }" | sort | uniq -d | wc -l) &&
	echo "# WAL objects holding slices of more than one stream: $shared" &&
	test "$shared" -gt 0 ||
	{ nrs_umount; false; }
'

test_expect_success 'recorded: t trimmed to its last record, u unlinked, GC punches them' '
	trim=$(nrs_xattr "$K/t" user.nereus.index | tail -n 1 | cut -d" " -f1) &&
	test "$trim" -gt 0 &&
	echo "$trim" >"$TRASH/trim" &&
	acks_before u $all &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack.cut.u" "$K/u" &&
	setfattr -n user.nereus.trim -v "$trim" "$K/t" &&
	unlink_at=$(journal_records) &&
	rm "$K/u" &&
	landmark "trimmed and unlinked" &&
	nrs_wait_for 90 settled &&
	landmark "punched" ||
	{ nrs_umount; false; }
'

test_expect_success 'recorded: a appends again, clean unmount' '
	nrs-appender -t 2 -n 4 -s 262144-1048576 -w 40 -S $((seed + 3)) -T \
		-a "$TRASH/ack.a" "$K/a" &&
	nrs_wait_for 60 nrs_all_adopted owal/ "$K/a" &&
	acks_before a $all &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack.cut.a" "$K/a" &&
	nrs_umount &&
	landmark "unmounted" &&
	retired_slices "$DATA" | sed "s/^/# retired: /" &&
	echo "# journal: $(journal_records) records, $(stat -c %s "$journal") bytes"
'

# holes_hold DIR: every retired adopted slice of DIR/meta.db is a hole in
# its WAL object, if that still exists; prints how many it checked.
holes_hold () {
	retired_slices "$1" >"$TRASH/retired" &&
	nrs_holes_hold "$1/objects" "$TRASH/retired"
}

holes_seen=0
cuts_checked=0
# check_cut K [REPLAY-OPTION...]: replay the journal up to K, look at the
# holes, mount, verify, unmount, fsck.
check_cut () {
	local k=$1 uflag= before start out
	shift
	[ "$unsynced" = 1 ] && uflag="-u $((seed + k))"
	rm -rf "$TRASH/cut" &&
	nrs-powerreplay $uflag "$@" "$journal" "$k" "$TRASH/cut" >"$TRASH/replay.out" &&
	cat "$TRASH/replay.out" &&
	before=$(sed -n "s/^cut .* before //p" "$TRASH/replay.out") &&
	for s in a t u; do acks_before $s "$before" || return 1; done &&
	echo "# acks before the cut: $(cat "$TRASH"/ack.cut.? | wc -l)" || return 1
	if [ -f "$TRASH/cut/meta.db" ]; then
		out=$(holes_hold "$TRASH/cut") || { echo "$out"; return 1; }
		echo "$out"
		case $out in *": 0") ;; *) holes_seen=$((holes_seen + 1)) ;; esac
	fi
	DATA=$TRASH/cut
	nrs_mount -o "$WO" || { DATA=$data0; return 1; }
	if ! verify_cut "$k"; then
		echo "# keep the evidence with NRS_KEEP_TRASH=1 and NRS_POWER_SEED=$seed"
		nrs_umount
		DATA=$data0
		return 1
	fi
	nrs_umount &&
	fsck_expect 0 "$DATA" -- &&
	! grep "F25\|F26" "$TRASH/fsck.out" || { DATA=$data0; return 1; }
	DATA=$data0
	cuts_checked=$((cuts_checked + 1))
}

# verify_cut K: what the cut before record K must hold (I1, I3: every
# record acknowledged before the cut, and at most one more per writer, the
# one in flight at the cut, -u 1; I4).  A stream may be missing only if
# nothing of it was acknowledged (made after the cut), or if it is u and
# the cut is after its unlink began.
verify_cut () {
	local s start
	for s in a t u; do
		if ! [ -e "$K/$s" ]; then
			[ "$s" = u ] && [ "$1" -gt "$unlink_at" ] && continue
			! [ -s "$TRASH/ack.cut.$s" ] ||
				{ echo "$s: acknowledged, but no stream"; return 1; }
			continue
		fi
		start=$(nrs_xattr "$K/$s" user.nereus.start) || return 1
		if [ "$start" = 0 ]; then
			nrs_verify_records -c -u 1 -a "$TRASH/ack.cut.$s" "$K/$s" || return 1
		elif [ "$s" = t ] && [ "$start" = "$(cat "$TRASH/trim")" ]; then
			nrs-verify -s "$start" "$K/t" && nrs_check_head "$K/t" || return 1
		else
			echo "$s: start $start, neither 0 nor the trim"
			return 1
		fi
	done
}

records=$(journal_records)
# shellcheck disable=SC2086 # the landmarks are words
points=$(nrs_cut_points "$seed" "$records" "$cuts" $landmarks)
for k in $points; do
	test_expect_success "power cut before record $k of $records" '
		check_cut $k
	'
done

# The negative control: a disk that ignores the syncs of WAL objects
# loses acknowledged records (or a punch), and the checks above say so.
test_expect_success 'a disk that ignores the syncs of WAL objects loses acknowledged records, and this test sees it' '
	! check_cut $(echo $landmarks | cut -d" " -f3) -L objects/owal/ \
		>"$TRASH/control.out" 2>&1 &&
	cat "$TRASH/control.out" &&
	grep -E "VIOLATION|no stream|nrs_mount|Input/output" "$TRASH/control.out"
'

test_expect_success 'the cuts after the punches found retired slices in objects that stay' '
	echo "# cuts checked: $cuts_checked, with retired slices in kept objects: $holes_seen" &&
	test "$holes_seen" -gt 0
'

test_done
