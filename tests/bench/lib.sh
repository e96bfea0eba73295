# tests/bench/lib.sh: mounting and unmounting for the benchmark scripts,
# sourced by them (bash).  The caller defines note MESSAGE (a line on
# stderr).

# Unmount MOUNTPOINT and wait for its daemon PID; lazily if it is stuck,
# and SIGKILL the daemon if it has not gone 10 s later.
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

# Start a FUSE daemon in the foreground (backgrounded here) and wait until
# its mount is in /proc/mounts with the daemon still alive.  Sets PIDVAR to
# the daemon's pid as soon as it runs, so an EXIT trap can always reach it;
# 1 if the daemon exited or the mount did not appear within 10 s (PIDVAR
# is then set only if the daemon still runs: unmount it).  It polls every
# 20 ms: run.sh times mounts from its return.  (Its own variables are
# named so that no caller's PIDVAR, "pid" in owal.sh and recover.sh, is a
# local of it: one was, and those scripts never had the daemon's pid.)
mount_fs() { # PIDVAR MOUNTPOINT LOG CMD...
	local var=$1 mnt=$2 log=$3 i mfs_pid
	shift 3
	"$@" >"$log" 2>&1 </dev/null &
	mfs_pid=$!
	printf -v "$var" %s "$mfs_pid"
	for i in $(seq 500); do
		if ! kill -0 "$mfs_pid" 2>/dev/null; then
			wait "$mfs_pid" 2>/dev/null
			printf -v "$var" %s ""
			return 1
		fi
		grep -q " $mnt fuse" /proc/mounts && return 0
		sleep 0.02
	done
	return 1
}
