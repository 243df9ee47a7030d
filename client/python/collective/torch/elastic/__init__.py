"""Horovod's ``horovod.torch.elastic`` over collectived: ``hvd.elastic.run``, the states, the sampler.

Start the job with ``collectiverun --elastic --min-np N --max-np M -np K``
(docs/elastic.md)::

    import collective.torch as hvd
    hvd.init()
    ...
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(state)
"""

from collective.common import elastic as _common
from collective.common.elastic import ObjectState as _ObjectState
from collective.common.elastic import State
from collective.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from collective.torch.elastic.sampler import ElasticSampler
from collective.torch.elastic.state import TorchState
from collective.torch.mpi_ops import init, rank, shutdown
from collective.torch.object_collectives import broadcast_object

__all__ = ['run', 'State', 'ObjectState', 'TorchState', 'ElasticSampler', 'HorovodInternalError',
           'HostsUpdatedInterrupt']


class ObjectState(_ObjectState):
    """Picklable objects as attributes (``ObjectState(epoch=0, batch=0)``), sent from rank 0 by
    ``broadcast_object`` when the job re-forms."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)


def run(func):
    """Decorates ``func(state, ...)``: it runs again from the last commit when a worker fails,
    and from where it is when workers are added, in the re-formed job (rank 0's state sent to
    every rank first). Calling it outside ``collectiverun --elastic`` runs it once; a failure then
    raises."""
    return _common.run_fn(func, _reset)


def _reset(after_failure):
    _common.reset_job(shutdown, init, after_failure)
