#!/bin/sh
test_description='conditional appends via NRS_IOC_EXPECT from several writers: one wins each offset'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

seed=$(od -An -N4 -tu4 /dev/urandom | tr -d " ")
seed=$((seed % 1000000))
echo "# seed $seed"

S=$MNT/s

test_expect_success 'mount' '
	nrs_mount &&
	: >"$S"
'

# nrs-adapter cas: snapshot the head, arm it, write; ESPIPE means another
# writer won that offset, so snapshot again.  It checks that the wins tile
# the stream exactly (two wins at one offset, or a gap, fail).
test_expect_success '4 writers x 200 appends: every offset won once, nothing lost' '
	nrs-adapter cas "$S" 4 200 "$seed" >"$TRASH/cas.out" &&
	cat "$TRASH/cas.out" &&
	test "$(nrs_xattr "$S" user.nereus.version)" = 800 &&
	nrs_check_head "$S"
'

test_expect_success 'again with 8 writers, from a non-zero head' '
	nrs-adapter cas "$S" 8 100 $((seed + 1)) &&
	test "$(nrs_xattr "$S" user.nereus.version)" = 1600
'

test_expect_success 'after a remount the stream is whole' '
	cp "$S" "$TRASH/before" &&
	nrs_remount &&
	cmp "$TRASH/before" "$S" &&
	test "$(nrs_xattr "$S" user.nereus.version)" = 1600
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
