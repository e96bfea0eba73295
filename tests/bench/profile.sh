#!/usr/bin/env bash
# tests/bench/profile.sh: the CPU cost of one append, for issue 16.
#
#   tests/bench/profile.sh [MODE] [CASE...]
#
# Mounts nereusfs (its default configuration) in a scratch directory, runs
# one nrs-bench load per CASE against it, and unmounts (always, also on
# failure).  MODE:
#   ops        (default) ops/s of each case on nereusfs and of its
#              baseline: plain files + fdatasync for 1k-64, O_APPEND on
#              nereusfs for cond-*, fo-* and pw-* (make bench's ratios)
#   callgrind  the daemon runs under valgrind --tool=callgrind; the
#              counters are zeroed just before each load and dumped just
#              after it, so a case's figure is the daemon's instructions
#              during the load divided by the appends it acknowledged
#              (mount, setup and unmount are not counted).  The top
#              functions by inclusive instructions per append follow.
#              Under valgrind the daemon runs on one core, many times
#              slower, so batches are larger than at full speed: compare
#              figures of one mode only.
#   perf       perf record -e cpu-clock -g on the daemon during each load
#              (these machines have no hardware counters); perf report's
#              top self-time symbols follow.
# CASE: 1k-64 (64 writers, 1 KiB O_APPEND, a stream each), cond-1 and
# cond-8 (1 KiB conditional appends, NRS_IOC_EXPECT + write, 1 and 8
# writers), fo-1 and fo-8 (one NRS_IOC_EXPECT with NRS_EXPECT_FOLLOW, then
# write()s), pw-1 and pw-8 (the one-call conditional append: pwrite at
# the head on a handle without O_APPEND, 1 and 8 writers).  Default:
# 1k-64 cond-1 cond-8.
#
# Environment: NEREUSFS (default ./nereusfs), NEREUSFS_OPTS (extra daemon
# options, e.g. "-o max_threads=8"), NRS_BENCH (default
# tests/bench/nrs-bench), PROFILE_SECONDS (seconds per load: 3, or 10
# under callgrind), PROFILE_TMPDIR (default $TMPDIR or /var/tmp),
# PROFILE_KEEP=1 keeps the scratch directory (callgrind.out.*, perf.data).
# Run it from a build directory after `make tests/bench/nrs-bench`;
# configure without --enable-debug, as for make bench.
set -uo pipefail

NEREUSFS=${NEREUSFS:-./nereusfs}
NRS_BENCH=${NRS_BENCH:-tests/bench/nrs-bench}
TMPBASE=${PROFILE_TMPDIR:-${TMPDIR:-/var/tmp}}
MODE=ops
case ${1:-} in ops|callgrind|perf) MODE=$1; shift ;; esac
CASES=${*:-1k-64 cond-1 cond-8}
if [ "$MODE" = callgrind ]; then SECS=${PROFILE_SECONDS:-10}; else SECS=${PROFILE_SECONDS:-3}; fi
export LC_ALL=C

die() { echo "profile: $*" >&2; exit 2; }
note() { echo "profile: $*" >&2; }
[ -x "$NEREUSFS" ] || die "no daemon at $NEREUSFS"
[ -x "$NRS_BENCH" ] || die "no load generator at $NRS_BENCH (make tests/bench/nrs-bench)"
case $MODE in
	callgrind) command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
			die "valgrind (callgrind) not installed" ;;
	perf) command -v perf >/dev/null || die "perf not installed" ;;
esac
for c in $CASES; do
	case $c in 1k-64|cond-1|cond-8|fo-1|fo-8|pw-1|pw-8) ;; *) die "unknown case '$c'" ;; esac
done

work=$(mktemp -d "$TMPBASE/nrs-profile.XXXXXX") || die "cannot make a scratch dir in $TMPBASE"
mkdir -p "$work/mnt" "$work/plain" && mkdir -m 700 "$work/data"
nrs_pid=
perf_pid=
. "$(dirname "$0")/lib.sh"	# unmount, mount_fs
cleanup() {
	[ -n "$perf_pid" ] && kill "$perf_pid" 2>/dev/null && wait "$perf_pid" 2>/dev/null
	unmount "$work/mnt" "$nrs_pid"
	if [ "${PROFILE_KEEP:-0}" = 1 ]; then note "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

run=("$NEREUSFS" -f ${NEREUSFS_OPTS:-} -o "data=$work/data" "$work/mnt")
if [ "$MODE" = callgrind ]; then
	run=(valgrind --tool=callgrind --collect-atstart=yes --fair-sched=yes
	     --callgrind-out-file="$work/callgrind.out.%p" "${run[@]}")
fi
mount_fs nrs_pid "$work/mnt" "$work/daemon.log" "${run[@]}" ||
	{ sed 's/^/  | /' "$work/daemon.log" >&2; die "nereusfs did not mount"; }
# under valgrind, the daemon's pid is the valgrind process's own
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
metric() { awk -v k="nereus_$1" '$1 == k { print $2 }' "$work/mnt/.nereus/metrics"; }

bench() { # DIR ARGS... -> nrs-bench's line
	local dir=$1
	shift
	mkdir -p "$dir"
	timeout -k 10 $((SECS * 3 + 120)) "$NRS_BENCH" --dir "$dir" --size 1024 --seconds "$SECS" "$@"
}

case_args() { # CASE -> nrs-bench arguments of the nereusfs load
	case $1 in
		1k-64) echo "--writers 64" ;;
		cond-1) echo "--writers 1 --expect --name c" ;;
		cond-8) echo "--writers 8 --expect --name c" ;;
		fo-1) echo "--writers 1 --follow --name c" ;;
		fo-8) echo "--writers 8 --follow --name c" ;;
		pw-1) echo "--writers 1 --pwrite --name c" ;;
		pw-8) echo "--writers 8 --pwrite --name c" ;;
	esac
}

n=0
for c in $CASES; do
	n=$((n + 1))
	a0=$(metric appends_total) b0=$(metric batches_total) q0=$(metric publications_total)
	read -r -a args <<<"$(case_args "$c")"
	case $MODE in
	ops)
		line=$(bench "$work/mnt/$c" "${args[@]}") || { note "$c failed"; continue; }
		a1=$(metric appends_total) b1=$(metric batches_total) q1=$(metric publications_total)
		case $c in
			1k-64) base=$(bench "$work/plain/$c" --writers 64 --sync) ; bl=b ;;
			cond-*|fo-*|pw-*) base=$(bench "$work/mnt/$c-append" --writers "${c#*-}" --name c) ; bl=append ;;
		esac
		awk -v c="$c" -v a="$(field "$line" ops_s)" -v b="$(field "$base" ops_s)" -v bl="$bl" \
			-v p="$(field "$line" p50_us)" \
			'BEGIN { printf "%-7s nereusfs %9.0f ops/s (p50 %s us)   %-6s %9.0f ops/s   ratio %.2f\n", c, a, p, bl, b, b ? a / b : 0 }'
		;;
	callgrind)
		callgrind_control --zero "$nrs_pid" >/dev/null 2>&1 || die "callgrind_control -z failed"
		line=$(bench "$work/mnt/$c" "${args[@]}") || { note "$c failed"; continue; }
		callgrind_control --dump="$c" "$nrs_pid" >/dev/null 2>&1 || die "callgrind_control -d failed"
		a1=$(metric appends_total) b1=$(metric batches_total) q1=$(metric publications_total)
		ops=$(field "$line" ops)
		f=$work/callgrind.out.$nrs_pid.$n	# the n-th dump
		[ -f "$f" ] || die "no callgrind dump $f"
		total=$(sed -n 's/^summary: //p; s/^totals: //p' "$f" | head -1 | awk '{ print $1 }')
		callgrind_annotate --inclusive=yes --threshold=100 "$f" 2>/dev/null >"$work/annotate.$c"
		# the materializer's threads hash and copy every byte in the
		# background (and valgrind hides SHA-NI from OpenSSL): shown apart
		incl() { # REGEX -> inclusive instructions of the functions it names
			awk -v re="$1" 'match($0, re) {
				k = substr($0, RSTART, RLENGTH); v = $1; gsub(",", "", v)
				if (v + 0 > m[k]) m[k] = v + 0 }
			END { for (k in m) s += m[k]; print s + 0 }' "$work/annotate.$c"
		}
		mat=$(incl 'mat_worker.c:(builder_main|uploader_main) ')
		pub=$(incl 'meta.c:nrs_meta_publish ')
		awk -v c="$c" -v t="$total" -v m="$mat" -v o="$ops" -v s="$(field "$line" ops_s)" \
			'BEGIN { printf "%-7s %d appends (%s/s under valgrind): %.0f daemon instructions per append, %.0f without the materializer threads (%.0f)\n",
				c, o, s, o ? t / o : 0, o ? (t - m) / o : 0, o ? m / o : 0 }'
		awk -v o="$((a1 - a0))" -v b="$((b1 - b0))" -v p="$pub" -v t="$total" -v m="$mat" \
			'BEGIN { if (o && b) printf "        head publication (nrs_meta_publish): %.0f per batch, %.0f per append; the rest: %.0f per append\n",
				p / b, p / o, (t - m - p) / o }'
		awk -v o="$ops" '/^ *[0-9,]+ .*[:(]/ && k < 40 {
				v = $1; gsub(",", "", v); $1 = ""
				if (o) printf "    %9.0f  %s\n", v / o, $0; k++ }' "$work/annotate.$c"
		;;
	perf)
		# for the load's duration (a background perf ignores SIGINT)
		perf record -q -e cpu-clock -g -p "$nrs_pid" -o "$work/perf.$c.data" \
			-- sleep "$SECS" 2>"$work/perf.log" &
		perf_pid=$!
		line=$(bench "$work/mnt/$c" "${args[@]}") || note "$c failed"
		a1=$(metric appends_total) b1=$(metric batches_total) q1=$(metric publications_total)
		wait "$perf_pid" 2>/dev/null; perf_pid=
		echo "$c: $line"
		perf report -i "$work/perf.$c.data" --no-children --sort symbol --stdio 2>/dev/null |
			grep -E '^ +[0-9.]+%' | head -30
		;;
	esac
	# publications_total (PL20): absent from a daemon before it
	awk -v a="$((a1 - a0))" -v b="$((b1 - b0))" -v q0="$q0" -v q1="$q1" \
		'BEGIN { printf "        (%d appends in %d batches on nereusfs, %.1f per batch", a, b, b ? a / b : 0
			if (q1 != "") printf "; %d head publications, %.2f batches each", q1 - q0, (q1 > q0) ? b / (q1 - q0) : 0
			printf ")\n" }'
	rm -rf "$work/mnt/$c" "$work/mnt/$c-append" "$work/plain/$c"
done
