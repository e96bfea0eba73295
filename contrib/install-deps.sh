#!/bin/sh
# contrib/install-deps.sh: install, with apt-get, everything nereusfs needs to
# build, run, test and benchmark on Debian 12 (bookworm).  Idempotent and
# non-interactive: safe to run again, safe with no terminal (CI).  Runs as
# root, or through sudo when it is there.
#
#   sh contrib/install-deps.sh            # build + test + bench packages
#   NRS_DEPS_EXTRA="gdb valgrind" sh contrib/install-deps.sh
#
# What each group is for:
#   build     compiler, autotools, pkg-config and the libraries configure
#             checks for (libfuse3, SQLite, ISA-L for CRC32C, OpenSSL and
#             libs3 and libcurl for the object store: libcurl4-gnutls-dev,
#             the flavour libs3 links, so one libcurl and one TLS stack)
#   run       fuse3 (fusermount3, /dev/fuse helper), the sqlite3 shell
#   test      cmocka, attr (getfattr/setfattr), python3 (JSON checks),
#             procps (pgrep/pkill in helpers), util-linux (mountpoint,
#             findmnt, flock), psmisc (fuser), coreutils' timeout, xz/gzip
#             for `make distcheck`, openssl (a test certificate)
#   lint      cppcheck (tests/lint/cppcheck.sh, a test of make check)
#   s3        nodejs and npm (Debian's, unless a node is already in PATH),
#             then s3rver, the S3 server the tests run against, at the
#             version tests/fixtures/s3/package-lock.json pins: `npm ci`
#             in tests/fixtures/s3, as the user running this script,
#             skipped when that lock file is what was installed last
#   moto      moto_server and boto3 (moto 5), the S3 server that checks V4
#             signatures (tests/fixtures/s3/moto.sh): not Debian packages; they come
#             with the image's Python (pyenv) and PyPI is not reachable
#             here, so this script only checks that they are there
#   adapters  openjdk-17-jdk-headless: the Java example adapter's test
#   valgrind  the memcheck run of a subset of the mounted tests
#   bench     fio, and libfuse3-dev's examples (passthrough_ll.c)
set -eu

PACKAGES="
	build-essential autoconf automake libtool pkg-config make
	libfuse3-dev libsqlite3-dev libisal-dev libssl-dev libs3-dev libcmocka-dev
	libcurl4-gnutls-dev
	fuse3 sqlite3
	attr python3 procps util-linux psmisc coreutils findutils grep sed
	xz-utils gzip tar openssl cppcheck
	openjdk-17-jdk-headless valgrind
	fio
	${NRS_DEPS_EXTRA:-}
"

# Node: Debian's, unless one is there already (NodeSource's nodejs bundles
# npm and conflicts with Debian's npm package).
if ! command -v node >/dev/null 2>&1; then
	PACKAGES="$PACKAGES nodejs npm"
elif ! command -v npm >/dev/null 2>&1; then
	PACKAGES="$PACKAGES npm"
fi

if [ "$(id -u)" -eq 0 ]; then
	SUDO=
elif command -v sudo >/dev/null 2>&1; then
	SUDO="sudo -n"
else
	echo "install-deps: not root and no sudo; run me as root" >&2
	exit 1
fi

export DEBIAN_FRONTEND=noninteractive
APT_OPTS="-y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"

# Skip the network when everything is already there: a second run costs
# nothing, and works offline.
missing=
for p in $PACKAGES; do
	if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
		missing="$missing $p"
	fi
done

if [ -n "$missing" ]; then
	echo "install-deps: installing:$missing"
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
	# shellcheck disable=SC2086 # word splitting of the lists is intended
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install $APT_OPTS --no-install-recommends $missing
else
	echo "install-deps: all packages present"
fi

# The FUSE device: present on a normal host; in a container it must be
# passed in (docker run --device /dev/fuse --cap-add SYS_ADMIN).
if [ ! -c /dev/fuse ]; then
	$SUDO modprobe fuse 2>/dev/null || true
fi
if [ ! -c /dev/fuse ]; then
	echo "install-deps: warning: /dev/fuse is missing; mounting will fail" >&2
fi

# s3rver, pinned by tests/fixtures/s3/package-lock.json, into tests/fixtures/s3/node_modules.
s3dir=$(cd "$(dirname "$0")/../tests/fixtures/s3" && pwd)
stamp=$s3dir/node_modules/.nrs-installed-lock
if [ -x "$s3dir/node_modules/.bin/s3rver" ] &&
   cmp -s "$s3dir/package-lock.json" "$stamp"; then
	echo "install-deps: s3rver present"
else
	echo "install-deps: npm ci in $s3dir"
	if ! (cd "$s3dir" && npm ci --no-audit --no-fund --loglevel=error); then
		echo "install-deps: npm ci in $s3dir failed" >&2
		exit 1
	fi
	cp "$s3dir/package-lock.json" "$stamp"
fi

# moto and boto3 (tests/fixtures/s3/moto.sh): the image's Python has them; say so
# loudly if not, rather than let the S3 tests fail later.
if python3 -c 'import moto, boto3' 2>/dev/null; then
	echo "install-deps: moto and boto3 present ($(python3 -c 'import moto; print(moto.__version__)'))"
else
	echo "install-deps: warning: python3 has no moto/boto3 (moto 5): the S3 tests on moto_server will fail" >&2
fi
