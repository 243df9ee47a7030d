"""The reduce ops (Horovod's constants and values) and how an op reaches the daemon."""

import warnings

from collective import _core
from collective.common import basics
from collective.common.exceptions import HorovodInternalError

# Horovod's values, so that code comparing or storing them keeps working.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_WIRE_CODES = {
    Average: _core.REDUCE_OPS['average'],
    Sum: _core.REDUCE_OPS['sum'],
    Adasum: _core.REDUCE_OPS['adasum'],
    Min: _core.REDUCE_OPS['min'],
    Max: _core.REDUCE_OPS['max'],
    Product: _core.REDUCE_OPS['product'],
}

# The wire code of each op a one-tensor allreduce takes on the short path (every op but
# Adasum), with None for Average, the op parameter's default: one lookup per call.
SHORT_PATH_CODES = {op: code for op, code in _WIRE_CODES.items() if op != Adasum}
SHORT_PATH_CODES[None] = _WIRE_CODES[Average]


def resolve_op(op, average):
    """The op meant by ``op`` and the deprecated ``average`` flag; Average when neither is given."""
    if op is not None:
        if average is not None:
            raise ValueError('The op parameter supersedes average. Please provide only one of them.')
        return op
    if average is not None:
        warnings.warn('Parameter `average` has been replaced with `op` and will be removed',
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return Average


def wire_code(op):
    """The daemon's code for ``op``."""
    try:
        return _WIRE_CODES[op]
    except (KeyError, TypeError):
        raise ValueError(f'Unknown reduce op {op!r}: use Average, Sum, Adasum, Min, Max or '
                         'Product') from None


def check_reducescatter_op(op):
    """Horovod's refusal of a reducescatter by any op but Average and Sum: raised by the call
    (the enqueue, in Horovod) as ``HorovodInternalError``, the RuntimeError its torch binding
    turns the enqueue's ABORTED status into, and in its words."""
    if op not in (Average, Sum):
        raise HorovodInternalError('Reducescatter currently only supports AVERAGE and SUM.')


def check_adasum_set(process_set, on_gpu=False):
    """Horovod's refusals of an Adasum allreduce, raised at the call before anything is
    submitted; returns the daemon's Adasum scope (ADASUM_SCOPES) for the tensors.

    Host tensors are combined over every rank, which needs a power-of-two number of ranks (it
    pairs rank r with r ^ 1, r ^ 2, ...). GPU tensors (``on_gpu``) with a daemon that runs them
    through NCCL get Horovod's NCCL build's variant: each node's ranks summed, the nodes' sums
    combined by Adasum, the result divided by the local size, which needs as many ranks on
    every node and a power-of-two number of nodes. Any process set but the global one is
    refused. (The daemon checks everything again for every rank; libcollective refuses integer
    tensors.)"""
    if process_set.process_set_id != _core.GLOBAL_PROCESS_SET:
        raise NotImplementedError('Adasum does not support non-global process sets yet.')
    if on_gpu and basics.nccl_built():
        if not basics.is_homogeneous():
            raise NotImplementedError(
                'Running GPU Adasum on heterogeneous cluster is not supported yet.')
        if not _power_of_two(basics.cross_size()):
            raise NotImplementedError(
                'Running GPU Adasum with non-power of 2 nodes is not supported yet.')
        return _core.ADASUM_SCOPES['nodes']
    if on_gpu:
        warnings.warn('Adasum of GPU tensors: the daemon has no NCCL path, so the tensors are '
                      'copied to host memory and combined over every rank, as Horovod built '
                      'without NCCL does.', stacklevel=3)
    if not _power_of_two(process_set.size()):
        raise NotImplementedError('Running Adasum with non-power of 2 ranks is not supported yet.')
    return _core.ADASUM_SCOPES['ranks']


def _power_of_two(count):
    return count >= 1 and count & (count - 1) == 0
