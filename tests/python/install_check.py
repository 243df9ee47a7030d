"""Installs the collective package with CMake and imports it from there.

Run by ctest (python_install) as: install_check.py BUILD_DIR [TENSORFLOW_PYTHON]

``cmake --install BUILD --component python --prefix TMP``: the extension must
load the libcollective installed in TMP (its RUNPATH is relative to itself),
never the build tree's, and the type stubs come along. (`pip install` of the
root pyproject.toml has tests of its own: tests/install.)

With TENSORFLOW_PYTHON (the build has collective.tensorflow's op library),
that interpreter also imports collective.tensorflow from the cmake install:
its op library from the installed package, libcollective from the prefix.

Each import runs in a fresh interpreter that sees only the installed copy.
"""

import json
import os
import subprocess
import sys
import tempfile

_PROBE = '''
import json, collective.torch, collective._core
libraries = sorted({line.split()[-1] for line in open('/proc/self/maps')
                    if 'libcollective' in line and '.so' in line})
print(json.dumps({'core': collective._core.__file__, 'libraries': libraries}))
'''

_TENSORFLOW_PROBE = '''
import json, os
os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'
import collective.tensorflow
libraries = sorted({line.split()[-1] for line in open('/proc/self/maps')
                    if ('libcollective' in line or '_ops.so' in line) and '.so' in line})
ops = [path for path in libraries if path.endswith('_ops.so')]
print(json.dumps({'core': ops[0] if ops else '',
                  'libraries': [path for path in libraries if 'libcollective' in path]}))
'''


def _run(command, **kwargs):
    completed = subprocess.run(command, capture_output=True, text=True, timeout=300, **kwargs)
    if completed.returncode != 0:
        sys.exit(f'{" ".join(command)} failed ({completed.returncode}):\n'
                 f'{completed.stdout}{completed.stderr}')
    return completed.stdout


def _probe(package_dir, python=sys.executable, probe=_PROBE):
    """What a fresh interpreter loads when the package comes from `package_dir`."""
    environment = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'LD_LIBRARY_PATH')}
    environment['PYTHONPATH'] = package_dir
    output = _run([python, '-c', probe], env=environment, cwd=package_dir)
    return json.loads(output.strip().splitlines()[-1])


def _expect(loaded, package_dir, library_dir, extension_dir='collective'):
    core_dir = os.path.realpath(os.path.dirname(loaded['core'])) if loaded['core'] else ''
    if core_dir != os.path.realpath(os.path.join(package_dir, extension_dir)):
        sys.exit(f'the extension came from {loaded["core"] or "nowhere"}, not from '
                 f'{os.path.join(package_dir, extension_dir)}')
    libraries = [os.path.realpath(p) for p in loaded['libraries']]
    if not libraries or any(os.path.dirname(p) != os.path.realpath(library_dir)
                            for p in libraries):
        sys.exit(f'expected libcollective from {library_dir}; loaded {loaded["libraries"]}')


def _directory_of(root, relative):
    """The directory below `root` that holds `relative` (a file name or a path ending in one)."""
    for directory, _, _ in os.walk(root):
        if os.path.exists(os.path.join(directory, relative)):
            return directory
    sys.exit(f'the install under {root} has no {relative}')


def main():
    build = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix='collective-install-') as prefix:
        _run(['cmake', '--install', build, '--prefix', prefix, '--component', 'python'])
        package_dir = _directory_of(prefix, os.path.join('collective', '__init__.py'))
        libdir = _directory_of(prefix, 'libcollective.so.0')
        _expect(_probe(package_dir), package_dir, libdir)
        for name in ('py.typed', '_core.pyi'):
            if not os.path.exists(os.path.join(package_dir, 'collective', name)):
                sys.exit(f'the install has no collective/{name}')
        print(f'cmake --install: the package in {package_dir} loads libcollective from {libdir}')
        if len(sys.argv) > 2:
            loaded = _probe(package_dir, python=sys.argv[2], probe=_TENSORFLOW_PROBE)
            _expect(loaded, package_dir, libdir, os.path.join('collective', 'tensorflow'))
            print(f'cmake --install: collective.tensorflow loads {loaded["core"]} and '
                  f'libcollective from {libdir}')


if __name__ == '__main__':
    main()
