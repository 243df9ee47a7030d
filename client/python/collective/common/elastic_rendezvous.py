"""The worker's side of an elastic job's rendezvous with ``collectiverun --elastic``.

The launcher is the rendezvous: it owns a private 0700 directory
(``COLLECTIVE_ELASTIC_DIR``) whose ``world`` file names the latest generation of
the job (its number, its job id, the worker numbers in rank order, how many
of them each node runs, and the world of daemons that serves it), replaced
atomically when a worker fails or is added. A worker knows its number
(``COLLECTIVE_ELASTIC_WORKER``) and the generation it is in; to re-form it
reads the newer world and points the environment that ``init()`` reads
(``COLLECTIVE_JOB_ID``, ``COLLECTIVE_LOCAL_RANK``/``_SIZE`` and Horovod's and
torchrun's names) at it. A worker's daemon is its host's, on a socket that
keeps its path; when the job's nodes change, the launcher starts a new world
of daemons once every worker has left the old one, and says so with the
marker ``daemons-<world>``, which a worker waits for before it registers. Waiting is on inotify, with a deadline
(``COLLECTIVE_ELASTIC_TIMEOUT_S``, else Horovod's ``HOROVOD_ELASTIC_TIMEOUT``,
else 600 s as Horovod), never on sleeps.

Without ``COLLECTIVE_ELASTIC_DIR`` (not started by ``collectiverun
--elastic``) there is one generation: nothing is ever updated and a failed
job cannot re-form.
"""

import ctypes
import os
import select
import threading
import time

_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = 0o2000000
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100

# The variables init() and the trainer read, as the launcher sets them
# (client/launcher/rank_environment.cc).
_GLOBAL_RANK_NAMES = ('HOROVOD_RANK', 'RANK')
_GLOBAL_SIZE_NAMES = ('HOROVOD_SIZE', 'WORLD_SIZE')
_LOCAL_RANK_NAMES = ('COLLECTIVE_LOCAL_RANK', 'HOROVOD_LOCAL_RANK', 'LOCAL_RANK')
_LOCAL_SIZE_NAMES = ('COLLECTIVE_LOCAL_SIZE', 'HOROVOD_LOCAL_SIZE', 'LOCAL_SIZE',
                     'LOCAL_WORLD_SIZE')


class World:
    """One generation of the job: ``workers`` lists the worker numbers in rank order, grouped
    by node (``local_sizes``: how many each node runs, in node order); ``failures`` counts the
    failures (workers that died, jobs that failed on every rank) the launcher had seen when it
    published it; ``daemons`` numbers the world of daemons that serves it."""

    def __init__(self, generation, job_id, workers, failures, local_sizes=None, daemons=0):
        self.generation = generation
        self.job_id = job_id
        self.workers = workers
        self.failures = failures
        self.local_sizes = local_sizes or [len(workers)]
        self.daemons = daemons

    def rank_of(self, worker):
        return self.workers.index(worker)

    def placement_of(self, worker):
        """(rank, local rank, local size, node) of ``worker``."""
        rank = self.rank_of(worker)
        offset = 0
        for node, local_size in enumerate(self.local_sizes):
            if rank < offset + local_size:
                return rank, rank - offset, local_size, node
            offset += local_size
        raise ValueError(f'worker {worker} lies beyond the nodes {self.local_sizes}')


def directory():
    """The launcher's rendezvous directory; None outside an elastic job."""
    return os.environ.get('COLLECTIVE_ELASTIC_DIR') or None


def worker():
    """This process's worker number, which it keeps while its rank changes."""
    return int(os.environ['COLLECTIVE_ELASTIC_WORKER'])


def generation():
    """The generation this process was last pointed at (0 outside an elastic job)."""
    return int(os.environ.get('COLLECTIVE_ELASTIC_GENERATION', '0'))


def failures():
    """How many failures the launcher had seen when that generation was published."""
    return int(os.environ.get('COLLECTIVE_ELASTIC_FAILURES', '0'))


def timeout_s():
    """How long to wait for the launcher; Horovod's variable works too."""
    return float(os.environ.get('COLLECTIVE_ELASTIC_TIMEOUT_S') or
                 os.environ.get('HOROVOD_ELASTIC_TIMEOUT') or '600')


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
                 [int(w) for w in fields['workers'].split()], int(fields['failures']),
                 [int(n) for n in fields.get('local_sizes', '').split()],
                 int(fields.get('daemons', '0')))


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

    def wait(self, deadline, also=None):
        """Waits for a change, or for ``also`` (a descriptor) to be readable, until ``deadline``
        (time.monotonic()); False if it passed."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        if also is not None:
            poller.register(also, select.POLLIN)
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


def _wait_until(condition, what, also=None):
    """Returns condition()'s first truthy value, re-checked whenever the directory changes (or
    ``also``, a descriptor, becomes readable)."""
    deadline = time.monotonic() + timeout_s()
    watch = _DirectoryWatch(directory())
    try:
        while True:
            # Checked after the watch exists: a change between the check and
            # the wait still wakes it.
            value = condition()
            if value:
                return value
            if not watch.wait(deadline, also):
                raise TimeoutError(
                    f'elastic worker {worker()}: {what} did not happen within '
                    f'{timeout_s():g} s (COLLECTIVE_ELASTIC_TIMEOUT_S)')
    finally:
        watch.close()


def request_reset():
    """Tells the launcher that this worker's job failed and that it waits to re-form.

    ``reset-<failures>-<worker>``: when every live worker that has joined a
    generation asked so after the same count of failures (a collective that
    failed on every rank without a death: mismatched tensors, a stall), the
    launcher publishes the next generation with the same workers, as
    Horovod's driver re-forms the job once every worker reported ready. A
    death re-forms it without the dead worker before that.
    """
    with open(os.path.join(directory(), f'reset-{failures()}-{worker()}'), 'w'):
        pass


def wait_for_next_world(after_failure):
    """Waits until the launcher has published what comes after this process's generation.

    After a failure that is a generation published since the job failed
    (``request_reset``): one published before (workers were being added)
    may still list a dead worker, whose job would never form. Otherwise any
    newer generation.
    """
    if directory() is None:
        return None
    current, failed = generation(), failures()
    if after_failure:
        request_reset()

    def next_world():
        world = read_world()
        if after_failure:
            return world if world.failures > failed else None
        return world if world.generation > current else None

    return _wait_until(next_world, 'a generation after the failure' if after_failure
                       else f'a generation after {current}')


def point_environment_at(world):
    """Makes ``init()`` join ``world``: its job id, this worker's rank in it and on its node,
    and the sizes."""
    rank, local_rank, local_size, node = world.placement_of(worker())
    os.environ['COLLECTIVE_JOB_ID'] = world.job_id
    os.environ['COLLECTIVE_ELASTIC_GENERATION'] = str(world.generation)
    os.environ['COLLECTIVE_ELASTIC_FAILURES'] = str(world.failures)
    for names, value in ((_GLOBAL_RANK_NAMES, rank), (_GLOBAL_SIZE_NAMES, len(world.workers)),
                         (_LOCAL_RANK_NAMES, local_rank), (_LOCAL_SIZE_NAMES, local_size),
                         (('HOROVOD_CROSS_RANK',), node),
                         (('HOROVOD_CROSS_SIZE',), len(world.local_sizes))):
        for name in names:
            os.environ[name] = str(value)


def join_latest_generation(after_superseded=False):
    """Points ``init()`` at the latest generation, which this worker belongs to (the launcher
    keeps every live worker), once the workers of the generation before have left theirs.

    The daemon serves one job at a time, so a worker that is added must not
    register before the running ranks left their job. ``COLLECTIVE_ELASTIC_AWAIT``
    (set for added workers, read once; after this worker gave up a generation
    that a failure superseded, the other workers of the latest) lists the
    workers it waits for: each
    has exited (``exited-<worker>``, written by the launcher) or is joining
    this generation or a later one (``joining-<generation>-<worker>``, written
    here by every worker before it registers). Nothing to do outside an
    elastic job.
    """
    base = directory()
    awaited = [int(w) for w in os.environ.pop('COLLECTIVE_ELASTIC_AWAIT', '').split()]
    if base is None:
        return
    mine = generation()
    if after_superseded:
        # This worker gave up a generation that never formed; so do the
        # others that live on, and none registers with the latest before
        # all have (each says so first, so that none waits for another).
        latest = read_world()
        mine = latest.generation
        awaited = [w for w in latest.workers if w != worker()]
        _mark_joining(base, mine)

    def gone_or_joining(names, member):
        if f'exited-{member}' in names:
            return True
        for name in names:
            kind, _, rest = name.partition('-')
            target, _, who = rest.partition('-')
            if kind == 'joining' and who == str(member) and int(target) >= mine:
                return True
        return False

    def all_left():
        names = set(os.listdir(base))
        return all(gone_or_joining(names, member) for member in awaited)

    if awaited:
        _wait_until(all_left, 'the workers of the previous generation leaving it')
    _join_when_daemons_serve(base)


def _join_when_daemons_serve(base):
    """Points ``init()`` at the latest generation and says this worker joins it; then waits
    until the world of daemons that serves it runs (the launcher starts a new one when the
    job's nodes change, once every worker said it joins), joining a newer generation instead
    if one is published meanwhile."""
    while True:
        world = read_world()
        point_environment_at(world)
        _mark_joining(base, world.generation)
        marker = f'daemons-{world.daemons}'

        def served_or_newer(world=world, marker=marker):
            if os.path.exists(os.path.join(base, marker)):
                return 'served'
            return 'newer' if read_world().generation > world.generation else None

        if _wait_until(served_or_newer, f'the daemons of generation {world.generation}') \
                == 'served':
            return


def _mark_joining(base, target):
    with open(os.path.join(base, f'joining-{target}-{worker()}'), 'w'):
        pass


def connect_unless_superseded(connect, cancellation):
    """Registers with this worker's generation and waits for it to form, unless a failure
    supersedes it first.

    ``connect()`` registers and blocks until the job forms (it runs on a
    thread of its own); ``cancellation.cancel()`` makes it give up. A member
    that dies before it registers would leave the others waiting for it until
    the daemon's registration deadline: as soon as the launcher publishes a
    generation after a failure, the registration is cancelled (the daemon
    forgets it) and None is returned, for the caller to join the latest
    generation. Returns the connected client, or raises what ``connect()``
    raised.
    """
    outcome = {}
    done_read, done_write = os.pipe()

    def register():
        try:
            outcome['client'] = connect()
        except BaseException as error:  # noqa: BLE001  handed to the waiting thread
            outcome['error'] = error
        finally:
            os.write(done_write, b'.')

    failed = failures()
    registering = threading.Thread(target=register, name='collective-elastic-register',
                                   daemon=True)
    registering.start()

    def formed_or_superseded():
        if outcome:
            return 'done'
        return 'superseded' if read_world().failures > failed else None

    try:
        _wait_until(formed_or_superseded, f'generation {generation()} forming', also=done_read)
    finally:
        # Superseded, or this wait failed (its deadline): the registration
        # gives up (no-op once it has its answer), and the thread is done
        # with the pipe before it is closed.
        cancellation.cancel()
        registering.join()
        os.close(done_read)
        os.close(done_write)
    if 'client' in outcome:
        return outcome['client']  # formed, perhaps before the cancellation reached it
    if read_world().failures > failed:
        return None  # superseded: the error is the cancellation's
    raise outcome['error']


def refused_for_an_earlier_generation(message):
    """Whether the daemon refused a registration because it still forms an earlier generation
    of this elastic job (``collectived is serving job '<job>.<n>'; ...``)."""
    base = os.environ.get('COLLECTIVE_JOB_ID', '').rpartition('.')[0]
    prefix = f"collectived is serving job '{base}."
    if not base or not message.startswith(prefix):
        return False
    serving = message[len(prefix):].partition("'")[0]
    return serving.isdigit() and int(serving) < generation()


class Backoff:
    """Waits before a retry, 5 ms doubling to 100 ms, until the elastic deadline; for the one
    race no file announces: the daemon taking in a registration another process cancelled."""

    def __init__(self):
        self._deadline = time.monotonic() + timeout_s()
        self._delay = 0.005

    def wait(self, why):
        if time.monotonic() + self._delay > self._deadline:
            raise TimeoutError(f'elastic worker {worker()}: still refused after '
                               f'{timeout_s():g} s (COLLECTIVE_ELASTIC_TIMEOUT_S): {why}')
        time.sleep(self._delay)
        self._delay = min(self._delay * 2, 0.1)
