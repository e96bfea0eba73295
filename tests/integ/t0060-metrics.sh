#!/bin/sh
test_description='/.nereus/metrics and /.nereus/status reflect the appends'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# The metric names are an interface (dashboards and alerts use them).
m_appends=nereus_appends_total
m_bytes=nereus_append_bytes_total
m_errors=nereus_append_errors_total
m_latency=nereus_commit_latency_seconds
m_batch=nereus_batch_appends
m_wal=nereus_wal_bytes

# metrics.py FILE: checks the Prometheus text format (every family has
# HELP and TYPE, every sample belongs to one, values are numbers,
# histograms are cumulative with a +Inf bucket equal to _count) and prints
# "name value" for every sample without labels, and the histograms'
# _sum/_count.
cat >"$TRASH/metrics.py" <<'EOF'
import re, sys

families, help_, samples, buckets = {}, set(), {}, {}
line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)( \d+)?$')
bad = []
for n, line in enumerate(open(sys.argv[1]), 1):
    line = line.rstrip('\n')
    if not line:
        continue
    if line.startswith('# HELP '):
        help_.add(line.split()[2])
        continue
    if line.startswith('# TYPE '):
        parts = line.split()
        if len(parts) != 4 or parts[3] not in ('counter', 'gauge', 'histogram', 'summary', 'untyped'):
            bad.append('%d: bad TYPE line: %s' % (n, line))
        else:
            families[parts[2]] = parts[3]
        continue
    if line.startswith('#'):
        continue
    m = line_re.match(line)
    if not m:
        bad.append('%d: not a sample: %s' % (n, line))
        continue
    name, labels, value = m.group(1), m.group(3) or '', m.group(4)
    try:
        v = float(value)
    except ValueError:
        bad.append('%d: bad value: %s' % (n, line))
        continue
    fam = name
    for suffix in ('_bucket', '_sum', '_count'):
        if name.endswith(suffix) and name[:-len(suffix)] in families:
            fam = name[:-len(suffix)]
    if fam not in families:
        bad.append('%d: sample of no declared family: %s' % (n, line))
    if families.get(fam) == 'counter' and v < 0:
        bad.append('%d: negative counter: %s' % (n, line))
    if name.endswith('_bucket') and families.get(fam) == 'histogram':
        le = re.search(r'le="([^"]*)"', labels)
        if not le:
            bad.append('%d: bucket without le: %s' % (n, line))
            continue
        buckets.setdefault(fam, []).append((float(le.group(1)), v))
        continue
    if not labels:
        samples[name] = v
for fam, t in families.items():
    if fam not in help_:
        bad.append('family %s has no HELP' % fam)
    if t != 'histogram':
        continue
    b = buckets.get(fam, [])
    if not b or b[-1][0] != float('inf'):
        bad.append('histogram %s: no +Inf bucket last' % fam)
        continue
    for (le1, c1), (le2, c2) in zip(b, b[1:]):
        if not (le1 < le2 and c1 <= c2):
            bad.append('histogram %s: buckets not ascending/cumulative at le=%g' % (fam, le2))
    for s in ('_sum', '_count'):
        if fam + s not in samples:
            bad.append('histogram %s: no %s' % (fam, s))
    if samples.get(fam + '_count') != b[-1][1]:
        bad.append('histogram %s: +Inf bucket %g != _count %s' % (fam, b[-1][1], samples.get(fam + '_count')))
for msg in bad:
    print('BAD', msg)
for name in sorted(samples):
    print(name, '%.17g' % samples[name])
sys.exit(1 if bad else 0)
EOF

# snapshot NAME: parse the metrics into $TRASH/NAME (sample value lines)
snapshot () {
	cat "$MNT/.nereus/metrics" >"$TRASH/$1.txt" || return 1
	if ! python3 "$TRASH/metrics.py" "$TRASH/$1.txt" >"$TRASH/$1"; then
		cat "$TRASH/$1"
		return 1
	fi
}

# value SNAPSHOT NAME
value () {
	awk -v n="$2" '$1 == n { print $2; found = 1 } END { exit !found }' "$TRASH/$1" ||
	{ echo "no sample $2 in $1" >&2; return 1; }
}

# delta NAME: value in "after" minus value in "before" (integers)
delta () {
	a=$(value after "$1") && b=$(value before "$1") &&
	echo $((${a%.*} - ${b%.*}))
}

test_expect_success 'mount; the metrics parse and hold every family we rely on' '
	nrs_mount &&
	snapshot before &&
	for n in $m_appends $m_bytes $m_errors ${m_latency}_sum ${m_latency}_count \
		${m_batch}_sum ${m_batch}_count $m_wal; do
		value before $n >/dev/null || return 1
	done &&
	grep "^# TYPE $m_latency histogram\$" "$TRASH/before.txt" &&
	grep "^# TYPE $m_batch histogram\$" "$TRASH/before.txt" &&
	grep "^# TYPE $m_appends counter\$" "$TRASH/before.txt" &&
	grep "^# TYPE $m_bytes counter\$" "$TRASH/before.txt" &&
	grep "^# TYPE $m_errors counter\$" "$TRASH/before.txt" &&
	grep "^${m_latency}_bucket{le=\"+Inf\"} " "$TRASH/before.txt"
'

test_expect_success '200 appends of 100 bytes by 8 writers show in the counters' '
	mkdir "$MNT/m" &&
	nrs-appender -t 8 -n 25 -s 100 -a "$TRASH/ack" "$MNT/m/a" "$MNT/m/b" &&
	snapshot after &&
	test "$(delta $m_appends)" = 200 &&
	test "$(delta $m_bytes)" = 20000 &&
	test "$(delta $m_errors)" = 0 &&
	test "$(delta ${m_batch}_sum)" = 200 &&
	batches=$(delta ${m_batch}_count) &&
	echo "200 appends in $batches group commits" &&
	test "$batches" -ge 1 && test "$batches" -le 200 &&
	lat=$(delta ${m_latency}_count) &&
	test "$lat" -ge 1 && test "$lat" -le 200 &&
	awk -v a="$(value after ${m_latency}_sum)" -v b="$(value before ${m_latency}_sum)" \
		"BEGIN { exit !(a > b) }" &&
	test "$(delta $m_wal)" -ge 20000
'

test_expect_success 'a refused append counts as an error, not as an append' '
	snapshot before &&
	expect_errno ESPIPE pwrite "$MNT/m/a" 0 x &&
	expect_errno ESPIPE pwrite "$MNT/m/a" 1 x &&
	snapshot after &&
	test "$(delta $m_appends)" = 0 &&
	test "$(delta $m_bytes)" = 0 &&
	test "$(delta $m_errors)" = 2
'

test_expect_success 'status: valid JSON with the streams and the WAL, matching the metrics' '
	cat "$MNT/.nereus/status" >"$TRASH/status.json" &&
	snapshot now &&
	cat "$TRASH/status.json" &&
	python3 -m json.tool "$TRASH/status.json" >/dev/null &&
	python3 - "$TRASH/status.json" "$(value now $m_wal)" "$(value now $m_appends)" <<-\EOF
	import json, sys
	j = json.load(open(sys.argv[1]))
	wal_bytes, appends = float(sys.argv[2]), float(sys.argv[3])
	assert j["streams"] == 2, "streams: %r, 2 expected" % j.get("streams")
	assert isinstance(j["wal"], dict), "wal: %r" % j.get("wal")
	assert j["wal"]["bytes"] == wal_bytes, "wal.bytes %r, metrics say %r" % (j["wal"]["bytes"], wal_bytes)
	assert j["appends"] == appends, "appends %r, metrics say %r" % (j["appends"], appends)
	EOF
'

test_expect_success 'counters start again from the durable state after a remount' '
	nrs_remount &&
	snapshot fresh &&
	# the bytes are in the WAL or, once materialized, in objects
	test $(( $(value fresh $m_wal) + $(value fresh nereus_object_bytes) )) -ge 20000 &&
	python3 -m json.tool "$MNT/.nereus/status" >/dev/null
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
