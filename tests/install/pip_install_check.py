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
from a directory outside the source tree, with no PYTHONPATH, under the
collectiverun of a `cmake --install` of BUILD's daemon and client
components, against that install's collectived, started here.

pip builds with no index from BUILD/pip-wheels, which holds the pinned build
requirements (scripts/python-build-requirements.txt); it is filled once
through pip's cache. Without them and without network the check exits 77
(skipped). The CMake build directories stay in SOURCE/build/pip, so a rerun
rebuilds only what changed.
"""

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from install_common import run

SKIPPED = 77


def _clean_environment(**extra):
    """The environment of a user's shell: nothing pointing into the source or build tree."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ('PYTHONPATH', 'LD_LIBRARY_PATH', 'PYTHONHOME', 'VIRTUAL_ENV')
                   and not k.startswith('COLLECTIVE_')}
    environment['PIP_DISABLE_PIP_VERSION_CHECK'] = '1'
    environment['PYTHONDONTWRITEBYTECODE'] = '1'
    environment.update(extra)
    return environment


def _build_environment(wheelhouse, source_tree, base, **extra):
    """pip's build: ccache where there is one, both cores, plus the switches in `extra`.

    pip puts pybind11 in a build environment of a fresh random name, which
    makes every compile of the binding new to ccache. The same pinned
    pybind11, unpacked at the same place relative to the build directory
    (SOURCE_TREE/build/pip-wheels, as the build directory is
    SOURCE_TREE/build/pip/X), and named by pybind11_ROOT (which find_package
    reads first), lets the clone's build and the sdist's, and every rerun,
    share compiled objects: on a fresh machine (CI) the sdist's build then
    compiles only what the clone's did not (the TensorFlow op library).
    """
    environment = _clean_environment(**extra)
    if shutil.which('ccache'):
        environment['CMAKE_C_COMPILER_LAUNCHER'] = 'ccache'
        environment['CMAKE_CXX_COMPILER_LAUNCHER'] = 'ccache'
        # Paths under BASE hash as relative to the build directory (ccache's
        # base_dir), so the clone's build and the unpacked sdist's, at the
        # same depth below their trees, compile to the same objects.
        environment['CCACHE_BASEDIR'] = base
        environment['CCACHE_NOHASHDIR'] = '1'
        wheel = glob.glob(os.path.join(wheelhouse, 'pybind11-*.whl'))[0]
        unpacked = os.path.join(source_tree, 'build', 'pip-wheels',
                                os.path.basename(wheel)[:-len('.whl')])
        if not os.path.isdir(unpacked):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(unpacked + '.partial')
            os.replace(unpacked + '.partial', unpacked)
        environment['pybind11_ROOT'] = os.path.join(unpacked, 'pybind11')
    environment.setdefault('CMAKE_BUILD_PARALLEL_LEVEL', str(os.cpu_count() or 2))
    return environment


def _pinned(source):
    """The requirement lines of scripts/python-build-requirements.txt."""
    path = os.path.join(source, 'scripts', 'python-build-requirements.txt')
    with open(path) as requirements:
        return [line.strip() for line in requirements if line.strip() and not line.startswith('#')]


def _check_pins_agree(source):
    """pyproject.toml's build requirements are pinned, and pinned alike in the requirements file."""
    with open(os.path.join(source, 'pyproject.toml')) as pyproject:
        requires = re.search(r'^requires\s*=\s*\[(.*?)\]', pyproject.read(), re.M | re.S).group(1)
    pinned = set(_pinned(source))
    for requirement in re.findall(r'"([^"]+)"', requires):
        if '==' not in requirement or requirement not in pinned:
            sys.exit(f'pyproject.toml requires {requirement}: not pinned as in '
                     'scripts/python-build-requirements.txt')


def _wheelhouse(source, build, python):
    """BUILD/pip-wheels with the pinned build requirements for `python`, downloaded when missing."""
    wheelhouse = os.path.join(build, 'pip-wheels')
    os.makedirs(wheelhouse, exist_ok=True)
    marker = ('import sys; from packaging.markers import Marker; '
              'print(Marker(sys.argv[1]).evaluate())')
    missing = []
    for line in _pinned(source):
        requirement, _, condition = line.partition(';')
        if condition.strip():
            # The venv's pip vendors packaging: ask it whether the marker holds there.
            held = subprocess.run(
                [python, '-c', marker.replace('from packaging', 'from pip._vendor.packaging'),
                 condition.strip()], capture_output=True, text=True)
            if held.stdout.strip() != 'True':
                continue
        name, version = requirement.strip().split('==')
        stem = re.sub(r'[-_.]+', '_', name).lower()
        if not glob.glob(os.path.join(wheelhouse, f'{stem}-{version}-*.whl')):
            missing.append(requirement.strip())
    if missing:
        download = subprocess.run(
            [python, '-m', 'pip', 'download', '--quiet', '--only-binary=:all:', '--no-deps',
             '--retries', '2', '-d', wheelhouse] + missing,
            capture_output=True, text=True, env=_clean_environment())
        if download.returncode != 0:
            print(f'pip could not download {" ".join(missing)} (no network?):\n'
                  f'{download.stderr[-2000:]}')
            sys.exit(SKIPPED)
    return wheelhouse


def _fresh_venv(path, base_python, system_site_packages=False):
    shutil.rmtree(path, ignore_errors=True)
    command = [base_python, '-m', 'venv', path]
    if system_site_packages:
        command.insert(3, '--system-site-packages')
    run(command)
    return os.path.join(path, 'bin', 'python')


_PROBE = '''
import json, os, sys, collective, collective._core
package = os.path.dirname(collective.__file__)
libraries = sorted({line.split()[-1] for line in open('/proc/self/maps')
                    if 'libcollective' in line and '.so' in line})
print(json.dumps({'package': package, 'core': collective._core.__file__,
                  'libraries': libraries, 'prefix': sys.prefix,
                  'typed': [os.path.exists(os.path.join(package, name))
                            for name in ('py.typed', '_core.pyi')]}))
'''


def _check_installed(python, workdir):
    """The package, its extension and libcollective all come from the environment's site-packages."""
    import json
    loaded = json.loads(run([python, '-c', _PROBE], cwd=workdir,
                             env=_clean_environment()).strip().splitlines()[-1])
    package = os.path.realpath(loaded['package'])
    if not package.startswith(os.path.realpath(loaded['prefix']) + os.sep):
        sys.exit(f'collective came from {package}, outside the environment {loaded["prefix"]}')
    if os.path.dirname(os.path.realpath(loaded['core'])) != package:
        sys.exit(f'collective._core came from {loaded["core"]}, not from {package}')
    expected = os.path.join(package, 'lib')
    if not loaded['libraries'] or any(os.path.dirname(os.path.realpath(p)) != expected
                                      for p in loaded['libraries']):
        sys.exit(f'expected libcollective from {expected}; loaded {loaded["libraries"]}')
    if not all(loaded['typed']):
        sys.exit(f'{package} lacks py.typed or _core.pyi')
    print(f'installed: {package}, libcollective from {expected}')


class _Daemon:
    """The collectived of a `cmake --install` prefix, on a socket of its own."""

    def __init__(self, prefix, directory):
        self.socket = os.path.join(directory, 'collectived.sock')
        self.log = open(os.path.join(directory, 'collectived.log'), 'w+')
        self.process = subprocess.Popen(
            [os.path.join(prefix, 'bin', 'collectived'), '--socket', self.socket,
             '--log-level', 'warn'], stdout=self.log, stderr=subprocess.STDOUT,
            env=_clean_environment())
        run([os.path.join(prefix, 'bin', 'collectivectl'), '--socket', self.socket,
              '--timeout', '60', 'health', '--wait'], timeout=120)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=60)
        self.log.seek(0)
        if status != 0:
            sys.exit(f'collectived exited with status {status}:\n{self.log.read()}')


def _install_tools(build, prefix):
    shutil.rmtree(prefix, ignore_errors=True)
    for component in ('daemon', 'client'):
        run(['cmake', '--install', build, '--prefix', prefix, '--component', component])


def _run_job(prefix, python, job, workdir, expected):
    """`collectiverun -np 2 python job` from `workdir` against the installed daemon."""
    daemon = _Daemon(prefix, workdir)
    try:
        output = run([os.path.join(prefix, 'bin', 'collectiverun'), '--socket', daemon.socket,
                       '-np', '2', python, job], cwd=workdir, timeout=300,
                      env=_clean_environment(TF_CPP_MIN_LOG_LEVEL='2'))
    finally:
        daemon.stop()
    print(output)
    for rank in range(2):
        if f'{expected}: rank {rank} of 2' not in output:
            sys.exit(f'rank {rank} did not report its result:\n{output}')


def _torch(source, build, work):
    python = _fresh_venv(os.path.join(work, 'venv'), '/usr/bin/python3',
                         system_site_packages=True)
    wheelhouse = _wheelhouse(source, build, python)
    run([python, '-m', 'pip', 'install', '--quiet', '--no-index', '--find-links', wheelhouse,
         '--config-settings=build-dir=build/pip/test-torch', source],
        env=_build_environment(wheelhouse, source, os.path.commonpath([source, build]),
                               COLLECTIVE_WITHOUT_TENSORFLOW='1'),
        timeout=1800)
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
    tools = _fresh_venv(os.path.join(work, 'sdist-venv'), '/usr/bin/python3')
    wheelhouse = _wheelhouse(source, build, tools)
    run([tools, '-m', 'pip', 'install', '--quiet', '--no-index', '--find-links', wheelhouse,
          next(line for line in _pinned(source) if line.startswith('scikit-build-core'))])
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
    python = _fresh_venv(os.path.join(work, 'venv'), base)
    site = run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'])
    tensorflow_site = run([tensorflow_python, '-c',
                            'import sysconfig; print(sysconfig.get_paths()["purelib"])'])
    with open(os.path.join(site.strip(), 'tensorflow-venv.pth'), 'w') as pth:
        pth.write(tensorflow_site.strip() + '\n')

    wheels = os.path.join(work, 'wheels')
    shutil.rmtree(wheels, ignore_errors=True)
    run([python, '-m', 'pip', 'wheel', '--quiet', '--no-index', '--find-links', wheelhouse,
          '--no-deps', '--wheel-dir', wheels, unpacked],
        env=_build_environment(wheelhouse, unpacked, os.path.commonpath([source, build]),
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
    message = run([python, '-c', _WITHOUT_TORCH], cwd=work, env=_clean_environment())
    if 'collective.torch needs PyTorch' not in message:
        sys.exit(f'collective.torch without torch said: {message}')
    print(f'without torch: {message.strip()}')
    return python


def main():
    mode, source, build = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    _check_pins_agree(source)
    work = os.path.join(build, 'pip-test', mode)
    os.makedirs(work, exist_ok=True)
    if mode == 'torch':
        python = _torch(source, build, work)
    else:
        python = _tensorflow(source, build, work, sys.argv[4])
    prefix = os.path.join(work, 'prefix')
    _install_tools(build, prefix)
    with tempfile.TemporaryDirectory(prefix=f'collective-pip-{mode}-') as outside:
        _check_installed(python, outside)
        job = shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       f'{mode}_job.py'), outside)
        _run_job(prefix, python, job, outside, f'{mode} job')
    print(f'pip install ({mode}): done')


if __name__ == '__main__':
    main()
