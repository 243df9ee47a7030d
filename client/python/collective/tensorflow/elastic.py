"""Horovod's ``horovod.tensorflow.elastic`` over collectived: ``hvd.elastic.run`` and the states.

Start the job with ``collectiverun --elastic --min-np N --max-np M -np K``
(docs/elastic.md)::

    import collective.tensorflow as hvd
    hvd.init()
    ...
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(state)

The re-formation is collective.torch.elastic's (``collective.common.elastic``);
what is TensorFlow's is how a state saves, restores and sends its variables,
and which errors mean that the job failed: a ``tf.errors.OpError`` raised by
one of this package's collective ops becomes ``HorovodInternalError`` inside
``run``, as Horovod turns its ops' errors into it.
"""

import re

import tensorflow as tf

from collective.common import elastic as _common
from collective.common.elastic import ObjectState as _ObjectState
from collective.common.elastic import State
from collective.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from collective.tensorflow.functions import allgather_object, broadcast_object, broadcast_variables
from collective.tensorflow.mpi_ops import init, rank, shutdown

__all__ = ['run', 'State', 'ObjectState', 'TensorFlowState', 'TensorFlowKerasState',
           'HorovodInternalError', 'HostsUpdatedInterrupt']

# The errors of client/tensorflow's kernels: their messages start
# "collective <kind> of '<name>'" (kernels.cc), and eagerly TensorFlow adds
# the op type ("[Op:CollectiveAllreduce]"); in a graph the node is named after
# its input, as Horovod's ("{{node HorovodAllreduce_x_0}}").
_OUR_OP = re.compile(r"\bCollective[A-Z][A-Za-z]*(_[0-9]+)?\b|"
                     r"\bcollective (grouped )?[a-z]+ of '")


def run(func):
    """Decorates ``func(state, ...)``: it runs again from the last commit when a worker fails (or
    a collective fails on every worker), and from where it is when workers are added, in the
    re-formed job (rank 0's state sent to every rank first). Outside ``collectiverun --elastic``
    it runs once and a failure raises."""

    def failures_as_internal_errors(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as error:
            if _OUR_OP.search(error.message or '') is None:
                raise
            raise HorovodInternalError(error.message) from error

    return _common.run_fn(failures_as_internal_errors, _reset)


def _reset(after_failure):
    _common.reset_job(shutdown, init, after_failure)


def _agree_generation(session):
    """The largest generation any rank saw: a collective over the whole job."""

    def agree(seen):
        return max(allgather_object(int(seen), session=session, name='elastic.generation'))

    return agree


def _object_broadcast(session):
    def bcast(obj):
        return broadcast_object(obj, root_rank=0, session=session, name='elastic.objects')

    return bcast


class ObjectState(_ObjectState):
    """Picklable objects as attributes (``ObjectState(epoch=0, batch=0)``), sent from rank 0 by
    ``broadcast_object`` when the job re-forms."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object=_object_broadcast(None), get_rank=rank,
                         agree_generation=_agree_generation(None), **kwargs)


class _Variables:
    """Saves, restores and broadcasts the variables ``source()`` lists: eagerly, or through
    ``session`` in a TF1 graph."""

    def __init__(self, source, session):
        self._source = source
        self.session = session
        self.variables = list(source())
        if session is not None:
            # Built once: a graph grows with every op made.
            with session.graph.as_default():
                self._assignments = broadcast_variables(self.variables, root_rank=0)
        self.save()

    def save(self):
        if self.session is None:
            self._values = [variable.numpy() for variable in self.variables]
        else:
            self._values = self.session.run(self.variables)

    def restore(self):
        for variable, value in zip(self.variables, self._values):
            if self.session is None:
                variable.assign(value)
            else:
                variable.load(value, self.session)

    def sync(self):
        if self.session is None:
            # Listed again: an optimizer makes its slots at its first step.
            self.variables = list(self._source())
            broadcast_variables(self.variables, root_rank=0)
        else:
            self.session.run(self._assignments)
        self.save()


class _VariablesState(ObjectState):
    """An ``ObjectState`` that also saves, restores and broadcasts groups of variables."""

    def __init__(self, groups, session, **kwargs):
        self._groups = groups
        _ObjectState.__init__(self, bcast_object=_object_broadcast(session), get_rank=rank,
                              agree_generation=_agree_generation(session), **kwargs)

    def save(self):
        for group in self._groups:
            group.save()
        super().save()

    def restore(self):
        for group in self._groups:
            group.restore()
        super().restore()

    def sync(self):
        for group in self._groups:
            group.sync()
        super().sync()


class TensorFlowState(_VariablesState):
    """Horovod's ``TensorFlowState(variables=None, session=None, **kwargs)``.

    ``variables`` (default: ``tf.compat.v1.global_variables()``) are copied at
    ``save()``, put back at ``restore()`` and broadcast from rank 0 at
    ``sync()``; in a TF1 graph ``session`` (default: the default session)
    runs that. Other keywords are picklable attributes (``state.epoch``).
    """

    def __init__(self, variables=None, session=None, **kwargs):
        if session is None and not tf.executing_eagerly():
            session = tf.compat.v1.get_default_session()
        if variables is None:
            variables = tf.compat.v1.global_variables()
        variables = list(variables)
        self.variables = variables
        self.session = session
        super().__init__([_Variables(lambda: variables, session)], session, **kwargs)


class TensorFlowKerasState(_VariablesState):
    """Horovod's ``TensorFlowKerasState(model, optimizer=None, backend=None, **kwargs)``.

    The model's variables and the optimizer's (``optimizer`` or the model's
    own) are copied at ``save()``, put back at ``restore()`` and broadcast
    from rank 0 at ``sync()``; in a TF1 graph ``backend.get_session()`` runs
    that. The model must be built. Other keywords are picklable attributes.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if hasattr(model, 'build') and not model.built:
            raise ValueError('Model must be built first. Run `model.build(input_shape)`.')
        self.model = model
        self.optimizer = optimizer or model.optimizer
        self.backend = backend
        session = None
        if backend is not None and not tf.executing_eagerly():
            session = backend.get_session()
        groups = [_Variables(lambda: model.variables, session),
                  _Variables(lambda: _optimizer_variables(self.optimizer), session)]
        super().__init__(groups, session, **kwargs)


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)
