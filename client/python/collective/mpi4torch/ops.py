"""mpi4torch's reduction constants and how each reaches the daemon.

The values are mpi4torch 0.1.3's (``MPI_MAX`` is 0, ..., ``MPI_MAXLOC``
11), so that code storing or comparing them keeps working. The daemon
reduces with sum, min, max and product; the logical reductions become those
over the tensor's truth values (``x != 0``): and is the minimum, or the
maximum, exclusive or the parity of the sum. Bitwise reductions are the
logical ones on bool tensors and are refused on others, as are
``MPI_MINLOC``/``MPI_MAXLOC``, whose (value, index) pairs no torch dtype holds.
"""

import torch

from collective import _core

MPI_MAX = 0
MPI_MIN = 1
MPI_SUM = 2
MPI_PROD = 3
MPI_LAND = 4
MPI_BAND = 5
MPI_LOR = 6
MPI_BOR = 7
MPI_LXOR = 8
MPI_BXOR = 9
MPI_MINLOC = 10
MPI_MAXLOC = 11

NAMES = {MPI_MAX: 'MPI_MAX', MPI_MIN: 'MPI_MIN', MPI_SUM: 'MPI_SUM', MPI_PROD: 'MPI_PROD',
         MPI_LAND: 'MPI_LAND', MPI_BAND: 'MPI_BAND', MPI_LOR: 'MPI_LOR', MPI_BOR: 'MPI_BOR',
         MPI_LXOR: 'MPI_LXOR', MPI_BXOR: 'MPI_BXOR', MPI_MINLOC: 'MPI_MINLOC',
         MPI_MAXLOC: 'MPI_MAXLOC'}

_DIRECT = {MPI_MAX: 'max', MPI_MIN: 'min', MPI_SUM: 'sum', MPI_PROD: 'product'}
# The logical reduction each bitwise one is on bool tensors.
_LOGICAL_OF_BITWISE = {MPI_BAND: MPI_LAND, MPI_BOR: MPI_LOR, MPI_BXOR: MPI_LXOR}


class Plan:
    """How one reduction of tensors of one dtype runs on the daemon.

    ``wire_op``: the daemon's code; ``prepare(tensor)``: what is sent;
    ``finish(result)``: the reduced tensor, back in the caller's dtype.
    """

    __slots__ = ('wire_op', 'prepare', 'finish')

    def __init__(self, wire_op, prepare, finish):
        self.wire_op = wire_op
        self.prepare = prepare
        self.finish = finish


def _truth(tensor):
    return tensor != 0


def plan(op, dtype):
    """The Plan for reducing ``dtype`` tensors with mpi4torch's ``op``; ValueError if refused."""
    name = NAMES.get(op) if isinstance(op, int) and not isinstance(op, bool) else None
    if name is None:
        raise ValueError(f'{op!r} is not one of mpi4torch\'s reduction ops (MPI_MAX, MPI_MIN, '
                         'MPI_SUM, MPI_PROD, MPI_LAND, MPI_BAND, MPI_LOR, MPI_BOR, MPI_LXOR, '
                         'MPI_BXOR, MPI_MINLOC, MPI_MAXLOC).')
    if op in _DIRECT:
        return Plan(_core.REDUCE_OPS[_DIRECT[op]], lambda t: t, lambda r: r)
    if op in _LOGICAL_OF_BITWISE:
        if dtype != torch.bool:
            raise ValueError(f'{name} is a bitwise reduction, which collectived does not offer '
                             f'for {dtype} tensors; on bool tensors it is the logical one.')
        op = _LOGICAL_OF_BITWISE[op]
    if op in (MPI_MINLOC, MPI_MAXLOC):
        raise ValueError(f'{name} reduces (value, index) pairs, which no torch dtype holds; '
                         'collectived does not offer it.')

    def back(truth):
        return truth if dtype == torch.bool else truth.to(dtype)

    if op == MPI_LAND:
        return Plan(_core.REDUCE_OPS['min'], _truth, back)
    if op == MPI_LOR:
        return Plan(_core.REDUCE_OPS['max'], _truth, back)
    # MPI_LXOR: true where an odd number of ranks hold a true value.
    return Plan(_core.REDUCE_OPS['sum'], lambda t: _truth(t).to(torch.int32),
                lambda r: back(r.remainder(2) != 0))
