#!/usr/bin/env bash
# tests/bench/run.sh: the append benchmark behind `make bench`.
#
# Runs the same append loads, case by case and side by side, against
#   a) nereusfs             write() alone: it returns once durable
#   b) plain files          write() + fdatasync() per append, in the
#                           filesystem that holds nereusfs's data directory
#   c) passthrough_ll       libfuse's example, compiled from Debian's
#                           libfuse3-dev, write() + fdatasync(): what FUSE
#                           itself costs
# and prints ops/s, MB/s, p50/p99 latency, the ratios a/b and c/b, and the
# targets of issue 2 next to them.  It measures and prints; it never fails a
# build over a figure (the exit status is non-zero only when the benchmark
# itself could not run).
#
# Cases: 1 KiB appends with 1, 8 and 64 writers each on its own stream, and 8
# writers on one stream; then 1 MiB appends with 1 and 8 writers.  Systems
# alternate within each case so drift on the machine hits all three alike.
#
# Environment:
#   NEREUSFS        the daemon (default: ./nereusfs); missing -> column a n/a
#   NRS_BENCH       the load generator (default: tests/bench/nrs-bench)
#   BENCH_SECONDS   seconds per measurement (default 5; ~16 runs in all)
#   BENCH_TMPDIR    where the scratch dir goes (default /var/tmp); the data
#                   dir, the plain baseline and passthrough's source all sit
#                   in it, so one filesystem serves all three
#   BENCH_CASES     space-separated subset of: 1k-1 1k-8 1k-64 1k-8s 1m-1 1m-8
#   BENCH_SYSTEMS   subset of: a b c (default: a b c)
#   BENCH_RAW       if set, append every raw nrs-bench line to this file
#   BENCH_COND=0    skip the conditional-append comparison (issue 6)
#   BENCH_KEEP=1    keep the scratch dir (and the daemon's log) afterwards
#   NEREUSFS_OPTS   extra options for the daemon, e.g. "-o max_threads=16"
#   PASSTHROUGH_LL  a built passthrough_ll to use instead of compiling one
#   CC              compiler for passthrough_ll (default cc)
set -uo pipefail

NEREUSFS=${NEREUSFS:-./nereusfs}
NRS_BENCH=${NRS_BENCH:-tests/bench/nrs-bench}
BENCH_SECONDS=${BENCH_SECONDS:-5}
BENCH_TMPDIR=${BENCH_TMPDIR:-/var/tmp}
BENCH_CASES=${BENCH_CASES:-1k-1 1k-8 1k-64 1k-8s 1m-1 1m-8}
BENCH_SYSTEMS=${BENCH_SYSTEMS:-a b c}
CC=${CC:-cc}
PT_EXAMPLES=/usr/share/doc/libfuse3-dev/examples

die() { echo "bench: $*" >&2; exit 2; }
note() { echo "bench: $*" >&2; }

[ -x "$NRS_BENCH" ] || die "no load generator at $NRS_BENCH (run 'make bench')"
command -v fusermount3 >/dev/null || die "fusermount3 not found (apt-get install fuse3)"

work=$(mktemp -d "$BENCH_TMPDIR/nrs-bench.XXXXXX") || die "cannot make a scratch dir in $BENCH_TMPDIR"
mkdir -p "$work/data" "$work/mnt" "$work/plain" "$work/pt-src" "$work/pt-mnt" "$work/pt-build"
nrs_pid=
pt_pid=

# Unmount one mount point and wait for its daemon; lazily if it is stuck.
unmount() { # MOUNTPOINT PID
	local mnt=$1 pid=$2 i
	if grep -q " $mnt fuse" /proc/mounts; then
		fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
	elif [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null	# never mounted, or already gone
	fi
	[ -n "$pid" ] || return 0
	for i in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		note "daemon $pid did not exit after unmount; killing it"
		kill -KILL "$pid" 2>/dev/null
	fi
	wait "$pid" 2>/dev/null
	return 0
}

cleanup() {
	unmount "$work/mnt" "$nrs_pid"
	unmount "$work/pt-mnt" "$pt_pid"
	nrs_pid= pt_pid=
	if [ "${BENCH_KEEP:-0}" = 1 ]; then
		note "kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Start a FUSE daemon in the foreground (backgrounded here) and wait until
# its mount is in /proc/mounts with the daemon still alive.  Sets PIDVAR to
# the daemon's pid as soon as it runs, so the EXIT trap can always reach it.
mount_fs() { # PIDVAR MOUNTPOINT LOG CMD...
	local var=$1 mnt=$2 log=$3 i pid
	shift 3
	"$@" >"$log" 2>&1 </dev/null &
	pid=$!
	printf -v "$var" %s "$pid"
	for i in $(seq 100); do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null
			printf -v "$var" %s ""
			return 1
		fi
		grep -q " $mnt fuse" /proc/mounts && return 0
		sleep 0.1
	done
	return 1	# the trap unmounts and reaps it
}

# ---- systems ---------------------------------------------------------------
have_a=0 have_b=0 have_c=0
case " $BENCH_SYSTEMS " in *" b "*) have_b=1 ;; esac

fstype=$(findmnt -n -o FSTYPE -T "$work" 2>/dev/null || stat -f -c %T "$work")
fsdev=$(df -P "$work" | awk 'NR == 2 { print $1 }')
[ "$fstype" = tmpfs ] && note "warning: $work is on tmpfs; fdatasync there costs nothing"

case " $BENCH_SYSTEMS " in *" a "*)
	if [ ! -x "$NEREUSFS" ]; then
		note "no daemon at $NEREUSFS: column a is n/a"
	elif mount_fs nrs_pid "$work/mnt" "$work/nereusfs.log" \
			"$NEREUSFS" -f ${NEREUSFS_OPTS:-} -o "data=$work/data" "$work/mnt"; then
		have_a=1
	else
		note "nereusfs did not mount; its log:"
		sed 's/^/  | /' "$work/nereusfs.log" >&2
	fi
;; esac

case " $BENCH_SYSTEMS " in *" c "*)
	pt=${PASSTHROUGH_LL:-}
	if [ -z "$pt" ]; then
		for f in passthrough_ll.c passthrough_helpers.h; do
			if [ -f "$PT_EXAMPLES/$f" ]; then
				cp "$PT_EXAMPLES/$f" "$work/pt-build/"
			elif [ -f "$PT_EXAMPLES/$f.gz" ]; then
				gzip -dc "$PT_EXAMPLES/$f.gz" >"$work/pt-build/$f"
			fi
		done
		if [ -f "$work/pt-build/passthrough_ll.c" ] && [ -f "$work/pt-build/passthrough_helpers.h" ] &&
		   $CC -O2 -w -o "$work/pt-build/passthrough_ll" "$work/pt-build/passthrough_ll.c" \
			$(pkg-config fuse3 --cflags --libs) 2>"$work/pt-build/cc.log"; then
			pt=$work/pt-build/passthrough_ll
		else
			note "cannot build passthrough_ll from $PT_EXAMPLES (libfuse3-dev): column c is n/a"
			[ -s "$work/pt-build/cc.log" ] && sed 's/^/  | /' "$work/pt-build/cc.log" >&2
		fi
	fi
	if [ -n "$pt" ]; then
		if mount_fs pt_pid "$work/pt-mnt" "$work/passthrough_ll.log" \
				"$pt" -f -o "source=$work/pt-src" "$work/pt-mnt"; then
			have_c=1
		else
			note "passthrough_ll did not mount; its log:"
			sed 's/^/  | /' "$work/passthrough_ll.log" >&2
		fi
	fi
;; esac

# ---- measuring -------------------------------------------------------------
declare -A R	# R[case,sys] = nrs-bench output line, or "error"

field() { # LINE KEY -> value or empty
	printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

run_one() { # CASE SYS WRITERS SIZE SAME
	local c=$1 s=$2 n=$3 size=$4 same=$5 dir args out
	case $s in
		a) dir=$work/mnt/$c; args= ;;
		b) dir=$work/plain/$c; args=--sync ;;
		c) dir=$work/pt-mnt/$c; args=--sync ;;
	esac
	[ "$same" = 1 ] && args="$args --same-stream"
	sync	# what the last run left dirty is not this run's cost
	# A wedged file system must not wedge the benchmark: bounded wait.
	if out=$(timeout -k 10 "$(awk -v s="$BENCH_SECONDS" 'BEGIN { printf "%d", s * 3 + 60 }')" \
			"$NRS_BENCH" --dir "$dir" --writers "$n" --size "$size" \
			--seconds "$BENCH_SECONDS" $args 2>"$work/err"); then
		R[$c,$s]=$out
	else
		R[$c,$s]=error
		note "$c on $s failed: $(head -c 300 "$work/err")"
	fi
	[ -n "${BENCH_RAW:-}" ] && echo "case=$c sys=$s $out" >>"$BENCH_RAW"
	rm -rf "$dir"	# keep the disk footprint to one case
}

case_params() { # CASE -> "WRITERS SIZE SAME LABEL"
	case $1 in
		1k-1)  echo "1 1024 0 1KiB,1w" ;;
		1k-8)  echo "8 1024 0 1KiB,8w" ;;
		1k-64) echo "64 1024 0 1KiB,64w" ;;
		1k-8s) echo "8 1024 1 1KiB,8w,1str" ;;
		1m-1)  echo "1 1048576 0 1MiB,1w" ;;
		1m-8)  echo "8 1048576 0 1MiB,8w" ;;
		*) return 1 ;;
	esac
}

for c in $BENCH_CASES; do
	case_params "$c" >/dev/null || die "unknown case '$c'"
done

echo "nereusfs append benchmark: ${BENCH_SECONDS}s per run; $work on $fstype ($fsdev); $(nproc) cores; kernel $(uname -r)"
echo "  a = nereusfs (write() is durable)   b = plain files + fdatasync per write   c = passthrough_ll + fdatasync per write"
[ $have_a = 1 ] || echo "  a: n/a (daemon missing or did not mount)"
[ $have_c = 1 ] || echo "  c: n/a (passthrough_ll missing or did not mount)"

for c in $BENCH_CASES; do
	read -r n size same label <<<"$(case_params "$c")"
	for s in a b c; do
		v=have_$s
		[ "${!v}" = 1 ] && run_one "$c" "$s" "$n" "$size" "$same"
	done
done

# Issue 6: conditional appends through the ioctl against plain O_APPEND
# writes, on nereusfs alone, 1 and 8 writers each on its own stream; the
# two alternate so that drift hits both.
declare -A CND=()
if [ $have_a = 1 ] && [ "${BENCH_COND:-1}" = 1 ]; then
	for n in 1 8; do
		for mode in append expect; do
			flag=; [ $mode = expect ] && flag=--expect
			dir=$work/mnt/cond-$mode-$n
			mkdir -p "$dir" || continue
			CND[$n,$mode]=$("$NRS_BENCH" --dir "$dir" --writers "$n" --size 1024 \
				--seconds "$BENCH_SECONDS" --name c $flag 2>>"$work/bench.err") ||
				CND[$n,$mode]=error
			[ -n "${BENCH_RAW:-}" ] && echo "case=cond-$n-$mode ${CND[$n,$mode]}" >>"$BENCH_RAW"
			rm -rf "$dir"
		done
	done
fi

if [ $have_a = 1 ] && ! kill -0 "$nrs_pid" 2>/dev/null; then
	note "nereusfs died during the run; the end of its log:"
	tail -n 30 "$work/nereusfs.log" | sed 's/^/  | /' >&2
fi

# ---- report ----------------------------------------------------------------
# ratio X Y: X/Y to two places, or "-" when either is missing or zero
ratio() { awk -v x="$1" -v y="$2" 'BEGIN { if (x == "" || y == "" || y + 0 == 0) print "-"; else printf "%.2f", x / y }'; }
ge() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x != "-" && x + 0 >= y + 0) }'; }
le() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x != "-" && x + 0 <= y + 0) }'; }

echo
printf '%-14s %-3s %10s %9s %10s %10s %7s %7s  %s\n' \
	case sys ops/s MB/s p50_us p99_us x_b x_c "target (issue 2): met?"
for c in $BENCH_CASES; do
	read -r n size same label <<<"$(case_params "$c")"
	declare -A ops=() mbps=() p99=()
	for s in a b c; do
		line=${R[$c,$s]:-}
		if [ -z "$line" ] || [ "$line" = error ]; then
			ops[$s]= mbps[$s]= p99[$s]=
			continue
		fi
		ops[$s]=$(field "$line" ops_s)
		mbps[$s]=$(field "$line" mbps)
		p99[$s]=$(field "$line" p99_us)
	done
	ab=$(ratio "${ops[a]}" "${ops[b]}")
	cb=$(ratio "${ops[c]}" "${ops[b]}")
	ac=$(ratio "${mbps[a]}" "${mbps[c]}")
	p99ab=$(ratio "${p99[a]}" "${p99[b]}")
	target=
	case $c in
		1k-1)
			if ge "$ab" 0.8 && le "$p99ab" 2; then m=yes; elif [ "$ab" = - ]; then m=n/a; else m=no; fi
			target="a >= 0.8x b ($ab), p99 a <= 2x b ($p99ab): $m" ;;
		1k-8)
			if ge "$ab" 1.0; then m=yes; elif [ "$ab" = - ]; then m=n/a; else m=no; fi
			target="a >= 1.0x b ($ab): $m" ;;
		1k-64)
			if ge "$ab" 1.5; then m=yes; elif [ "$ab" = - ]; then m=n/a; else m=no; fi
			target="a >= 1.5x b ($ab): $m" ;;
		1k-8s)
			target="none set (one stream: ordering per stream)" ;;
		1m-*)
			if ge "$ac" 1.0; then m=yes; elif [ "$ac" = - ]; then m=n/a; else m=no; fi
			target="a MB/s >= c MB/s ($ac): $m" ;;
	esac
	first=1
	for s in a b c; do
		line=${R[$c,$s]:-}
		[ -n "$line" ] || continue
		lab=; [ $first = 1 ] && lab=$label
		if [ "$line" = error ]; then
			printf '%-14s %-3s %10s\n' "$lab" "$s" error
		else
			xb=-; xc=-
			[ "$s" != b ] && xb=$(ratio "${ops[$s]}" "${ops[b]}")
			[ "$s" = a ] && xc=$(ratio "${ops[a]}" "${ops[c]}")
			t=; [ $first = 1 ] && t=$target
			printf '%-14s %-3s %10s %9s %10s %10s %7s %7s  %s\n' "$lab" "$s" \
				"${ops[$s]}" "${mbps[$s]}" "$(field "$line" p50_us)" "${p99[$s]}" "$xb" "$xc" "$t"
		fi
		first=0
	done
	unset ops mbps p99
done
echo
echo "x_b, x_c: ops/s relative to b and c (for 1 MiB, ops/s and MB/s ratios are the same)."
if [ ${#CND[@]} -gt 0 ]; then
	echo
	echo "conditional appends (NRS_IOC_EXPECT + write) vs O_APPEND write, 1 KiB, nereusfs (issue 6: ratio close to 1)"
	printf '%-8s %-8s %10s %10s %10s %7s\n' writers mode ops/s p50_us p99_us ratio
	for n in 1 8; do
		for mode in append expect; do
			line=${CND[$n,$mode]:-error}
			if [ "$line" = error ]; then
				printf '%-8s %-8s %10s\n' "$n" "$mode" error
				continue
			fi
			r=-; [ $mode = expect ] && r=$(ratio "$(field "$line" ops_s)" "$(field "${CND[$n,append]:-}" ops_s)")
			printf '%-8s %-8s %10s %10s %10s %7s\n' "$n" "$mode" "$(field "$line" ops_s)" \
				"$(field "$line" p50_us)" "$(field "$line" p99_us)" "$r"
		done
	done
fi
exit 0
