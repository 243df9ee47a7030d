"""Connects every rank before any test module is imported.

Every rank of the job runs this same pytest session (``collectiverun -np N
python -m pytest tests/python``); collectives pair up because every rank runs
the same tests in the same order. Static process sets (evens and odds) must
be requested by the first ``init()``, which is why it happens here; later
``init()`` calls (tests/python/_helpers.py) change nothing.
"""

import faulthandler
import os
import sys
import threading

import pytest

import collective.torch as hvd


def _static_process_sets():
    # The job's size is known only after init(); launchers say it (WORLD_SIZE:
    # collectiverun, torchrun, the multi-node test; else one node's size).
    size = int(os.environ.get('WORLD_SIZE', os.environ.get('COLLECTIVE_LOCAL_SIZE', '1')))
    if size < 2:
        return []
    return [hvd.ProcessSet(range(0, size, 2)), hvd.ProcessSet(range(1, size, 2))]


# The elastic tests need collectiverun --elastic and join no job here
# (tests/python/elastic, run by ctest's python_elastic_* tests).
collect_ignore = ['elastic']

STATIC_PROCESS_SETS = _static_process_sets()
hvd.init(process_sets=STATIC_PROCESS_SETS)


@pytest.fixture
def static_process_sets():
    """The (evens, odds) sets created by init(); skips the test in a job of one."""
    if len(STATIC_PROCESS_SETS) < 2:
        pytest.skip('static process sets need at least 2 ranks')
    return STATIC_PROCESS_SETS


@pytest.fixture
def two_ranks():
    """Skips the test in a job of one."""
    if hvd.size() < 2:
        pytest.skip('needs at least 2 ranks')


# A test that fails on some ranks only leaves the others waiting for a
# collective that never comes. Rather than hang until the suite's timeout, a
# rank stuck in one test this long prints every thread's stack (past pytest's
# output capture) and exits, which ends the job.
_TEST_DEADLINE_S = float(os.environ.get('COLLECTIVE_TEST_DEADLINE_S', '120'))


@pytest.fixture(autouse=True)
def _deadline(request):
    capture = request.config.pluginmanager.getplugin('capturemanager')

    def expire():
        if capture is not None:
            capture.suspend_global_capture(in_=False)
        try:
            rank = hvd.rank()
        except ValueError:  # stuck in init(): not connected
            rank = '(not initialized)'
        sys.stderr.write(f'\n{request.node.nodeid} still runs after {_TEST_DEADLINE_S} s on '
                         f'rank {rank}; its threads:\n')
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(3)

    timer = threading.Timer(_TEST_DEADLINE_S, expire)
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()
