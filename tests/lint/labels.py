#!/usr/bin/env python3
"""
tests/lint/labels.py - every numbered rule label is defined once in the project,
and every label cited is defined (issue 13).

    python3 tests/lint/labels.py [--root DIR] [--inventory FILE] [-v]

Exit 0 when clean, 1 on a label defined twice or a citation of a label no
file defines, 2 on a usage error.  Meant to be run at the top of the tree
(by hand or as tests/lint/labels.py from `make check`; with no --root it
uses the directory above its own when that holds src/, else ".").

A label is 1-4 capital letters and a number (and a/b: RC5b).  Where:

  definitions  in comments of src/, include/, tools/, tests/: a comment
               line that starts with the label (after " * " or "# ") and
               states the rule ("RC3 In LSN order, a record ..."), a
               heading naming it ("Clean close (U1).") or "Invariant X1:".
               "C1-C2 Compaction ..." defines both (a range header: it
               does not count against a rule stated again on its own).
  citations    comments and strings of C files; all of shell, Python,
               man pages, README, tests/mutants/mutants.list, and the
               topmost (unreleased) section of NEWS.
"""
import argparse
import os
import re
import sys

SCOPE_DIRS = ['src', 'include', 'tools', 'tests/unit', 'tests/integ',
              'tests/helpers', 'tests/lint', 'tests/bench', 'tests/mutants',
              'tests/lib', 'tests/fixtures/s3']
SCOPE_FILES = ['README', 'NEWS']
DEF_DIRS = ('src/', 'include/', 'tools/', 'tests/')

# Rules defined outside the repository (DESIGN.md's invariants).
EXTERNAL = {'I%d' % i for i in range(1, 9)}

# Tokens that look like labels and are not: names, magic strings,
# variables.  (token, context regex around it, or None for anywhere.)
NOT_LABELS = [
    ('S3', None), ('MD5', None), ('AWS4', None), ('LIBS3', None),
    ('SSE4', None), ('GMSJ4', None), ('NEED2', None), ('IO3', None),
    ('V2', None), ('V4', None),          # S3 signature versions
    ('NPF1', None),                      # nrs-powerfail journal magic
    ('R2', r'R2 and B2|B2 and R2'), ('B2', r'R2 and B2|B2 and R2'),
    ('T0', r'^#define T0|\bT0\b'), ('T1', r'T0 T1'),   # test timestamps
    ('Z0', None),
]
NOT_LABEL_FILES = {
    # shell variables of one test (S0=..., $SEG1, ...)
    'tests/integ/t0040-concurrency.sh': {'S0', 'S1'},
    'tests/integ/t0200-fsck.sh': {'SEG1', 'SEG2'},
    'tests/unit/test_fsck.c': {'T0'},
    'tests/bench/run.sh': {'T0', 'T1'},
}

LABEL = r'[A-Z]{1,4}\d{1,2}[ab]?'
TOKEN = re.compile(r'(?<![\w$])' + LABEL + r'(?![\w=])')
STOP = {'for', 'in', 'are', 'is', 'and', 'or', 'of', 'at', 'to', 'on',
        'says', 'as', 'with', 'by', 'from'}
DEF_LINE = re.compile(r'^\s*(?:\*|#+)(\s+)(?:- )?(' + LABEL + r')(?:-(' + LABEL +
                      r'))?(\s+)(\S+)')
DEF_HEAD = re.compile(r'^\s*(?:/?\*|#+)\s+[A-Z][\w -]{2,40} \((' + LABEL +
                      r')\)\.\s')
DEF_INV = re.compile(r'\bInvariant (' + LABEL + r'):')
DEF_SET = re.compile(r'\((' + LABEL + r')\):')


def top_end(text):
    """Where the top-of-file comment ends (C: its */; else the first line
    that is not a comment)."""
    m = re.match(r'\s*/\*', text)
    if m:
        j = text.find('*/')
        return len(text) if j < 0 else j
    off = 0
    for l in text.split('\n'):
        if l.strip() and not l.startswith('#'):
            return off
        off += len(l) + 1
    return off


def indent(line):
    """Spaces after the comment leader (" *   text" -> 3)."""
    m = re.match(r'^\s*(?:\*|#+)( *)\S', line)
    return len(m.group(1)) if m else 0


def para_start(prev):
    """Does a rule stated on the next line start a paragraph?"""
    p = re.sub(r'^\s*(?:/\*+|\*+|#+)', '', prev).strip()
    return p == '' or p.endswith(('.', ':', ';', ')', '*/')) or \
        re.match(r'^[A-Z][A-Z ()-]+$', p) is not None


def files(root):
    out = []
    for d in SCOPE_DIRS:
        for dp, dn, fn in os.walk(os.path.join(root, d)):
            dn.sort()
            for f in sorted(fn):
                if f.endswith(('.c', '.h', '.sh', '.py', '.list')):
                    out.append(os.path.relpath(os.path.join(dp, f), root))
    for f in SCOPE_FILES:
        if os.path.exists(os.path.join(root, f)):
            out.append(f)
    if os.path.isdir(os.path.join(root, 'man')):
        out += ['man/' + f for f in sorted(os.listdir(os.path.join(root,
                                                                   'man')))
                if f.endswith('.8')]
    return out


def c_mask(text):
    """True where text is inside a comment or a string literal."""
    mask = bytearray(len(text))
    i, n = 0, len(text)
    while i < n:
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] not in '"\n':
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
        elif text[i] == "'":
            j = i + 1
            while j < n and text[j] not in "'\n":
                j += 2 if text[j] == '\\' else 1
            i = j + 1
            continue
        else:
            i += 1
            continue
        mask[i:j] = b'\1' * (j - i)
        i = j
    return mask


def news_end(lines):
    heads = [i for i, l in enumerate(lines)
             if re.match(r'^\d+\.\d+(\.\d+)? ', l) and i + 1 < len(lines)
             and re.match(r'^-{3,}', lines[i + 1])]
    return heads[1] if len(heads) > 1 else len(lines)


def not_label(path, line, m):
    tok = m.group(0)
    if tok in EXTERNAL or tok in NOT_LABEL_FILES.get(path, ()):
        return True
    for t, ctx in NOT_LABELS:
        if t != tok:
            continue
        if ctx is None:
            return True
        for c in re.finditer(ctx, line):
            if c.start() <= m.start() < c.end():
                return True
    s = m.start()
    # an option (od -N2), not the end of a range (R1-R9)
    if s > 0 and line[s - 1] == '-' and (s < 2 or not line[s - 2].isalnum()):
        return True
    # inside base64 or a path
    if re.search(r'[A-Za-z0-9+/]{12,}', line[max(0, s - 12):m.end() + 12]) \
            and ('/' in line[max(0, s - 2):m.end() + 2]
                 or '+' in line[max(0, s - 2):m.end() + 2]):
        return True
    return False


def scan(root):
    defs = {}     # label -> [(path, line, text, weak)]
    cites = {}    # label -> [(path, line)]
    me = os.path.abspath(__file__)
    for path in files(root):
        if os.path.abspath(os.path.join(root, path)) == me:
            continue
        try:
            with open(os.path.join(root, path), encoding='utf-8',
                      errors='replace') as f:
                text = f.read()
        except OSError:
            continue
        lines = text.split('\n')
        limit = news_end(lines) if path == 'NEWS' else len(lines)
        mask = c_mask(text) if path.endswith(('.c', '.h')) else None
        off = 0
        top = top_end(text)
        for i, line in enumerate(lines[:limit]):
            here = set()
            if path.startswith(DEF_DIRS) and not path.endswith('.list'):
                m = DEF_LINE.match(line)
                if m and (mask is None or mask[off + m.start(2)]):
                    one = m.group(4) == ' '
                    word = m.group(5)
                    prev = lines[i - 1] if i else ''
                    pm = DEF_LINE.match(prev)
                    if word[0] not in '(),.;:+-=/|&*' and not (
                            one and word in STOP) and (
                            para_start(prev) or
                            (pm and pm.group(1) == m.group(1)) or
                            indent(prev) > len(m.group(1))):
                        weak = m.group(3) is not None
                        for lab in filter(None, (m.group(2), m.group(3))):
                            defs.setdefault(lab, []).append(
                                (path, i + 1, line.strip(), weak))
                            here.add(lab)
                for rx in (DEF_HEAD, DEF_INV, DEF_SET):
                    m = rx.search(line)
                    if m and off + m.start(1) < top and (
                            mask is None or mask[off + m.start(1)]):
                        defs.setdefault(m.group(1), []).append(
                            (path, i + 1, line.strip(), rx is DEF_SET))
                        here.add(m.group(1))
            for m in TOKEN.finditer(line):
                if mask is not None and not mask[off + m.start()]:
                    continue
                if not_label(path, line, m):
                    continue
                cites.setdefault(m.group(0), []).append((path, i + 1))
            off += len(line) + 1
    return defs, cites


def default_root():
    up = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    return up if os.path.isdir(os.path.join(up, 'src')) else '.'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    ap.add_argument('--root', default=None)
    ap.add_argument('--inventory', default=None)
    ap.add_argument('-v', action='store_true', help='list every label')
    a = ap.parse_args()
    root = a.root or default_root()
    if not os.path.isdir(os.path.join(root, 'src')):
        print('labels: no src/ in %s' % root, file=sys.stderr)
        return 2
    defs, cites = scan(root)
    bad = 0
    for lab in sorted(defs):
        strong = [d for d in defs[lab] if not d[3]]
        if len(strong) > 1:
            bad += 1
            print('DUPLICATE %s defined %d times:' % (lab, len(strong)))
            for p, ln, t, _ in strong:
                print('  %s:%d: %s' % (p, ln, t[:100]))
    for lab in sorted(cites):
        if lab not in defs and lab not in EXTERNAL:
            bad += 1
            where = ', '.join('%s:%d' % c for c in cites[lab][:6])
            more = len(cites[lab]) - 6
            print('UNDEFINED %s cited at %s%s' % (
                lab, where, ' and %d more' % more if more > 0 else ''))
    if a.inventory or a.v:
        out = open(a.inventory, 'w') if a.inventory else sys.stdout
        key = lambda l: (re.match(r'[A-Z]+', l).group(0),
                         int(re.search(r'\d+', l).group(0)), l)
        for lab in sorted(set(defs) | set(cites), key=key):
            ds = defs.get(lab, [])
            out.write('%s\n' % lab)
            for p, ln, t, weak in ds:
                out.write('   defined%s: %s:%d  %s\n' % (
                    ' (range)' if weak else '', p, ln, t[:100]))
            if not ds:
                out.write('   defined: %s\n' % (
                    'DESIGN.md (outside the repo)' if lab in EXTERNAL
                    else 'NOWHERE'))
            cs = [c for c in cites.get(lab, [])
                  if (c[0], c[1]) not in {(d[0], d[1]) for d in ds}]
            out.write('   cited:   %s\n' % ' '.join(
                '%s:%d' % c for c in cs))
        if a.inventory:
            out.close()
    n = sum(len(v) for v in cites.values())
    print('labels: %d labels defined, %d citations, %d problems' % (
        len(defs), n, bad), file=sys.stderr)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
