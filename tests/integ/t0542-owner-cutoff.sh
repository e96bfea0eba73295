#!/bin/sh
test_description='an owner cut off from the store stops acknowledging object-wal appends on its own (owner.c OR3); local-wal appends go on'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"

# The embedded store holds the owner record (owner_store.c).  Renewals run
# every 500 ms; from the third on, 25 fail as a store that does not answer
# (failpoint owner.renew): the window of the last good one (lease - lease/5
# = 1.2 s after it began) runs out, the next good renewal (about 2.5 s
# later) opens it again.  Nothing materializes: the object-wal stream's
# bytes live only in the WAL objects.
OPTS="owner_lease_ms=1500,object_wal_timeout_ms=20000,materialize_age_ms=3600000,materialize_bytes=1099511627776"
O=$MNT/o/s
L=$MNT/l

# owner_field FIELD: a field of /.nereus/status's "owner"
owner_field () {
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["owner"][sys.argv[2]])' \
		"$MNT/.nereus/status" "$1"
}

# append_until WHAT N FILE: append numbered records "WHAT.i;" to FILE
# every 50 ms until one fails with WHAT's errno ("ok": until one is
# acknowledged), at most N tries; the acknowledged ones go to $TRASH/want,
# the errno name of the last failed one to $TRASH/err.  One write(2) per
# record through nrs-syscalls, which names the errno: a shell's printf
# reports a failed write as "I/O error" whatever the errno was (dash).
append_until () {
	i=0
	while [ $i -lt "$2" ]; do
		i=$((i + 1))
		rec="$1.$i;"
		out=$(nrs-syscalls append "$3" "$rec")
		if [ "$out" = "ok ${#rec}" ]; then
			printf %s "$rec" >>"$TRASH/want"
			[ "$1" = ok ] && return 0
		else
			printf '%s\n' "$out" >"$TRASH/err"
			[ "$1" != ok ] && return 0
		fi
		sleep 0.05
	done
	echo "append_until $1: no outcome in $2 tries"
	return 1
}

test_expect_success 'renewals fail: object-wal appends fail ESTALE, local-wal ones are acknowledged' '
	: >"$TRASH/want" &&
	# the stream first: its create is a record of the object WAL too
	# (core_metalog.c NS1), which a cut-off owner does not acknowledge
	nrs_mount -o "$OPTS" &&
	mkdir "$MNT/o" &&
	setfattr -n user.nereus.profile -v object-wal "$MNT/o" &&
	: >"$O" &&
	nrs_umount &&
	NRS_FAILPOINTS="owner.renew=error:EIO@3-27" &&
	export NRS_FAILPOINTS &&
	nrs_mount -o "$OPTS" &&
	unset NRS_FAILPOINTS &&
	append_until stale 200 "$O" &&
	test "$(cat "$TRASH/err")" = ESTALE &&
	# a namespace change is not acknowledged either (core_metalog.c NS2):
	# ESTALE, which the kernel takes for a stale lookup and tries once
	# more, finding the directory made (EEXIST)
	test_must_fail mkdir "$MNT/o/cut" 2>/dev/null &&
	grep -q "may not acknowledge" "$LOG" &&
	grep -q "failpoint owner.renew" "$LOG" &&
	printf local >>"$L" &&
	test "$(cat "$L")" = local &&
	test "$(owner_field may_ack)" = False &&
	test "$(owner_field state)" = owned
'

test_expect_success 'once a renewal gets through, the appends are acknowledged again' '
	append_until ok 400 "$O" &&
	test "$(owner_field may_ack)" = True &&
	printf tail. >>"$O" && printf tail. >>"$TRASH/want" &&
	cmp "$O" "$TRASH/want"
'

test_expect_success 'after a crash, exactly the acknowledged appends: none that failed ESTALE' '
	nrs_kill9 &&
	nrs_mount -o "$OPTS" &&
	cmp "$O" "$TRASH/want" &&
	test "$(cat "$L")" = local &&
	nrs_umount
'

test_done
