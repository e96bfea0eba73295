#!/usr/bin/env bash
# tests/lint/layers.sh - the layering check (`make check-layers`, and a
# test of `make check`).
#
#	tests/lint/layers.sh		check src/, then plant violations in
#					copies of it and require the check
#					to refuse each one
#	tests/lint/layers.sh --only DIR	check the tree DIR only
#
# Every file under src/ belongs to the layer of its folder.  The layers,
# from the top down (README, "Architecture"), with their rank:
#
#	8 fuse     the FUSE front and main()
#	7 core     handles, namespace, xattrs, virtual files, adapter ioctls
#	7 fsck     the offline checker (a sibling of core)
#	6 bg       background services: materializer, lifecycle, checkpoints
#	5 commit   the commit pipeline
#	4 stream   the stream table, index, reader, recovery
#	3 wal owner  the WAL providers (the object WAL stores its segments
#		   in an object store); the owner record of a bucket
#	2 meta obj the metadata store, the object store
#	1 util     what every layer may use
#
# Rules (each one a line of the report when broken):
#   LY1  an #include "DIR/FILE" names a layer of lower rank, or its own
#        folder; never a higher rank (upward) nor another folder of the
#        same rank (a sibling).  "config.h" and the installed ABI header
#        "nereusfs.h" may be included anywhere.
#   LY2  a header whose name ends in _priv.h is private to its folder.
#   LY3  an include names a file that exists (no bare names that a
#        search path might resolve to another layer's file).
#   LY4  <fuse*.h> only in fuse/; <sqlite3.h> only in meta/; <curl/...>
#        and <libs3.h> only in obj/.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

declare -A rank=([fuse]=8 [core]=7 [fsck]=7 [bg]=6 [commit]=5 [stream]=4
		 [wal]=3 [owner]=3 [meta]=2 [obj]=2 [util]=1)

check() {
	local src=$1 f dir inc idir bad=0 line n
	if [ ! -d "$src" ]; then
		echo "layers: no such folder: $src" >&2
		return 2
	fi
	for f in "$src"/*.[ch]; do
		[ -e "$f" ] || continue
		echo "LY1 ${f#"$src"/}: a file outside every layer folder"
		bad=1
	done
	while IFS= read -r f; do
		dir=${f#"$src"/}
		dir=${dir%%/*}
		if [ -z "${rank[$dir]:-}" ]; then
			echo "LY1 ${f#"$src"/}: folder $dir is not a layer"
			bad=1
			continue
		fi
		n=0
		while IFS= read -r line; do
			n=$((n + 1))
			case $line in
			'#'*include*) ;;
			*) continue ;;
			esac
			if [[ $line =~ ^#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
				inc=${BASH_REMATCH[1]}
				case $inc in
				config.h|nereusfs.h) continue ;;
				esac
				if [[ $inc != */* ]]; then
					echo "LY3 ${f#"$src"/}:$n: \"$inc\" names no layer folder"
					bad=1
					continue
				fi
				if [ ! -e "$src/$inc" ]; then
					echo "LY3 ${f#"$src"/}:$n: \"$inc\" does not exist"
					bad=1
					continue
				fi
				idir=${inc%%/*}
				if [[ $inc == *_priv.h && $idir != "$dir" ]]; then
					echo "LY2 ${f#"$src"/}:$n: $inc is private to $idir/"
					bad=1
					continue
				fi
				[ "$idir" = "$dir" ] && continue
				if [ "${rank[$idir]:-0}" -ge "${rank[$dir]}" ]; then
					if [ "${rank[$idir]:-0}" -eq "${rank[$dir]}" ]; then
						echo "LY1 ${f#"$src"/}:$n: $inc is a sibling layer's ($idir)"
					else
						echo "LY1 ${f#"$src"/}:$n: $inc points up ($dir -> $idir)"
					fi
					bad=1
				fi
			elif [[ $line =~ ^#[[:space:]]*include[[:space:]]*\<([^\>]+)\> ]]; then
				inc=${BASH_REMATCH[1]}
				case $inc in
				fuse*.h|fuse/*)
					[ "$dir" = fuse ] || { echo "LY4 ${f#"$src"/}:$n: <$inc> outside fuse/"; bad=1; } ;;
				sqlite3.h)
					[ "$dir" = meta ] || { echo "LY4 ${f#"$src"/}:$n: <$inc> outside meta/"; bad=1; } ;;
				curl/*|libs3.h)
					[ "$dir" = obj ] || { echo "LY4 ${f#"$src"/}:$n: <$inc> outside obj/"; bad=1; } ;;
				esac
			fi
		done <"$f"
	done < <(find "$src" -mindepth 2 -name '*.[ch]' | LC_ALL=C sort)
	return $bad
}

# Plant one violation in a copy of SRC and require check to refuse it.
plant() {
	local src=$1 file=$2 text=$3 want=$4 tmp out
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/layers.XXXXXX") || return 1
	cp -r "$src" "$tmp/src"
	printf '%s\n' "$text" >>"$tmp/src/$file"
	out=$(check "$tmp/src")
	local rc=$?
	rm -rf "$tmp"
	if [ $rc -eq 0 ] || ! grep -q "^$want " <<<"$out"; then
		echo "FAIL: planting '$text' in $file was not refused ($want)"
		return 1
	fi
	echo "ok: planted '$text' in $file refused: $(head -n1 <<<"$out")"
}

src=$here/../../src
self=1
case ${1:-} in
--only) src=${2:?--only DIR}; self=0 ;;
'') ;;
*) echo "usage: $0 [--only DIR]" >&2; exit 2 ;;
esac

check "$src" || { echo "layers: the tree breaks the layering (above)"; exit 1; }
echo "layers: $(find "$src" -mindepth 2 -name '*.[ch]' | wc -l) files, every include points down"
[ $self -eq 1 ] || exit 0

fail=0
plant "$src" util/log.c '#include "core/core.h"' LY1 || fail=1
plant "$src" obj/objfmt.c '#include "meta/meta.h"' LY1 || fail=1
plant "$src" obj/objstore.c '#include "wal/wal.h"' LY1 || fail=1
plant "$src" wal/walrec.c '#include "stream/stream.h"' LY1 || fail=1
plant "$src" bg/lifecycle.c '#include "fuse/fuse_front.h"' LY1 || fail=1
plant "$src" fuse/main.c '#include "core/core_priv.h"' LY2 || fail=1
plant "$src" bg/materializer.c '#include "core/core_priv.h"' LY2 || fail=1
plant "$src" stream/recovery.c '#include "core/core.h"' LY1 || fail=1
plant "$src" util/log.c '#include "log.h"' LY3 || fail=1
plant "$src" core/core.c '#include <fuse_lowlevel.h>' LY4 || fail=1
plant "$src" stream/reader.c '#include <sqlite3.h>' LY4 || fail=1
exit $fail
