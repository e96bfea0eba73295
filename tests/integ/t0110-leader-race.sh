#!/bin/sh
test_description='two leaders racing on one stream: no append of a fenced leader is published'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# nrs-adapter race (tests/helpers/nrs-adapter.c says what it checks):
# every round a new leader fences the one still appending, at a random
# moment, alternately by NRS_IOC_BIND and by user.nereus.epoch.
rounds=${NRS_RACE_ROUNDS:-60}
seed=$(od -An -N4 -tu4 /dev/urandom | tr -d " ")
seed=$((seed % 1000000))
echo "# seed $seed, $rounds rounds"

S=$MNT/kafka/orders/p0

test_expect_success 'mount, a stream with some history' '
	nrs_mount &&
	mkdir -p "$MNT/kafka/orders" &&
	printf history >"$S"
'

test_expect_success 'leader changes under load: old leader ESTALE, stream = acks in order' '
	nrs-adapter race "$S" "$rounds" "$seed" &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = $((rounds + 1)) &&
	nrs_check_head "$S"
'

test_expect_success 'a second race on the same stream continues from there' '
	nrs-adapter race "$S" 10 $((seed + 1)) &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = $((rounds + 12))
'

test_expect_success 'after a remount: same bytes, same epoch' '
	cp "$S" "$TRASH/before" &&
	nrs_remount &&
	cmp "$TRASH/before" "$S" &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = $((rounds + 12)) &&
	test "$(head -c 7 "$S")" = history
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
