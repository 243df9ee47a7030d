"""mpi4torch's reduction constants and how each is carried out with the daemon's reductions.

The values are mpi4torch 0.1.3's (``MPI_MAX`` is 0, ..., ``MPI_MAXLOC``
11), so that code storing or comparing them keeps working. The daemon
reduces with sum, min, max and product; every other op is built from those,
exactly:

- the logical ops (``MPI_LAND``, ``MPI_LOR``, ``MPI_LXOR``) reduce the
  tensor's truth values (``x != 0``): and is their minimum, or their maximum,
  exclusive or the parity of their sum; the result has the tensor's dtype
  (0 or 1), as MPI's has;
- the bitwise ops (``MPI_BAND``, ``MPI_BOR``, ``MPI_BXOR``) take integer
  tensors (and bool ones, where they are the logical ops): each byte of the
  tensor is split into its 8 bits, one uint8 per bit, and the bits are
  reduced as truth values (and: minimum, or: maximum, exclusive or: the
  parity of the sum, which a uint8 sum keeps as it wraps), then packed back;
  the daemon moves 8 bytes per byte of the tensor;
- ``MPI_MINLOC``/``MPI_MAXLOC`` reduce (value, index) pairs as MPI's pair
  types (``MPI_2INT``, ``MPI_2DOUBLE_PRECISION``, ...) hold them: a tensor
  whose last dimension is 2, ``[..., 0]`` the values and ``[..., 1]`` the
  indices, of one dtype. The result holds for each pair the minimum (or
  maximum) value and the smallest index that any rank holding that value
  gave it, as MPI defines them. Two reductions: the values' minimum (maximum)
  on every rank, then the minimum of the indices of the pairs that hold it.

mpi4torch itself hands the tensor's plain MPI datatype to ``MPI_Allreduce``
with these ops, which MPI defines for integer types only (bitwise) or for
pair types only (MINLOC/MAXLOC).
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
# The logical reduction each bitwise one applies to every bit.
_LOGICAL_OF_BITWISE = {MPI_BAND: MPI_LAND, MPI_BOR: MPI_LOR, MPI_BXOR: MPI_LXOR}
_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_BITS = torch.arange(8, dtype=torch.uint8)


def wire_op(name):
    """The daemon's code for its reduction ``name`` ('sum', 'min', 'max', 'product')."""
    return _core.REDUCE_OPS[name]


def _name(op):
    name = NAMES.get(op) if isinstance(op, int) and not isinstance(op, bool) else None
    if name is None:
        raise ValueError(f'{op!r} is not one of mpi4torch\'s reduction ops (MPI_MAX, MPI_MIN, '
                         'MPI_SUM, MPI_PROD, MPI_LAND, MPI_BAND, MPI_LOR, MPI_BOR, MPI_LXOR, '
                         'MPI_BXOR, MPI_MINLOC, MPI_MAXLOC).')
    return name


def check(op, tensor):
    """Raises ValueError, before anything is sent, if mpi4torch's ``op`` cannot reduce
    ``tensor``: an unknown op, a bitwise op on a floating-point tensor, MINLOC/MAXLOC on a
    tensor that holds no (value, index) pairs."""
    name = _name(op)
    if op in _LOGICAL_OF_BITWISE and tensor.dtype not in _INTEGER_DTYPES + (torch.bool,):
        raise ValueError(f'{name} is a bitwise reduction: it takes integer (or bool) tensors, '
                         f'not {tensor.dtype} ones.')
    if op in (MPI_MINLOC, MPI_MAXLOC):
        if tensor.dim() == 0 or tensor.shape[-1] != 2:
            raise ValueError(f'{name} reduces (value, index) pairs: a tensor whose last '
                             f'dimension is 2 ([..., 0] the values, [..., 1] the indices), not '
                             f'one of shape {list(tensor.shape)}.')
        if tensor.dtype == torch.bool:
            raise ValueError(f'{name} takes pairs of numbers, not bool tensors.')


def reduce(op, tensor, reduction, allreduction):
    """Every rank's ``tensor`` (a host tensor without history) reduced by mpi4torch's ``op``,
    in ``tensor``'s dtype and shape, after ``check``.

    ``reduction(host, wire_op)`` runs one daemon reduction of a contiguous host
    tensor (an allreduce, or a reduce to a root) and returns its result;
    ``allreduction`` is an allreduce (MINLOC/MAXLOC need the extreme value on
    every rank). Where ``reduction`` leaves a rank without the result (a
    reduce's other ranks), what this returns there is meaningless.
    """
    check(op, tensor)
    dtype = tensor.dtype
    if op in _DIRECT:
        return reduction(tensor.contiguous(), wire_op(_DIRECT[op]))
    if op in (MPI_MINLOC, MPI_MAXLOC):
        return _reduce_loc(op, tensor, reduction, allreduction)
    if op in _LOGICAL_OF_BITWISE:
        if dtype != torch.bool:
            return _reduce_bits(_LOGICAL_OF_BITWISE[op], tensor, reduction)
        op = _LOGICAL_OF_BITWISE[op]
    truth = _reduce_truth(op, tensor != 0, reduction)
    return truth if dtype == torch.bool else truth.to(dtype)


def _reduce_truth(op, truth, reduction):
    """The logical ``op`` (MPI_LAND, MPI_LOR, MPI_LXOR) of every rank's bool ``truth``."""
    if op == MPI_LAND:
        return reduction(truth.contiguous(), wire_op('min'))
    if op == MPI_LOR:
        return reduction(truth.contiguous(), wire_op('max'))
    # MPI_LXOR: true where an odd number of ranks hold a true value.
    return reduction(truth.to(torch.int32).contiguous(), wire_op('sum')).remainder(2) != 0


def _reduce_bits(op, tensor, reduction):
    """The bitwise form of the logical ``op``: every bit of ``tensor``'s bytes reduced alone."""
    data = tensor.contiguous().reshape(-1).view(torch.uint8)
    bits = data.unsqueeze(-1).bitwise_right_shift(_BITS).bitwise_and(1)
    if op == MPI_LAND:
        reduced = reduction(bits.contiguous(), wire_op('min'))
    elif op == MPI_LOR:
        reduced = reduction(bits.contiguous(), wire_op('max'))
    else:
        # A uint8 sum wraps modulo 256, which keeps its parity.
        reduced = reduction(bits.contiguous(), wire_op('sum')).bitwise_and(1)
    packed = reduced.bitwise_left_shift(_BITS).sum(-1, dtype=torch.uint8)
    return packed.view(tensor.dtype).reshape(tensor.shape)


def _reduce_loc(op, pairs, reduction, allreduction):
    """MINLOC/MAXLOC of (value, index) pairs (``pairs[..., 0]``, ``pairs[..., 1]``)."""
    values, indices = pairs[..., 0].contiguous(), pairs[..., 1].contiguous()
    extreme = allreduction(values, wire_op('min' if op == MPI_MINLOC else 'max'))
    # The smallest index among the ranks that hold the extreme value; the
    # others offer the largest index the dtype holds.
    largest = (torch.iinfo(pairs.dtype).max if not pairs.dtype.is_floating_point
               else float('inf'))
    offered = torch.where(values == extreme, indices, torch.full_like(indices, largest))
    index = reduction(offered.contiguous(), wire_op('min'))
    return torch.stack([extreme, index], dim=-1)
