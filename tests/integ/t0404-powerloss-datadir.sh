#!/bin/sh
test_description='power loss after the first mount made the data directory: its name survives with every acknowledged record (core.c DM3)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# The recorder (nrs-powerfail.so; t0400 explains it and the replay) watches
# $TRASH/root, an empty directory, and the daemon is given data=root/d,
# which does not exist yet: the daemon makes it.  Its name in root is
# durable only once root is fsynced (nrs-powerreplay.c PR2), which no
# other part of the daemon does -- every other sync is of d or below.  So
# a cut after the first acknowledged record replays a root holding d,
# and d holding the record, only if the daemon made d's name durable
# before it acknowledged anything.  The run ends by a clean unmount (U1:
# after it a cut loses nothing), and a second mount on the now existing
# d appends more: the sync at every start is harmless there.
cuts=${NRS_POWER_CUTS:-4}
seed=${NRS_POWER_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d " ")}
echo "# seed $seed (NRS_POWER_SEED), $cuts cut points"

root=$TRASH/root
journal=$TRASH/journal
real_daemon=$NEREUSFS
mkdir "$root" || nrs_error "mkdir $root"
data0=$DATA
DATA=$root
nrs_powerfail_daemon "$TRASH/nereusfs-pf" "$journal"
DATA=$root/d

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

test_expect_success 'recorded: the first mount makes the data directory; appends; clean unmount' '
	! test -e "$DATA" &&
	NEREUSFS=$TRASH/nereusfs-pf &&
	nrs_mount &&
	NEREUSFS=$real_daemon &&
	test -d "$DATA" &&
	: >"$MNT/s" &&
	landmark "stream made" &&
	nrs-appender -t 1 -n 1 -s 33-4096 -w 10 -S $seed -T -a "$TRASH/ack" "$MNT/s" &&
	landmark "first record acknowledged" &&
	nrs-appender -t 2 -n 10 -s 33-4096 -w 20 -S $((seed + 1)) -T -a "$TRASH/ack" "$MNT/s" &&
	nrs_umount &&
	landmark "unmounted"
'

test_expect_success 'recorded: a second mount on the existing directory appends more' '
	NEREUSFS=$TRASH/nereusfs-pf &&
	nrs_mount &&
	NEREUSFS=$real_daemon &&
	nrs-appender -t 2 -n 10 -s 33-4096 -w 40 -S $((seed + 2)) -T -a "$TRASH/ack" "$MNT/s" &&
	nrs_umount &&
	landmark "unmounted again"
'

# check_cut K [REPLAY-OPTION...]: replay up to K; if anything was
# acknowledged before the cut, root/d and the stream must be there, with
# every such record.
check_cut () {
	local k=$1 before
	shift
	rm -rf "$TRASH/cut" &&
	nrs-powerreplay "$@" "$journal" "$k" "$TRASH/cut" >"$TRASH/replay.out" &&
	cat "$TRASH/replay.out" &&
	before=$(sed -n "s/^cut .* before //p" "$TRASH/replay.out") &&
	awk -v t="$before" '($1 "") < (t "") { print $2, $3, $4, $5 }' \
		"$TRASH/ack" >"$TRASH/ack.cut" &&
	echo "# $(wc -l <"$TRASH/ack.cut") acks before the cut; in the cut: $(cd "$TRASH/cut" && find . -maxdepth 2 | sort | xargs)" ||
		return 1
	[ -s "$TRASH/ack.cut" ] || return 0
	test -d "$TRASH/cut/d" ||
		{ echo "VIOLATION: records acknowledged, but no data directory"; return 1; }
	DATA=$TRASH/cut/d
	nrs_mount || { DATA=$root/d; return 1; }
	if ! test -e "$MNT/s"; then
		echo "VIOLATION: records acknowledged, but no stream"
		nrs_umount
		DATA=$root/d
		return 1
	fi
	nrs_verify_records -c -u 1 -a "$TRASH/ack.cut" "$MNT/s" ||
		{ nrs_umount; DATA=$root/d; return 1; }
	nrs_umount
	DATA=$root/d
}

records=$(journal_records)
# shellcheck disable=SC2086 # the landmarks are words
points=$(nrs_cut_points "$seed" "$records" "$cuts" $landmarks)
for k in $points; do
	test_expect_success "power cut before record $k of $records" '
		check_cut $k
	'
done

# The negative control: a disk that loses the sync of root (and nothing
# else) loses the directory, and check_cut says so.
test_expect_success 'a disk that ignores the sync of the parent loses the data directory, and this test sees it' '
	! check_cut $records -L / >"$TRASH/control.out" 2>&1 &&
	cat "$TRASH/control.out" &&
	grep "VIOLATION: records acknowledged, but no data directory" "$TRASH/control.out"
'

DATA=$data0
test_done
