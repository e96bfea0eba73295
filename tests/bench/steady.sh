#!/usr/bin/env bash
# tests/bench/steady.sh: the steady-state run of `make bench` (issue 5,
# "Performance"): does the disk stay bounded when a retention of a few
# seconds is in force and appends never stop, and what does the daemon cost
# meanwhile?
#
# For each object store (the embedded directory DATA/objects, and S3 served
# by a real s3rver, tests/fixtures/s3/s3rver.sh) it mounts nereusfs on a scratch
# directory, sets user.nereus.retention.ms on the directory of the streams,
# and appends at a fixed rate (nrs-bench --rate: STREAMS writers, one
# stream each) for SECONDS, then keeps watching for DRAIN seconds with no
# appends.  Every INTERVAL seconds it samples
#   wal      bytes on disk under DATA/wal
#   objects  bytes on disk under DATA/objects, or the bucket's directory in
#            s3rver's data directory (what the bucket holds, s3rver's own
#            metadata files included)
#   meta     meta.db and its -wal and -shm files
#   live     the sum over the streams of head - start (what retention keeps
#            readable; the rest of the object bytes await GC or belong to
#            generations that compaction replaced)
#   drain    gc_draining_bytes: objects past their use, in the grace period
#   cpu      the daemon's user+system time over the interval, in % of one
#            core (/proc/PID/stat)
#   rss      the daemon's VmRSS (/proc/PID/status)
#   cache    cache_memory_bytes: what of that the block cache holds
#            (-o cache_size, 64 MiB by default)
# "On disk" is allocated bytes (du -B1), what df sees.
#
# The summary compares the largest sizes with a model of the bound, where
# R is the total append rate, A an age-triggered object (rate * materialize
# age, the size objects are made at here) and G the largest object
# retention must keep whole, since it cuts at object ends (rounded down to
# a page, lifecycle.c L2; the appends here are whole pages): A, or while
# compaction merges such objects (A below compact_size / 4, compaction.c
# CP1) a merged object of compact_size / 4:
#   objects: R * (retention + materialize age + grace + 1.5 s of lifecycle
#            ticks) + STREAMS * G, and while compaction merges, also the
#            generations it replaced, waiting out the grace period: per
#            stream at most one merge per new object, each leaving G + A,
#            so STREAMS * (G + A) * (grace + 0.5 s) / materialize age
#   wal:     one segment + R * (materialize age + 1 s): the open segment,
#            plus the previous one until its last range is materialized
# "live / R" is how many seconds of appends retention actually kept at
# most (the retention asked for is a minimum).  "levels off" sets the
# largest value in the last third of the append phase against the middle
# third: "yes" within 10 % + 1 MiB, and the difference in MiB.
# "unneeded objects left" counts, after the unmount and when sqlite3 is at
# hand, the rows of meta.db still prepared (an upload never published: an
# orphan until the next mount, materializer.c MZ6) or quarantined: bytes the
# store holds that no GC pass of that mount deletes; "publish_failed" counts
# the daemon's log lines for failed object publications, the usual cause.
#
# These are figures to read, not a test: the exit status is 0 whatever they
# are, 1 when the run itself went wrong (the daemon died, an append failed),
# 2 when it could not start (no daemon, no FUSE).  A store whose server is
# missing (s3rver not installed) is reported n/a.
#
# Environment (defaults in brackets):
#   NEREUSFS            the daemon [./nereusfs]
#   NRS_BENCH           the load generator [tests/bench/nrs-bench]
#   NRS_S3RVER_SH       tests/fixtures/s3/s3rver.sh [beside this script]
#   NRS_S3RVER          s3rver's package directory (s3rver.sh's default)
#   STEADY_STORES       dir, s3 or both ["dir s3"]
#   STEADY_SECONDS      seconds of appends per store [180]
#   STEADY_DRAIN        seconds watched after the appends stop [15]
#   STEADY_INTERVAL     seconds between samples [5]
#   STEADY_STREAMS      streams, one writer each [4]
#   STEADY_RATE         bytes per second per stream [1048576]
#   STEADY_SIZE         bytes per append [65536]
#   STEADY_RETENTION_MS user.nereus.retention.ms on the streams' directory [5000]
#   STEADY_GRACE_MS     -o gc_grace_ms [2000]
#   STEADY_AGE_MS       -o materialize_age_ms [1000]
#   STEADY_SEGMENT      -o wal_segment_size [67108864, the daemon's default]
#   STEADY_COMPACT      -o compact_size [67108864, the daemon's default;
#                       0 turns compaction off]
#   NEREUSFS_OPTS       more daemon options, e.g. "-o object_size=4194304"
#   BENCH_TMPDIR        where the scratch dir goes [/var/tmp]
#   STEADY_KEEP=1       keep the scratch dir (daemon logs, samples)
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
NEREUSFS=${NEREUSFS:-./nereusfs}
NRS_BENCH=${NRS_BENCH:-tests/bench/nrs-bench}
NRS_S3RVER_SH=${NRS_S3RVER_SH:-$here/../fixtures/s3/s3rver.sh}
STORES=${STEADY_STORES:-dir s3}
SECONDS_LOAD=${STEADY_SECONDS:-180}
DRAIN=${STEADY_DRAIN:-15}
INTERVAL=${STEADY_INTERVAL:-5}
STREAMS=${STEADY_STREAMS:-4}
RATE=${STEADY_RATE:-1048576}
SIZE=${STEADY_SIZE:-65536}
RET_MS=${STEADY_RETENTION_MS:-5000}
GRACE_MS=${STEADY_GRACE_MS:-2000}
AGE_MS=${STEADY_AGE_MS:-1000}
SEGMENT=${STEADY_SEGMENT:-67108864}
COMPACT=${STEADY_COMPACT:-67108864}
BENCH_TMPDIR=${BENCH_TMPDIR:-/var/tmp}

die() { echo "steady: $*" >&2; exit 2; }
note() { echo "steady: $*" >&2; }
. "$here/lib.sh"	# unmount, mount_fs

for v in SECONDS_LOAD DRAIN INTERVAL STREAMS RATE SIZE RET_MS GRACE_MS AGE_MS SEGMENT COMPACT; do
	[[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, not '${!v}'"
done
[ "$INTERVAL" -ge 1 ] && [ "$STREAMS" -ge 1 ] && [ "$SECONDS_LOAD" -ge 1 ] ||
	die "STEADY_INTERVAL, STEADY_STREAMS and STEADY_SECONDS must be at least 1"
for s in $STORES; do
	case $s in dir|s3) ;; *) die "unknown store '$s' in STEADY_STORES (dir, s3)" ;; esac
done
[ -x "$NEREUSFS" ] || die "no daemon at $NEREUSFS"
[ -x "$NRS_BENCH" ] || die "no load generator at $NRS_BENCH (run 'make bench-steady')"
command -v fusermount3 >/dev/null || die "fusermount3 not found (apt-get install fuse3)"
command -v setfattr >/dev/null && command -v getfattr >/dev/null ||
	die "setfattr/getfattr not found (apt-get install attr)"

work=$(mktemp -d "$BENCH_TMPDIR/nrs-steady.XXXXXX") || die "cannot make a scratch dir in $BENCH_TMPDIR"
nrs_pid= bench_pid= s3dir= mnt=
clk=$(getconf CLK_TCK)

# Stop whatever of one store's run is still there: writers, mount, s3rver.
stop_store() {
	if [ -n "$bench_pid" ]; then
		kill -TERM "$bench_pid" 2>/dev/null
		wait "$bench_pid" 2>/dev/null
		bench_pid=
	fi
	[ -n "$mnt" ] && unmount "$mnt" "$nrs_pid"
	nrs_pid=
	if [ -n "$s3dir" ]; then
		sh "$NRS_S3RVER_SH" stop "$s3dir"
		s3dir=
	fi
}

cleanup() {
	stop_store
	if [ "${STEADY_KEEP:-0}" = 1 ]; then
		note "kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---- sampling --------------------------------------------------------------
disk() { # PATH... -> allocated bytes (0 for what does not exist)
	local n
	n=$(du -s -B1 -c "$@" 2>/dev/null | tail -n 1 | cut -f1)
	echo "${n:-0}"
}

cpu_ticks() { # PID -> utime + stime in clock ticks
	local rest
	rest=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return; }
	rest=${rest##*) }	# the command name may hold spaces
	awk '{ print $12 + $13 }' <<<"$rest"
}

rss_bytes() { # PID
	awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$1/status" 2>/dev/null || echo 0
}

metric() { # NAME (from .nereus/metrics of the current mount)
	awk -v k="nereus_$1" '$1 == k { print $2; exit }' "$mnt/.nereus/metrics" 2>/dev/null
}

live_bytes() { # DIR: sum over its streams of head - start
	local f h s sum=0
	for f in "$1"/*; do
		[ -f "$f" ] || continue
		h=$(getfattr --only-values -n user.nereus.head "$f" 2>/dev/null) || continue
		s=$(getfattr --only-values -n user.nereus.start "$f" 2>/dev/null) || continue
		sum=$((sum + h - s))
	done
	echo "$sum"
}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# ---- one store -------------------------------------------------------------
declare -A SUM	# SUM[store,key]: the summary figures
failed=0

run_store() { # dir|s3
	local store=$1 base data opts objdir out line k
	local t0 now next tick0 tick1 prev_t prev_tick cpu rss wal obj meta live drain cache phase
	base=$work/$store
	local samples=$base/samples
	mkdir -p "$base/mnt" && mkdir -m 700 "$base/data" || die "cannot make $base"
	data=$base/data mnt=$base/mnt
	opts="data=$data,gc_grace_ms=$GRACE_MS,materialize_age_ms=$AGE_MS"
	opts="$opts,wal_segment_size=$SEGMENT,compact_size=$COMPACT"
	objdir=$data/objects
	if [ "$store" = s3 ]; then
		s3dir=$base/s3
		if ! out=$(NRS_S3RVER_OWNER=$$ sh "$NRS_S3RVER_SH" start "$s3dir" 2>"$base/s3rver.err"); then
			note "s3: n/a: s3rver did not start (cd tests/fixtures/s3 && npm ci):"
			sed 's/^/  | /' "$base/s3rver.err" >&2
			s3dir=
			SUM[$store,na]=1
			return 0
		fi
		eval "$out"
		export AWS_ACCESS_KEY_ID=$NRS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$NRS_S3_SECRET_KEY
		opts="$opts,s3=$NRS_S3_URL"
		objdir=$s3dir/data/${NRS_S3_URL##*/}
	fi
	if ! mount_fs nrs_pid "$mnt" "$base/nereusfs.log" "$NEREUSFS" -f ${NEREUSFS_OPTS:-} -o "$opts" "$mnt"; then
		note "$store: nereusfs did not mount; its log:"
		sed 's/^/  | /' "$base/nereusfs.log" >&2
		exit 2
	fi
	mkdir "$mnt/steady" && setfattr -n user.nereus.retention.ms -v "$RET_MS" "$mnt/steady" ||
		die "$store: cannot set user.nereus.retention.ms on $mnt/steady"

	SUM[$store,load0]=$(cut -d' ' -f1-3 /proc/loadavg)
	echo
	echo "== $store: $(if [ "$store" = s3 ]; then echo "S3 (s3rver), bucket dir $objdir"; else echo "embedded store, $objdir"; fi)"
	printf '%6s %-5s %9s %9s %9s %9s %9s %6s %8s %9s\n' \
		t_s phase wal_MiB obj_MiB meta_MiB live_MiB drain_MiB cpu_% rss_MiB cache_MiB
	"$NRS_BENCH" --dir "$mnt/steady" --name s --writers "$STREAMS" --size "$SIZE" \
		--rate "$RATE" --seconds "$SECONDS_LOAD" >"$base/bench.out" 2>"$base/bench.err" &
	bench_pid=$!
	t0=$EPOCHREALTIME
	prev_t=$t0 prev_tick=$(cpu_ticks "$nrs_pid")
	tick0=$prev_tick
	: >"$samples"
	next=$INTERVAL
	while :; do
		now=$(awk -v a="$EPOCHREALTIME" -v b="$t0" 'BEGIN { print a - b }')
		sleep "$(awk -v n="$next" -v t="$now" 'BEGIN { d = n - t; printf "%.3f", (d > 0 ? d : 0) }')"
		if ! kill -0 "$nrs_pid" 2>/dev/null; then
			note "$store: nereusfs died during the run; the end of its log:"
			tail -n 30 "$base/nereusfs.log" | sed 's/^/  | /' >&2
			failed=1
			break
		fi
		now=$EPOCHREALTIME
		tick1=$(cpu_ticks "$nrs_pid")
		cpu=$(awk -v d="$((tick1 - prev_tick))" -v c="$clk" -v a="$now" -v b="$prev_t" \
			'BEGIN { printf "%.1f", 100 * d / c / (a - b) }')
		prev_t=$now prev_tick=$tick1
		rss=$(rss_bytes "$nrs_pid")
		wal=$(disk "$data/wal")
		obj=$(disk "$objdir")
		meta=$(disk "$data"/meta.db "$data"/meta.db-wal "$data"/meta.db-shm)
		live=$(live_bytes "$mnt/steady")
		drain=$(metric gc_draining_bytes)
		cache=$(metric cache_memory_bytes)
		phase=load
		[ "$next" -gt "$SECONDS_LOAD" ] && phase=drain
		echo "$next $phase $wal $obj $meta $live ${drain:-0} $cpu $rss ${cache:-0}" >>"$samples"
		printf '%6s %-5s %9s %9s %9s %9s %9s %6s %8s %9s\n' "$next" "$phase" \
			"$(mib "$wal")" "$(mib "$obj")" "$(mib "$meta")" "$(mib "$live")" \
			"$(mib "${drain:-0}")" "$cpu" "$(mib "$rss")" "$(mib "${cache:-0}")"
		[ "$next" -ge $((SECONDS_LOAD + DRAIN)) ] && break
		next=$((next + INTERVAL))
	done
	SUM[$store,cpu_load]=$(awk '$2 == "load" { s += $8; n++ } END { printf "%.1f", n ? s / n : 0 }' "$samples")
	if ! wait "$bench_pid"; then
		note "$store: appends failed: $(head -c 300 "$base/bench.err")"
		failed=1
	fi
	line=$(cat "$base/bench.out")
	bench_pid=
	SUM[$store,delivered]=$(sed -n 's/.*mbps=\([0-9.]*\).*/\1/p' <<<"$line")
	SUM[$store,p99]=$(sed -n 's/.*p99_us=\([0-9.]*\).*/\1/p' <<<"$line")
	SUM[$store,max_us]=$(sed -n 's/.*max_us=\([0-9.]*\).*/\1/p' <<<"$line")
	for k in append_bytes_total object_upload_bytes_total object_uploads_total \
		 compactions_total retention_trims_total gc_deleted_objects_total \
		 gc_deleted_bytes_total wal_reclaimed_segments_total object_upload_retries_total \
		 object_quarantined_total; do
		SUM[$store,$k]=$(metric "$k")
	done
	SUM[$store,cpu_total]=$(awk -v d="$(( $(cpu_ticks "$nrs_pid") - tick0 ))" -v c="$clk" \
		'BEGIN { printf "%.1f", d / c }')
	SUM[$store,load1]=$(cut -d' ' -f1-3 /proc/loadavg)
	cp "$samples" "$work/samples.$store" 2>/dev/null
	stop_store
	# materializer.c logs it; no metric counts it
	SUM[$store,publish_failed]=$(grep -c 'publishing object .* failed' "$base/nereusfs.log")
	mnt=
	# What the store still holds that no stream needs and GC will not
	# delete in this mount's life: uploads never published (orphans until
	# the next mount, materializer.c MZ6) and quarantined objects.
	if command -v sqlite3 >/dev/null; then
		SUM[$store,left]=$(sqlite3 -separator ' ' "$data/meta.db" \
			"SELECT count(*), coalesce(sum(length), 0) FROM objects WHERE state IN (1, 5)" 2>/dev/null)
	fi
}

# Largest value of column COL over the rows of SAMPLES matching the awk
# condition COND.
col_max() { # SAMPLES COL COND
	awk -v c="$2" "$3"' { if ($c > m) m = $c } END { print m + 0 }' "$1"
}

col_last() { # SAMPLES COL COND
	awk -v c="$2" "$3"' { v = $c } END { print v + 0 }' "$1"
}

# "yes" when the largest value of COL in the last third of the append phase
# is within 10 % + 1 MiB of the largest in the middle third, else "NO"; then
# the difference in MiB.
levels_off() { # SAMPLES COL
	awk -v c="$2" -v L="$SECONDS_LOAD" '
		$2 == "load" && $1 > L / 3 && $1 <= 2 * L / 3 { if ($c > mid) mid = $c; nm++ }
		$2 == "load" && $1 > 2 * L / 3 { if ($c > last) last = $c; nl++ }
		END {
			if (!nm || !nl) { print "n/a"; exit }
			printf "%s (%+.1f)\n", last <= mid * 1.1 + 1048576 ? "yes" : "NO",
				(last - mid) / 1048576
		}' "$1"
}

echo "nereusfs steady state (issue 5): $STREAMS streams x $(mib "$RATE") MiB/s in $SIZE-byte appends" \
	"for ${SECONDS_LOAD}s + ${DRAIN}s idle, per store: $STORES"
echo "  retention.ms=$RET_MS on the streams' directory; -o gc_grace_ms=$GRACE_MS,materialize_age_ms=$AGE_MS," \
	"wal_segment_size=$SEGMENT,compact_size=$COMPACT ${NEREUSFS_OPTS:-}"
echo "  $work on $(findmnt -n -o FSTYPE -T "$work" 2>/dev/null || stat -f -c %T "$work");" \
	"$(nproc) cores; kernel $(uname -r); load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  sizes are allocated bytes; live = sum of head - start; drain = objects in the GC grace period"

for s in $STORES; do
	run_store "$s"
done

# ---- summary ---------------------------------------------------------------
R=$((STREAMS * RATE))
A=$((RATE * AGE_MS / 1000))
G=$A C=0
if [ $((COMPACT / 4)) -gt "$A" ] && [ "$AGE_MS" -gt 0 ]; then
	G=$((COMPACT / 4))
	C=$((STREAMS * (G + A) * (GRACE_MS + 500) / AGE_MS))
fi
obj_model=$((R * (RET_MS + AGE_MS + GRACE_MS + 1500) / 1000 + STREAMS * G + C))
wal_model=$(awk -v r="$R" -v a="$AGE_MS" -v s="$SEGMENT" 'BEGIN { printf "%d", s + r * (a + 1000) / 1000 }')
appended=$((R * SECONDS_LOAD))

echo
echo "summary (MiB unless said; model = the bound the design implies, see the top of tests/bench/steady.sh)"
echo "  model: objects <= $(mib "$obj_model") = R $(mib "$R") MiB/s x $((RET_MS + AGE_MS + GRACE_MS + 1500)) ms" \
	"+ $STREAMS x $(mib "$G") whole objects + $(mib "$C") replaced by compaction in grace;" \
	"wal <= $(mib "$wal_model"); $(mib "$appended") appended per store"
printf '  %-26s' ""
for s in $STORES; do printf '%22s' "$s"; done
echo
row() { # LABEL FUNC
	local label=$1 f=$2 s
	printf '  %-26s' "$label"
	for s in $STORES; do
		if [ -n "${SUM[$s,na]:-}" ] || [ ! -s "$work/samples.$s" ]; then
			printf '%22s' n/a
		else
			printf '%22s' "$($f "$s" "$work/samples.$s")"
		fi
	done
	echo
}
f_walmax() { mib "$(col_max "$2" 3 '$2 == "load"')"; }
f_walidle() { mib "$(col_last "$2" 3 1)"; }
f_walflat() { levels_off "$2" 3; }
f_objmax() { mib "$(col_max "$2" 4 '$2 == "load"')"; }
f_objend() { mib "$(col_last "$2" 4 '$2 == "load"')"; }
f_objidle() { mib "$(col_last "$2" 4 1)"; }
f_objflat() { levels_off "$2" 4; }
f_objmodel() {
	awk -v m="$(col_max "$2" 4 '$2 == "load"')" -v b="$obj_model" \
		'BEGIN { printf "%.2f x", b ? m / b : 0 }'
}
f_livemax() { mib "$(col_max "$2" 6 '$2 == "load"')"; }
f_livesecs() { awk -v l="$(col_max "$2" 6 '$2 == "load"')" -v r="$R" 'BEGIN { printf "%.1f", l / r }'; }
f_drainmax() { mib "$(col_max "$2" 7 '$2 == "load"')"; }
f_metamax() { mib "$(col_max "$2" 5 1)"; }
f_metaflat() { levels_off "$2" 5; }
f_cpu() { echo "${SUM[$1,cpu_load]}"; }
f_cpus() { echo "${SUM[$1,cpu_total]}"; }
f_rssmax() { mib "$(col_max "$2" 9 1)"; }
f_rssflat() { levels_off "$2" 9; }
f_cachemax() { mib "$(col_max "$2" 10 1)"; }
f_rate() { echo "${SUM[$1,delivered]:-?} MB/s"; }
f_p99() { awk -v p="${SUM[$1,p99]:-0}" -v m="${SUM[$1,max_us]:-0}" 'BEGIN { printf "%.1f / %.1f", p / 1e3, m / 1e3 }'; }
f_amp() {
	awk -v u="${SUM[$1,object_upload_bytes_total]:-0}" -v a="${SUM[$1,append_bytes_total]:-0}" \
		'BEGIN { printf "%.2f x", a ? u / a : 0 }'
}
f_m() { echo "${SUM[$1,$M]:-?}"; }
f_left() {
	local v=${SUM[$1,left]:-}
	[ -n "$v" ] || { echo "? (no sqlite3)"; return; }
	echo "${v% *} = $(mib "${v#* }")"
}
row "wal max" f_walmax
row "  ... after idle" f_walidle
row "  levels off" f_walflat
row "objects max" f_objmax
row "  ... end of load" f_objend
row "  ... after idle" f_objidle
row "  max / model" f_objmodel
row "  levels off" f_objflat
row "live max" f_livemax
row "  live max / R (s)" f_livesecs
row "draining max" f_drainmax
row "meta max" f_metamax
row "  levels off" f_metaflat
row "daemon cpu % (load avg)" f_cpu
row "daemon cpu s (whole run)" f_cpus
row "daemon rss max" f_rssmax
row "  levels off" f_rssflat
row "  block cache max" f_cachemax
row "appends delivered" f_rate
row "append p99 / max ms" f_p99
row "uploaded / appended" f_amp
for M in object_uploads_total compactions_total retention_trims_total gc_deleted_objects_total \
	 wal_reclaimed_segments_total object_upload_retries_total object_quarantined_total \
	 publish_failed; do
	row "${M%_total}" f_m
done
row "unneeded objects left" f_left
printf '  %-26s' "load average start/end"
for s in $STORES; do	# a store that never ran (n/a) has no loads
	l0=${SUM[$s,load0]:-n/a} l1=${SUM[$s,load1]:-n/a}
	printf '%22s' "${l0%% *}/${l1%% *}"
done
echo
exit "$failed"
