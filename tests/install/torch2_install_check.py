"""`pip install` of the clone beside PyPI's PyTorch 2.x, in a Python other than Debian's.

Opt-in (ctest's install_pip_torch2, registered by -DCOLLECTIVE_TEST_TORCH2=ON),
as PyPI's Linux torch wheels bring about 3 GB of CUDA libraries:
  torch2_install_check.py SOURCE BUILD [--python PYTHON] [--wheels DIR]

PYTHON (else COLLECTIVE_TEST_TORCH2_PYTHON, else the newest of python3.12 and
python3.10 in pyenv's versions or on PATH; none: exit 77, skipped) makes a
fresh venv, without Debian's site packages. pip installs into it
tests/install/torch2-requirements.txt (the pinned torch 2.x) from DIR
(~/.cache/collectived/torch2-wheels), downloading from PyPI only what is
missing there (no network then: exit 77), so that only the first run
downloads; then the clone, as pip_install_check.py does. From directories
outside the source tree, with no PYTHONPATH, against a `cmake --install` of
BUILD's daemon and tools: the 2-rank torch_job.py, then tests/python (what
ctest's python_2_ranks runs: the collective.torch and collective.mpi4torch
suite) on 2 ranks with that venv's python.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from install_common import (SKIPPED, check_and_run_job, check_pins_agree, clean_environment,
                            fresh_venv, pip_install_clone, run)

_CANDIDATES = ('3.12', '3.10')  # not Debian's 3.11, which every build tests
_REQUIREMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             'torch2-requirements.txt')
# What ctest's python_2_ranks says of the build tree's package, said of the
# pip-built one: pyproject.toml builds it without the GPU path
# (COLLECTIVE_GPU=OFF), so its nccl_built() is 0 and cuda_built() False,
# whatever the daemon has.
_SUITE_ENVIRONMENT = {'COLLECTIVE_TEST_GPU_PATH': '0', 'COLLECTIVE_TEST_NCCL_VERSION_CODE': '0'}


def _version_key(path):
    return tuple(int(part) for part in re.findall(r'\d+', os.path.basename(
        os.path.dirname(os.path.dirname(path)))))


def _find_python():
    """The newest python3.12, else python3.10: pyenv's, else one on PATH that runs."""
    versions = os.path.join(os.environ.get('PYENV_ROOT', os.path.expanduser('~/.pyenv')),
                            'versions')
    for version in _CANDIDATES:
        installed = glob.glob(os.path.join(versions, f'{version}.*', 'bin', f'python{version}'))
        if installed:
            return max(installed, key=_version_key)
        # pyenv's shims are on PATH for every version it knows, installed or not.
        found = shutil.which(f'python{version}')
        if found and subprocess.run([found, '-c', ''], capture_output=True).returncode == 0:
            return found
    return None


def _wheels_directory():
    """Where the requirements' wheels are kept between runs, outside the build tree.

    Not pip's own cache: pip keeps a download only when the server says it may
    be cached, and a proxy can leave that out (this machine's does).
    """
    cache = os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache')
    return os.path.join(cache, 'collectived', 'torch2-wheels')


def _install_requirements(python, wheels):
    """The pinned torch 2.x and the suite's tools, from WHEELS; what is missing there from PyPI."""
    offline = [python, '-m', 'pip', 'install', '--quiet', '--no-index', '--find-links', wheels,
               '-r', _REQUIREMENTS]
    print('+', ' '.join(offline), flush=True)
    if subprocess.run(offline, capture_output=True, env=clean_environment(),
                      timeout=1800).returncode == 0:
        print(f'pip installed {os.path.basename(_REQUIREMENTS)} from {wheels}, with no download')
        return
    os.makedirs(wheels, exist_ok=True)
    download = subprocess.run(
        [python, '-m', 'pip', 'download', '--progress-bar', 'off', '--retries', '2', '-d', wheels,
         '-r', _REQUIREMENTS], capture_output=True, text=True, env=clean_environment(),
        timeout=3600)
    if download.returncode != 0:
        print(f'pip could not download {_REQUIREMENTS} into {wheels} (no network?):\n'
              f'{download.stdout[-2000:]}{download.stderr[-2000:]}')
        sys.exit(SKIPPED)
    downloaded = len(re.findall(r'^\s*Downloading ', download.stdout, re.M))
    print(f'pip downloaded {downloaded} wheels into {wheels}')
    run(offline, env=clean_environment(), timeout=1800)


def _run_suite(source, prefix, python):
    """tests/python on 2 ranks, copied outside the tree with the examples it imports."""
    with tempfile.TemporaryDirectory(prefix='collective-pip-torch2-suite-') as outside:
        for part in ('tests/python', 'examples/python'):
            os.makedirs(os.path.join(outside, part))
            for path in glob.glob(os.path.join(source, part, '*.py')):
                shutil.copy(path, os.path.join(outside, part))
        # A deprecation our package meets under this torch and Python fails the
        # test, before a release that removes it fails users.
        output = run([os.path.join(prefix, 'bin', 'collectiverun'), '-np', '2', python, '-m',
                      'pytest', '-q', '-p', 'no:cacheprovider', '-W', 'error::DeprecationWarning',
                      '-W', 'error::FutureWarning', 'tests/python'],
                     cwd=outside, timeout=600, env=clean_environment(**_SUITE_ENVIRONMENT))
    # collectiverun prefixes each rank's lines with [rank].
    results = dict(re.findall(r'^\[(\d+)\] (\d+ passed.*)$', output, re.M))
    if sorted(results) != ['0', '1']:
        sys.exit(f'expected a pytest summary from each of 2 ranks:\n{output[-6000:]}')
    print(f'tests/python on 2 ranks: {results["0"]}')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('source')
    parser.add_argument('build')
    parser.add_argument('--python', default=os.environ.get('COLLECTIVE_TEST_TORCH2_PYTHON'))
    parser.add_argument('--wheels', default=_wheels_directory())
    args = parser.parse_args()
    source, build = os.path.abspath(args.source), os.path.abspath(args.build)
    base_python = args.python or _find_python()
    if not base_python:
        print(f'no python{" or python".join(_CANDIDATES)} in pyenv\'s versions or on PATH: '
              'name one with --python or COLLECTIVE_TEST_TORCH2_PYTHON')
        sys.exit(SKIPPED)
    check_pins_agree(source)
    work = os.path.join(build, 'pip-test', 'torch2')
    os.makedirs(work, exist_ok=True)
    python = fresh_venv(os.path.join(work, 'venv'), base_python)
    _install_requirements(python, args.wheels)
    versions = run([python, '-c', 'import sys, torch; '
                    'print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, '
                    'cp{sys.version_info[0]}{sys.version_info[1]}")'],
                   env=clean_environment()).strip()
    print(f'{base_python}: {versions}')
    pip_install_clone(python, source, build, f'test-torch2-{versions.split(", ")[-1]}',
                      COLLECTIVE_WITHOUT_TENSORFLOW='1')
    prefix = check_and_run_job(build, work, python, 'torch')
    _run_suite(source, prefix, python)
    print(f'pip install (torch2, {versions.rsplit(", ", 1)[0]}): done')


if __name__ == '__main__':
    main()
