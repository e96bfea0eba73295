#!/bin/sh
test_description='simulated power loss at random points: every acknowledged record survives'
. "${NRS_TESTLIB:-$(dirname "$0")/lib.sh}"

# How it works.  One run of the daemon, from an empty data directory, is
# recorded by nrs-powerfail.so (every write, truncate, sync and name change
# under $DATA, with its bytes, in a journal) while nrs-appender writes
# self-checking records to two streams and logs each acknowledgement with a
# CLOCK_MONOTONIC stamp taken after write(2) returned.  Then, for each cut
# point K, nrs-powerreplay builds what the disk would hold had the power
# gone off before journal record K returned (its model: the top of
# tests/helpers/nrs-powerreplay.c), a fresh daemon mounts that directory,
# and nrs-verify checks that every record acknowledged before the cut (ack
# stamp < record K's stamp; why that is sound: top of nrs-powerfail.c) is
# there once, in order, byte-exact, nothing partial, at most one
# unacknowledged record per writer after its acknowledged ones, heads ==
# sizes, version == records.
#
#   NRS_POWER_CUTS      random cut points besides the very end (20)
#   NRS_POWER_SEED      seed for the cut points and the unsynced sectors
#   NRS_POWER_UNSYNCED  1: the disk also wrote a random subset of the
#                       unsynced writes, torn at 512-byte sectors (0)
#   NRS_POWER_SECONDS   how long the appender runs (3)
#   NRS_POWER_END       umount (clean) or kill (kill -9 under load)
# make torture runs it with hundreds of cut points, both ends, unsynced on.

cuts=${NRS_POWER_CUTS:-20}
seed=${NRS_POWER_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d " ")}
unsynced=${NRS_POWER_UNSYNCED:-0}
seconds=${NRS_POWER_SECONDS:-3}
end=${NRS_POWER_END:-umount}
powerfail=${NRS_POWERFAIL:-$NRS_HELPERS/nrs-powerfail.so}
echo "# seed $seed (NRS_POWER_SEED), $cuts cut points, unsynced=$unsynced, end=$end"
[ -f "$powerfail" ] || nrs_error "no $powerfail (run make check)"

journal=$TRASH/journal
real_daemon=$NEREUSFS
streams="s0 s1"

# The daemon, recorded.  exec keeps the pid nrs_mount watches.
cat >"$TRASH/nereusfs-pf" <<EOF
#!/bin/sh
NRS_PF_DIR='$DATA' NRS_PF_JOURNAL='$journal' LD_PRELOAD='$powerfail' \\
ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}verify_asan_link_order=0" \\
exec '$real_daemon' "\$@"
EOF
chmod +x "$TRASH/nereusfs-pf"

test_expect_success 'record a run: the daemon under nrs-powerfail.so, stamped acks' '
	test -z "$(ls -A "$DATA")" &&
	NEREUSFS=$TRASH/nereusfs-pf &&
	nrs_mount &&
	NEREUSFS=$real_daemon &&
	mkdir "$MNT/k" &&
	for s in $streams; do : >>"$MNT/k/$s" || return 1; done &&
	if [ "$end" = kill ]; then
		nrs_bg nrs-appender -t 4 -d $((seconds * 3)) -s 33-8192 -E 40 \
			-S "$seed" -T -a "$TRASH/ack" "$MNT/k/s0" "$MNT/k/s1" \
			>"$TRASH/appender" 2>&1 &&
		app=$NRS_LAST_BG &&
		sleep "$seconds" &&
		nrs_kill9 &&
		{ nrs_wait $app 30; arc=$?; } &&
		cat "$TRASH/appender" &&
		test "$arc" = 3
	else
		nrs-appender -t 4 -d "$seconds" -s 33-8192 -E 40 -S "$seed" -T \
			-a "$TRASH/ack" "$MNT/k/s0" "$MNT/k/s1" &&
		nrs_umount
	fi &&
	records=$(nrs-powerreplay -c "$journal") &&
	echo "# journal: $records records, $(stat -c %s "$journal") bytes; $(wc -l <"$TRASH/ack") acks" &&
	test "$(wc -l <"$TRASH/ack")" -gt 0
'

# Every stream is checked by nrs-verify, then I4 and version == records
# (lib.sh).  -u 1: a write that did not return may be there, whole.
verify_streams () {
	nrs_verify_records -c -u 1 -a "$TRASH/ack.cut" "$@"
}

# What the cuts add up to, said at the end (make torture prints it).
cuts_checked=0
records_verified=0
records_republished=0

# check_cut K [REPLAY-OPTION...]: replay the journal up to K, mount,
# verify, unmount.
check_cut () {
	local k=$1 uflag= before paths= s n
	shift
	[ "$unsynced" = 1 ] && uflag="-u $((seed + k))"
	rm -rf "$TRASH/cut" &&
	DATA=$TRASH/cut &&
	nrs-powerreplay $uflag "$@" "$journal" "$k" "$DATA" >"$TRASH/replay.out" &&
	cat "$TRASH/replay.out" &&
	before=$(sed -n "s/^cut .* before //p" "$TRASH/replay.out") &&
	awk -v t="$before" '($1 "") < (t "") { print $2, $3, $4, $5 }' \
		"$TRASH/ack" >"$TRASH/ack.cut" &&
	echo "# $(wc -l <"$TRASH/ack.cut") acks before the cut; files: $(cd "$DATA" && find . -type f -printf '%p:%s ' | sort)" &&
	nrs_mount || return 1
	nrs_log_since_mount | grep -i -E "recover|cut|torn|publish" | tail -n 5
	for s in $streams; do
		if [ -e "$MNT/k/$s" ]; then
			paths="$paths $MNT/k/$s"
		elif grep -q "^$s " "$TRASH/ack.cut"; then
			echo "$s: records acknowledged before the cut, but no stream"
			nrs_umount
			return 1
		fi
	done
	if [ -n "$paths" ] && ! verify_streams $paths; then
		echo "# keep the evidence with NRS_KEEP_TRASH=1 and NRS_POWER_SEED=$seed"
		nrs_umount
		return 1
	fi
	n=$(sed -n 's/^nrs-verify: ok, \([0-9]*\) records$/\1/p' "$TRASH/verify.out")
	[ -n "$paths" ] && records_verified=$((records_verified + ${n:-0}))
	n=$(nrs_log_since_mount | sed -n 's/.*recovery: re-published \([0-9]*\) WAL records.*/\1/p')
	records_republished=$((records_republished + ${n:-0}))
	cuts_checked=$((cuts_checked + 1))
	nrs_umount
}

records=$(nrs-powerreplay -c "$journal" 2>/dev/null || echo 0)
points=$(awk -v s="$seed" -v n="$records" -v c="$cuts" \
	'BEGIN { srand(s); for (i = 0; i < c && n > 0; i++) print int(rand() * n) }' |
	sort -n -u)
for k in $points $records; do
	test_expect_success "power cut before record $k of $records" '
		check_cut $k
	'
done

# The negative control: a disk ignoring the WAL's fdatasync loses
# acknowledged records, and the checks above must say so.
test_expect_success 'a disk that ignores the WAL fdatasync loses acknowledged records, and this test sees it' '
	! check_cut $records -L wal/ >"$TRASH/control.out" 2>&1 &&
	cat "$TRASH/control.out" &&
	grep -E "VIOLATION|no stream|nrs_mount|Input/output" "$TRASH/control.out"
'

echo "# power cuts checked: $cuts_checked (end=$end, unsynced=$unsynced, seed $seed); records verified: $records_verified; re-published at mount: $records_republished"
test_done
