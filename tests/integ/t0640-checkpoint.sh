#!/bin/sh
test_description='metadata checkpoints in the embedded store: written after the namespace changes, found without a listing, restored into an empty data directory with the same namespace and xattrs'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"

CKPT_STORE=dir:$DATA/objects
. "$nrs_lib/checkpoint.sh"
test_done
