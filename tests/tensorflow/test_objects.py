"""collective.tensorflow's broadcast_object and allgather_object: picklable Python objects of
every rank, whose values each rank knows in closed form; eagerly, in a TF1 graph with a
session, on a process set; the argument errors and the daemon's."""

import numpy as np
import pytest
import tensorflow as tf

import collective.tensorflow as hvd


def _object_of(rank):
    """Rank r's object: sizes differ by rank (rank 0's list is empty)."""
    return {'rank': rank, 'values': list(range(rank * 5)), 'array': np.arange(rank, dtype=np.int16),
            'text': 'é' * rank}


def _assert_equal_objects(got, want):
    assert got.keys() == want.keys()
    for key in want:
        if isinstance(want[key], np.ndarray):
            np.testing.assert_array_equal(got[key], want[key])
            assert got[key].dtype == want[key].dtype
        else:
            assert got[key] == want[key]


@pytest.mark.parametrize('root', ['first', 'last'])
def test_broadcast_object_from_a_root(root):
    size, rank = hvd.size(), hvd.rank()
    root_rank = 0 if root == 'first' else size - 1
    mine = _object_of(rank) if rank == root_rank else None
    _assert_equal_objects(hvd.broadcast_object(mine, root_rank=root_rank), _object_of(root_rank))
    # The default root is 0, the default name one for every rank whatever it passes.
    assert hvd.broadcast_object(('tuple', rank)) == ('tuple', 0)


def test_allgather_object_in_rank_order():
    size, rank = hvd.size(), hvd.rank()
    gathered = hvd.allgather_object(_object_of(rank))
    assert len(gathered) == size
    for r, got in enumerate(gathered):
        _assert_equal_objects(got, _object_of(r))
    assert hvd.allgather_object(None, name='nones') == [None] * size


def test_in_a_tf1_graph_with_a_session():
    size, rank = hvd.size(), hvd.rank()
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        assert not tf.executing_eagerly()
        broadcast = hvd.broadcast_object([rank] * 3 if rank == 0 else None, session=session,
                                         name='graph.broadcast')
        gathered = hvd.allgather_object({'r': rank}, session=session, name='graph.gather')
    assert broadcast == [0] * 3
    assert gathered == [{'r': r} for r in range(size)]


def test_on_a_process_set(evens):
    size, rank = hvd.size(), hvd.rank()
    members = evens.ranks
    if rank in members:
        last = members[-1]
        got = hvd.broadcast_object(_object_of(rank) if rank == last else None,
                                   root_rank=last, process_set=evens)
        _assert_equal_objects(got, _object_of(last))
        assert hvd.allgather_object(rank * 10, process_set=evens) == \
            [m * 10 for m in members]
        if size > 1:
            # root_rank is a global rank, which must be a member of the set.
            with pytest.raises(ValueError, match='rank 1 is not a member'):
                hvd.broadcast_object('x', root_rank=1, process_set=evens)


def test_disagreeing_roots_fail_on_every_rank():
    size, rank = hvd.size(), hvd.rank()
    if size < 2:
        pytest.skip('needs at least 2 ranks')
    # Every rank believes itself the root: the daemon refuses the length's broadcast.
    with pytest.raises(tf.errors.OpError, match='broadcast root ranks') as raised:
        hvd.broadcast_object(rank, root_rank=rank, name='roots')
    assert "'broadcast.roots.sz'" in raised.value.message
    assert hvd.broadcast_object(rank, root_rank=0, name='roots.after') == 0


def test_broadcast_object_fn_in_a_tf1_graph():
    # Horovod's: the broadcast ops built once, the function called again and again.
    rank = hvd.rank()
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        broadcast = hvd.broadcast_object_fn(root_rank=hvd.size() - 1, session=session,
                                            name='fn.graph')
        first = broadcast({'from': rank, 'list': list(range(rank))})
        second = broadcast('x' * (rank + 1))
    last = hvd.size() - 1
    assert first == {'from': last, 'list': list(range(last))}
    assert second == 'x' * (last + 1)


def test_broadcast_object_fn_eagerly():
    broadcast = hvd.broadcast_object_fn(name='fn.eager')
    assert broadcast(hvd.rank() + 10) == 10
    assert broadcast([hvd.rank()]) == [0]
