#!/usr/bin/env python3
"""Fails on a reference to a repository file that does not exist.

Scans the tracked sources, scripts and documents for paths that start with one of the
repository's top-level directories (engine/ops.h, docs/api.md, tests/router/...) and for
Markdown file names (DESIGN.md, docs/numerics.md), and checks each names a tracked file or
directory. Accepted without a file: generated protobuf headers whose .proto is tracked, test names
whose .cc is tracked (tests/router/router_cluster_itest), globs that match something, and paths
under node_modules/ (installed by scripts/install-deps.sh).

A Markdown reference followed by a quoted section (`docs/router.md "Stalled legs"`,
`DESIGN.md, "Failure rules"`, `DESIGN.md ("Failure rules")`, the quotes on the same line) must
also name a heading of that document (case aside): one whose text is the section, or starts with
it followed by a space or punctuation ("Generating nothing" names "Generating nothing
(max_new_tokens 0)"). Headings inside code fences do not count.

Prints file:line: reference for each dangling one and exits 1; prints a count and exits 0 when
there is none.
"""
import fnmatch
import os
import re
import subprocess
import sys

# What may follow a Markdown reference before a quoted section: a closing backtick or parenthesis,
# a comma, spaces, an opening parenthesis; the quotes may be escaped (inside a JSON string).
SECTION_RE = re.compile(r'`?\)?,?[ \t]*\(?\\?"([^"\\\n]*[^"\\\s])\\?"')
TEXT = ('.h', '.cc', '.md', '.sh', '.py', '.txt', '.cmake', '.proto', '.yaml', '.mjs')


def main():
    root = subprocess.check_output(['git', 'rev-parse', '--show-toplevel'], text=True).strip()
    os.chdir(root)
    files = [f for f in subprocess.check_output(['git', 'ls-files'], text=True).split('\n') if f]
    tracked = set(files)
    dirs = {'/'.join(f.split('/')[:i]) for f in files for i in range(1, f.count('/') + 1)}
    tops = sorted({f.split('/')[0] for f in files if '/' in f})
    path_re = re.compile(r'(?<![\w./$:{}-])((?:%s)/[\w./*-]*[\w*/])' % '|'.join(map(re.escape, tops)))
    md_re = re.compile(r'(?<![\w./$:{}-])((?:[\w-]+/)*[\w-]+\.md)\b')
    basenames = {os.path.basename(f) for f in files}
    headings = {}

    def doc_headings(doc):
        """Lower-cased heading texts of a tracked Markdown file, outside code fences."""
        if doc not in headings:
            found, fenced = [], False
            for line in open(doc, encoding='utf-8').read().split('\n'):
                if line.startswith('```'):
                    fenced = not fenced
                elif not fenced and re.match(r'#+ ', line):
                    found.append(line.lstrip('#').strip().lower())
            headings[doc] = found
        return headings[doc]

    def has_section(doc, section):
        section = section.lower()
        return any(h == section or (h.startswith(section) and not h[len(section)].isalnum())
                   for h in doc_headings(doc))

    def resolve_doc(f, ref):
        """The tracked Markdown file a reference in f names, or None."""
        for cand in (ref, os.path.normpath(os.path.join(os.path.dirname(f), ref))):
            if cand in tracked:
                return cand
        same = [t for t in tracked if os.path.basename(t) == ref]
        return same[0] if len(same) == 1 else None

    def check_section(f, n, line, m, ref):
        nonlocal checked
        if not ref.endswith('.md'):
            return
        s = SECTION_RE.match(line, m.end())
        if not s:
            return
        doc = resolve_doc(f, ref)
        if doc is None:
            return  # a dangling file is reported on its own
        checked += 1
        if not has_section(doc, s.group(1)):
            dangling.append((f, n, f'{ref} "{s.group(1)}"', 'names no heading of that document'))

    def exists(ref):
        ref = ref.rstrip('/')
        if ref in tracked or ref in dirs or '/node_modules' in ref:
            return True
        if '*' in ref:
            return any(fnmatch.fnmatch(t, ref) for t in tracked)
        proto = re.sub(r'\.(grpc\.)?pb\.h$', '.proto', ref)
        if proto != ref and proto in tracked:
            return True
        return ref + '.cc' in tracked  # a test named after its source

    dangling = []
    checked = 0
    for f in files:
        if not (f.endswith(TEXT) or os.path.basename(f) == 'CMakeLists.txt'):
            continue
        if f.startswith('models/') or '/node_modules/' in f:
            continue
        try:
            lines = open(f, encoding='utf-8').read().split('\n')
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(lines, 1):
            for m in path_re.finditer(line):
                ref = m.group(1).rstrip('.')
                checked += 1
                if not exists(ref):
                    dangling.append((f, n, ref, 'does not exist in the repository'))
                check_section(f, n, line, m, ref)
            for m in md_re.finditer(line):
                ref = m.group(1)
                if ref.split('/')[0] in tops:
                    continue  # checked as a path above
                checked += 1
                # A bare name is fine when a tracked file has it (DESIGN.md, README.md, ...).
                if '/' in ref or ref not in basenames:
                    if not exists(ref) and not exists(os.path.join(os.path.dirname(f), ref)):
                        dangling.append((f, n, ref, 'does not exist in the repository'))
                check_section(f, n, line, m, ref)
    for f, n, ref, why in dangling:
        print(f'{f}:{n}: {ref} {why}')
    if dangling:
        print(f'refs: {len(dangling)} dangling references (fix the path or the text)', file=sys.stderr)
        return 1
    print(f'refs: {checked} references to repository files and sections, none dangling')
    return 0


if __name__ == '__main__':
    sys.exit(main())
