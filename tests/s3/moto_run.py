# moto_run.py DIR PORT - run moto_server (moto 5) on 127.0.0.1:PORT for
# tests/s3/moto.sh.  DIR is only there so that the server's command line
# names it (moto.sh signals a pid only while that is so).  Authentication
# is what the environment says (INITIAL_NO_AUTH_ACTION_COUNT, set by
# moto.sh).
import sys

from moto.server import main

if len(sys.argv) != 3:
    sys.exit("usage: moto_run.py DIR PORT")
main(["-H", "127.0.0.1", "-p", sys.argv[2]])
