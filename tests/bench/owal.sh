#!/usr/bin/env bash
# tests/bench/owal.sh: the object-WAL part of `make bench` (issue 15), run
# by run.sh when BENCH_PARTS names owal.
#
# nereusfs mounted on an s3rver of its own (tests/fixtures/s3/s3rver.sh,
# loopback) with one directory set to user.nereus.profile=object-wal and
# the object WAL's defaults (object_wal_bytes 512 KiB, linger 5 ms, 8 PUTs
# in flight; the last two can be changed, below).  Cases: 1 KiB and 64 KiB appends by 1, 8 and 64 writers,
# each on a stream of its own (nrs-bench, BENCH_SECONDS each): ops/s, MB/s
# and the ack latency (write() alone: it returns once the WAL object is
# proven) p50/p99; and, from the metrics, the WAL objects PUT during the
# case and their mean size.
#
# The raw cost of the same PUTs comes from nrs-putbench (nrs-putbench.c):
# a C loop of THREADS threads putting objects one after another through
# the daemon's own S3 provider (same signatures and headers, digests
# computed once, no HEAD, no FUSE).  First, objects of the flush size
# (512 KiB) with 1, 8 and 64 threads (BENCH_OWAL_RAW_THREADS): MB/s and
# one PUT's p50/p99.  Then beside each case the same loop putting objects
# of that case's mean WAL object size with as many threads as the object
# WAL had PUTs in flight at most (min(writers, 8)).  The targets of issue
# 15, each printed as the ratio of the figure to its bound (<= 1 is met
# for latency, >= 0.8 for MB/s):
#   ack p50 <= linger + 1.5 x PUT p50;  ack p99 <= linger + 3 x PUT p99
#     (PUT: the case's own baseline, objects of its mean size);
#   with 64 writers, MB/s >= 0.8 x the raw PUTs' MB/s at the same
#     concurrency (64 threads putting objects of the case's mean size;
#     beside it the ratio to 64 threads of flush-size PUTs, which 1 KiB
#     appends cannot fill, and to 64 threads each PUTting objects of the
#     append's size, what the writers would get by putting every append
#     themselves).  64 writers of 1 KiB, each waiting for its ack, hold
#     64 KiB in flight, so their MB/s is at most 64 KiB / ack latency
#     (Little's law), whatever the window: the first two baselines keep
#     megabytes in flight.
# Without nrs-putbench (NRS_PUTBENCH) boto3 (boto3_bench.py putlat) is the
# baseline; boto3 is Python, which adds to each PUT.
# It prints and never fails over a figure.
#
# Environment: NEREUSFS, NRS_BENCH, BENCH_SECONDS, BENCH_TMPDIR as run.sh;
# NRS_PUTBENCH (default tests/bench/nrs-putbench);
# BENCH_OWAL_CASES (default "1k-1 1k-8 1k-64 64k-1 64k-8 64k-64");
# BENCH_OWAL_RAW_THREADS (default "1 8 64"; empty: no flush-size table);
# BENCH_OWAL_RAW_PUTS PUTs per thread of that table (default 8, at least
# 32 in all); BENCH_OWAL_LINGER_MS and BENCH_OWAL_INFLIGHT the daemon's
# object_wal_linger_ms and object_wal_inflight (default 5 and 8, the
# defaults), to compare settings side by side.
set -uo pipefail

NEREUSFS=${NEREUSFS:-./nereusfs}
NRS_BENCH=${NRS_BENCH:-tests/bench/nrs-bench}
BENCH_SECONDS=${BENCH_SECONDS:-3}
BENCH_TMPDIR=${BENCH_TMPDIR:-/var/tmp}
NRS_PUTBENCH=${NRS_PUTBENCH:-tests/bench/nrs-putbench}
CASES=${BENCH_OWAL_CASES:-1k-1 1k-8 1k-64 64k-1 64k-8 64k-64}
RAW_THREADS=${BENCH_OWAL_RAW_THREADS-1 8 64}
RAW_PUTS=${BENCH_OWAL_RAW_PUTS:-8}
LINGER_MS=${BENCH_OWAL_LINGER_MS:-5}
INFLIGHT=${BENCH_OWAL_INFLIGHT:-8}
FLUSH=524288
here=$(cd "$(dirname "$0")" && pwd)
S3RVER_SH=${NRS_S3RVER_SH:-$here/../fixtures/s3/s3rver.sh}
export LC_ALL=C

note() { echo "bench: $*" >&2; }
. "$here/lib.sh"	# unmount, mount_fs

[ -x "$NRS_BENCH" ] || { note "no load generator at $NRS_BENCH"; exit 2; }
[ -x "$NEREUSFS" ] || { note "no daemon at $NEREUSFS"; exit 2; }
work=$(mktemp -d "$BENCH_TMPDIR/nrs-owal.XXXXXX") || exit 2
mkdir -p "$work/mnt" "$work/logs"
mkdir -m 700 "$work/data"
pid=
s3=
cleanup() {
	unmount "$work/mnt" "$pid"
	[ -n "$s3" ] && sh "$S3RVER_SH" stop "$work/s3"
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

out=$(NRS_S3RVER_OWNER=$$ sh "$S3RVER_SH" start "$work/s3" 2>"$work/logs/s3rver.log") ||
	{ note "s3rver did not start: the object-WAL part is n/a"; exit 0; }
eval "$out"
s3=1
export AWS_ACCESS_KEY_ID=$NRS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$NRS_S3_SECRET_KEY
mount_fs pid "$work/mnt" "$work/logs/nereusfs.log" "$NEREUSFS" -f \
	-o "data=$work/data,s3=$NRS_S3_URL,materialize_age_ms=3600000,materialize_bytes=1099511627776" \
	-o "object_wal_linger_ms=$LINGER_MS,object_wal_inflight=$INFLIGHT" \
	"$work/mnt" || { note "nereusfs did not mount"; cat "$work/logs/nereusfs.log" >&2; exit 2; }
mkdir "$work/mnt/ow"
setfattr -n user.nereus.profile -v object-wal "$work/mnt/ow"

metric() { sed -n "s/^nereus_$1 //p" "$work/mnt/.nereus/metrics"; }
kv() { sed -n "s/.*\\<$1=\\([^ ]*\\).*/\\1/p" <<<"$2"; }

# raw THREADS COUNT SIZE PREFIX: one baseline line (mbps= p50_ms= p99_ms=)
raw_puts() {
	if [ -x "$NRS_PUTBENCH" ]; then
		NRS_S3_URL=$NRS_S3_URL "$NRS_PUTBENCH" "$@" 2>>"$work/logs/putbench.log"
	else
		NRS_S3_URL=$NRS_S3_URL NRS_S3_ACCESS_KEY=$NRS_S3_ACCESS_KEY NRS_S3_SECRET_KEY=$NRS_S3_SECRET_KEY \
			python3 "$here/boto3_bench.py" putlat "$@" 2>>"$work/logs/boto3.log"
	fi
}
base_name=nrs-putbench
[ -x "$NRS_PUTBENCH" ] || { base_name=boto3; note "no $NRS_PUTBENCH: the PUT baseline is boto3"; }

declare -A RAW	# RAW[threads] = mbps of flush-size PUTs
if [ -n "$RAW_THREADS" ]; then
	echo "raw PUTs on s3rver ($base_name: the daemon's S3 provider, digests computed once, no HEAD): objects of the flush size, 512 KiB"
	printf '%-8s %8s %9s %9s %9s %9s\n' threads PUTs 'PUT/s' 'MB/s' 'PUT p50' 'PUT p99'
	for n in $RAW_THREADS; do
		count=$(( n * RAW_PUTS < 32 ? 32 : n * RAW_PUTS ))
		r=$(raw_puts "$n" "$count" "$FLUSH" "rawflush-$n") || { echo "$n: failed"; continue; }
		RAW[$n]=$(kv mbps "$r")
		printf '%-8s %8s %9s %9s %7sms %7sms\n' "$n" "$count" "$(kv puts_s "$r")" "${RAW[$n]}" \
			"$(kv p50_ms "$r")" "$(kv p99_ms "$r")"
	done
	echo
fi

echo "object WAL benchmark on s3rver (loopback): ${BENCH_SECONDS}s per case; object_wal_bytes 512 KiB, linger ${LINGER_MS} ms, ${INFLIGHT} PUTs in flight; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
printf '%-7s %10s %8s %9s %9s %8s %9s | %9s %9s %9s | %s\n' case ops/s MB/s 'ack p50' 'ack p99' objects 'obj KiB' \
	'PUT p50' 'PUT p99' 'PUT MB/s' 'targets (issue 15)'
for c in $CASES; do
	size=${c%-*} writers=${c#*-}
	case $size in 1k) bytes=1024 ;; 64k) bytes=65536 ;; *) note "bad case $c"; continue ;; esac
	mkdir -p "$work/mnt/ow/$c"
	o0=$(metric object_wal_objects_total) b0=$(metric object_wal_bytes_total)
	r=$("$NRS_BENCH" --dir "$work/mnt/ow/$c" --writers "$writers" --size "$bytes" \
		--seconds "$BENCH_SECONDS" 2>"$work/logs/bench.err") ||
		{ echo "$c: failed: $(grep -m 1 . "$work/logs/bench.err" | sed 's/^nrs-bench: //')"; continue; }
	o1=$(metric object_wal_objects_total) b1=$(metric object_wal_bytes_total)
	objs=$((o1 - o0))
	avg=$(( objs > 0 ? (b1 - b0) / objs : bytes ))
	n=$(( writers < INFLIGHT ? writers : INFLIGHT ))
	raw=$(raw_puts "$n" $((n * 24)) "$avg" "raw-$c") || raw=
	raw_w= raw_a=
	if [ "$writers" -ge 64 ]; then
		raw_w=$(raw_puts "$writers" $((writers * 4)) "$avg" "raww-$c") || raw_w=
		raw_a=$(raw_puts "$writers" $((writers * 8)) "$bytes" "rawa-$c") || raw_a=
	fi
	p50=$(kv p50_us "$r") p99=$(kv p99_us "$r") mb=$(kv mbps "$r")
	rp50=$(kv p50_ms "$raw") rp99=$(kv p99_ms "$raw") rmb=$(kv mbps "$raw")
	t=$(awk -v a="$p50" -v b="$p99" -v m="$mb" -v x="$rp50" -v y="$rp99" -v z="$rmb" \
		-v l="$LINGER_MS" -v w="$writers" -v r="${RAW[$writers]:-}" -v q="$(kv mbps "$raw_w")" -v e="$(kv mbps "$raw_a")" 'BEGIN {
		if (x == "") { print "n/a (no baseline)"; exit }
		s = sprintf("p50 %s (%.1f <= %.1f ms: %.2f), p99 %s (%.1f <= %.1f ms: %.2f)",
			a / 1000 <= l + 1.5 * x ? "yes" : "no", a / 1000, l + 1.5 * x, a / 1000 / (l + 1.5 * x),
			b / 1000 <= l + 3 * y ? "yes" : "no", b / 1000, l + 3 * y, b / 1000 / (l + 3 * y))
		if (w >= 64 && q != "")
			s = s sprintf(", MB/s %s (%.2fx raw PUTs of this size at %d threads; %.2fx flush-size ones; %.2fx PUTs of each append)",
				m >= 0.8 * q ? "yes" : "no", q > 0 ? m / q : 0, w, r > 0 ? m / r : 0, e > 0 ? m / e : 0)
		else if (w >= 64)
			s = s sprintf(", MB/s %s (%.2fx raw)", m >= 0.8 * z ? "yes" : "no", z > 0 ? m / z : 0)
		print s }')
	printf '%-7s %10s %8s %7.1fms %7.1fms %8s %9.1f | %7sms %7sms %9s | %s\n' "$c" "$(kv ops_s "$r")" "$mb" \
		"$(awk -v v="$p50" 'BEGIN { print v / 1000 }')" "$(awk -v v="$p99" 'BEGIN { print v / 1000 }')" \
		"$objs" "$(awk -v v="$avg" 'BEGIN { print v / 1024 }')" "${rp50:-n/a}" "${rp99:-n/a}" "${rmb:-n/a}" "$t"
done
hedges=$(metric object_wal_put_hedges_total) retries=$(metric object_wal_put_retries_total)
echo "  PUTs hedged: ${hedges:-0}, retried: ${retries:-0}.  ack = write() on an object-wal stream (FUSE, ordering, the WAL object's PUT and HEAD, publication)."
exit 0
