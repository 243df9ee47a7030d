"""A stand-in node's daemon dies mid-step: collectiverun leaves its host out from then on (as
Horovod blacklists a failing host), stops the host's worker and the other daemons, and the
survivors roll back to their last commit and re-form on the nodes left, with new daemons.

Run as ``collectiverun --host-discovery-script discover_hosts.sh --min-np 2 -np 3`` with the
script listing ``localhost:2`` and ``127.0.0.1:1``: worker 2, alone on 127.0.0.1, kills its
collectived (SIGKILL) after the step's weights changed, and waits. The script goes on listing
127.0.0.1, which is not used again. The job ends with every sample processed once per epoch
and one process's weights on both survivors, and nothing of the dead daemon left in shared
memory (collectiverun removes it once it has stopped that world). (machines_test runs it with
other machines' names, where 127.0.0.1's part is another machine's.)"""

import os
import signal
import socket
import struct
import time

import collective.torch as hvd
import elastic_training as training


def _kill_my_daemon():
    """SIGKILL to the collectived this worker talks to (its pid from the socket's peer)."""
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(os.environ['COLLECTIVE_SOCKET'])
        credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                            struct.calcsize('3i'))
    pid, _, _ = struct.unpack('3i', credentials)
    with open(training.death_file(), 'w') as f:
        f.write(repr(time.time()))
    with open(training.death_file() + '.socket', 'w') as f:
        f.write(os.environ['COLLECTIVE_SOCKET'])
    os.kill(pid, signal.SIGKILL)


def _segments_of(socket_path):
    """The shared-memory segments named for the daemon on ``socket_path``
    (shm/segment_names.cc: uid, then the path's FNV-1a)."""
    tag = 2166136261
    for byte in socket_path.encode():
        tag = ((tag ^ byte) * 16777619) & 0xffffffff
    prefix = f'collectived.{os.geteuid()}.{tag:08x}.'
    return [name for name in os.listdir('/dev/shm') if name.startswith(prefix)]


def test_a_node_whose_daemon_dies_is_left_out():
    training.report(training.train_losing_the_second_node(_kill_my_daemon))
    # Its socket, as the dead daemon's worker wrote it.
    with open(training.death_file() + '.socket') as f:
        dead = f.read()
    assert dead.endswith('/daemons/host1.sock')
    assert _segments_of(dead) == []
    hvd.barrier()
    if hvd.rank() == 0:
        os.unlink(training.death_file())
        os.unlink(training.death_file() + '.socket')
