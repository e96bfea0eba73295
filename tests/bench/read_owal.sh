# tests/bench/read_owal.sh: the objects part's owal8 case (issue 16),
# sourced by run.sh, whose helpers and arrays it uses (omount, read_cold_warm,
# read_pt, read_medians, RD, NOTE, LOAD).
#
# A cold sequential read of an object-wal stream adopted where the object
# WAL stored it (mat_adopt.c MZ13), on the embedded store with the default
# options (write_once=auto): OWAL_STREAMS writers (8) each append
# READ_BYTES in 1 MiB appends to a stream of its own, all at once, in one
# object-wal directory (nrs-bench), so that every WAL object holds records
# of several streams and a stream's bytes are scattered over many objects,
# a slice of each.  Once every record is adopted (materialize lag 0) the
# daemon is unmounted; each run then mounts it again (an empty block
# cache), drops the kernel's caches, and reads the first writer's stream
# with dd bs=1M, cold then warm, beside passthrough_ll reading its file of
# the same size (run.sh's read_pt).  RD[owal8,...] as read_runs's; how
# many WAL objects the stream's bytes lie in goes to NOTE[read,owal8].
#
#   BENCH_OWAL_STREAMS  streams written at once (8); the setup writes
#                       that many times BENCH_READ_BYTES

OWAL_STREAMS=${BENCH_OWAL_STREAMS:-8}

readowal_runs() {
	local data=$work/odata-owal8 r d=$work/omnt/ow f objs recs
	local -a nc=() nw=() pc=() pw=() gets=() gbytes=() wreads=() loads=()
	[ "$READ_RUNS" -gt 0 ] || return 0
	[ -x "$NRS_BENCH" ] || { note "no load generator at $NRS_BENCH: the owal8 read is n/a"; return 0; }
	f=$d/o8-w000
	omount dir "$data" "" || return
	if ! mkdir "$d" || ! setfattr -n user.nereus.profile -v object-wal "$d" ||
			! timeout -k 10 900 "$NRS_BENCH" --dir "$d" --writers "$OWAL_STREAMS" --size $MiB \
				--name o8 --seconds 900 --ops $((READ_BYTES / MiB)) >/dev/null 2>"$work/logs/owal8.err" ||
			[ "$(stat -c %s "$f")" != "$READ_BYTES" ]; then
		note "cannot write the owal8 read streams: $(head -n 3 "$work/logs/owal8.err")"
		oumount
		return
	fi
	wait_materialized 900
	getfattr --only-values -n user.nereus.index "$f" >"$work/logs/owal8.index" 2>/dev/null
	recs=$(grep -c " adopt:owal/" "$work/logs/owal8.index")
	objs=$(sed -n 's/.* adopt:\(owal\/[^:]*\):.*/\1/p' "$work/logs/owal8.index" | sort -u | wc -l)
	oumount
	for r in $(seq "$READ_RUNS"); do
		omount dir "$data" "" || return
		read_cold_warm "$f"
		oumount
		read_pt
	done
	read_medians owal8
	NOTE[read,owal8]="$OWAL_STREAMS object-wal streams written at once in 1 MiB appends, default options; the one read: $recs of $(wc -l <"$work/logs/owal8.index") ranges adopted, in $objs WAL objects"
	[ -n "${BENCH_RAW:-}" ] && echo "obj=readowal8 store=dir bytes=$READ_BYTES streams=$OWAL_STREAMS nereus_cold=${nc[*]} nereus_warm=${nw[*]} pt_cold=${pc[*]} pt_warm=${pw[*]} gets=${gets[*]} get_bytes=${gbytes[*]} warm_daemon_reads=${wreads[*]} wal_objects=$objs load=${loads[*]}" >>"$BENCH_RAW"
	rm -rf "$data"
	return 0
}
