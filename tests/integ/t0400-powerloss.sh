#!/bin/sh
test_description='crashes, recoveries, then simulated power loss at random points: every acknowledged record survives'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# How it works.  A history of one data directory, from empty, is recorded
# by nrs-powerfail.so into one journal (every write, truncate, sync and
# name change under $DATA, with its bytes), in PHASES: each phase is one
# daemon run on the same $DATA -- it mounts (recovering what the phase
# before left), nrs-appender writes self-checking records to two streams
# and logs each acknowledgement with a CLOCK_MONOTONIC stamp taken after
# write(2) returned (one ack log, one clock for all phases), and the phase
# ends with a process crash -- a crash failpoint of the daemon
# (src/util/failpoint.c) or a kill -9 under load, both falling between two
# recorded calls (nrs-powerfail.c Q1) -- or a clean unmount.  A crash
# keeps the page cache, so the next phase continues the same journal and
# reads what the last one wrote but never synced.  The last phase ends as
# NRS_POWER_END says.  The default run: a crash at wal.after_write, a
# recovery and a clean unmount (issue 12's sequence), kill -9 under load,
# appends and a clean unmount.
#
# Then, for each cut point K, nrs-powerreplay builds what the disk would
# hold had the power gone off before journal record K returned (its model:
# the top of tests/helpers/nrs-powerreplay.c): whatever the phases before
# K synced, nothing they only wrote.  A fresh daemon mounts that directory
# and nrs-verify checks that every record acknowledged before the cut (ack
# stamp < record K's stamp; why that is sound: top of nrs-powerfail.c),
# in any phase, is there once, in order, byte-exact, nothing partial, at
# most one unacknowledged record per writer after its acknowledged ones,
# heads == sizes, version == records.  A one-phase model cannot see a
# recovery that publishes what a crash left unsynced (issue 12): the bytes
# are readable in phase 2, and lost only at a power cut after it.
#
# Cut points: NRS_POWER_CUTS random ones over the whole journal, the very
# end, and landmarks: where each phase's mount answered (recovery done)
# and where each phase ended.  Each phase also checks, live, that after
# its recovery every record acknowledged so far reads back.  And after
# each clean unmount, a power cut must change nothing: the replay holds
# every file of $DATA byte for byte (SQLite's -shm aside: it is mmap'ed,
# not recorded, and rebuilt by SQLite), since a daemon that exits 0 has
# left nothing unsynced.
#
#   NRS_POWER_PHASES    daemon runs in the journal (4); 1 is the one-phase
#                       model of before
#   NRS_POWER_CRASHES   how phases 1..PHASES-1 end, in turn: failpoint
#                       names (crash at a random hit), "kill" (kill -9
#                       under load), "umount" (clean), "remount" (recover,
#                       no appends, clean unmount: issue 12's sequence);
#                       default: the list below
#   NRS_POWER_CRASH_FIRST  index into that list of phase 1's crash (0)
#   NRS_POWER_END       how the last phase ends: umount (clean) or kill
#   NRS_POWER_CUTS      random cut points (12)
#   NRS_POWER_SEED      seed for cut points, hits, unsynced sectors
#   NRS_POWER_UNSYNCED  1: the disk also wrote a random subset of the
#                       unsynced writes, torn at 512-byte sectors (0)
#   NRS_POWER_SECONDS   how long each phase appends (2)
# make torture runs several journals of 5 phases that together crash at
# every point of the list, 300 random cuts in all, unsynced on.

cuts=${NRS_POWER_CUTS:-12}
seed=${NRS_POWER_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d " ")}
unsynced=${NRS_POWER_UNSYNCED:-0}
seconds=${NRS_POWER_SECONDS:-2}
end=${NRS_POWER_END:-umount}
phases=${NRS_POWER_PHASES:-4}
# The crash points that a run of appenders on the default options reaches
# (gc.* needs superseded objects past gc_grace_ms: t0610 crashes there).
crashes=${NRS_POWER_CRASHES:-"wal.after_write remount kill \
pipeline.before_reply meta.after_commit wal.after_sync wal.before_sync \
recovery.before_publish meta.before_commit wal.before_write wal.write \
obj.before_put obj.after_put obj.before_publish obj.after_publish \
wal.before_reclaim umount"}
crash_first=${NRS_POWER_CRASH_FIRST:-0}
powerfail=${NRS_POWERFAIL:-$NRS_HELPERS/nrs-powerfail.so}
[ -f "$powerfail" ] || nrs_error "no $powerfail (run make check)"
case $end in umount|kill) ;; *) nrs_error "NRS_POWER_END=$end: umount or kill" ;; esac
[ "$phases" -ge 1 ] 2>/dev/null || nrs_error "NRS_POWER_PHASES=$phases"

# how_phase P: how phase P ends.
set -- $crashes
ncrashes=$#
how_phase () {
	local i=$(( (crash_first + $1 - 1) % ncrashes ))
	if [ "$1" -ge "$phases" ]; then
		echo "$end"
		return
	fi
	set -- $crashes
	shift "$i"
	echo "$1"
}
plan=
p=1
while [ $p -le "$phases" ]; do
	plan="$plan $(how_phase $p)"
	p=$((p + 1))
done
echo "# seed $seed (NRS_POWER_SEED), $cuts cut points, unsynced=$unsynced; $phases phases ending:$plan"

journal=$TRASH/journal
kill_file=$TRASH/pf.kill
real_daemon=$NEREUSFS
streams="s0 s1"
paths="$MNT/k/s0 $MNT/k/s1"

# The daemon, recorded.  exec keeps the pid nrs_mount watches.
cat >"$TRASH/nereusfs-pf" <<EOF
#!/bin/sh
NRS_PF_DIR='$DATA' NRS_PF_JOURNAL='$journal' NRS_PF_KILL='$kill_file' \\
LD_PRELOAD='$powerfail' \\
ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}verify_asan_link_order=0" \\
exec '$real_daemon' "\$@"
EOF
chmod +x "$TRASH/nereusfs-pf"

rnd_state=$seed
# rnd N: RND becomes a pseudo-random number in 0..N-1 from the seed (an
# LCG; not in a subshell, so that the state moves on).
rnd () {
	rnd_state=$(( (rnd_state * 1103515245 + 12345) % 2147483648 ))
	RND=$(( (rnd_state / 65536) % $1 ))
}

# hit_for POINT: HIT becomes the hit at which POINT crashes: under load
# for the append path, soon for the background ones.
hit_for () {
	case $1 in
	wal.*reclaim|obj.*) rnd 3; HIT=$((1 + RND)) ;;
	recovery.*) HIT=1 ;;
	*) rnd 200; HIT=$((20 + RND)) ;;
	esac
}

journal_records () {
	nrs-powerreplay -c "$journal" 2>/dev/null || echo 0
}

landmarks=		# journal record counts to cut at
phase_starts=		# the record count when each phase started
landmark () {
	local k
	k=$(journal_records)
	landmarks="$landmarks $k"
	echo "# landmark: record $k, $1"
}

# The acks so far, stamps stripped, for a live check.
acks_so_far () {
	awk '{ print $2, $3, $4, $5 }' "$TRASH/ack" >"$TRASH/ack.live"
}

# The daemon exited and nrs_wait_exit reaped it: forget it (its pid may
# be reused now: never kill it), detach its dead mount.
daemon_reaped () {
	nrs_forget_daemon
	nrs_detach || { echo "cannot detach $MNT"; return 1; }
}

# Kill the recorded daemon between two recorded calls (nrs-powerfail.c
# Q1), reap it, detach the dead mount.
quiesced_kill () {
	: >"$kill_file" &&
	{ nrs_wait_exit 20 || { echo "the daemon ignored $kill_file"; return 1; }; } &&
	daemon_reaped
}

# crashed_by SPEC: the daemon that just died was killed by failpoint
# SPEC (POINT=crash@HIT), not by anything else.
crashed_by () {
	nrs_log_since_mount | grep "failpoint ${1%%=*}: crash at hit ${1##*@}\$" ||
		{ echo "the daemon died, but not by $1 (status ${NRS_EXIT:-?})"; return 1; }
}

# disk_sums DIR: every regular file below DIR but SQLite's -shm, with its
# checksum.
disk_sums () {
	(cd "$1" && find . -type f ! -name '*-shm' -exec sha1sum {} + | sort -k 2)
}
clean_ends=		# record counts where a phase had unmounted cleanly

# run_phase P HOW: one recorded daemon run on $DATA, ending by HOW.
run_phase () {
	local p=$1 how=$2 spec= app arc mrc k
	case $how in
	umount|remount|kill) ;;
	*) hit_for "$how"; spec="$how=crash@$HIT" ;;
	esac
	echo "# phase $p: ends by ${spec:-$how}"
	phase_starts="$phase_starts $(journal_records)"
	rm -f "$kill_file"
	NEREUSFS=$TRASH/nereusfs-pf
	NRS_FAILPOINTS=$spec
	export NRS_FAILPOINTS
	nrs_mount
	mrc=$?
	unset NRS_FAILPOINTS
	NEREUSFS=$real_daemon
	if [ $mrc != 0 ]; then
		# the failpoint may fire before the mount answers (recovery)
		[ -n "$spec" ] && crashed_by "$spec" || return 1
		landmark "phase $p crashed while mounting ($spec)"
		return 0
	fi
	nrs_log_since_mount | grep -i -E "recover|cut|torn|broken" | tail -n 5
	landmark "phase $p mounted"
	if [ "$p" = 1 ]; then
		mkdir "$MNT/k" &&
		for s in $streams; do : >>"$MNT/k/$s" || return 1; done
	elif ! { acks_so_far &&
		 nrs_verify_records -c -u 1 -a "$TRASH/ack.live" $paths; }; then
		# a background point (obj.*) may fire before any append
		if [ -n "$spec" ] && nrs_wait_exit 5; then
			crashed_by "$spec" && daemon_reaped || return 1
			landmark "phase $p crashed before its appends ($spec)"
			return 0
		fi
		nrs_umount
		return 1
	fi
	case $how in
	remount)
		nrs_umount || return 1
		;;
	umount)
		nrs-appender -t 4 -d "$seconds" -s 33-8192 -E 40 -w $((p * 10)) \
			-S $((seed + p)) -T -a "$TRASH/ack" $paths &&
		nrs_umount || return 1
		;;
	*)
		nrs_bg nrs-appender -t 4 -d $((seconds * 4)) -s 33-8192 -E 40 \
			-w $((p * 10)) -S $((seed + p)) -T -a "$TRASH/ack" $paths \
			>"$TRASH/appender" 2>&1
		app=$NRS_LAST_BG
		if [ "$how" = kill ]; then
			rnd 1000
			sleep "$(awk -v r=$RND -v s="$seconds" 'BEGIN { print s * (0.3 + r / 1000) }')"
			quiesced_kill || return 1
		elif nrs_wait_exit $((seconds * 2)); then
			crashed_by "$spec" && daemon_reaped || return 1
		else
			echo "# $spec did not fire in $((seconds * 2)) s: kill -9 instead"
			quiesced_kill || return 1
		fi
		{ nrs_wait $app 30; arc=$?; }
		cat "$TRASH/appender"
		[ "$arc" = 3 ] || { echo "appender exit $arc, not 3"; return 1; }
		;;
	esac
	if grep "nrs-powerfail: killed unquiesced" "$LOG"; then
		echo "the journal does not model this crash (nrs-powerfail.c Q1)"
		return 1
	fi
	landmark "phase $p ended (${spec:-$how})"
	case $how in
	umount|remount)
		k=$(journal_records) &&
		disk_sums "$DATA" >"$TRASH/sums.$k" &&
		clean_ends="$clean_ends $k"
		;;
	esac
}

p=1
for how in $plan; do
	test_expect_success "phase $p, recorded: mount, recover, append, end by $how" '
		test $p -gt 1 || test -z "$(ls -A "$DATA")" &&
		run_phase $p $how &&
		echo "# journal: $(journal_records) records, $(stat -c %s "$journal") bytes; $(wc -l <"$TRASH/ack") acks"
	'
	p=$((p + 1))
done
test_expect_success 'acknowledged records were logged' '
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

# phase_of K: the phase that wrote journal record K - 1, the last one a
# cut before record K keeps.
phase_of () {
	local k ph=0
	for k in $phase_starts; do
		[ "$1" -le "$k" ] && break
		ph=$((ph + 1))
	done
	echo "$((ph > 0 ? ph : 1))"
}

# check_cut K [REPLAY-OPTION...]: replay the journal up to K, mount,
# verify, unmount.
check_cut () {
	local k=$1 uflag= before cut_paths= s n
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
	nrs_log_since_mount | grep -i -E "recover|cut|torn|publish|broken" | tail -n 5
	for s in $streams; do
		if [ -e "$MNT/k/$s" ]; then
			cut_paths="$cut_paths $MNT/k/$s"
		elif grep -q "^$s " "$TRASH/ack.cut"; then
			echo "$s: records acknowledged before the cut, but no stream"
			nrs_umount
			return 1
		fi
	done
	if [ -n "$cut_paths" ] && ! verify_streams $cut_paths; then
		echo "# keep the evidence with NRS_KEEP_TRASH=1 and NRS_POWER_SEED=$seed"
		nrs_umount
		return 1
	fi
	n=$(sed -n 's/^nrs-verify: ok, \([0-9]*\) records$/\1/p' "$TRASH/verify.out")
	[ -n "$cut_paths" ] && records_verified=$((records_verified + ${n:-0}))
	n=$(nrs_log_since_mount | sed -n 's/.*recovery: re-published \([0-9]*\) WAL records.*/\1/p')
	records_republished=$((records_republished + ${n:-0}))
	cuts_checked=$((cuts_checked + 1))
	nrs_umount
}

records=$(journal_records)
# shellcheck disable=SC2086 # the landmarks are words
points=$(nrs_cut_points "$seed" "$records" "$cuts" $landmarks)
for k in $points; do
	test_expect_success "power cut before record $k of $records (phase $(phase_of $k))" '
		check_cut $k
	'
done

# U1 of src/core/core.c: a daemon that exited 0 after a clean unmount left
# nothing only in the page cache.
for k in $clean_ends; do
	test_expect_success "after the clean unmount at record $k, a power cut changes no file" '
		rm -rf "$TRASH/cut" &&
		nrs-powerreplay "$journal" $k "$TRASH/cut" &&
		disk_sums "$TRASH/cut" >"$TRASH/sums.cut" &&
		test_cmp "$TRASH/sums.$k" "$TRASH/sums.cut"
	'
done

# The negative control: a disk ignoring the WAL's fdatasync loses
# acknowledged records, and the checks above must say so.
test_expect_success 'a disk that ignores the WAL fdatasync loses acknowledged records, and this test sees it' '
	! check_cut $records -L wal/ >"$TRASH/control.out" 2>&1 &&
	cat "$TRASH/control.out" &&
	grep -E "VIOLATION|no stream|nrs_mount|Input/output" "$TRASH/control.out"
'

echo "# power cuts checked: $cuts_checked ($phases phases ending:$plan; unsynced=$unsynced, seed $seed); records verified: $records_verified; re-published at mount: $records_republished"
test_done
