"""The reduce ops (Horovod's constants and values) and how an op reaches the daemon."""

import warnings

from collective import _core

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


def check_adasum_set(process_set):
    """Horovod's refusals of an Adasum allreduce, raised at the call before anything is
    submitted: over a process set other than the global one, and over a set whose size is not
    a power of two (it pairs rank r with r ^ 1, r ^ 2, ...). (The daemon checks everything
    again for every rank; libcollective refuses integer tensors.)"""
    if process_set.process_set_id != _core.GLOBAL_PROCESS_SET:
        raise NotImplementedError('Adasum does not support non-global process sets yet.')
    set_size = process_set.size()
    if set_size < 1 or set_size & (set_size - 1):
        raise NotImplementedError('Running Adasum with non-power of 2 ranks is not supported yet.')
