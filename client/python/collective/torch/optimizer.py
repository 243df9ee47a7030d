"""DistributedOptimizer: averages gradients across ranks while backward runs.

Each parameter's gradient accumulator gets a hook. When the last of
``backward_passes_per_step`` backward passes has produced a parameter's
gradient, the hook submits its allreduce (or, with ``groups``, the grouped
allreduce of its group once every member is ready) without waiting, so
communication overlaps the rest of the backward pass. ``synchronize()`` (and
``step()``) submits whatever no hook submitted, zero-filling gradients a rank
did not compute so that every rank submits the same tensors, then waits for
all of them and writes the reduced gradients back.

Gradients are kept in the client's shared-memory arena where they fit
(``grad_buckets``), so that the daemon reads them where autograd wrote them
instead of libcollective copying each one in.
"""

import os
import warnings
from contextlib import contextmanager

import torch

from collective.torch.adasum_optimizer import adasum_optimizer
from collective.torch.compression import Compression
from collective.torch.grad_buckets import GradientBuckets
from collective.torch.grad_hooks import hook_last_pass
from collective.torch.handles import discard
from collective.torch.mpi_ops import (allreduce_async_, grouped_allreduce_async_,
                                      sparse_allreduce_async)
from collective.torch.mpi_ops import synchronize, size
from collective.torch.mpi_ops import Adasum, Average
from collective.torch.mpi_ops import global_process_set
from collective.common.reduce_ops import check_adasum_set
from collective.torch.object_collectives import broadcast_object


class _DistributedOptimizer(torch.optim.Optimizer):
    """Mixin placed in front of the wrapped optimizer's class by DistributedOptimizer()."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense, process_set,
                 zero_copy_gradients):
        super().__init__(params)
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._parameter_names = self._name_parameters(named_parameters)
        _check_groups(groups)

        self._groups = []       # every group, in the same order on every rank
        self._p_to_group = {}
        self._ready_counts = {}  # group -> members whose last pass is done
        self._allreduce_delay = {}  # parameter -> backward passes still to come
        self._handles = {}       # group -> its submitted allreduce (_InFlight)
        self._grad_accs = []     # keeps the hooked accumulators alive
        self._synchronized = False
        self._should_synchronize = True
        self._buckets = None     # arena views of the gradients, when used

        # In an elastic job (HOROVOD_ELASTIC=1, as horovodrun and collectiverun
        # set it) a job of one may grow: the hooks are needed from the start.
        if process_set.included() and (size() > 1 or os.environ.get('HOROVOD_ELASTIC') == '1'):
            self._register_hooks(groups)
            # A compressor makes a new tensor to send, which is never in the
            # arena: buckets would only hold space.
            if zero_copy_gradients and compression is Compression.none:
                self._buckets = GradientBuckets([p for group in self._groups for p in group])

    def _name_parameters(self, named_parameters):
        """Validates named_parameters and returns a parameter -> name map."""
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [('allreduce.noname.%d.%d' % (i, j), p)
                                for i, group in enumerate(self.param_groups)
                                for j, p in enumerate(group['params'])]
        if any(not isinstance(entry, tuple) for entry in named_parameters):
            raise ValueError('named_parameters should be a sequence of tuples (name, parameter), '
                             'usually produced by model.named_parameters().')

        duplicates = _DistributedOptimizer.find_duplicates([name for name, _ in named_parameters])
        if duplicates:
            raise ValueError('Parameter names in named_parameters must be unique. '
                             'Found duplicates: %s' % ', '.join(sorted(duplicates)))

        named_ids = {id(p) for _, p in named_parameters}
        unnamed_ids = [id(p) for group in self.param_groups for p in group['params']
                       if id(p) not in named_ids]
        if unnamed_ids:
            raise ValueError('named_parameters was specified, but one or more model parameters '
                             'were not named. Python object ids: %s'
                             % ', '.join(str(i) for i in unnamed_ids))
        return {p: name for name, p in named_parameters}

    @staticmethod
    def find_duplicates(lst):
        """The set of the elements that occur more than once in ``lst`` (Horovod's helper)."""
        seen, duplicates = set(), set()
        for element in lst:
            (duplicates if element in seen else seen).add(element)
        return duplicates

    def _register_hooks(self, groups):
        params = [p for group in self.param_groups for p in group['params'] if p.requires_grad]
        if groups is None:
            self._groups = [(p,) for p in params]
        else:
            # Groups must be formed identically everywhere: order the
            # parameters as the set's first rank does.
            order = broadcast_object([self._parameter_names[p] for p in params],
                                     root_rank=self.process_set.ranks[0],
                                     name='DistributedOptimizer.parameter_order',
                                     process_set=self.process_set)
            position = {name: i for i, name in enumerate(order)}
            params.sort(key=lambda p: position[self._parameter_names[p]])
            self._groups = _form_groups(params, groups)

        for group in self._groups:
            self._ready_counts[group] = 0
            for p in group:
                self._p_to_group[p] = group
                self._allreduce_delay[p] = self.backward_passes_per_step
                hook_last_pass(p, self._allreduce_delay, self._last_pass_done,
                               self._grad_accs)

    def _last_pass_done(self, p):
        group = self._p_to_group[p]
        self._ready_counts[group] += 1
        if self._ready_counts[group] == len(group):
            self._handles[group] = self._allreduce_group_async(group)

    def _scale_factors(self):
        """Splits Average's division between before and after the sum."""
        if self.op == Average:
            # The daemon divides by the set's size after the sum on top of this.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_group_async(self, group):
        """Submits the allreduce of a group's gradients; returns its _InFlight."""
        buckets = self._buckets
        for p in group:
            if p.grad is None:
                # Another rank may have computed this gradient (a dynamic
                # forward): submit zeros so its allreduce can complete.
                p.grad = torch.zeros_like(p) if buckets is None else buckets.zeros(p)
            elif buckets is not None:
                buckets.rehome(p)
        if len(group) == 1 and group[0].grad.is_sparse and not self.sparse_as_dense:
            return self._sparse_allreduce_async(group[0])

        name = self._parameter_names[group[0]]
        prescale, postscale = self._scale_factors()
        compressed, ctxs = zip(*(self._compression.compress(self._dense_grad(p)) for p in group))
        # In place: the result is copied from the daemon's read-only result
        # segment into p.grad (into its arena view, when it has one).
        if len(group) == 1:
            handle = allreduce_async_(compressed[0], name=name, op=self.op,
                                      prescale_factor=prescale, postscale_factor=postscale,
                                      process_set=self.process_set)

            def outputs():
                return [synchronize(handle)]
        else:
            handle = grouped_allreduce_async_(list(compressed), name=name, op=self.op,
                                              prescale_factor=prescale,
                                              postscale_factor=postscale,
                                              process_set=self.process_set)

            def outputs():
                return synchronize(handle)

        def finish():
            for p, output, ctx in zip(group, outputs(), ctxs):
                _store_grad(p, self._compression.decompress(output, ctx))
        return _InFlight([handle], finish)

    def _dense_grad(self, p):
        if not p.grad.is_sparse:
            return p.grad
        if not self.sparse_as_dense:
            raise ValueError('Sparse gradient of %s cannot be reduced in a group with other '
                             'parameters; pass sparse_as_dense=True or leave it out of groups.'
                             % self._parameter_names[p])
        return p.grad.to_dense()

    def _sparse_allreduce_async(self, p):
        """Sums a sparse gradient by gathering every rank's nonzero rows."""
        result = sparse_allreduce_async(p.grad, name=self._parameter_names[p], op=self.op,
                                        process_set=self.process_set)

        def finish():
            p.grad = result()
        return _InFlight(result.handles, finish)

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes are accumulated before the allreduce."""
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def load_state_dict(self, *args, **kwargs):
        """Loads the wrapped optimizer's state and forgets any gradient in flight.

        Allreduces in flight are waited for and their results dropped, so
        that their names are free for the next backward pass and no late
        result lands in a gradient it computes.
        """
        for in_flight in self._handles.values():
            in_flight.discard()
        self._handles.clear()
        self._reset_counts()
        self._synchronized = False
        self._should_synchronize = True
        super().load_state_dict(*args, **kwargs)

    def _reset_counts(self):
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for group in self._ready_counts:
            self._ready_counts[group] = 0

    def synchronize(self):
        """
        Waits for every gradient's allreduce and writes the results into ``p.grad``.

        Gradients whose allreduce has not started (a parameter that got no
        gradient in this backward pass, fewer passes than
        ``backward_passes_per_step``, an incomplete group) are submitted now,
        zero-filled where missing, so every rank reduces the same tensors.
        """
        if not self.process_set.included():
            self._synchronized = True
            return
        for group in self._groups:
            if group not in self._handles:
                self._handles[group] = self._allreduce_group_async(group)
        error = None
        try:
            # Every group is waited for, also after one failed, so that no
            # name stays in use; the first error is raised.
            while self._handles:
                group = next(iter(self._handles))
                try:
                    self._handles.pop(group).finish()
                except Exception as e:  # noqa: BLE001 (re-raised below)
                    error = error or e
        finally:
            self._reset_counts()
        if error is not None:
            raise error
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """
        A context manager used to specify that optimizer.step() should
        not perform synchronization.

        It's typically used in a following pattern:

        .. code-block:: python

            optimizer.synchronize()
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        """Synchronizes the gradients (unless skipped), then steps the wrapped optimizer."""
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn('optimizer.step() called without optimizer.skip_synchronize() '
                              'context after optimizer.synchronize(). This can cause training '
                              'slowdown. You may want to consider using '
                              'optimizer.skip_synchronize() context if you use '
                              'optimizer.synchronize() in your code.')
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        """Zeroes the gradients (the wrapped optimizer's ``zero_grad``).

        Raises AssertionError, as Horovod does, while allreduces are in flight
        (after the ``backward()`` that completed ``backward_passes_per_step``
        passes and before ``step()`` or ``synchronize()``). Between the passes
        of an accumulation it zeroes what was accumulated so far, and the
        count of passes goes on.
        """
        if self._handles:
            raise AssertionError('optimizer.zero_grad() was called after loss.backward() but '
                                 'before optimizer.step() or optimizer.synchronize(). This is '
                                 'prohibited as it can cause a race condition.')
        return super().zero_grad(*args, **kwargs)


class _InFlight:
    """A group's submitted allreduce: its handles, and ``finish()``, which waits for them and
    writes the results into ``p.grad``."""

    __slots__ = ('handles', 'finish')

    def __init__(self, handles, finish):
        self.handles = handles
        self.finish = finish

    def discard(self):
        """Waits for it and drops the results (and any error)."""
        for handle in self.handles:
            discard(handle)


def _check_groups(groups):
    if groups is None:
        return
    if isinstance(groups, list):
        seen = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError('groups must consist of torch.Tensor.')
                if id(p) in seen:
                    raise ValueError('A parameter can only appear once in groups.')
                seen.add(id(p))
    elif not isinstance(groups, int) or groups <= 0:
        raise ValueError('groups should be a non-negative integer or a list of list of '
                         'torch.Tensor.')


def _form_groups(params, groups):
    """Splits params (in the agreed order) into tuples reduced together."""
    if isinstance(groups, int):
        # Contiguous, nearly equal slices; the first len % groups get one more.
        base, extra = divmod(len(params), groups)
        bounds = [i * base + min(i, extra) for i in range(groups + 1)]
        slices = [params[start:end] for start, end in zip(bounds, bounds[1:])]
    else:
        position = {id(p): i for i, p in enumerate(params)}
        slices = [sorted((p for p in group if id(p) in position), key=lambda p: position[id(p)])
                  for group in groups]
        grouped = {id(p) for group in slices for p in group}
        slices += [[p] for p in params if id(p) not in grouped]
    return [tuple(group) for group in slices if group]


def _store_grad(p, value):
    """Writes a reduced gradient into p.grad, keeping the tensor object when it can."""
    if p.grad.is_sparse:
        p.grad = value if value.is_sparse else value.to_sparse()
    elif value is not p.grad:
        p.grad.copy_(value)


def DistributedOptimizer(optimizer, named_parameters=None,
                         compression=Compression.none,
                         backward_passes_per_step=1,
                         op=Average,
                         gradient_predivide_factor=1.0,
                         num_groups=0, groups=None,
                         sparse_as_dense=False,
                         process_set=global_process_set,
                         *, zero_copy_gradients=True):
    """
    An optimizer that wraps another torch.optim.Optimizer, using an allreduce to
    combine gradient values before applying gradients to model weights.

    Allreduce operations are executed after each gradient is computed by ``loss.backward()``
    in parallel with each other. The ``step()`` method ensures that all allreduce operations are
    finished before applying gradients to the model.

    DistributedOptimizer exposes the ``synchronize()`` method, which forces allreduce operations
    to finish before continuing the execution. It's useful in conjunction with gradient
    clipping, or other operations that modify gradients in place before ``step()`` is executed.
    Make sure to use ``optimizer.skip_synchronize()`` if you're calling ``synchronize()``
    in your code.

    Example of gradient clipping:

    .. code-block:: python

        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        with optimizer.skip_synchronize():
            optimizer.step()

    The returned object is an instance of a class derived from the class of
    ``optimizer``, sharing its parameter groups; the wrapped optimizer's state
    is not carried over (wrap before the first step).

    Arguments:
        optimizer: Optimizer to use for computing gradients and applying updates.
        named_parameters: A mapping between parameter names and values. Used for naming of
                          allreduce operations. Typically just ``model.named_parameters()``.
        compression: Compression algorithm used during allreduce to reduce the amount
                     of data sent during the each parameter update step. Defaults to
                     not using compression.
        backward_passes_per_step: Number of expected backward passes to perform
                                  before calling step()/synchronize(). This
                                  allows accumulating gradients over multiple
                                  mini-batches before reducing and applying them.
        op: The reduction operation to use when combining gradients across different ranks.
        gradient_predivide_factor: If op == Average, gradient_predivide_factor splits the averaging
                                   before and after the sum. Gradients are scaled by
                                   1.0 / gradient_predivide_factor before the sum and
                                   gradient_predivide_factor / size after the sum.
        num_groups: Deprecated alias of an integer ``groups``.
        groups: The parameter to group the gradient allreduce ops. Accept values is a
                non-negative integer or a list of list of torch.Tensor.
                If groups is a non-negative integer, it is the number of groups to assign
                gradient allreduce ops to for explicit grouping.
                If groups is a list of list of torch.Tensor. Tensors in the same
                inner list will be assigned to the same group, while parameter that does
                not appear in any list will form a group itself.
                Defaults as None, which is no explicit groups.
        sparse_as_dense: If set True, convert all sparse gradients to dense and perform allreduce,
                         then convert back to sparse before applying the update.
        process_set: Gradients will only be reduced over processes belonging
                     to this process set. Defaults to the global process set.
        zero_copy_gradients: (collective.torch only) Keep the gradients in this
                     process's shared-memory arena, where the daemon reads them
                     without a copy (see ``collective.torch.grad_buckets``);
                     gradients that do not fit take the copy path. Not used with
                     compression. False: always copy.
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average')
    if backward_passes_per_step <= 0:
        raise ValueError('backward_passes_per_step must be > 0')
    if op == Adasum and size() > 1:
        # Horovod's delta optimizer (adasum_optimizer.py), over the global set as in Horovod;
        # GPU parameters take the GPU variant's rules.
        check_adasum_set(process_set, on_gpu=any(
            p.is_cuda for group in optimizer.param_groups for p in group['params']))
        return adasum_optimizer(optimizer, named_parameters, compression,
                                backward_passes_per_step, _DistributedOptimizer._name_parameters)
    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` and will be removed.',
                      DeprecationWarning)
        if groups is None:
            groups = num_groups

    # A class derived from the wrapped optimizer's, with the distributed
    # behaviour in front of it, so isinstance() checks and the optimizer's own
    # methods keep working.
    cls = type(optimizer.__class__.__name__, (_DistributedOptimizer, optimizer.__class__), {})
    distributed = cls(optimizer.param_groups, named_parameters, compression,
                      backward_passes_per_step, op, gradient_predivide_factor, groups,
                      sparse_as_dense, process_set, zero_copy_gradients)
    # The constructor ran with the class's default hyper-parameters; groups
    # added later should get the ones the user chose.
    distributed.defaults = optimizer.defaults
    return distributed
