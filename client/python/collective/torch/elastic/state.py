"""``TorchState``: a model, an optimizer, an ``ElasticSampler`` and picklable objects as one
elastic state, each saved, restored and sent from rank 0 in the way that suits it."""

import copy

import torch

from collective.common.elastic import ObjectState
from collective.common.reduce_ops import Max
from collective.torch.elastic.sampler import ElasticSampler
from collective.torch.functions import broadcast_optimizer_state, broadcast_parameters
from collective.torch.mpi_ops import allreduce, rank
from collective.torch.object_collectives import allgather_object, broadcast_object


def agree_generation(seen):
    """The largest of every rank's ``seen``: a collective over the whole job."""
    return int(allreduce(torch.tensor([seen], dtype=torch.int64), op=Max,
                         name='elastic.generation').item())


class _StateHandler:
    """Saves, restores and syncs one value of a ``TorchState``."""

    def __init__(self, value):
        self.value = value
        self.save()

    def set_value(self, value):
        self.value = value
        self.save()

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass


class _ModelHandler(_StateHandler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_StateHandler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_StateHandler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        # What every rank processed since the epoch began (a dead worker's
        # share is lost with it and is processed again), then rank 0's view.
        state = self.value.state_dict()
        state['processed_indices'] = set().union(*allgather_object(state['processed_indices']))
        self.value.load_state_dict(broadcast_object(state, root_rank=0))

    def reset(self):
        self.value.reset()


_HANDLERS = ((torch.nn.Module, _ModelHandler), (torch.optim.Optimizer, _OptimizerHandler),
             (ElasticSampler, _SamplerHandler))


def _handler_for(value):
    for kind, handler in _HANDLERS:
        if isinstance(value, kind):
            return handler(value)
    return None


class TorchState(ObjectState):
    """Horovod's ``TorchState(model=None, optimizer=None, **kwargs)``.

    The model's ``state_dict``, the optimizer's (momentum buffers and all) and
    ``ElasticSampler``s given by keyword are copied at ``save()`` and put back
    at ``restore()``; ``sync()`` broadcasts the model's parameters and the
    optimizer's state from rank 0. Other keywords are picklable attributes
    (``state.epoch``), as in ``ObjectState``. Assigning ``state.model = m``
    replaces the model and saves it.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers = {}
        objects = {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is None:
                objects[name] = value
            else:
                handlers[name] = handler
        object.__setattr__(self, '_handlers', handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank,
                         agree_generation=agree_generation, **objects)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self):
        for handler in self._handlers.values():
            handler.reset()
        super().reset()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get('_handlers', {})
        if name in handlers:
            handlers[name].set_value(value)
        object.__setattr__(self, name, value)
