# checkpoint.sh - metadata checkpoints in the object store (bg/checkpoint.c
# KP1-KP7, bg/ckpt_service.c), run once per provider: sourced by
# t0640-checkpoint.sh (embedded store) and t0645-checkpoint-s3.sh (s3rver)
# after lib.sh and the provider's file, which set OBJ_OPTS; the script sets
# CKPT_STORE, the store as tests/helpers/nrs-ckpt names it (dir:PATH or
# s3:URL).
#
# What it checks: a daemon with -o checkpoint_ms writes checkpoints after
# the namespace changes (and none while nothing changes); the one the
# store holds is found and verified by nrs-ckpt, and restored into an
# empty data directory it holds the same namespace, modes, owners and
# user.* xattrs as the daemon's own database at unmount; a restore never
# goes over an existing database; checkpoint_ms=0 and checkpoint_bytes=0
# write none.

OPTS="checkpoint_ms=300$OBJ_OPTS"

ckpt_status () { # FIELD: a field of "checkpoints" in /.nereus/status
	python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["checkpoints"][sys.argv[2]])' \
		"$MNT/.nereus/status" "$1"
}
ckpt_past () { # SEQ: a checkpoint newer than SEQ was stored
	[ "$(ckpt_status last_seq)" -gt "$1" ]
}

# The namespace of a database as rows (no times: a restore keeps them,
# but the daemon's own unmount may touch an inode's atime).
ns_dump () { # DB
	python3 - "$1" <<'PY'
import sqlite3, sys
db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True)
for q in ("SELECT parent, hex(name), ino FROM dirents ORDER BY cookie",
          "SELECT ino, parent, kind, mode, uid, gid, nlink, profile"
          " FROM inodes ORDER BY ino",
          "SELECT ino, hex(name), hex(value) FROM xattrs ORDER BY ino, name",
          "SELECT id, ino, profile, unlinked FROM streams ORDER BY id"):
    for r in db.execute(q):
        print(*r)
PY
}

test_expect_success 'checkpoints follow the namespace, and only when it changed' '
	nrs_mount -o "$OPTS" &&
	mkdir -p "$MNT/kafka/orders" "$MNT/logs" &&
	printf "abc" >>"$MNT/kafka/orders/p0" &&
	printf "defg" >>"$MNT/kafka/orders/p1" &&
	printf "x" >>"$MNT/logs/app" &&
	mv "$MNT/kafka/orders/p1" "$MNT/kafka/orders/p9" &&
	chmod 0600 "$MNT/logs/app" &&
	setfattr -n user.team -v payments "$MNT/kafka/orders/p0" &&
	setfattr -n user.note -v "" "$MNT/kafka" &&
	rm "$MNT/logs/app" && printf "y" >>"$MNT/logs/app2" &&
	s0=$(ckpt_status last_seq) &&
	nrs_wait_for 20 ckpt_past "$s0" &&
	seq=$(ckpt_status last_seq) &&
	echo "# checkpoint $seq, $(ckpt_status bytes) bytes, $(ckpt_status duration_ms) ms, lock $(ckpt_status lock_max_us) us" &&
	test "$(nrs_metric checkpoint_last_seq)" = "$seq" &&
	sleep 1.5 &&	# several periods, nothing changed
	test "$(ckpt_status last_seq)" = "$seq" &&
	test "$(ckpt_status skipped)" -ge 2 &&
	nrs-ckpt find "$CKPT_STORE" >"$TRASH/find" &&
	cat "$TRASH/find" &&
	test "$(cat "$TRASH/find")" = "top $seq pointer $seq"
'

test_expect_success 'a restore into an empty data directory holds the namespace and xattrs' '
	nrs_umount &&
	mkdir -m 700 "$TRASH/r" &&
	nrs-ckpt restore "$CKPT_STORE" "$TRASH/r" >"$TRASH/show" &&
	cat "$TRASH/show" &&
	grep -q "^seq $seq covered [0-9]* epoch 0 db_bytes " "$TRASH/show" &&
	ns_dump "$DATA/meta.db" >"$TRASH/ns.live" &&
	ns_dump "$TRASH/r/meta.db" >"$TRASH/ns.restored" &&
	test -s "$TRASH/ns.live" &&
	diff "$TRASH/ns.live" "$TRASH/ns.restored" &&
	test "$(stat -c %a "$TRASH/r/meta.db")" = 600 &&
	! nrs-ckpt restore "$CKPT_STORE" "$TRASH/r" 2>"$TRASH/err" &&
	grep -q "File exists" "$TRASH/err"
'

test_expect_success 'checkpoint_ms=0,checkpoint_bytes=0: none; bad values refused' '
	nrs_mount -o "checkpoint_ms=200,checkpoint_bytes=1$OBJ_OPTS" &&
	nrs_wait_for 20 ckpt_past 0 &&
	nrs_umount &&
	before=$(nrs-ckpt find "$CKPT_STORE") &&
	nrs_mount -o "checkpoint_ms=0,checkpoint_bytes=0$OBJ_OPTS" &&
	mkdir "$MNT/more" &&
	sleep 1 &&
	test "$(ckpt_status last_seq)" = 0 &&
	nrs_umount &&
	test "$(nrs-ckpt find "$CKPT_STORE")" = "$before" &&
	! "$NEREUSFS" -f -o "data=$DATA,checkpoint_ms=-1" "$MNT" 2>"$TRASH/err" &&
	grep -q "checkpoint_ms must be" "$TRASH/err"
'
