"""README.md and docs/*.md: every link resolves, and every block marked runnable runs.

Run by ctest as:
  docs_check.py links SOURCE
  docs_check.py runnable SOURCE BUILD [TENSORFLOW_PYTHON]

links: every Markdown link outside code, in README.md and docs/*.md, to a
file of the repository names one that exists, and its #anchor (or a bare
#anchor's) is a heading of that page (GitHub's slugs) or an
<a id="..."></a> there. Links to other sites are left alone.

runnable: the markers (docs/development.md, "Documentation"):
  <!-- file: NAME -->         the next fenced block is written to NAME
  <!-- runnable -->          the next fenced sh block is run by bash -e
  <!-- runnable: tensorflow --> the same, with `python` the TensorFlow venv's
Each page's blocks run in order in a scratch directory of that page, outside
the source tree, with the build's programs (BUILD/bin) on PATH, its package
on PYTHONPATH and `python` the build's Python (/usr/bin/python3): what a
reader who installed both would type. A tensorflow block is reported
skipped where the build has no TensorFlow. A marker must stand right before
a fenced block.
"""

import os
import re
import subprocess
import sys
import tempfile

_FENCE = re.compile(r'^(```|~~~)')
_LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
_ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
_MARKER = re.compile(r'^<!-- (file|runnable)(?::\s*(\S+))? -->$')


def _pages(source):
    docs = os.path.join(source, 'docs')
    return [os.path.join(source, 'README.md')] + sorted(
        os.path.join(docs, name) for name in os.listdir(docs) if name.endswith('.md'))


def _slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation gone, spaces to -."""
    text = re.sub(r'`', '', heading).strip().lower()
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def _prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.split('\n'), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def _anchors(path):
    with open(path) as page:
        text = page.read()
    anchors, seen = set(), {}
    for _, line in _prose_lines(text):
        heading = re.match(r'#{1,6} (.*)', line)
        if heading:
            slug = _slug(heading.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f'{slug}-{count}')
        anchors.update(_ANCHOR.findall(line))
    return anchors


def check_links(source):
    problems = []
    anchors = {}
    pages = _pages(source)
    for page in pages:
        with open(page) as page_file:
            text = page_file.read()
        for number, line in _prose_lines(text):
            line = re.sub(r'`[^`]*`', '', line)  # inline code is not a link
            for target in _LINK.findall(line):
                if re.match(r'[a-z]+:', target):  # https:, mailto:
                    continue
                path, _, anchor = target.partition('#')
                resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) \
                    if path else page
                where = f'{os.path.relpath(page, source)}:{number}: {target}'
                if not resolved.startswith(source + os.sep) and resolved != source:
                    problems.append(f'{where} leaves the repository')
                    continue
                if not os.path.exists(resolved):
                    problems.append(f'{where}: no such file')
                    continue
                if anchor:
                    if not resolved.endswith('.md'):
                        problems.append(f'{where}: an anchor into a file that is not Markdown')
                        continue
                    if resolved not in anchors:
                        anchors[resolved] = _anchors(resolved)
                    if anchor not in anchors[resolved]:
                        problems.append(f'{where}: {os.path.relpath(resolved, source)} has no '
                                        f'heading or <a id> "{anchor}"')
    if problems:
        sys.exit('\n'.join(problems))
    print(f'links: {len(pages)} pages, every link resolves')


def _blocks(page):
    """(marker, argument, language, code, line number) of each marked block of `page`."""
    with open(page) as page_file:
        lines = page_file.read().split('\n')
    blocks, fenced = [], False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        marker = _MARKER.match(line) if not fenced else None
        if not marker:
            if not fenced and line.startswith('<!-- ') and re.search(r'runnable|file:', line):
                sys.exit(f'{page}:{index + 1}: not a marker this check knows: {line}')
            continue
        if index + 1 >= len(lines) or not _FENCE.match(lines[index + 1]):
            sys.exit(f'{page}:{index + 1}: {line} stands before no fenced block')
        language = lines[index + 1][3:].strip()
        end = next(i for i in range(index + 2, len(lines)) if _FENCE.match(lines[i]))
        blocks.append((marker.group(1), marker.group(2), language,
                       '\n'.join(lines[index + 2:end]) + '\n', index + 1))
    return blocks


def run_blocks(source, build, tensorflow_python):
    # A reader's shell: no daemon configured (collectiverun starts its own).
    environment = {k: v for k, v in os.environ.items()
                   if k not in ('PYTHONPATH', 'VIRTUAL_ENV') and not k.startswith('COLLECTIVE_')}
    environment.update(PYTHONPATH=os.path.join(build, 'python'), PYTHONDONTWRITEBYTECODE='1',
                       TF_CPP_MIN_LOG_LEVEL='2', PYTHONUNBUFFERED='1')
    ran = skipped = 0
    with tempfile.TemporaryDirectory(prefix='collective-docs-') as scratch:
        # `python` as a reader's environment has it: the build's, or TensorFlow's.
        shims = {}
        for kind, python in (('default', '/usr/bin/python3'), ('tensorflow', tensorflow_python)):
            if not python:
                continue
            shims[kind] = os.path.join(scratch, f'python-{kind}')
            os.mkdir(shims[kind])
            # A script, not a link: a venv's python finds its venv from the
            # path it was started as.
            shim = os.path.join(shims[kind], 'python')
            with open(shim, 'w') as out:
                out.write(f'#!/bin/sh\nexec {python} "$@"\n')
            os.chmod(shim, 0o755)
        for page in _pages(source):
            blocks = _blocks(page)
            if not blocks:
                continue
            name = os.path.relpath(page, source)
            workdir = os.path.join(scratch, name.replace(os.sep, '_'))
            os.mkdir(workdir)
            for marker, argument, language, code, number in blocks:
                if marker == 'file':
                    with open(os.path.join(workdir, argument), 'w') as out:
                        out.write(code)
                    continue
                if language not in ('sh', 'bash', 'shell'):
                    sys.exit(f'{name}:{number}: a runnable block must be sh, not {language!r}')
                kind = argument or 'default'
                if kind not in ('default', 'tensorflow'):
                    sys.exit(f'{name}:{number}: runnable: {kind}? (tensorflow or nothing)')
                if kind not in shims:
                    print(f'{name}:{number}: skipped (no TensorFlow in this build)')
                    skipped += 1
                    continue
                path = f'{shims[kind]}:{os.path.join(build, "bin")}:{environment["PATH"]}'
                print(f'{name}:{number}: running\n{code}', flush=True)
                completed = subprocess.run(['bash', '-e', '-o', 'pipefail', '-c', code],
                                           cwd=workdir, env=dict(environment, PATH=path),
                                           capture_output=True, text=True, timeout=600)
                print(completed.stdout[-4000:], completed.stderr[-4000:])
                if completed.returncode != 0:
                    sys.exit(f'{name}:{number}: the block exited {completed.returncode}')
                ran += 1
    print(f'runnable: {ran} blocks ran, {skipped} skipped')


def main():
    mode, source = sys.argv[1], os.path.abspath(sys.argv[2])
    if mode == 'links':
        check_links(source)
    else:
        run_blocks(source, os.path.abspath(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else '')


if __name__ == '__main__':
    main()
