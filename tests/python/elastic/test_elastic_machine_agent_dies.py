"""Another machine's host agent dies mid-step: collectiverun can no longer keep that machine's
copy of the rendezvous, so it blacklists the machine (as it does one whose daemon died), stops
its worker and the daemons, and the survivors roll back to their last commit and re-form on
the machines left.

Only across machines (machines_test runs it, with ``--host-discovery-script`` listing
``machine-a:2`` and ``machine-b:1``): worker 2, alone on machine-b, SIGKILLs the agent that keeps
its directory there (the ``collectiverun --host-agent`` process named for it) after the
step's weights changed, and waits. The job ends with every sample processed once per epoch and
one process's weights on both survivors."""

import os
import signal
import subprocess
import time

import collective.torch as hvd
import elastic_training as training


def _kill_my_agent():
    directory = os.environ['COLLECTIVE_ELASTIC_DIR']
    agents = subprocess.run(['pgrep', '-f', '--', f'--host-agent {directory}$'], capture_output=True,
                            text=True, check=True).stdout.split()
    assert len(agents) == 1, agents
    with open(training.death_file(), 'w') as f:
        f.write(repr(time.time()))
    os.kill(int(agents[0]), signal.SIGKILL)


def test_a_machine_whose_agent_dies_is_left_out():
    training.report(training.train_losing_the_second_node(_kill_my_agent))
    hvd.barrier()
    if hvd.rank() == 0:
        os.unlink(training.death_file())
