#!/usr/bin/env bash
# tests/bench/recover.sh: the recovery part of `make bench` (issue 15), run
# by run.sh when BENCH_PARTS names recover.
#
# How long `-o recover` takes to rebuild a lost host's data directory from
# the bucket, and how that grows.  The goal of issue 15: time proportional
# to what was written since the last checkpoint, not to history.  For each
# store (s3rver on loopback, and the embedded store in a directory apart,
# -o objects=) and each stream count N (BENCH_REC_STREAMS):
#   history  a fresh bucket; N empty streams created in an object-wal
#            directory (64 at a time: each create returns once its META
#            record is proven, core_metalog.c NS1), then BENCH_REC_BYTES
#            appended across them in 64 KiB appends by 64 threads, with
#            periodic checkpoints (checkpoint_ms=500) and materialization
#            on (materialize_age_ms=1000, 4 materializers); then, once all
#            of it is materialized (nereus_materialize_lag_bytes 0) and a
#            checkpoint covers it (one skipped since: ckpt_service.c KC1),
#            the daemon is killed (-9) and its data directory deleted.  The
#            history is in the bucket as segment objects, the checkpoint
#            names them; the WAL objects that held it are reclaimed.
#   since=0  `nereusfs -o recover` (without -f: the command returns once
#            the mount is there) on a new data directory, timed from the
#            start of the command to its return: right after a checkpoint.
#   since=M  on that mount, with checkpoints off (checkpoint_ms=0,
#            checkpoint_bytes=0) and materialization held off, more bytes
#            appended the same way until M MiB were written since the last
#            checkpoint (BENCH_REC_SINCE, cumulative), all of it only in
#            WAL objects; killed, deleted, recovered and timed again.
# (A checkpoint covers the object WAL only up to what is materialized:
# the index of a range still in WAL objects is rebuilt by reading them,
# walgc.c MZ8.  So what a recovery reads is the object WAL not yet
# materialized at the last checkpoint plus what came since.)
# Each row shows the recovery's wall time, the in-daemon time and what it
# read (its last progress line, wal_object_scan.c RP1: objects, MiB), and
# how many progress lines reached its standard error, which is the
# terminal of a daemon started without -f.  On s3rver (no conditional
# writes) the new owner waits out the old owner's lease first
# (owner_lease_ms=5000 here, core_owner.c), which is in the wall time.
# It prints and never fails over a figure.
#
# Environment: NEREUSFS, BENCH_TMPDIR, NRS_S3RVER_SH, NRS_S3RVER as run.sh;
#   BENCH_REC_STORES   subset of: s3 dir (default: both)
#   BENCH_REC_STREAMS  stream counts (default "1000 10000")
#   BENCH_REC_BYTES    history bytes (default 1073741824: 1 GiB)
#   BENCH_REC_SINCE    MiB written since the last checkpoint, cumulative
#                      (default "64 256")
#   BENCH_KEEP=1       keep the daemons' logs (work/logs)
set -uo pipefail

NEREUSFS=${NEREUSFS:-./nereusfs}
BENCH_TMPDIR=${BENCH_TMPDIR:-/var/tmp}
STORES=${BENCH_REC_STORES:-s3 dir}
STREAMS=${BENCH_REC_STREAMS:-1000 10000}
HIST=${BENCH_REC_BYTES:-1073741824}
SINCE=${BENCH_REC_SINCE:-64 256}
here=$(cd "$(dirname "$0")" && pwd)
S3RVER_SH=${NRS_S3RVER_SH:-$here/../fixtures/s3/s3rver.sh}
MiB=1048576
export LC_ALL=C

note() { echo "bench: $*" >&2; }
. "$here/lib.sh"	# unmount, mount_fs

[ -x "$NEREUSFS" ] || { note "no daemon at $NEREUSFS"; exit 2; }
work=$(mktemp -d "$BENCH_TMPDIR/nrs-rec.XXXXXX") || exit 2
mkdir -p "$work/mnt" "$work/logs"
pid=
s3=
cleanup() {
	unmount "$work/mnt" "$pid"
	pid=
	[ -n "$s3" ] && sh "$S3RVER_SH" stop "$work/s3"
	if [ "${BENCH_KEEP:-0}" = 1 ]; then
		rm -rf "$work/s3" "$work/bucket" "$work/data"
		note "kept the logs in $work/logs"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# The load: python threads, each append a write(2) that returns once
# acknowledged (the GIL is let go in the call).
cat >"$work/load.py" <<'EOF'
import os, sys, threading, time
mode, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
total = int(sys.argv[4]) if len(sys.argv) > 4 else 0
T, CH = 64, 65536
body = os.urandom(CH)
errors = []
def create(w):
    for i in range(w, n, T):
        os.close(os.open("%s/s%d" % (d, i), os.O_CREAT | os.O_WRONLY, 0o644))
def write(w):
    per = total // n
    for i in range(w, n, T):
        fd = os.open("%s/s%d" % (d, i), os.O_WRONLY | os.O_APPEND)
        left = per + (1 if i < total % n else 0)
        while left > 0:
            k = min(left, CH)
            if os.write(fd, body[:k]) != k:
                raise OSError("short write")
            left -= k
        os.close(fd)
def run(f, w):
    try:
        f(w)
    except Exception as e:
        errors.append(e)
t0 = time.monotonic()
ts = [threading.Thread(target=run, args=(create if mode == "create" else write, w)) for w in range(T)]
for t in ts: t.start()
for t in ts: t.join()
el = time.monotonic() - t0
if errors:
    print("load: %s" % errors[0], file=sys.stderr)
    sys.exit(1)
print("seconds=%.2f mbps=%.1f" % (el, total / el / 1e6 if total else 0))
EOF

metric() { sed -n "s/^nereus_$1 //p" "$work/mnt/.nereus/metrics"; }
kv() { sed -n "s/.*\\<$1=\\([^ ]*\\).*/\\1/p" <<<"$2"; }
now() { date +%s.%N; }

# kill -9 the daemon and take its data directory: the host is lost.
lose_host() {
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
	wait "$pid" 2>/dev/null
	pid=
	fusermount3 -u "$work/mnt" 2>/dev/null || fusermount3 -uz "$work/mnt" 2>/dev/null
	rm -rf "$work/data"
	mkdir -m 700 "$work/data"
}

# recover OPTS LOG: time `nereusfs -o recover` into the empty data dir;
# sets pid (the daemon's, from its log lines) and REC (the figures).
recover() {
	local t0 t1 rc line
	t0=$(now)
	"$NEREUSFS" -o "recover,data=$work/data,$1" "$work/mnt" >"$2" 2>&1 </dev/null
	rc=$?
	t1=$(now)
	pid=$(sed -n 's/^nereusfs\[\([0-9]*\)\]: .*/\1/p' "$2" | tail -n 1)
	if [ $rc != 0 ] || ! grep -q " $work/mnt fuse" /proc/mounts; then
		note "recover failed ($rc); its output:"
		sed 's/^/  | /' "$2" >&2
		REC=
		return 1
	fi
	line=$(grep 'recover: progress: done: ' "$2" | tail -n 1)
	REC=$(awk -v a="$t0" -v b="$t1" -v l="$line" \
		-v w="$(sed -n 's/.*owner record: \(.* \)\{0,1\}\(waiting\|watching it for\) \([0-9]*\) ms.*/\3/p' "$2" |
			awk '{ s += $1 } END { print s + 0 }')" -v n="$(grep -c 'recover: progress: ' "$2")" 'BEGIN {
		o = l; sub(/.*objects read /, "", o); sub(/,.*/, "", o)
		m = l; sub(/.*, bytes [0-9]* \(/, "", m); sub(/ MiB.*/, "", m)
		s = l; sub(/.*streams [0-9]*, /, "", s); sub(/ s$/, "", s)
		printf "%.2f %.2f %s %s %s %d", b - a, w / 1000, s, o, m, n }')
}

# write BYTES to the N streams of the mount, through load.py
load() {
	timeout -k 10 1800 python3 "$work/load.py" write "$work/mnt/ow" "$1" "$2" 2>>"$work/logs/load.err"
}

OPTS_BASE="owner_lease_ms=5000,object_wal_timeout_ms=60000"
HOLD="materialize_age_ms=3600000,materialize_bytes=1099511627776"

one_store() { # STORE
	local store=$1 n opts out r m since t hist_s
	for n in $STREAMS; do
		# a fresh bucket
		if [ "$store" = s3 ]; then
			[ -n "$s3" ] && sh "$S3RVER_SH" stop "$work/s3"
			rm -rf "$work/s3"
			s3=
			out=$(NRS_S3RVER_OWNER=$$ sh "$S3RVER_SH" start "$work/s3" 2>"$work/logs/s3rver.log") ||
				{ note "s3rver did not start: the s3 rows are n/a"; return; }
			eval "$out"
			s3=1
			export AWS_ACCESS_KEY_ID=$NRS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$NRS_S3_SECRET_KEY
			opts="$OPTS_BASE,s3=$NRS_S3_URL"
		else
			rm -rf "$work/bucket"
			mkdir -m 700 "$work/bucket"
			opts="$OPTS_BASE,objects=$work/bucket"
		fi
		rm -rf "$work/data"
		mkdir -m 700 "$work/data"
		if ! mount_fs pid "$work/mnt" "$work/logs/history.log" "$NEREUSFS" -f \
				-o "data=$work/data,$opts,checkpoint_ms=500,materialize_age_ms=1000,materializers=4" \
				"$work/mnt"; then
			note "nereusfs did not mount"; sed 's/^/  | /' "$work/logs/history.log" >&2
			return
		fi
		mkdir "$work/mnt/ow"
		setfattr -n user.nereus.profile -v object-wal "$work/mnt/ow"
		r=$(timeout -k 10 1800 python3 "$work/load.py" create "$work/mnt/ow" "$n" 2>>"$work/logs/load.err") ||
			{ note "creating $n streams failed: $(tail -n 1 "$work/logs/load.err")"; return; }
		note "$store: $n streams created in $(kv seconds "$r") s"
		r=$(load "$n" "$HIST") || { note "the history load failed: $(tail -n 1 "$work/logs/load.err")"; return; }
		hist_s=$(kv seconds "$r")
		note "$store: $((HIST / MiB)) MiB appended to $n streams in $hist_s s ($(kv mbps "$r") MB/s)"
		# all of it materialized, then a checkpoint that holds it all: one
		# skipped since (ckpt_service.c KC1)
		t=$(now)
		for _ in $(seq 6000); do
			[ "$(metric materialize_lag_bytes)" = 0 ] && break
			sleep 0.1
		done
		note "$store: materialized $(awk -v a="$t" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s after the appends (lag $(metric materialize_lag_bytes))"
		m=$(metric checkpoints_skipped_total)
		for _ in $(seq 600); do
			[ "$(metric checkpoints_skipped_total)" -gt "$m" ] && break
			sleep 0.1
		done
		echo "rec store=$store streams=$n hist=$HIST ckpts=$(metric checkpoints_total)" >>"$work/logs/raw"
		lose_host
		since=0
		for t in 0 $SINCE; do
			if [ "$t" -gt "$since" ]; then
				r=$(load "$n" $(( (t - since) * MiB ))) ||
					{ note "the load failed: $(tail -n 1 "$work/logs/load.err")"; break; }
				since=$t
				lose_host
			fi
			recover "$opts,$HOLD,checkpoint_ms=0,checkpoint_bytes=0" "$work/logs/recover-$store-$n-$t.log" || break
			printf '%-5s %8s %8s %8s | %8s %8s %8s %8s %9s %6s\n' "$store" "$n" $((HIST / MiB)) "$since" \
				$REC
		done
		lose_host
		unmount "$work/mnt" "$pid"
	done
	if [ -n "$s3" ]; then
		sh "$S3RVER_SH" stop "$work/s3"
		s3=
	fi
}

echo "recovery from the bucket (issue 15): history of $((HIST / MiB)) MiB of object-wal appends over N streams, a checkpoint after it; then M MiB since; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-5s %8s %8s %8s | %8s %8s %8s %8s %9s %6s\n' store streams hist_MiB since_MiB wall_s lease_s daemon_s objects read_MiB lines
for store in $STORES; do
	case $store in
		s3) command -v node >/dev/null || { note "node not found: the s3 rows are n/a"; continue; } ;;
		dir) ;;
		*) note "unknown store '$store'"; continue ;;
	esac
	one_store "$store"
done
echo "  wall_s: the recover command, start to mounted; lease_s: of it, the waits the owner record logged before taking the bucket"
echo "  over (owner.c OR4, OR5; owner_lease_ms=5000: a shorter one lapses on a loaded machine; in lease mode, s3rver, half a lease more to settle is not in it);"
echo "  daemon_s, objects, read_MiB: its last progress line (the checkpoint, then every WAL object read; the time from the end"
echo "  of that wait); lines: progress lines on its stderr (the terminal of a daemon started without -f)."
echo "  Figures on a shared machine: see the load above."

exit 0
