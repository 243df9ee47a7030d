"""Another machine's host agent dies mid-step: collectiverun can no longer keep that machine's
copy of the rendezvous, so it blacklists the machine (as it does one whose daemon died), stops
its worker and the daemons, and the survivors roll back to their last commit and re-form on
the machines left.

Only across machines (machines_test runs it, with ``--host-discovery-script`` listing
``machine-a:2`` and ``machine-b:1``): worker 2, alone on machine-b, SIGKILLs the agent that
keeps its directory there (the ``collectiverun --host-agent`` process named for it, found in
/proc) after the step's weights changed, and waits. The job ends with every sample processed
once per epoch and one process's weights on both survivors."""

import os
import signal
import time

import collective.torch as hvd
import elastic_training as training


def _agents_of(directory):
    """The pids of the processes running ``collectiverun --host-agent directory``."""
    found = []
    for entry in os.listdir('/proc'):
        try:
            with open(f'/proc/{entry}/cmdline', 'rb') as f:
                args = f.read().split(b'\0')[:-1]
        except (OSError, ValueError):
            continue  # not a process, or gone meanwhile
        if args[-2:] == [b'--host-agent', directory.encode()]:
            found.append(int(entry))
    return found


def _kill_my_agent():
    agents = _agents_of(os.environ['COLLECTIVE_ELASTIC_DIR'])
    assert len(agents) == 1, agents
    with open(training.death_file(), 'w') as f:
        f.write(repr(time.time()))
    os.kill(agents[0], signal.SIGKILL)


def test_a_machine_whose_agent_dies_is_left_out():
    training.report(training.train_losing_the_second_node(_kill_my_agent))
    hvd.barrier()
    if hvd.rank() == 0:
        os.unlink(training.death_file())
