"""Connects every rank before the collective.tensorflow tests run.

Every rank of the job runs this same pytest session (``collectiverun -np N
tf-venv/bin/python -m pytest tests/tensorflow``), so the collectives of each
test pair up across ranks by name and order. A rank stuck in one test past
COLLECTIVE_TEST_DEADLINE_S prints its threads and exits, which ends the job
instead of leaving it to the suite's timeout.
"""

import faulthandler
import os

import pytest

import collective.tensorflow as hvd

hvd.init()

_TEST_DEADLINE_S = float(os.environ.get('COLLECTIVE_TEST_DEADLINE_S', '120'))


@pytest.fixture(autouse=True)
def _deadline():
    faulthandler.dump_traceback_later(_TEST_DEADLINE_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def evens():
    """The process set of the even ranks (every rank makes it), removed after the test."""
    process_set = hvd.add_process_set([r for r in range(hvd.size()) if r % 2 == 0])
    yield process_set
    hvd.remove_process_set(process_set)
