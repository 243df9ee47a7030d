"""mpi4torch's collectives as autograd functions, with mpi4torch's adjoints.

Forward runs one daemon collective (``requests``); backward runs the
adjoint collective, itself through these functions, so that gradients of
gradients work too:

    Allreduce(MPI_SUM) <-> Allreduce(MPI_SUM)
    Bcast_(root)       <-> Reduce_(MPI_SUM, root)
    Gather(axis, root) <-> Scatter(axis, root)
    Allgather(axis)    <-> the sum of every rank's gradient, scattered back (a reduce-scatter)
    Alltoall(g, s)     <-> Alltoall(s, g): gather and scatter axes swapped

Every rank of the communicator must call the same collectives in the same
order, forward and backward (mpi4torch's requirement, MPI's too). The
functions take the communicator (``communicator.MPI_Communicator``) as
their last argument and use its ``set_id`` and ``rank``.
"""

import math

import torch

from collective.mpi4torch import inplace, layout, ops, requests
from collective.mpi4torch.dummies import JoinDummies

NO_ADJOINT = ('collective.mpi4torch differentiates {function} with MPI_SUM only, as mpi4torch '
              'does; this {function} reduced with {op}.')


def _reduced(tensor, op, run, set_id):
    """``tensor`` reduced by mpi4torch's ``op`` (``ops.reduce``), where ``run(host tensor, wire
    op)`` is the daemon reduction at hand; the result in the caller's dtype, on the host."""
    return ops.reduce(op, layout.host(tensor), run,
                      lambda t, wire: requests.allreduce(t, wire, set_id))


class Allreduce(torch.autograd.Function):
    """``MPI_Communicator.Allreduce``: every rank's tensor reduced by ``op``, on every rank."""

    @staticmethod
    def forward(ctx, tensor, op, comm):
        """The reduction of every rank's ``tensor`` by ``op`` (``ops.reduce``), on ``tensor``'s
        device."""
        ctx.op, ctx.comm = op, comm
        set_id = comm.set_id
        reduced = _reduced(tensor, op, lambda t, wire: requests.allreduce(t, wire, set_id),
                           set_id)
        return reduced.to(tensor.device)

    @staticmethod
    def backward(ctx, grad):
        """MPI_SUM's adjoint, the gradients' sum; RuntimeError for any other op, as mpi4torch."""
        if ctx.op != ops.MPI_SUM:
            raise RuntimeError(NO_ADJOINT.format(function='Allreduce', op=ops.NAMES[ctx.op]))
        return Allreduce.apply(grad, ops.MPI_SUM, ctx.comm), None, None


def _writable(tensor):
    """Whether the daemon can write ``tensor``'s own memory."""
    return tensor.device.type == 'cpu' and tensor.is_contiguous()


class Bcast(torch.autograd.Function):
    """The root's tensor, written into ``tensor`` on every rank (returned as a new alias)."""

    @staticmethod
    def forward(ctx, tensor, root, comm):
        """Broadcasts the root's ``tensor`` into every rank's ``tensor``; returns it, detached."""
        ctx.root, ctx.comm = root, comm
        target = layout.host(tensor)
        requests.broadcast_(target, root, comm.set_id)
        inplace.overwrite(tensor, target.to(tensor.device))
        return tensor.detach()

    @staticmethod
    def backward(ctx, grad):
        """The adjoint: every rank's gradient summed at the root (``Reduce``)."""
        grad = grad.clone(memory_format=torch.contiguous_format)
        return Reduce.apply(grad, ops.MPI_SUM, ctx.root, ctx.comm), None, None


class Reduce(torch.autograd.Function):
    """The reduction at the root, written into ``tensor`` there; zeros elsewhere (mpi4torch's)."""

    @staticmethod
    def forward(ctx, tensor, op, root, comm):
        """Reduces every rank's ``tensor`` by ``op`` into the root's; zeros on the other ranks."""
        ctx.op, ctx.root, ctx.comm = op, root, comm
        set_id = comm.set_id
        result = _reduced(tensor, op, lambda t, wire: requests.reduce_(t, wire, root, set_id),
                          set_id)
        inplace.overwrite(tensor, result.to(tensor.device) if comm.rank == root
                          else torch.zeros_like(tensor))
        return tensor.detach()

    @staticmethod
    def backward(ctx, grad):
        """MPI_SUM's adjoint, the root's gradient broadcast; RuntimeError for any other op."""
        if ctx.op != ops.MPI_SUM:
            raise RuntimeError(NO_ADJOINT.format(function='Reduce_', op=ops.NAMES[ctx.op]))
        grad = grad.clone(memory_format=torch.contiguous_format)
        return Bcast.apply(grad, ctx.root, ctx.comm), None, None, None


def bcast_(comm, tensor, root):
    """``MPI_Communicator.Bcast_``: broadcast in place; ``tensor`` must not be used again."""
    result = Bcast.apply(tensor, root, comm)
    inplace.guard(tensor, 'Bcast_')
    return result


def reduce_(comm, tensor, op, root):
    """``MPI_Communicator.Reduce_``: reduce in place; ``tensor`` must not be used again."""
    result = Reduce.apply(tensor, op, root, comm)
    inplace.guard(tensor, 'Reduce_')
    return result


class Gather(torch.autograd.Function):
    """Every rank's tensor concatenated along ``axis`` at the root; elsewhere an empty tensor
    (the axis of length 0), as in mpi4torch."""

    @staticmethod
    def forward(ctx, tensor, axis, root, comm):
        """Every rank's ``tensor`` concatenated along ``axis`` at the root; an empty tensor
        elsewhere."""
        axis = layout.axis_of(axis, tensor.dim(), 'gatheraxis')
        ctx.axis, ctx.root, ctx.comm, ctx.count = axis, root, comm, tensor.shape[axis]
        gathered = requests.gather(layout.rows(tensor, axis), root, comm.set_id)
        if gathered is None:
            shape = list(tensor.shape)
            shape[axis] = 0
            return tensor.new_empty(shape)
        return layout.from_rows(gathered, axis, tensor.device)

    @staticmethod
    def backward(ctx, grad):
        """The adjoint: the root's gradient scattered back, each rank its own slices."""
        return Scatter.apply(grad, ctx.axis, ctx.count, ctx.root, ctx.comm), None, None, None


def _root_shape(tensor, is_root, root, set_id):
    """The root's shape, on every rank (mpi4torch's Scatter needs no shape elsewhere either)."""
    ndim = torch.tensor([tensor.dim() if is_root else 0], dtype=torch.int64)
    ndim = int(requests.broadcast_(ndim, root, set_id)[0])
    if ndim == 0:
        return []
    dims = torch.tensor(list(tensor.shape) if is_root else [0] * ndim, dtype=torch.int64)
    return requests.broadcast_(dims, root, set_id).tolist()


class Scatter(torch.autograd.Function):
    """``numelem`` slices along ``axis`` of the root's tensor, in rank order; other ranks'
    tensors give only their dtype."""

    @staticmethod
    def forward(ctx, tensor, axis, numelem, root, comm):
        """This rank's ``numelem`` slices along ``axis`` of the root's tensor."""
        set_id = comm.set_id
        is_root = comm.rank == root
        shape = _root_shape(tensor, is_root, root, set_id)
        axis = layout.axis_of(axis, len(shape), 'scatteraxis')
        if not isinstance(numelem, int) or isinstance(numelem, bool) or numelem < 0:
            raise ValueError(f'numelem must be a count of slices, not {numelem!r}.')
        if is_root:
            rows = layout.rows(tensor, axis)
        else:
            rows = torch.empty([0] + shape[:axis] + shape[axis + 1:], dtype=tensor.dtype)
        received = requests.scatter(rows, numelem, root, set_id)
        ctx.axis, ctx.root, ctx.comm, ctx.is_root = axis, root, comm, is_root
        ctx.template = (tensor.shape, tensor.dtype, tensor.device)
        return layout.from_rows(received, axis, tensor.device)

    @staticmethod
    def backward(ctx, grad):
        """The adjoint: every rank's gradient gathered at the root; zeros elsewhere."""
        gathered = Gather.apply(grad, ctx.axis, ctx.root, ctx.comm)
        if not ctx.is_root:
            shape, dtype, device = ctx.template
            gathered = JoinDummies(torch.zeros(shape, dtype=dtype, device=device), [gathered])
        return gathered, None, None, None, None


class Allgather(torch.autograd.Function):
    """``MPI_Communicator.Allgather``: every rank's tensor concatenated along an axis."""

    @staticmethod
    def forward(ctx, tensor, axis, comm):
        """Every rank's ``tensor`` concatenated along ``axis``, in rank order, on every rank."""
        axis = layout.axis_of(axis, tensor.dim(), 'gatheraxis')
        ctx.axis, ctx.comm, ctx.count = axis, comm, tensor.shape[axis]
        gathered = requests.allgather(layout.rows(tensor, axis), comm.set_id)
        return layout.from_rows(gathered, axis, tensor.device)

    @staticmethod
    def backward(ctx, grad):
        """The adjoint: every rank's gradient summed, each rank keeping its own slices."""
        return AllgatherAdjoint.apply(grad, ctx.axis, ctx.count, ctx.comm), None, None


def _even_split(total, size):
    """The daemon's reducescatter rows per rank: the first (total mod size) get one more."""
    return [total // size + (1 if r < total % size else 0) for r in range(size)]


class AllgatherAdjoint(torch.autograd.Function):
    """The sum over ranks of ``grad``, each rank keeping its ``count`` slices along ``axis``
    (those it contributed to the Allgather)."""

    @staticmethod
    def forward(ctx, grad, axis, count, comm):
        """The sum over ranks of ``grad``; this rank's ``count`` slices of it along ``axis``."""
        ctx.axis, ctx.comm = axis, comm
        set_id = comm.set_id
        counts = [row[0] for row in requests.exchange([count], set_id)]
        rows = layout.rows(grad, axis)
        if counts == _even_split(sum(counts), len(counts)):
            mine = requests.reducescatter_sum(rows, count, set_id)
        else:
            summed = requests.allreduce(rows, ops.wire_op('sum'), set_id)
            mine = summed.narrow(0, sum(counts[:comm.rank]), count)
        return layout.from_rows(mine, axis, grad.device)

    @staticmethod
    def backward(ctx, grad):
        """Its adjoint: the gradient allgathered."""
        return Allgather.apply(grad, ctx.axis, ctx.comm), None, None, None


class Alltoall(torch.autograd.Function):
    """Each rank sends every rank r its ``numelem_r`` slices along ``scatteraxis`` (in rank
    order) and concatenates what it receives along ``gatheraxis`` (in rank order). With
    both axes the same, the slices along it are redistributed: rank r ends with
    ``numelem_r`` of them, in rank order, as mpi4torch does."""

    @staticmethod
    def forward(ctx, tensor, gatheraxis, scatteraxis, numelem, comm):
        """The slices every rank sends this one, concatenated along ``gatheraxis`` in rank order."""
        gather = layout.axis_of(gatheraxis, tensor.dim(), 'gatheraxis')
        scatter = layout.axis_of(scatteraxis, tensor.dim(), 'scatteraxis')
        if not isinstance(numelem, int) or isinstance(numelem, bool) or numelem < 0:
            raise ValueError(f'numelem must be a count of slices, not {numelem!r}.')
        set_id = comm.set_id
        table = requests.exchange([numelem, tensor.shape[gather], tensor.shape[scatter]], set_id)
        ctx.gather, ctx.scatter, ctx.comm = gather, scatter, comm
        ctx.count = tensor.shape[gather]
        if gather == scatter:
            result = _redistribute(tensor, scatter, table, comm.rank, set_id)
        else:
            result = _exchange_slices(tensor, gather, scatter, numelem, table, set_id)
        return result.to(tensor.device)

    @staticmethod
    def backward(ctx, grad):
        """The adjoint: an Alltoall with the gather and scatter axes swapped."""
        return Alltoall.apply(grad, ctx.scatter, ctx.gather, ctx.count, ctx.comm), \
            None, None, None, None


def _offsets(counts):
    offsets = [0]
    for count in counts[:-1]:
        offsets.append(offsets[-1] + count)
    return offsets


def _redistribute(tensor, axis, table, rank, set_id):
    """Slices along ``axis``, numbered across the ranks in rank order, moved so that rank r
    holds numelem_r of them."""
    wanted = [row[0] for row in table]
    held = [row[2] for row in table]
    if sum(wanted) != sum(held):
        raise ValueError(f'Alltoall along one axis: the ranks hold {sum(held)} slices in all '
                         f'({held}) but ask for {sum(wanted)} ({wanted}).')
    first = _offsets(held)[rank]
    last = first + held[rank]
    splits = [max(0, min(last, start + count) - max(first, start))
              for start, count in zip(_offsets(wanted), wanted)]
    received, _ = requests.alltoall(layout.rows(tensor, axis), splits, set_id)
    return layout.from_rows(received, axis, 'cpu')


def _exchange_slices(tensor, gather, scatter, numelem, table, set_id):
    """Rank r's numelem_r slices along ``scatter`` of every rank's tensor, concatenated along
    ``gather`` in rank order. The blocks differ in length along ``gather`` between senders, so
    they travel flattened."""
    wanted = [row[0] for row in table]
    for rank, row in enumerate(table):
        if row[2] != sum(wanted):
            raise ValueError(f'Alltoall: rank {rank} has {row[2]} slices along scatteraxis, but '
                             f'the ranks ask for {sum(wanted)} in all (numelem: {wanted}).')
    rows = layout.rows(tensor, scatter)  # [scatter, the other dimensions in order]
    rest = list(rows.shape[1:])
    at = gather if gather < scatter else gather - 1  # gather's place among the others
    per_slice = math.prod(rest)
    received, counts = requests.alltoall(rows.reshape(-1), [w * per_slice for w in wanted],
                                         set_id)
    pieces = []
    offset = 0
    for source, row in enumerate(table):
        shape = list(rest)
        shape[at] = row[1]
        expected = numelem * math.prod(shape)
        if counts[source] != expected:
            raise ValueError(f'Alltoall: rank {source} sent {counts[source]} elements where '
                             f'{expected} were expected; the dimensions other than gatheraxis '
                             'and scatteraxis must be the same on every rank.')
        piece = received[offset:offset + expected].reshape([numelem] + shape)
        pieces.append(piece.movedim(0, scatter))
        offset += expected
    return torch.cat(pieces, dim=gather)
