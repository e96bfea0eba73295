# smallfs.sh - a small tmpfs for the data directory, for the tests of a full
# disk (t0310-fulldisk.sh, t0350-xattr-space.sh) and of a small one
# (t0363-smallfs.sh): sourced after lib.sh.
#
# smallfs_mount SIZE NAME mounts a tmpfs of SIZE (as mount -o size=) at
# $SMALL and points $DATA into it.  lib.sh's EXIT trap removes $TRASH with
# --one-file-system, so it would leave the tmpfs mounted: the trap set here
# stops the daemon and unmounts the tmpfs first, then hands over to
# lib.sh's (with the script's exit status).

SMALL=$TRASH/small

command -v mount >/dev/null && command -v umount >/dev/null ||
	nrs_error "mount/umount missing"

small_is_mounted () {
	awk -v m="$SMALL" '$5 == m { found = 1 } END { exit !found }' \
		/proc/self/mountinfo
}

smallfs_mount () {
	mkdir "$SMALL" &&
	mount -t tmpfs -o "size=$1,mode=0700" "$2" "$SMALL" &&
	DATA=$SMALL/data &&
	mkdir -m 700 "$DATA"
}

# Bytes free for unprivileged users on the tmpfs.
smallfs_avail () {
	df -B1 --output=avail "$SMALL" | tail -n 1 | tr -d " "
}

smallfs_cleanup () {
	sf_rc=$?
	set +e
	if [ -n "$NRS_PID" ] && kill -0 "$NRS_PID" 2>/dev/null; then
		fusermount3 -u "$MNT" 2>/dev/null
		nrs_wait_exit 10 || kill -9 "$NRS_PID" 2>/dev/null
		wait "$NRS_PID" 2>/dev/null
		nrs_forget_daemon
	fi
	nrs_detach
	if small_is_mounted; then
		umount "$SMALL" 2>/dev/null || umount -l "$SMALL"
	fi
	(exit $sf_rc)
	nrs_cleanup
}
trap smallfs_cleanup EXIT
