"""What the install checks of this directory share.

pip_install_check.py and torch2_install_check.py build the clone with pip
into fresh venvs, with no index, from BUILD/pip-wheels (the pinned build
requirements of scripts/python-build-requirements.txt, filled once through
pip's cache; without them and without network a check exits 77, skipped), and
run a 2-rank job from a directory outside the source tree, with no
PYTHONPATH, under the collectiverun of a `cmake --install` of BUILD's daemon
and client components, against that install's collectived.
"""

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile

SKIPPED = 77



def run(command, timeout=120, **kwargs):
    """`command`'s stdout; a failure ends the check with what the command said."""
    print('+', ' '.join(command), flush=True)
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    if completed.returncode != 0:
        sys.exit(f'{" ".join(command)} failed ({completed.returncode}):\n'
                 f'{completed.stdout[-6000:]}{completed.stderr[-6000:]}')
    return completed.stdout


def clean_environment(**extra):
    """The environment of a user's shell: nothing pointing into the source or build tree."""
    environment = {k: v for k, v in os.environ.items()
                   if k not in ('PYTHONPATH', 'LD_LIBRARY_PATH', 'PYTHONHOME', 'VIRTUAL_ENV')
                   and not k.startswith('COLLECTIVE_')}
    environment['PIP_DISABLE_PIP_VERSION_CHECK'] = '1'
    environment['PYTHONDONTWRITEBYTECODE'] = '1'
    environment.update(extra)
    return environment


def build_environment(wheelhouse, source_tree, base, **extra):
    """pip's build: ccache where there is one, both cores, plus the switches in `extra`.

    pip puts pybind11 in a build environment of a fresh random name, which
    makes every compile of the binding new to ccache. The same pinned
    pybind11, unpacked at the same place relative to the build directory
    (SOURCE_TREE/build/pip-wheels, as the build directory is
    SOURCE_TREE/build/pip/X), and named by pybind11_ROOT (which find_package
    reads first), lets the clone's build and the sdist's, and every rerun,
    share compiled objects: paths under `base` hash as relative to the build
    directory (ccache's base_dir), so on a fresh machine (CI) the sdist's
    build compiles only what the clone's did not (the TensorFlow op library).
    """
    environment = clean_environment(**extra)
    if shutil.which('ccache'):
        environment['CMAKE_C_COMPILER_LAUNCHER'] = 'ccache'
        environment['CMAKE_CXX_COMPILER_LAUNCHER'] = 'ccache'
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


def pinned(source):
    """The requirement lines of scripts/python-build-requirements.txt."""
    path = os.path.join(source, 'scripts', 'python-build-requirements.txt')
    with open(path) as requirements:
        return [line.strip() for line in requirements if line.strip() and not line.startswith('#')]


def check_pins_agree(source):
    """pyproject.toml's build requirements are pinned, and pinned alike in the requirements file."""
    with open(os.path.join(source, 'pyproject.toml')) as pyproject:
        requires = re.search(r'^requires\s*=\s*\[(.*?)\]', pyproject.read(), re.M | re.S).group(1)
    pins = set(pinned(source))
    for requirement in re.findall(r'"([^"]+)"', requires):
        if '==' not in requirement or requirement not in pins:
            sys.exit(f'pyproject.toml requires {requirement}: not pinned as in '
                     'scripts/python-build-requirements.txt')


def pinned_wheels(source, build, python):
    """BUILD/pip-wheels with the pinned build requirements for `python`, downloaded when missing."""
    wheelhouse = os.path.join(build, 'pip-wheels')
    os.makedirs(wheelhouse, exist_ok=True)
    marker = ('import sys; from packaging.markers import Marker; '
              'print(Marker(sys.argv[1]).evaluate())')
    missing = []
    for line in pinned(source):
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
            capture_output=True, text=True, env=clean_environment())
        if download.returncode != 0:
            print(f'pip could not download {" ".join(missing)} (no network?):\n'
                  f'{download.stderr[-2000:]}')
            sys.exit(SKIPPED)
    return wheelhouse


def fresh_venv(path, base_python, system_site_packages=False):
    """A new venv of `base_python` at `path` (any old one removed); its python."""
    shutil.rmtree(path, ignore_errors=True)
    command = [base_python, '-m', 'venv', path]
    if system_site_packages:
        command.insert(3, '--system-site-packages')
    run(command)
    return os.path.join(path, 'bin', 'python')


PROBE = '''
import json, os, sys, collective, collective._core
package = os.path.dirname(collective.__file__)
libraries = sorted({line.split()[-1] for line in open('/proc/self/maps')
                    if 'libcollective' in line and '.so' in line})
print(json.dumps({'package': package, 'core': collective._core.__file__,
                  'libraries': libraries, 'prefix': sys.prefix,
                  'typed': [os.path.exists(os.path.join(package, name))
                            for name in ('py.typed', '_core.pyi')]}))
'''


def check_installed(python, workdir):
    """The package, its extension and libcollective all come from the environment's site-packages."""
    loaded = json.loads(run([python, '-c', PROBE], cwd=workdir,
                             env=clean_environment()).strip().splitlines()[-1])
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


class Daemon:
    """The collectived of a `cmake --install` prefix, on a socket of its own."""

    def __init__(self, prefix, directory):
        self.socket = os.path.join(directory, 'collectived.sock')
        self.log = open(os.path.join(directory, 'collectived.log'), 'w+')
        self.process = subprocess.Popen(
            [os.path.join(prefix, 'bin', 'collectived'), '--socket', self.socket,
             '--log-level', 'warn'], stdout=self.log, stderr=subprocess.STDOUT,
            env=clean_environment())
        run([os.path.join(prefix, 'bin', 'collectivectl'), '--socket', self.socket,
              '--timeout', '60', 'health', '--wait'], timeout=120)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=60)
        self.log.seek(0)
        if status != 0:
            sys.exit(f'collectived exited with status {status}:\n{self.log.read()}')


def install_tools(build, prefix):
    """The daemon and the tools of BUILD, `cmake --install`ed into a fresh `prefix`."""
    shutil.rmtree(prefix, ignore_errors=True)
    for component in ('daemon', 'client'):
        run(['cmake', '--install', build, '--prefix', prefix, '--component', component])


def run_job(prefix, python, job, workdir, expected):
    """`collectiverun -np 2 python job` from `workdir` against the installed daemon."""
    daemon = Daemon(prefix, workdir)
    try:
        output = run([os.path.join(prefix, 'bin', 'collectiverun'), '--socket', daemon.socket,
                       '-np', '2', python, job], cwd=workdir, timeout=300,
                      env=clean_environment(TF_CPP_MIN_LOG_LEVEL='2'))
    finally:
        daemon.stop()
    print(output)
    for rank in range(2):
        if f'{expected}: rank {rank} of 2' not in output:
            sys.exit(f'rank {rank} did not report its result:\n{output}')


def pip_install_clone(python, source, build, build_dir, **switches):
    """`pip install SOURCE` into `python`'s environment, building in SOURCE/build/pip/`build_dir`.

    With no index: the build requirements come from BUILD/pip-wheels, and the
    environment already holds whatever else the package is to meet there.
    """
    wheels = pinned_wheels(source, build, python)
    run([python, '-m', 'pip', 'install', '--quiet', '--no-index', '--find-links', wheels,
         f'--config-settings=build-dir=build/pip/{build_dir}', source],
        env=build_environment(wheels, source, os.path.commonpath([source, build]), **switches),
        timeout=1800)


def check_and_run_job(build, work, python, mode):
    """Checks what was installed, then runs `mode`_job.py on 2 ranks from outside the tree.

    Installs BUILD's daemon and tools into WORK/prefix, which it returns.
    """
    prefix = os.path.join(work, 'prefix')
    install_tools(build, prefix)
    with tempfile.TemporaryDirectory(prefix=f'collective-pip-{mode}-') as outside:
        check_installed(python, outside)
        job = shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       f'{mode}_job.py'), outside)
        run_job(prefix, python, job, outside, f'{mode} job')
    return prefix
