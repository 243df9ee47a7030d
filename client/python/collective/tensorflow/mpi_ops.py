"""Horovod's ``horovod.tensorflow.mpi_ops`` over collectived: the collectives as TensorFlow ops.

The ops live in ``_ops.so``, built against the TensorFlow of the build
tree's virtual environment (client/tensorflow). Their kernels are
asynchronous: they hand the tensor to libcollective and return TensorFlow's
thread at once; libcollective's completion finishes them. They share this
process's one connection (``collective.common.connection``) with
``collective.torch``: ``init()`` lends its client to the op library, and
``shutdown()`` takes it back before closing it.

Names, as Horovod's: an op built in a graph (inside ``tf.function``, or a TF1
graph) is named after its input's name when it is not named ('HorovodAllreduce_'
and the input's name, its characters outside [a-zA-Z0-9_] made '_'), and the
daemon knows its tensor by the op's full node name (with TensorFlow's name
scopes, unless ``ignore_name_scope``, and TensorFlow's '_1' for a second op of
that name in the graph). A rank that traces a function again (a partial last
batch, another input signature) builds the same names. An eager tensor that the
function captures, which TensorFlow names with a process-wide number, counts as
'captured' (see ``_name_of``). Eagerly, a call is
'<kind>.<name>', or '<kind>.noname.<n>' counted per process set, so every rank
must make the same unnamed eager calls in the same order, as in Horovod.
"""

import atexit
import ctypes
import itertools
import os
import re

import tensorflow as tf
from tensorflow.python.framework import ops

from collective.common import basics, connection, reduce_ops
from collective.common.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                                      gloo_built, gloo_enabled, is_homogeneous, is_initialized,
                                      local_rank, local_size, mpi_built, mpi_enabled,
                                      mpi_threads_supported, nccl_built, rank, rocm_built, size,
                                      start_timeline, stop_timeline)
from collective.common.exceptions import HorovodInternalError
from collective.common.process_sets import (ProcessSet, add_process_set, global_process_set,
                                            process_set_id, remove_process_set, set_rank_of)
from collective.common.reduce_ops import Adasum, Average, Max, Min, Product, Sum
from collective.tensorflow.util import _executing_eagerly

_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), '_ops.so')
if not os.path.exists(_LIBRARY):
    raise ImportError(
        f'collective.tensorflow: its op library {_LIBRARY} is missing. It is built only when '
        'the build finds TensorFlow: the environment\'s own for `pip install`, build/tf-venv '
        '(scripts/tensorflow-venv.sh makes it) for a CMake build; see docs/tensorflow.md.')
_OPS = tf.load_op_library(_LIBRARY)
# The same library through ctypes, for the one function that is no op: lending
# collective._core's client to the kernels.
_ATTACH = ctypes.CDLL(_LIBRARY).collective_tensorflow_attach
_ATTACH.argtypes = [ctypes.c_size_t]
_ATTACH.restype = None


_detach_registered = False


def init(comm=None, process_sets=None):
    """Horovod's ``init``: connects to collectived (``collective.common.basics.init``) and lends
    the connection to the TensorFlow ops."""
    global _detach_registered
    basics.init(comm=comm, process_sets=process_sets)
    _ATTACH(connection.current().client.address)
    if not _detach_registered:
        # Registered after basics' own exit handler, so it runs first: the
        # ops give the client back before it closes.
        atexit.register(_ATTACH, 0)
        _detach_registered = True


def shutdown():
    """Leaves the job. Ops still running finish first; ops run afterwards fail until ``init()``."""
    _ATTACH(0)
    basics.shutdown()


def _set_id(process_set):
    return process_set_id(process_set)


def _normalize_name(name):
    """Horovod's: ``name`` with each character outside [a-zA-Z0-9_] replaced by '_', as an
    op's name may hold it."""
    return re.sub('[^a-zA-Z0-9_]', '_', name)


# The node name prefix of an unnamed op built in a graph, per kind: Horovod's.
_GRAPH_PREFIXES = {
    'allreduce': 'HorovodAllreduce',
    'grouped_allreduce': 'HorovodGroupedAllreduce',
    'allgather': 'HorovodAllgather',
    'grouped_allgather': 'HorovodGroupedAllgather',
    'broadcast': 'HorovodBroadcast',
    'alltoall': 'HorovodAlltoall',
    'reducescatter': 'HorovodReducescatter',
    'grouped_reducescatter': 'HorovodGroupedReducescatter',
}


def _graph_name(kind, tensors):
    """Horovod's node name for an unnamed op of ``kind`` built in a graph: from its input's
    name, or from the first and last of a group's."""
    prefix = _GRAPH_PREFIXES[kind]
    if isinstance(tensors, (list, tuple)):
        return _normalize_name(f'{prefix}_{_name_of(tensors[0])}_{_name_of(tensors[-1])}')
    return f'{prefix}_{_normalize_name(_name_of(tensors))}'


def _name_of(tensor):
    """The graph name of ``tensor`` (a value that is no tensor yet, a list or a number, is made
    one first, as the op would make it), or 'captured' for a tensor that TensorFlow named
    with its process-wide counter: an eager tensor that a ``tf.function`` captures becomes a
    placeholder named by a number, which differs between ranks whose programs made different
    numbers of ops before (Horovod takes that number and the ranks' names differ). TensorFlow
    makes 'captured' unique within the graph, the same on every rank that traced the same
    function."""
    tensor = tensor if hasattr(tensor, 'name') else tf.convert_to_tensor(tensor)
    # A variable has no op in a function's graph (its handle is captured): its own name.
    op = getattr(tensor, 'op', None)
    return 'captured' if op is not None and op.name.isdigit() else tensor.name


def _collective(kind, inputs, name, set_id, ignore_name_scope, **attrs):
    """The op ``collective_<kind>`` of ``inputs`` (its first one names it) in the process set
    ``set_id``, named as the module says: eagerly the daemon's name is given to the op, in
    a graph the op's node name becomes it (TensorFlow's scopes and uniquing applied)."""
    if _executing_eagerly():
        node_name, tensor_name = None, connection.call_name(kind, name, set_id)
    else:
        node_name = name if name is not None else _graph_name(kind, inputs[0])
        tensor_name = ''
    return getattr(_OPS, 'collective_' + kind)(
        *inputs, name=node_name, tensor_name=tensor_name,
        ignore_name_scope=bool(ignore_name_scope), process_set_id=set_id, **attrs)


def size_op(process_set_id=0, name=None):
    """Horovod's: an int32 scalar op, the number of ranks in the process set ``process_set_id``
    (an id, as Horovod takes it) when the op runs; unlike ``size()`` it follows a re-init, in a
    graph built before it."""
    return _OPS.collective_size(process_set_id=process_set_id, name=name)


def local_size_op(name=None):
    """Horovod's: an int32 scalar op, the number of ranks on this node when the op runs."""
    return _OPS.collective_local_size(name=name)


def rank_op(name=None):
    """Horovod's: an int32 scalar op, this process's rank when the op runs."""
    return _OPS.collective_rank(name=name)


def local_rank_op(name=None):
    """Horovod's: an int32 scalar op, this process's rank on its node when the op runs."""
    return _OPS.collective_local_rank(name=name)


def process_set_included_op(process_set_id=0, name=None):
    """Horovod's: an int32 scalar op, 1 if this process belongs to the process set
    ``process_set_id`` when the op runs, else 0."""
    return _OPS.collective_process_set_included(process_set_id=process_set_id, name=name)


def _reduction(kind, tensors, name, op, prescale_factor, postscale_factor, process_set,
               ignore_name_scope=False):
    """The reduction op ``collective_<kind>`` (allreduce or reducescatter, grouped or not) of
    ``tensors``: ``op`` (a ReduceOp) over the ranks of ``process_set``, with the scale
    factors."""
    return _reduction_of_code(kind, tensors, name, reduce_ops.wire_code(op), prescale_factor,
                              postscale_factor, _set_id(process_set), ignore_name_scope)


def _reduction_of_code(kind, tensors, name, code, prescale_factor, postscale_factor, set_id,
                       ignore_name_scope):
    """``_reduction`` with the reduce op as the daemon's ``code`` and the set as its id, as an
    op's attributes hold them."""
    return _collective(kind, (tensors,), name, set_id, ignore_name_scope, reduce_op=code,
                       prescale_factor=float(prescale_factor),
                       postscale_factor=float(postscale_factor))


def _same_reduction(kind, op, tensors):
    """The reduction ``kind`` of ``tensors`` with the op, factors, name scope handling and
    process set of ``op`` (an op of that kind): the gradient of an allreduce, Horovod's."""
    return _reduction_of_code(kind, tensors, None, op.get_attr('reduce_op'),
                              op.get_attr('prescale_factor'), op.get_attr('postscale_factor'),
                              op.get_attr('process_set_id'), op.get_attr('ignore_name_scope'))


def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               ignore_name_scope=False, process_set=global_process_set):
    """Horovod's ``_allreduce``: the allreduce op itself, ``op`` over the ranks of
    ``process_set`` with the scale factors (Horovod's parameter order)."""
    return _reduction('allreduce', tensor, name, op, prescale_factor, postscale_factor,
                      process_set, ignore_name_scope)


@ops.RegisterGradient('CollectiveAllreduce')
def _allreduce_grad(op, grad):
    """Horovod's: the same allreduce (op and factors) of the gradient."""
    return _same_reduction('allreduce', op, grad)


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    """Horovod's ``_grouped_allreduce``: the grouped allreduce op itself, its tensors (of any
    dtypes) negotiated and run together."""
    return _reduction('grouped_allreduce', list(tensors), name, op, prescale_factor,
                      postscale_factor, process_set, ignore_name_scope)


@ops.RegisterGradient('CollectiveGroupedAllreduce')
def _grouped_allreduce_grad(op, *grads):
    """Horovod's: the same grouped allreduce of the gradients."""
    return _same_reduction('grouped_allreduce', op, list(grads))


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Horovod's ``allgather``: every rank's ``tensor`` concatenated in rank order along the
    first dimension, which may differ per rank.

    ``name`` names the op (see the module on names); ``ignore_name_scope`` leaves
    TensorFlow's outer name scopes out of the name the ranks agree on.
    """
    return _collective('allgather', (tensor,), name, _set_id(process_set), ignore_name_scope)


def _process_set_of(set_id):
    """A ProcessSet for an op's process_set_id attribute (gradients know only the id)."""
    if set_id == global_process_set.process_set_id:
        return global_process_set
    for known_id, ranks in connection.current().client.process_sets():
        if known_id == set_id:
            known = ProcessSet(ranks)
            known.process_set_id = set_id
            return known
    raise ValueError(f'process set {set_id} does not exist any more')


def _own_rows(grads, inputs, process_set, ignore_name_scope):
    """Each of ``grads`` (allgathered shapes) cut down to the rows ``inputs`` gave on this rank:
    one allgather of every input's row count tells where they lie."""
    rows = tf.stack([tf.shape(t, out_type=tf.int64)[0] for t in inputs])
    all_rows = tf.reshape(allgather(rows, ignore_name_scope=ignore_name_scope,
                                    process_set=process_set),
                          [process_set.size(), len(inputs)])
    return [tf.split(grad, num_or_size_splits=all_rows[:, i], axis=0)[process_set.rank()]
            for i, grad in enumerate(grads)]


@ops.RegisterGradient('CollectiveAllgather')
def _allgather_grad(op, grad):
    """Horovod's: the average of the gradient over the set, of which this rank's rows."""
    process_set = _process_set_of(op.get_attr('process_set_id'))
    ignore_name_scope = op.get_attr('ignore_name_scope')
    grad = _allreduce(grad, op=Average, ignore_name_scope=ignore_name_scope,
                      process_set=process_set)
    return _own_rows([grad], op.inputs, process_set, ignore_name_scope)[0]


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Horovod's ``grouped_allgather``: ``allgather`` of each tensor (of any dtypes),
    negotiated and run together as one group; the first dimension of each may differ per
    rank."""
    tensors = list(tensors)
    if not tensors:
        return []
    return _collective('grouped_allgather', (tensors,), name, _set_id(process_set),
                       ignore_name_scope)


@ops.RegisterGradient('CollectiveGroupedAllgather')
def _grouped_allgather_grad(op, *grads):
    """Horovod's: the average of each gradient over the set (one group: TensorFlow may give a
    float32 zero gradient beside float64 ones, which a group of any dtypes takes), of each
    this rank's rows."""
    process_set = _process_set_of(op.get_attr('process_set_id'))
    ignore_name_scope = op.get_attr('ignore_name_scope')
    averaged = _grouped_allreduce(list(grads), op=Average, ignore_name_scope=ignore_name_scope,
                                  process_set=process_set)
    return _own_rows(averaged, op.inputs, process_set, ignore_name_scope)


def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False,
                   process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Horovod's ``_reducescatter``: the reducescatter op itself, this rank's rows of ``op``
    (Sum or Average) over the set."""
    return _reduction('reducescatter', tensor, name, op, prescale_factor, postscale_factor,
                      process_set, ignore_name_scope)


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False,
                           process_set=global_process_set, prescale_factor=1.0,
                           postscale_factor=1.0):
    """Horovod's ``_grouped_reducescatter``: the grouped reducescatter op itself, its tensors
    (of any dtypes) negotiated and run together."""
    return _reduction('grouped_reducescatter', list(tensors), name, op, prescale_factor,
                      postscale_factor, process_set, ignore_name_scope)


def _reducescatter_grad_scale(op, process_set):
    """Horovod's: a Sum's gradient is the allgathered gradient times the set's size, an
    Average's the allgathered gradient itself; both times the scale factors."""
    scale = op.get_attr('prescale_factor') * op.get_attr('postscale_factor')
    if op.get_attr('reduce_op') == reduce_ops.wire_code(Sum):
        scale *= process_set.size()
    return scale


def _scaled(tensor, scale):
    return tensor if scale == 1.0 else tensor * tf.cast(scale, tensor.dtype)


@ops.RegisterGradient('CollectiveReducescatter')
def _reducescatter_grad(op, grad):
    """Horovod's: the allgather of the (scaled) gradient."""
    process_set = _process_set_of(op.get_attr('process_set_id'))
    return allgather(_scaled(grad, _reducescatter_grad_scale(op, process_set)),
                     ignore_name_scope=op.get_attr('ignore_name_scope'),
                     process_set=process_set)


@ops.RegisterGradient('CollectiveGroupedReducescatter')
def _grouped_reducescatter_grad(op, *grads):
    """Horovod's: the grouped allgather of the (scaled) gradients."""
    process_set = _process_set_of(op.get_attr('process_set_id'))
    scale = _reducescatter_grad_scale(op, process_set)
    return grouped_allgather([_scaled(g, scale) for g in grads],
                             ignore_name_scope=op.get_attr('ignore_name_scope'),
                             process_set=process_set)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Horovod's ``broadcast``: the ``tensor`` of ``root_rank`` (a global rank, as in Horovod)
    on every rank of the set."""
    return _collective('broadcast', (tensor,), name, _set_id(process_set), ignore_name_scope,
                       root_rank=set_rank_of(process_set, root_rank))


@ops.RegisterGradient('CollectiveBroadcast')
def _broadcast_grad(op, grad):
    """Horovod's: the average of the gradient over the set on the root, zeros elsewhere."""
    process_set = _process_set_of(op.get_attr('process_set_id'))
    reduced = _allreduce(grad, op=Average, ignore_name_scope=op.get_attr('ignore_name_scope'),
                         process_set=process_set)
    if process_set.rank() != op.get_attr('root_rank'):
        return reduced * 0
    return reduced


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Horovod's ``alltoall``: ``splits[j]`` rows of ``tensor`` (by default an even share) go
    to rank j of the set.

    Returns the rows received in rank order and, when ``splits`` was given, also how many
    came from each rank (Horovod's ``received_splits``).
    """
    given = (tf.constant([], dtype=tf.int32) if splits is None
             else tf.cast(tf.convert_to_tensor(splits), tf.int32))
    received, received_splits = _collective('alltoall', (tensor, given), name,
                                            _set_id(process_set), ignore_name_scope)
    return (received, received_splits) if splits is not None else received


@ops.RegisterGradient('CollectiveAlltoall')
def _alltoall_grad(op, grad, grad_received_splits):
    """Horovod's: the gradient's rows sent back where they came from; splits have none."""
    del grad_received_splits
    returned, _ = _collective('alltoall', (grad, op.outputs[1]), None,
                              op.get_attr('process_set_id'), op.get_attr('ignore_name_scope'))
    return [returned, None]


def barrier(process_set=global_process_set):
    """Horovod's ``barrier``: returns once every rank of ``process_set`` has reached it.

    An op: eagerly it has run when this returns; inside ``tf.function`` it runs in program
    order with the function's other stateful ops (TensorFlow's automatic control
    dependencies). Returns None, as Horovod's.
    """
    _OPS.collective_barrier(process_set_id=_set_id(process_set))


# The allreduce by which an eager join ends (collective.torch's too): no name
# a call can generate starts so.
_AUTOMATIC_NAMES = '__collective__.join.automatic_names'


def join(process_set=global_process_set):
    """Horovod's ``join``: this rank has finished its data. Until every rank of the set has
    joined, its allreduces contribute zeros (averages still divide by the set's size); other
    collectives are refused.

    Returns an int32 scalar tensor: the (global) rank that joined last. Eagerly, every rank
    of the set then counts its unnamed calls on from the same number again, as in
    ``collective.torch``: a joined rank skipped those the others made.
    """
    set_id = _set_id(process_set)
    last = _OPS.collective_join(process_set_id=set_id)
    if set_id != global_process_set.process_set_id:
        last = tf.gather(tf.constant(process_set.ranks, dtype=tf.int32), last)
    if tf.executing_eagerly():
        counters = connection.current().unnamed_calls
        count = tf.constant([connection.current().peek_unnamed_call(set_id)], dtype=tf.int64)
        agreed = _OPS.collective_allreduce(count, reduce_op=reduce_ops.wire_code(Max),
                                           tensor_name=_AUTOMATIC_NAMES, process_set_id=set_id)
        counters[set_id] = itertools.count(int(agreed[0]))
    return last


__all__ = [
    'init', 'shutdown', 'is_initialized', 'size', 'local_size', 'cross_size', 'rank',
    'local_rank', 'cross_rank', 'is_homogeneous', 'mpi_threads_supported', 'mpi_enabled',
    'mpi_built', 'gloo_enabled', 'gloo_built', 'nccl_built', 'ddl_built', 'ccl_built',
    'cuda_built', 'rocm_built', 'start_timeline', 'stop_timeline', 'HorovodInternalError',
    'ProcessSet', 'add_process_set', 'remove_process_set', 'global_process_set',
    'Average', 'Sum', 'Adasum', 'Min', 'Max', 'Product',
    'allgather', 'grouped_allgather', 'broadcast', 'alltoall', 'barrier', 'join',
    'size_op', 'local_size_op', 'rank_op', 'local_rank_op', 'process_set_included_op',
]
