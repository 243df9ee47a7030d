"""`pip install` of the collectived distribution into fresh environments, then a job from there.

Run by ctest (tests/install) as:
  pip_install_check.py torch SOURCE BUILD
  pip_install_check.py tensorflow SOURCE BUILD TENSORFLOW_PYTHON

torch: a fresh venv with --system-site-packages (Debian's torch); pip installs
the clone (SOURCE) into it. tensorflow: an sdist of the clone is built,
unpacked and built into a wheel by a fresh venv that sees TENSORFLOW_PYTHON's
packages (the build tree's tf-venv, through a .pth file, so that venv stays as
it is) with COLLECTIVE_WITH_TENSORFLOW=1; the wheel is installed there, and
``import collective.torch`` must work there without torch, raising a clear
ImportError only when used.

Each then checks what was installed (the extension, libcollective beside it,
the type stubs) and runs a 2-rank job (torch_job.py / tensorflow_job.py)
from a directory outside the source tree against an installed daemon
(install_common.py says how). The CMake build directories stay in
SOURCE/build/pip, so a rerun rebuilds only what changed.
"""

import glob
import os
import re
import shutil
import sys
import tarfile
import zipfile

from install_common import (build_environment, check_and_run_job, check_pins_agree,
                            clean_environment, fresh_venv, pinned, pinned_wheels,
                            pip_install_clone, run)

def _torch(source, build, work):
    python = fresh_venv(os.path.join(work, 'venv'), '/usr/bin/python3',
                         system_site_packages=True)
    pip_install_clone(python, source, build, 'test-torch', COLLECTIVE_WITHOUT_TENSORFLOW='1')
    return python


_WITHOUT_TORCH = '''
import collective.torch as hvd
try:
    hvd.init()
except ImportError as error:
    print(error)
else:
    raise SystemExit('collective.torch.init worked without torch')
'''


def _tensorflow(source, build, work, tensorflow_python):
    # The sdist of the clone, made by the pinned backend in a venv of its own.
    tools = fresh_venv(os.path.join(work, 'sdist-venv'), '/usr/bin/python3')
    wheelhouse = pinned_wheels(source, build, tools)
    run([tools, '-m', 'pip', 'install', '--quiet', '--no-index', '--find-links', wheelhouse,
          next(line for line in pinned(source) if line.startswith('scikit-build-core'))])
    dist = os.path.join(work, 'dist')
    shutil.rmtree(dist, ignore_errors=True)
    name = run([tools, '-c', f'from scikit_build_core.build import build_sdist; '
                 f'print(build_sdist({dist!r}))'], cwd=source).strip().splitlines()[-1]
    sdist = os.path.join(dist, name)
    with tarfile.open(sdist) as archive:
        members = archive.getnames()
        top = members[0].split('/')[0]
        for required in ('pyproject.toml', 'CMakeLists.txt', 'README.md',
                         'client/python/collective/_core.pyi',
                         'client/python/collective/py.typed'):
            if f'{top}/{required}' not in members:
                sys.exit(f'the sdist {name} has no {required}')
        if any(member.startswith(f'{top}/build/') for member in members):
            sys.exit(f'the sdist {name} carries a build tree')
        unpacked = os.path.join(work, 'sdist')
        shutil.rmtree(unpacked, ignore_errors=True)
        archive.extractall(unpacked)
    unpacked = os.path.join(unpacked, top)

    # A fresh venv that sees the TensorFlow venv's packages.
    base = run([tensorflow_python, '-c', 'import sys; print(sys._base_executable)']).strip()
    python = fresh_venv(os.path.join(work, 'venv'), base)
    site = run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'])
    tensorflow_site = run([tensorflow_python, '-c',
                            'import sysconfig; print(sysconfig.get_paths()["purelib"])'])
    with open(os.path.join(site.strip(), 'tensorflow-venv.pth'), 'w') as pth:
        pth.write(tensorflow_site.strip() + '\n')

    wheels = os.path.join(work, 'wheels')
    shutil.rmtree(wheels, ignore_errors=True)
    run([python, '-m', 'pip', 'wheel', '--quiet', '--no-index', '--find-links', wheelhouse,
          '--no-deps', '--wheel-dir', wheels, unpacked],
        env=build_environment(wheelhouse, unpacked, os.path.commonpath([source, build]),
                              COLLECTIVE_WITH_TENSORFLOW='1'),
        timeout=1800)
    wheel = glob.glob(os.path.join(wheels, 'collectived-*.whl'))[0]
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    for pattern in (r'collective/_core\..*\.so', r'collective/lib/libcollective\.so\.0',
                    r'collective/lib/libcollective-proto\.so\.0', r'collective/tensorflow/_ops\.so',
                    r'collective/_core\.pyi', r'collective/py\.typed',
                    r'collective/torch/__init__\.py'):
        if not any(re.fullmatch(pattern, name) for name in names):
            sys.exit(f'the wheel {os.path.basename(wheel)} has no {pattern}: {names}')
    run([python, '-m', 'pip', 'install', '--quiet', '--no-index', '--no-deps', wheel])

    # No torch here: collective.torch imports, and says what is missing when used.
    message = run([python, '-c', _WITHOUT_TORCH], cwd=work, env=clean_environment())
    if 'collective.torch needs PyTorch' not in message:
        sys.exit(f'collective.torch without torch said: {message}')
    print(f'without torch: {message.strip()}')
    return python


def main():
    mode, source, build = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    check_pins_agree(source)
    work = os.path.join(build, 'pip-test', mode)
    os.makedirs(work, exist_ok=True)
    if mode == 'torch':
        python = _torch(source, build, work)
    else:
        python = _tensorflow(source, build, work, sys.argv[4])
    check_and_run_job(build, work, python, mode)
    print(f'pip install ({mode}): done')


if __name__ == '__main__':
    main()
