# tests/s3/proc.sh - the process helpers the test servers' scripts share
# (s3rver.sh, moto.sh), sourced by them.  A pid is only signalled while
# its command line still names the server's directory (pids are reused).

# Is pid $1 alive and running with $2 in its command line?
is_ours() {
	[ -n "$1" ] && tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -qF -- "$2"
}

# kill_ours PID DIR: if PID is ours, TERM it, KILL it after 5 s, and wait
# until it is gone.
kill_ours() {
	is_ours "$1" "$2" || return 0
	kill -TERM "$1" 2>/dev/null
	n=0
	while is_ours "$1" "$2" && [ $n -lt 50 ]; do
		sleep 0.1
		n=$((n + 1))
	done
	if is_ours "$1" "$2"; then
		kill -KILL "$1" 2>/dev/null
		while is_ours "$1" "$2"; do
			sleep 0.1
		done
	fi
}

# stop DIR: stop the guard (DIR/guard.pid) and the server (DIR/pid) that
# were started in DIR.  Safe to run twice.
stop() {
	dir=$1
	if [ -f "$dir/guard.pid" ]; then
		g=$(cat "$dir/guard.pid")
		is_ours "$g" "$dir" && kill "$g" 2>/dev/null
		rm -f "$dir/guard.pid"
	fi
	[ -f "$dir/pid" ] || return 0
	kill_ours "$(cat "$dir/pid")" "$dir"
	rm -f "$dir/pid"
	return 0
}

# guard DIR SPID OWNER: in the background, stop server SPID once OWNER is
# gone without stopping it.  It stops this server only, never one a later
# restart started in DIR: it ends as soon as DIR/pid no longer names SPID
# (a stop, also one whose TERM to the guard was lost, or DIR removed).
# Its pid goes to DIR/guard.pid.
guard() {
	(
		trap - EXIT INT TERM HUP
		exec >/dev/null 2>&1 </dev/null
		while kill -0 "$3" 2>/dev/null &&
		      [ "$(cat "$1/pid" 2>/dev/null)" = "$2" ]; do
			sleep 1
		done
		kill_ours "$2" "$1"
	) &
	echo $! >"$1/guard.pid"
}
