#!/bin/sh
test_description='concurrent writers and tailing readers, record by record'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# 8 writers (threads, each with its own O_APPEND descriptor) on 2 streams,
# self-checking records of 33 B .. 64 KiB + 32 (1 B .. 64 KiB of payload),
# every 40th of each writer exactly 1 MiB.
seconds=${NRS_LOAD_SECONDS:-5}
seed=$(od -An -N4 -tu4 /dev/urandom | tr -d " ")
echo "# seed $seed (NRS_LOAD_SECONDS=$seconds)"

S0=$MNT/kafka/orders/p0
S1=$MNT/kafka/orders/p1

test_expect_success 'mount, create the streams' '
	nrs_mount &&
	mkdir -p "$MNT/kafka/orders" &&
	: >>"$S0" && : >>"$S1"
'

test_expect_success 'append under load while one tailing reader per stream checks every read' '
	arc= r0= r1= &&
	nrs_bg nrs-tail -w "$TRASH/stop" -d 120 -o "$TRASH/copy0" "$S0" >"$TRASH/tail0.out" 2>&1 &&
	tail0=$NRS_LAST_BG &&
	nrs_bg nrs-tail -w "$TRASH/stop" -d 120 -b 2097152 -o "$TRASH/copy1" "$S1" >"$TRASH/tail1.out" 2>&1 &&
	tail1=$NRS_LAST_BG &&
	{ nrs-appender -t 8 -d "$seconds" -s 33-65568 -E 40 -S "$seed" \
		-a "$TRASH/ack" "$S0" "$S1" >"$TRASH/appender.out" 2>&1; arc=$?; } ;
	touch "$TRASH/stop" &&
	{ nrs_wait $tail0 60; r0=$?; } ;
	{ nrs_wait $tail1 60; r1=$?; } ;
	cat "$TRASH/appender.out" "$TRASH/tail0.out" "$TRASH/tail1.out" &&
	test "$arc" = 0 && test "$r0" = 0 && test "$r1" = 0 &&
	test "$(wc -l <"$TRASH/ack")" -gt 100
'

test_expect_success 'every acknowledged record is there, whole, once, in order' '
	nrs_verify_records -c -u 0 -a "$TRASH/ack" "$S0" "$S1" &&
	nrs_check_head "$S0" "$S1"
'

test_expect_success 'what the tailing readers saw is what the streams hold (I2)' '
	cmp "$TRASH/copy0" "$S0" &&
	cmp "$TRASH/copy1" "$S1"
'

test_expect_success 'the 1 MiB records are there' '
	test "$(grep -c " 1048576\$" "$TRASH/ack")" -ge 8
'

test_expect_success 'writers and readers on one stream, readers opened before and after' '
	arc= r2= &&
	: >>"$MNT/one" &&
	nrs_bg nrs-tail -w "$TRASH/stop2" -d 120 -o "$TRASH/copy2" "$MNT/one" >"$TRASH/tail2.out" 2>&1 &&
	tail2=$NRS_LAST_BG &&
	nrs_bg nrs-appender -t 4 -d 2 -s 33-8192 -E 100 -S "$seed" -w 100 \
		-a "$TRASH/ack2" "$MNT/one" >"$TRASH/appender2.out" 2>&1 &&
	app2=$NRS_LAST_BG &&
	sleep 0.5 &&
	nrs-tail -n 50 -d 60 "$MNT/one" &&
	{ nrs_wait $app2 60; arc=$?; } ;
	touch "$TRASH/stop2" &&
	{ nrs_wait $tail2 60; r2=$?; } ;
	cat "$TRASH/appender2.out" "$TRASH/tail2.out" &&
	test "$arc" = 0 && test "$r2" = 0 &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack2" "$MNT/one" &&
	cmp "$TRASH/copy2" "$MNT/one"
'

test_expect_success 'after a remount the same records verify' '
	nrs_remount &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack" "$S0" "$S1" &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack2" "$MNT/one" &&
	nrs_check_head "$S0" "$S1" "$MNT/one"
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
