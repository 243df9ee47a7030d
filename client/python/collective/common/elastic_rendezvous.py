"""The worker's side of an elastic job's rendezvous with ``collectiverun --elastic``.

The launcher is the rendezvous: it owns a private 0700 directory
(``COLLECTIVE_ELASTIC_DIR``) whose ``world`` file names the latest generation of
the job (its number, its job id, and the worker numbers in rank order),
replaced atomically when a worker fails or is added. A worker knows its
number (``COLLECTIVE_ELASTIC_WORKER``) and the generation it is in; to re-form
it reads the newer world and points the environment that ``init()`` reads
(``COLLECTIVE_JOB_ID``, ``COLLECTIVE_LOCAL_RANK``/``_SIZE`` and Horovod's and
torchrun's names) at it. Waiting is on inotify, with a deadline
(``COLLECTIVE_ELASTIC_TIMEOUT_S``, 600 s by default as Horovod's
``HOROVOD_ELASTIC_TIMEOUT``), never on sleeps.

Without ``COLLECTIVE_ELASTIC_DIR`` (not started by ``collectiverun
--elastic``) there is one generation: nothing is ever updated and a failed
job cannot re-form.
"""

import ctypes
import os
import select
import time

_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = 0o2000000
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100

_RANK_NAMES = ('COLLECTIVE_LOCAL_RANK', 'HOROVOD_RANK', 'HOROVOD_LOCAL_RANK', 'RANK', 'LOCAL_RANK')
_SIZE_NAMES = ('COLLECTIVE_LOCAL_SIZE', 'HOROVOD_SIZE', 'HOROVOD_LOCAL_SIZE', 'WORLD_SIZE',
               'LOCAL_SIZE', 'LOCAL_WORLD_SIZE')


class World:
    """One generation of the job: ``workers`` lists the worker numbers in rank order."""

    def __init__(self, generation, job_id, workers):
        self.generation = generation
        self.job_id = job_id
        self.workers = workers

    def rank_of(self, worker):
        return self.workers.index(worker)


def directory():
    """The launcher's rendezvous directory; None outside an elastic job."""
    return os.environ.get('COLLECTIVE_ELASTIC_DIR') or None


def worker():
    """This process's worker number, which it keeps while its rank changes."""
    return int(os.environ['COLLECTIVE_ELASTIC_WORKER'])


def generation():
    """The generation this process was last pointed at (0 outside an elastic job)."""
    return int(os.environ.get('COLLECTIVE_ELASTIC_GENERATION', '0'))


def timeout_s():
    return float(os.environ.get('COLLECTIVE_ELASTIC_TIMEOUT_S', '600'))


def read_world():
    """The latest generation the launcher published; None outside an elastic job."""
    path = directory()
    if path is None:
        return None
    fields = {}
    with open(os.path.join(path, 'world')) as f:
        for line in f:
            key, _, value = line.rstrip('\n').partition(' ')
            fields[key] = value
    return World(int(fields['generation']), fields['job_id'],
                 [int(w) for w in fields['workers'].split()])


class _DirectoryWatch:
    """inotify on the rendezvous directory: wakes when a file there is written or renamed in."""

    def __init__(self, path):
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), 'inotify_init1 failed')
        mask = _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE
        if self._libc.inotify_add_watch(self._fd, os.fsencode(path), mask) < 0:
            errno = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(errno, f'cannot watch {path}')

    def wait(self, deadline):
        """Waits for a change until ``deadline`` (time.monotonic()); False if it passed."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        if not poller.poll(remaining * 1000):
            return False
        try:
            while os.read(self._fd, 4096):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self):
        os.close(self._fd)


def _wait_until(condition, what):
    """Returns condition()'s first truthy value, re-checked whenever the directory changes."""
    deadline = time.monotonic() + timeout_s()
    watch = _DirectoryWatch(directory())
    try:
        while True:
            # Checked after the watch exists: a change between the check and
            # the wait still wakes it.
            value = condition()
            if value:
                return value
            if not watch.wait(deadline):
                raise TimeoutError(
                    f'elastic worker {worker()}: {what} did not happen within '
                    f'{timeout_s():g} s (COLLECTIVE_ELASTIC_TIMEOUT_S)')
    finally:
        watch.close()


def wait_for_world(newer_than):
    """Waits for a generation after ``newer_than`` (a failed job re-forms) and returns it."""
    if directory() is None:
        return None

    def newer():
        world = read_world()
        return world if world.generation > newer_than else None

    return _wait_until(newer, f'a generation after {newer_than}')


def point_environment_at(world):
    """Makes ``init()`` join ``world``: its job id, this worker's rank in it and its size."""
    rank = world.rank_of(worker())
    os.environ['COLLECTIVE_JOB_ID'] = world.job_id
    os.environ['COLLECTIVE_ELASTIC_GENERATION'] = str(world.generation)
    for name in _RANK_NAMES:
        os.environ[name] = str(rank)
    for name in _SIZE_NAMES:
        os.environ[name] = str(len(world.workers))


def mark_left():
    """Tells workers waiting to join that this one has left its generation."""
    if directory() is None:
        return
    path = os.path.join(directory(), f'left-{generation()}-{worker()}')
    with open(path, 'w'):
        pass


def await_previous_generation():
    """A worker added to a running job: waits until every member of the previous generation
    has left it, since the daemon serves one job at a time. Once; nothing to do otherwise.

    ``COLLECTIVE_ELASTIC_AWAIT`` lists, per member, the markers that say so
    (``left-<generation>-<worker>|exited-<worker>``: it left, or it exited).
    """
    awaited = os.environ.pop('COLLECTIVE_ELASTIC_AWAIT', '').split()
    if not awaited or directory() is None:
        return
    base = directory()

    def all_left():
        return all(any(os.path.exists(os.path.join(base, marker)) for marker in choice.split('|'))
                   for choice in awaited)

    _wait_until(all_left, 'the previous generation leaving')
