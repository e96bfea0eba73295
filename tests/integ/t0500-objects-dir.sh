#!/bin/sh
test_description='materialization to the embedded object directory: publish, read back, reclaim, corruption, crashes'
. "${NRS_TESTLIB:-$(dirname "$0")/lib.sh}"
. "$(dirname "$0")/dirstore.sh"

. "$(dirname "$0")/objects.sh"
test_done
