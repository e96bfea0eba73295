#!/bin/sh
test_description='S3 credentials rotated under a mounted nereusfs (moto_server): the s3_credentials file is read again when it changes, or when the store refuses the old key; no remount'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/moto.sh"
. "$nrs_lib/objlib.sh"

nrs_moto_start
S3=",s3=$NRS_S3_URL"
creds=$TRASH/creds

moto_keys () {
	NRS_S3_URL=$NRS_S3_URL NRS_S3_ACCESS_KEY=$NRS_S3_ACCESS_KEY \
	NRS_S3_SECRET_KEY=$NRS_S3_SECRET_KEY \
		python3 "$nrs_top/tests/fixtures/s3/moto_keys.py" "$@"
}

# write_creds AKID SECRET: the file, replaced by a rename as secret
# managers do
write_creds () {
	printf "AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n" "$1" "$2" >"$creds.new" &&
	chmod 600 "$creds.new" &&
	mv -f "$creds.new" "$creds"
}

test_expect_success 'mount with a key A from the credentials file' '
	keys=$(moto_keys new) && eval "$keys" &&
	A_KEY=$NRS_NEW_ACCESS_KEY A_SECRET=$NRS_NEW_SECRET_KEY &&
	write_creds "$A_KEY" "$A_SECRET" &&
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY &&
	nrs_mount -o "s3_credentials=$creds,$FAST$S3" &&
	head -c 300000 /dev/urandom >"$TRASH/a" &&
	cp "$TRASH/a" "$MNT/a" &&
	wait_materialized "$MNT/a"
'

test_expect_success 'key A deleted, key B in the file: new objects go with B, no remount' '
	pid=$NRS_PID &&
	keys=$(moto_keys new) && eval "$keys" &&
	test "$NRS_NEW_ACCESS_KEY" != "$A_KEY" &&
	write_creds "$NRS_NEW_ACCESS_KEY" "$NRS_NEW_SECRET_KEY" &&
	moto_keys delete "$A_KEY" &&
	head -c 300000 /dev/urandom >"$TRASH/b" &&
	cp "$TRASH/b" "$MNT/b" &&
	wait_materialized -t 30 "$MNT/b" &&
	test "$NRS_PID" = "$pid" &&
	nrs_log_since_mount | grep "s3 $NRS_S3_URL: new credentials read from $creds" &&
	index_keys "$MNT/b" >"$TRASH/bkeys" &&
	moto_ls >"$TRASH/ls" &&
	for k in $(cat "$TRASH/bkeys"); do grep -q "^$k " "$TRASH/ls" || return 1; done &&
	! grep -F "$NRS_NEW_SECRET_KEY" "$LOG"
'

test_expect_success 'a credentials file that turns unreadable: the keys in use stay' '
	chmod 644 "$creds" &&
	sleep 1.2 &&
	echo more >>"$MNT/b" &&
	wait_materialized -t 30 "$MNT/b" &&
	nrs_log_since_mount | grep "credentials file $creds: .*: keeping the ones in use" &&
	chmod 600 "$creds" &&
	nrs_umount &&
	nrs_mount -o "s3_credentials=$creds,$FAST$S3" &&
	cmp "$TRASH/a" "$MNT/a" &&
	nrs_umount
'

test_done
