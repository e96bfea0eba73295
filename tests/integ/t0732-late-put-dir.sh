#!/bin/sh
test_description='a PUT of the old owner that lands after a takeover is never used (wal_object_seal.c SL1-SL4)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"

# The "bucket" (the embedded store, apart from the data directory) is a
# directory: an object of the old owner's run still in flight at the
# takeover is one moved aside, and it lands when it is moved back.  A
# wrote a1, a2, a3 to p0, one WAL object each; a2's was in flight when B
# recovered the bucket (so B found a1 and a3 -- a gap it crossed, SL4 --
# and published a1: a3 does not continue the head), sealed A's run and
# acknowledged b1 after a1.  Then a2's PUT lands.  C, recovering after B
# was lost too, must find a1b1: walking a2 after the seal would publish
# a1a2a3 (they continue the head as of A's run's end) and lose b1.  (Here
# A acknowledged a2 and a3 before the harness hid a2; in the case this
# stands for both were in flight, never acknowledged: only what B
# acknowledged is checked.)
mkdir -m 700 "$TRASH/bucket" "$TRASH/late"
NRS_MOUNT_TIMEOUT=${NRS_MOUNT_TIMEOUT_OWAL:-90}
O="objects=$TRASH/bucket,materialize_age_ms=3600000,materialize_bytes=1099511627776,checkpoint_ms=3600000,owner_lease_ms=4000"
P=$MNT/k/p0
run1=$TRASH/bucket/owal/000001

test_expect_success 'A appends a1, a2, a3, one WAL object each, and is lost' '
	nrs_mount -o "$O" &&
	mkdir "$MNT/k" &&
	setfattr -n user.nereus.profile -v object-wal "$MNT/k" &&
	: >"$P" &&
	printf a1 >>"$P" && printf a2 >>"$P" && printf a3 >>"$P" &&
	nrs_kill9 &&
	rm -rf "$DATA" &&
	a2=$(ls "$run1" | grep "^[0-9a-f]\{10\}$" | grep -v "^0000000000$" | sort | tail -n 2 | head -n 1) &&
	test -n "$a2" &&
	mv "$run1/$a2" "$TRASH/late/" &&
	echo "$a2" >"$TRASH/late.name"
'

test_expect_success 'B recovers without a2, seals A'"'"'s run, acknowledges b1' '
	nrs_mount -o "recover,$O" &&
	test "$(cat "$P")" = a1 &&
	printf b1 >>"$P" &&
	test "$(cat "$P")" = a1b1 &&
	nrs_kill9 &&
	rm -rf "$DATA"
'

test_expect_success 'a2 lands late; C recovers every append B acknowledged' '
	mv "$TRASH/late/$(cat "$TRASH/late.name")" "$run1/" &&
	nrs_mount -o "recover,$O" &&
	cat "$P" >"$TRASH/p0" &&
	{ test "$(cat "$TRASH/p0")" = a1b1 || { echo "p0: $(cat "$TRASH/p0")"; false; }; } &&
	test -e "$run1/seal" &&
	grep -q "objects of run 1 landed after it was sealed" "$LOG" &&
	test "$(nrs_metric object_wal_late_objects_total)" = 1 &&
	nrs_umount
'

test_done
