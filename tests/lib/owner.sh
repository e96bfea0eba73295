# owner.sh - one bucket, two daemons (DESIGN.md I8, owner/owner.c): the
# suite t0540 (moto: compare-and-set) and t0541 (s3rver: lease) run after
# their provider (moto.sh / s3.sh, started).  Sets OWNER_MODE ("cas" or
# "lease") before sourcing.
#
# Daemon A is the harness's ($MNT, $DATA); daemon B has its own data
# directory and mount point ($TRASH/data2, $TRASH/mnt2), started here and
# stopped by an nrs_at_exit command however the script ends.  Leases are
# short (OWNER_LEASE_MS) so that a takeover takes a few seconds.

OWNER_LEASE_MS=${OWNER_LEASE_MS:-900}
MNT2=$TRASH/mnt2
DATA2=$TRASH/data2
LOG2=$TRASH/log2
mkdir -p "$MNT2" "$TRASH/mnt3"
# A's materializer writes a stream's bytes 10 s after the first of them
# was appended: "three", on a stream of its own right before the takeover,
# is still A's to materialize when A finds itself fenced, a few seconds
# later (a_refused_put_after_fence).
OWNER_OPTS="owner_lease_ms=$OWNER_LEASE_MS,materialize_age_ms=10000,materialize_bytes=1048576$OBJ_OPTS"
nrs_at_exit "[ -f '$TRASH/b.pid' ] && kill -9 \$(cat '$TRASH/b.pid'); fusermount3 -u -z '$MNT2' 2>/dev/null"

# b_mount [-o opts]: daemon B on $MNT2; fails if it exits first.
b_mount () {
	"$NEREUSFS" -f -o "data=$DATA2" "$@" "$MNT2" >>"$LOG2" 2>&1 &
	B_PID=$!
	echo "$B_PID" >"$TRASH/b.pid"
	n=0
	while [ $n -lt 200 ]; do
		kill -0 "$B_PID" 2>/dev/null || { wait "$B_PID"; echo "B exited $?"; tail -n 20 "$LOG2"; rm -f "$TRASH/b.pid"; return 1; }
		grep -q " $MNT2 fuse" /proc/mounts && stat "$MNT2/.nereus/status" >/dev/null 2>&1 && return 0
		sleep 0.1
		n=$((n + 1))
	done
	echo "B did not mount"
	return 1
}

b_umount () {
	fusermount3 -u "$MNT2" && wait "$B_PID" && rm -f "$TRASH/b.pid"
}

# refused DATADIR MNT LOGFILE WHAT [-o opts]: a daemon that must exit
# non-zero before mounting, its log saying WHAT.
refused () {
	d=$1 m=$2 l=$3 what=$4
	shift 4
	if timeout 60 "$NEREUSFS" -f -o "data=$d" "$@" "$m" >"$l" 2>&1; then
		echo "mounted, but should have been refused"
		fusermount3 -u "$m"
		return 1
	fi
	grep -q "$what" "$l" || { echo "no '$what' in:"; cat "$l"; return 1; }
}

# owner_field MOUNT FIELD: a field of /.nereus/status's "owner"
owner_field () {
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["owner"][sys.argv[2]])' \
		"$1/.nereus/status" "$2"
}

# owner_may_ack: A's ack window is open (OR3).  With a 900 ms lease a
# renewal slowed by a loaded machine closes it for a moment, so callers
# wait for it rather than read it once.
owner_may_ack () {
	test "$(owner_field "$MNT" may_ack)" = True
}

# The bucket's objects as an independent client sees them (the provider's
# obj_files: the owner record left out): what the daemons PUT and DELETE.
bucket_keys () {
	obj_files | sort
}

# The owner record as the store holds it: 64 bytes (owner/owner.c).  In
# lease mode it is rewritten every lease/3, and s3rver's file may be
# caught mid-write: a few tries.
owner_record_is_64 () {
	n=0
	while [ $n -lt 10 ]; do
		obj_sync &&
		test "$(stat -c %s "$(obj_file owner)" 2>/dev/null)" = 64 && return 0
		sleep 0.05
		n=$((n + 1))
	done
	echo "the owner record is not 64 bytes"
	return 1
}

# A's uploader, fenced, is refused by the owner's store (owner_store.c
# OS1; core_obj.c CW2 hands the services that store).  Stream s3's
# bytes, appended at $three_at (seconds), become due 10 s later: if A was
# fenced before that, their PUT comes after the fence, and must be refused
# and logged while A's upload count stays.  Judged by A's own log and
# counter, not by where its PUT falls against a bucket listing.  Only a takeover slower
# than 9 s (a machine under very heavy load) leaves nothing to judge.
a_refused_put_after_fence () {
	up=$(nrs_metric object_uploads_total) || return 1
	if [ $(($(date +%s) - three_at)) -ge 9 ]; then
		echo "the takeover took 9 s or more: A's PUT not judged"
		return 0
	fi
	nrs_wait_for 30 grep -q "upload not proven (PUT: Stale file handle" "$LOG" &&
	test "$(nrs_metric object_uploads_total)" = "$up"
}

test_expect_success "A owns the bucket ($OWNER_MODE mode)" '
	nrs_mount -o "$OWNER_OPTS" &&
	printf one >>"$MNT/s" &&
	test "$(owner_field "$MNT" state)" = owned &&
	test "$(owner_field "$MNT" mode)" = "$OWNER_MODE" &&
	test "$(owner_field "$MNT" epoch)" = 1 &&
	nrs_wait_for 10 owner_may_ack &&
	grep -q "^nereus_owner_state 1$" "$MNT/.nereus/metrics" &&
	owner_record_is_64
'

test_expect_success 'a second daemon on a fresh data directory is refused' '
	refused "$DATA2" "$MNT2" "$TRASH/refused1" "this data directory never did" \
		-o "$OWNER_OPTS" &&
	grep -q "recover" "$TRASH/refused1" &&
	printf two >>"$MNT/s"
'

test_expect_success 'with recover it takes over; A is fenced: appends ESTALE, no PUT or DELETE' '
	printf three >>"$MNT/s3" && three_at=$(date +%s) &&
	b_mount -o "$OWNER_OPTS,recover" &&
	test "$(owner_field "$MNT2" state)" = owned &&
	test "$(owner_field "$MNT2" epoch)" = 2 &&
	n=0 && while printf x >>"$MNT/s" 2>"$TRASH/estale"; do
		n=$((n + 1)); test $n -lt 50 || break; sleep 0.1
	done &&
	grep -q "Stale file handle" "$TRASH/estale" &&
	test "$(owner_field "$MNT" state)" = fenced &&
	grep -q "^nereus_owner_state 2$" "$MNT/.nereus/metrics" &&
	grep -q "fenced" "$LOG" &&
	! printf y 2>/dev/null >>"$MNT/s" &&
	a_refused_put_after_fence &&
	keys_before=$(bucket_keys) &&
	sleep 5 &&
	keys_after=$(bucket_keys) &&
	test "$keys_before" = "$keys_after"
'

test_expect_success 'A, remounted, is refused unless recover; with it, B is fenced' '
	nrs_umount &&
	refused "$DATA" "$TRASH/mnt3" "$TRASH/refused2" "fenced: another daemon owns this bucket" \
		-o "$OWNER_OPTS" &&
	nrs_mount -o "$OWNER_OPTS,recover" &&
	test "$(owner_field "$MNT" epoch)" = 3 &&
	printf four >>"$MNT/s" &&
	n=0 && while printf x >>"$MNT2/t" 2>/dev/null; do
		n=$((n + 1)); test $n -lt 50 || break; sleep 0.1
	done &&
	test "$(owner_field "$MNT2" state)" = fenced &&
	b_umount &&
	nrs_umount
'
