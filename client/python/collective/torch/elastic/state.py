"""``TorchState``: a model, an optimizer, an ``ElasticSampler`` and picklable objects as one
elastic state, each saved, restored and sent from rank 0 in the way that suits it."""

import copy

import torch

from collective.common.elastic import ObjectState
from collective.torch.elastic.sampler import ElasticSampler
from collective.torch.functions import broadcast_optimizer_state, broadcast_parameters
from collective.torch.mpi_ops import rank
from collective.torch.object_collectives import allgather_object, broadcast_object


class StateHandler:
    """Saves, restores and syncs one value of a ``TorchState`` (Horovod's base class).

    A subclass implements ``save``, ``restore`` and ``sync``; registered for a
    type (``set_handler_registry``), it handles every ``TorchState`` keyword
    argument of that type.

    Arguments:
        value: The object handled.
    """

    def __init__(self, value):
        self.value = value

    def save(self):
        """Saves the value in memory (what ``restore()`` returns to)."""
        raise NotImplementedError()

    def restore(self):
        """Puts back the value last saved."""
        raise NotImplementedError()

    def sync(self):
        """Sends rank 0's value to every rank."""
        raise NotImplementedError()

    def set_value(self, value):
        """Handles ``value`` from now on, and saves it."""
        self.value = value
        self.save()

    def reset(self):
        """Adapts the value to a re-formed job (collective.torch only; nothing by default)."""


class ModelStateHandler(StateHandler):
    """A ``torch.nn.Module``: its ``state_dict`` copied, restored, broadcast from rank 0."""

    def __init__(self, model):
        super().__init__(model)
        self._saved_model_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        """Copies the model's ``state_dict``."""
        self._saved_model_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        """Loads the ``state_dict`` last saved."""
        self.value.load_state_dict(self._saved_model_state)

    def sync(self):
        """Broadcasts rank 0's parameters and buffers into the model (``broadcast_parameters``)."""
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    """A ``torch.optim.Optimizer``: its ``state_dict`` copied, restored, broadcast from rank 0."""

    def __init__(self, optimizer):
        super().__init__(optimizer)
        self._saved_optimizer_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        """Copies the optimizer's ``state_dict`` (momentum buffers and all)."""
        self._saved_optimizer_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        """Loads the ``state_dict`` last saved."""
        self.value.load_state_dict(self._saved_optimizer_state)

    def sync(self):
        """Broadcasts rank 0's optimizer state (``broadcast_optimizer_state``)."""
        broadcast_optimizer_state(self.value, root_rank=0)


class SamplerStateHandler(StateHandler):
    """An ``ElasticSampler``: what it has processed, saved, restored and pooled."""

    def __init__(self, sampler):
        super().__init__(sampler)
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def save(self):
        """Copies the sampler's epoch and processed indices."""
        self._saved_sampler_state = copy.deepcopy(self.value.state_dict())

    def restore(self):
        """Loads the sampler's state last saved."""
        self.value.load_state_dict(self._saved_sampler_state)

    def sync(self):
        """Gives every rank rank 0's epoch and what any rank processed since it began."""
        # What every rank processed since the epoch began (a dead worker's
        # share is lost with it and is processed again), then rank 0's view.
        state = self.value.state_dict()
        state['processed_indices'] = set().union(*allgather_object(state['processed_indices']))
        self.value.load_state_dict(broadcast_object(state, root_rank=0))

    def reset(self):
        """Shares out what is left of the epoch among the ranks of the re-formed job."""
        self.value.reset()


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    """The ``(type, StateHandler subclass)`` pairs ``TorchState`` looks values up in, in
    order: the first type a value is an instance of picks its handler."""
    return _handler_registry


def set_handler_registry(registry):
    """Replaces the registry (``get_handler_registry``) for the states made from now on."""
    global _handler_registry
    _handler_registry = registry


def _get_handler(value):
    for handler_type, handler_cls in _handler_registry:
        if isinstance(value, handler_type):
            return handler_cls(value)
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
            handler = _get_handler(value)
            if handler is None:
                objects[name] = value
            else:
                handlers[name] = handler
        object.__setattr__(self, '_handlers', handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **objects)

    def save(self):
        """Saves every handled value and the other attributes."""
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        """Puts back every handled value and the other attributes, as last saved."""
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        """Sends rank 0's values to every rank."""
        for handler in self._handlers.values():
            handler.sync()
        super().sync()

    def reset(self):
        """Adapts the handled values to the re-formed job (the sampler's shares)."""
        for handler in self._handlers.values():
            handler.reset()
        super().reset()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get('_handlers', {})
        if name in handlers:
            handlers[name].set_value(value)
        object.__setattr__(self, name, value)
