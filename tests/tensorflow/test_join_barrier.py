"""collective.tensorflow's join and barrier: join's zeros and its last rank (Horovod's
test_horovod_join_allreduce and _allgather), a barrier that must wait for a late rank (no
timing: the late rank marks its arrival in a shared directory just before it calls the
barrier), eagerly and inside tf.function, on process sets, and their errors."""

import os
import shutil
import tempfile
import time

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd


def test_join_others_allreduce_with_zeros_from_the_joined_rank():
    size = hvd.size()
    if hvd.rank() == 0:
        last = hvd.join()
    else:
        summed = hvd.allreduce(tf.ones([4]), op=hvd.Sum, name='join.sum')
        averaged = hvd.allreduce(tf.ones([4]), op=hvd.Average, name='join.avg')
        np.testing.assert_array_equal(summed.numpy(), [size - 1] * 4)
        np.testing.assert_allclose(averaged.numpy(), [(size - 1) / size] * 4)
        with pytest.raises(tf.errors.OpError, match='after a join only allreduce carries on'):
            hvd.allgather(tf.ones([1]), name='join.gather')
        last = hvd.join()
    assert last.dtype == tf.int32 and last.shape == ()
    # Rank 0 joined before the others could finish their allreduces.
    assert int(last) != 0
    np.testing.assert_array_equal(hvd.allgather(tf.reshape(last, [1])).numpy(),
                                  [int(last)] * size)
    np.testing.assert_array_equal(hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy(), [size] * 2)


def test_unnamed_calls_agree_again_after_a_join():
    # Rank 0 joins at once and makes one unnamed allgather fewer than the others, whose
    # allgather is refused: after the join every rank counts on from the same number.
    if hvd.rank() != 0:
        with pytest.raises(tf.errors.OpError, match='after a join only allreduce carries on'):
            hvd.allgather(tf.ones([2, 2]))
    hvd.join()
    gathered = hvd.allgather(tf.constant([[hvd.rank()]]))
    np.testing.assert_array_equal(gathered.numpy().flatten(), np.arange(hvd.size()))


def test_join_inside_tf_function():
    @tf.function
    def join():
        return hvd.join()

    last = join()
    assert 0 <= int(last) < hvd.size()
    np.testing.assert_array_equal(hvd.allgather(tf.reshape(last, [1])).numpy(),
                                  [int(last)] * hvd.size())


def _shared_directory():
    """A directory made by rank 0, its path broadcast to every rank."""
    path = tempfile.mkdtemp(prefix='tf-barrier-') if hvd.rank() == 0 else ''
    encoded = np.zeros(256, dtype=np.uint8)
    encoded[:len(path)] = np.frombuffer(path.encode(), dtype=np.uint8)
    received = hvd.broadcast(tf.constant(encoded), 0).numpy()
    return bytes(received[received != 0]).decode()


def test_barrier_waits_for_a_late_rank_eagerly_and_inside_tf_function():
    directory = _shared_directory()
    traced_barrier = tf.function(hvd.barrier)
    late = hvd.size() - 1
    for round_, barrier in enumerate((hvd.barrier, traced_barrier)):
        arrived = os.path.join(directory, f'{round_}.arrived')
        waiting = os.path.join(directory, f'{round_}.waiting')
        if hvd.rank() == late:
            # Rank 0 is at the barrier (or on its way): arrive last. A rank that never
            # gets here is ended by conftest's deadline.
            while not os.path.exists(waiting):
                time.sleep(0.001)
            open(arrived, 'w').close()
        elif hvd.rank() == 0:
            open(waiting, 'w').close()
        assert barrier() is None
        assert os.path.exists(arrived), f'rank {hvd.rank()} left the barrier before rank {late}'
    hvd.barrier()  # everyone has looked: rank 0 may clean up
    if hvd.rank() == 0:
        shutil.rmtree(directory)


def test_barrier_and_join_on_a_process_set(evens):
    rank = hvd.rank()
    members = evens.ranks
    if rank in members:
        hvd.barrier(process_set=evens)
        if rank == members[0]:
            last = hvd.join(process_set=evens)
        else:
            summed = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name='set.join.sum',
                                   process_set=evens)
            np.testing.assert_array_equal(summed.numpy(), [len(members) - 1] * 2)
            last = hvd.join(process_set=evens)
        # A global rank, as every rank argument here.
        assert int(last) in members
        if len(members) > 1:
            assert int(last) != members[0]
        gathered = hvd.allgather(tf.reshape(last, [1]), process_set=evens)
        np.testing.assert_array_equal(gathered.numpy(), [int(last)] * len(members))
    else:
        # Not a member: refused on this rank, with the client's reason.
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=f'rank {rank} is not a member of process set') as raised:
            hvd.barrier(process_set=evens)
        assert 'collective barrier of' in raised.value.message
        with pytest.raises(tf.errors.InvalidArgumentError, match='is not a member'):
            hvd.join(process_set=evens)


def test_barrier_and_join_fail_between_shutdown_and_init():
    hvd.shutdown()
    try:
        with pytest.raises(tf.errors.FailedPreconditionError, match='not initialized'):
            hvd.barrier()
        with pytest.raises(tf.errors.FailedPreconditionError, match='not initialized'):
            hvd.join()
    finally:
        hvd.init()
    hvd.barrier()
