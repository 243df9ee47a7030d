"""DistributedOptimizer(op=Adasum): Horovod's delta optimizer.

Adasum combines what each rank's optimizer would do, not the gradients: when
the last of ``backward_passes_per_step`` backward passes has produced a
parameter's gradient, the hook runs the wrapped optimizer on that parameter
alone, takes the change it made (delta = new - old) and starts an Adasum
allreduce of the delta without waiting. ``step()`` starts those no hook
started, waits for each and sets the parameter to old + Adasum(deltas), the
same value on every rank. The wrapped optimizer's state (momentum, Adam's
moments) stays each rank's own, as in Horovod.
"""

from contextlib import contextmanager

import torch

from collective.torch.grad_hooks import hook_last_pass
from collective.torch.handles import discard
from collective.torch.mpi_ops import Adasum, allreduce_async_, synchronize


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """Mixin placed in front of the wrapped optimizer's class by DistributedOptimizer()."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step,
                 name_parameters):
        super().__init__(params)
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self._parameter_names = name_parameters(self, named_parameters)
        self._params = [p for group in self.param_groups for p in group['params']
                        if p.requires_grad]
        # Where each parameter stood before this step's update.
        self._starts = {p: torch.zeros_like(p, requires_grad=False) for p in self._params}
        self._allreduce_delay = {p: backward_passes_per_step for p in self._params}
        self._handles = {}  # parameter -> (handle, compression context)
        self._grad_accs = []  # keeps the hooked accumulators alive
        for p in self._params:
            hook_last_pass(p, self._allreduce_delay, self._last_pass_done, self._grad_accs)

    def _last_pass_done(self, p):
        self._handles[p] = self._delta_allreduce_async(p)

    def _delta_allreduce_async(self, p):
        """Steps the wrapped optimizer on ``p`` alone, turns ``p`` into the change it made and
        starts the Adasum allreduce of that change."""
        saved = [group['params'] for group in self.param_groups]
        for group in self.param_groups:
            group['params'] = [p] if any(p is q for q in group['params']) else []
        try:
            start = self._starts[p]
            start.copy_(p.data)
            super().step()
            p.data.sub_(start)
        finally:
            for group, params in zip(self.param_groups, saved):
                group['params'] = params
        compressed, context = self._compression.compress(p.data)
        handle = allreduce_async_(compressed, name=self._parameter_names[p], op=Adasum)
        return handle, context

    def set_backward_passes_per_step(self, passes):
        """Changes how many backward passes are accumulated before the allreduce."""
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def synchronize(self):
        """Nothing to do: ``step()`` waits for the deltas (as in Horovod)."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError('Skipping synchronization is not supported when using Adasum '
                             'optimizer.')

    def step(self, closure=None):
        """Starts the deltas no hook started, then sets every parameter to its value before the
        step plus the Adasum of every rank's delta."""
        loss = closure() if closure is not None else None
        for p in self._params:
            if p not in self._handles:
                self._handles[p] = self._delta_allreduce_async(p)
        error = None
        # Every delta is waited for, also after one failed, so that no name
        # stays in use; the first error is raised.
        for p, (handle, context) in list(self._handles.items()):
            try:
                delta = self._compression.decompress(synchronize(handle), context)
                start = self._starts[p]
                start.add_(delta)
                p.data.copy_(start)
            except Exception as e:  # noqa: BLE001 (re-raised below)
                error = error or e
        self._handles.clear()
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        if error is not None:
            raise error
        return loss

    def load_state_dict(self, *args, **kwargs):
        """Loads the wrapped optimizer's state and drops any delta in flight."""
        for handle, _ in self._handles.values():
            discard(handle)
        self._handles.clear()
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super().load_state_dict(*args, **kwargs)

    def zero_grad(self, *args, **kwargs):
        """Zeroes the gradients; refused while deltas are being reduced."""
        if self._handles:
            raise AssertionError('optimizer.zero_grad() was called after loss.backward() but '
                                 'before optimizer.step() or optimizer.synchronize(). This is '
                                 'prohibited as it can cause a race condition.')
        return super().zero_grad(*args, **kwargs)


def adasum_optimizer(optimizer, named_parameters, compression, backward_passes_per_step,
                     name_parameters):
    """``optimizer`` wrapped as Horovod's Adasum DistributedOptimizer; ``name_parameters``
    validates ``named_parameters`` and returns a parameter -> name map."""
    cls = type(optimizer.__class__.__name__, (_DistributedAdasumOptimizer, optimizer.__class__),
               {})
    distributed = cls(optimizer.param_groups, named_parameters, compression,
                      backward_passes_per_step, name_parameters)
    distributed.defaults = optimizer.defaults
    return distributed
