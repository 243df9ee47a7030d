"""Horovod's TensorFlow helpers above the ops: ``allreduce`` with its options,
``broadcast_variables``, and ``DistributedGradientTape``."""

import os
import pickle

import numpy as np
import tensorflow as tf

from collective.common import basics, reduce_ops
from collective.common.process_sets import global_process_set
from collective.tensorflow import gradient_groups
from collective.tensorflow.compression import Compression
from collective.tensorflow.mpi_ops import (_allreduce, _grouped_allreduce,
                                           _grouped_reducescatter, _reducescatter, allgather,
                                           broadcast, grouped_allgather, size_op)


def _horovod_size(process_set, dtype):
    """The set's size as a ``dtype`` tensor, to divide by: in an elastic job
    (HOROVOD_ELASTIC=1) an op that reads it when it runs, as Horovod's ``size_op()``."""
    if int(os.environ.get('HOROVOD_ELASTIC', 0)):
        return tf.cast(size_op(process_set_id=process_set.process_set_id), dtype)
    return tf.cast(process_set.size(), dtype)


def _check_sparse_op(op):
    """Horovod's refusals of a reduction of ``tf.IndexedSlices`` by ``op``."""
    if op == reduce_ops.Adasum:
        raise NotImplementedError(
            'The Adasum reduction does not currently support sparse tensors. As a '
            'workaround please pass sparse_as_dense=True to DistributedOptimizer')
    if op not in (reduce_ops.Sum, reduce_ops.Average):
        raise NotImplementedError('Only Sum and Average ops are supported with tf.IndexedSlices')


def _check_sparse_scale(prescale_factor, postscale_factor):
    """Horovod's refusal of scale factors for ``tf.IndexedSlices``, which it raises once the
    slices' allgathers are made."""
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError('Pre/postscale_factor are not supported with tf.IndexedSlices')


def allreduce(tensor, average=None, device_dense='', device_sparse='',
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """Horovod's ``allreduce``: ``op`` (Average unless said otherwise) of ``tensor`` over the
    ranks of ``process_set``.

    A ``tf.IndexedSlices`` is gathered, as Horovod does: its values and indices from every rank
    (values divided by the set's size for Average); Adasum, Min, Max and Product, and scale
    factors, raise NotImplementedError for it, as in Horovod. Devices are CPU only: the
    arguments that name devices are accepted and ignored. Adasum combines host tensors of a
    set whose size is a power of two (else NotImplementedError, as Horovod). ``name`` and
    ``ignore_name_scope`` name the op (``mpi_ops`` says how).
    """
    del device_dense, device_sparse
    op = reduce_ops.resolve_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse_op(op)
        values = allgather(tensor.values, process_set=process_set,
                           ignore_name_scope=ignore_name_scope)
        indices = allgather(tensor.indices, process_set=process_set,
                            ignore_name_scope=ignore_name_scope)
        if op == reduce_ops.Average:
            values = values / _horovod_size(process_set, values.dtype)
        _check_sparse_scale(prescale_factor, postscale_factor)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    if op == reduce_ops.Adasum:
        reduce_ops.check_adasum_set(process_set)
    compressed, context = compression.compress(tensor)
    reduced = _allreduce(compressed, name=name, op=op, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor,
                         ignore_name_scope=ignore_name_scope, process_set=process_set)
    return compression.decompress(reduced, context)


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='',
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Horovod's ``grouped_allreduce``: ``allreduce`` of each tensor, negotiated and run as one
    group; the dense tensors may be of several dtypes. ``tf.IndexedSlices`` are gathered as
    Horovod gathers them: their values in one grouped allgather, their indices in another
    (scale factors refused for them, after those, as in Horovod). ``name`` and
    ``ignore_name_scope`` name the dense tensors' grouped op (``mpi_ops`` says how)."""
    del device_dense, device_sparse
    if not tensors:
        return tensors
    op = reduce_ops.resolve_op(op, average)
    tensors = list(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    results = [None] * len(tensors)
    if sparse:
        _check_sparse_op(op)
        values = grouped_allgather([tensors[i].values for i in sparse], process_set=process_set,
                                   ignore_name_scope=ignore_name_scope)
        indices = grouped_allgather([tensors[i].indices for i in sparse],
                                    process_set=process_set,
                                    ignore_name_scope=ignore_name_scope)
        if op == reduce_ops.Average:
            values = [v / _horovod_size(process_set, v.dtype) for v in values]
        _check_sparse_scale(prescale_factor, postscale_factor)
        for i, v, ix in zip(sparse, values, indices):
            results[i] = tf.IndexedSlices(v, ix, dense_shape=tensors[i].dense_shape)
    if dense:
        if op == reduce_ops.Adasum:
            reduce_ops.check_adasum_set(process_set)
        compressed = [compression.compress(tensors[i]) for i in dense]
        reduced = _grouped_allreduce([c for c, _ in compressed], name=name, op=op,
                                     prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor,
                                     ignore_name_scope=ignore_name_scope, process_set=process_set)
        for i, r, (_, context) in zip(dense, reduced, compressed):
            results[i] = compression.decompress(r, context)
    return results


def reducescatter(tensor, device_dense='', compression=Compression.none, op=reduce_ops.Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Horovod's ``reducescatter``: ``op`` (Average or Sum) of ``tensor`` over the ranks of
    ``process_set``, of which this rank keeps its rows. The first dimension is divided as
    Horovod divides it: the first (rows mod size) ranks of the set get one row more.
    Differentiable (the gradient is an allgather). ``name`` and ``ignore_name_scope`` name
    the op (``mpi_ops`` says how)."""
    del device_dense
    if isinstance(tensor, tf.IndexedSlices):
        raise NotImplementedError('reducescatter does not support tf.IndexedSlices.')
    compressed, context = compression.compress(tensor)
    scattered = _reducescatter(compressed, name=name, op=op, prescale_factor=prescale_factor,
                               postscale_factor=postscale_factor,
                               ignore_name_scope=ignore_name_scope, process_set=process_set)
    return compression.decompress(scattered, context)


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none,
                          op=reduce_ops.Average, process_set=global_process_set,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Horovod's ``grouped_reducescatter``: ``reducescatter`` of each tensor, negotiated and
    run as one group; the tensors may be of several dtypes."""
    del device_dense
    if not tensors:
        return tensors
    tensors = list(tensors)
    if any(isinstance(t, tf.IndexedSlices) for t in tensors):
        raise NotImplementedError('grouped_reducescatter does not support tf.IndexedSlices.')
    compressed = [compression.compress(t) for t in tensors]
    scattered = _grouped_reducescatter([c for c, _ in compressed], op=op,
                                       prescale_factor=prescale_factor,
                                       postscale_factor=postscale_factor, process_set=process_set)
    return [compression.decompress(s, context) for s, (_, context) in zip(scattered, compressed)]


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns to every variable its value on ``root_rank``. ``inplace`` (Horovod's in-place
    broadcast op) is accepted; the value is assigned from the broadcast's output either way.

    Returns the group of assignments (inside ``tf.function``) or None (eagerly).
    """
    del inplace
    assignments = [var.assign(broadcast(var, root_rank, process_set=process_set))
                   for var in variables]
    return None if tf.executing_eagerly() else tf.group(*assignments)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Horovod's in-place broadcast: every variable of ``variables`` (one, or a list) takes its
    value on ``root_rank``. Returns the broadcast values, one tensor per variable.

    Each variable's value is broadcast by the broadcast op (named after ``name`` and the
    variable's position, so that every rank pairs them alike) and assigned to it; eagerly
    the variables hold the new values on return, inside ``tf.function`` once the returned
    tensors are computed.
    """
    if isinstance(variables, tf.Variable):
        variables = [variables]
    values = []
    for index, var in enumerate(variables):
        value = broadcast(var, root_rank, name=f'{name}.{index}' if name else None,
                          process_set=process_set)
        with tf.control_dependencies([var.assign(value)]):
            values.append(tf.identity(value))
    return values


def _to_numpy(tensor, session):
    """The value of ``tensor``: eagerly its own, in a TF1 graph what ``session`` (by default
    the default session) computes for it."""
    if tf.executing_eagerly():
        return tensor.numpy()
    return (session or tf.compat.v1.get_default_session()).run(tensor)


def _serialize(obj):
    """``obj`` pickled into a uint8 tensor (the standard library's pickle: Horovod's
    cloudpickle is not in Debian, as for ``collective.torch``)."""
    return tf.constant(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)),
                       dtype=tf.uint8)


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """Horovod's ``broadcast_object``: the object of ``root_rank`` (a global rank) on every
    rank of ``process_set``, pickled, its length broadcast first.

    Only the root's ``obj`` matters. ``name`` defaults to 'broadcast_object': unlike Horovod's
    (the object's type name) it does not depend on what the other ranks pass, often None.
    ``session``: for a TF1 graph, the session that runs the broadcasts.
    """
    name = name or 'broadcast_object'
    is_root = basics.rank() == root_rank
    payload = _serialize(obj) if is_root else None
    length = tf.constant([int(payload.shape[0]) if is_root else 0], dtype=tf.int64)
    length = _to_numpy(broadcast(length, root_rank, name=name + '.sz', process_set=process_set),
                       session)
    if not is_root:
        payload = tf.zeros([int(length[0])], dtype=tf.uint8)
    received = _to_numpy(broadcast(payload, root_rank, name=name + '.t', process_set=process_set),
                         session)
    return obj if is_root else pickle.loads(received.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Horovod's: a function that broadcasts an object from ``root_rank``, as
    ``broadcast_object`` does, whose ops are built once here. In a TF1 graph they take the
    pickled object through placeholders and ``session`` (by default the default session when
    the function is called) runs them, as Horovod's; eagerly the function calls
    ``broadcast_object``."""
    name = name or 'broadcast_object_fn'
    if tf.executing_eagerly():
        return lambda obj: broadcast_object(obj, root_rank, name=name, process_set=process_set)
    length_in = tf.compat.v1.placeholder(tf.int64, [1], name='bcast_object_size')
    length_out = broadcast(length_in, root_rank, name=name + '.sz', process_set=process_set)
    payload_in = tf.compat.v1.placeholder(tf.uint8, [None], name='bcast_object_data')
    payload_out = broadcast(payload_in, root_rank, name=name + '.t', process_set=process_set)

    def broadcast_one(obj):
        run = (session or tf.compat.v1.get_default_session()).run
        is_root = basics.rank() == root_rank
        payload = (np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL),
                                 dtype=np.uint8) if is_root else None)
        length = run(length_out, feed_dict={length_in: [payload.size if is_root else 0]})
        if not is_root:
            payload = np.zeros(int(length[0]), dtype=np.uint8)
        received = run(payload_out, feed_dict={payload_in: payload})
        return obj if is_root else pickle.loads(received.tobytes())

    return broadcast_one


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Horovod's ``allgather_object``: the list of every rank's ``obj`` in the rank order of
    ``process_set``, pickled, the lengths gathered first. ``name`` defaults to
    'allgather_object'; ``session`` as for ``broadcast_object``."""
    name = name or 'allgather_object'
    payload = _serialize(obj)
    lengths = _to_numpy(allgather(tf.constant([int(payload.shape[0])], dtype=tf.int64),
                                  name=name + '.sz', process_set=process_set), session)
    gathered = _to_numpy(allgather(payload, name=name + '.t', process_set=process_set), session)
    starts = [0]
    for length in lengths:
        starts.append(starts[-1] + int(length))
    return [pickle.loads(gathered[start:end].tobytes())
            for start, end in zip(starts[:-1], starts[1:])]


def _divided(gradient, divisor):
    """``gradient`` / ``divisor``; a ``tf.IndexedSlices`` keeps its indices."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values / divisor, gradient.indices, gradient.dense_shape)
    return gradient / divisor


class GradientReducer:
    """How DistributedGradientTape and Keras' DistributedOptimizer allreduce the gradients:
    one by one, or in Horovod's ``groups`` (see ``gradient_groups``)."""

    def __init__(self, compression, sparse_as_dense, op, gradient_predivide_factor, process_set,
                 groups=None, scale_local_gradients=True, name='DistributedGradientTape'):
        # Horovod's: the reductions are built under the name scope '<name>_Allreduce' (the
        # optimizer's name, or 'DistributedGradientTape'), which names them in a graph.
        self.name = name
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = op
        self._process_set = process_set
        self._groups = groups
        # Horovod's worker-local sources (register_local): their gradients are not reduced,
        # only divided by the set's size with scale_local_gradients (Horovod's pull 3695),
        # so that they weigh as the averaged ones do.
        self._local = set()
        self._scale_local = scale_local_gradients
        # In an elastic job (HOROVOD_ELASTIC=1) the set's size changes while a step traced
        # before keeps what it was traced with: a division by the size is then an op that
        # reads it when the step runs, as Horovod's size_op() there.
        self._elastic = os.environ.get('HOROVOD_ELASTIC') == '1'
        # Horovod: with Average, divide by the factor before and by size/factor after the sum.
        self._prescale = 1.0
        self._postscale = 1.0
        self._divide_by_size = False
        if gradient_predivide_factor != 1.0:
            if op != reduce_ops.Average:
                raise ValueError('gradient_predivide_factor not supported with op != Average')
            self._op = reduce_ops.Sum
            self._prescale = 1.0 / gradient_predivide_factor
            if self._elastic:
                self._postscale = gradient_predivide_factor
                self._divide_by_size = True
            else:
                self._postscale = gradient_predivide_factor / process_set.size()

    def _set_size(self, dtype):
        """The set's size to divide a gradient of ``dtype`` by: an op in an elastic job."""
        if self._elastic:
            return tf.cast(size_op(process_set_id=self._process_set.process_set_id), dtype)
        return self._process_set.size()

    def _after_sum(self, reduced):
        """What the predivide factor leaves for after the sum in an elastic job: the division
        by the set's size when the step runs."""
        if not self._divide_by_size or reduced is None:
            return reduced
        return _divided(reduced, self._set_size(reduced.dtype))

    def _prepared(self, gradient):
        if self._sparse_as_dense and isinstance(gradient, tf.IndexedSlices):
            return tf.convert_to_tensor(gradient)
        return gradient

    def __call__(self, gradient, name=None, ignore_name_scope=False):
        if gradient is None:
            return None
        return self._after_sum(
            allreduce(self._prepared(gradient), op=self._op, compression=self._compression,
                      prescale_factor=self._prescale, postscale_factor=self._postscale,
                      name=name, process_set=self._process_set,
                      ignore_name_scope=ignore_name_scope))

    def register_local(self, source):
        """Horovod's ``register_local_source``/``register_local_var``: ``source``'s gradient
        stays this worker's own."""
        self._local.add(source.ref())

    def is_local(self, source):
        """Whether ``source`` was registered with ``register_local``."""
        return source.ref() in self._local

    def reduce_all(self, gradients, variables, use_generic_names=False):
        """The reduced ``gradients`` (None stays None) of ``variables``, a flat list each; the
        gradients of local sources are not reduced (see ``register_local``).

        With ``use_generic_names``, as Horovod's: the i-th reduction (of a gradient, or of a
        group) is named 'grad_<i>' without the name scopes, so that graphs whose gradients
        are named differently still pair up.
        """
        with tf.name_scope(self.name + '_Allreduce'):
            if not self._local:
                return self._reduce_shared(gradients, variables, use_generic_names)
            shared = [i for i, v in enumerate(variables) if not self.is_local(v)]
            results = list(gradients)
            reduced = self._reduce_shared([gradients[i] for i in shared],
                                          [variables[i] for i in shared], use_generic_names)
            for i, result in zip(shared, reduced):
                results[i] = result
            if self._scale_local:
                for i, variable in enumerate(variables):
                    if self.is_local(variable) and results[i] is not None:
                        results[i] = _divided(results[i], self._set_size(results[i].dtype))
            return results

    def _reduce_shared(self, gradients, variables, use_generic_names):
        def naming(i):
            return {'name': f'grad_{i}' if use_generic_names else None,
                    'ignore_name_scope': use_generic_names}

        if self._groups is None:
            return [self(gradient, **naming(i)) for i, gradient in enumerate(gradients)]
        gradients = [None if g is None else self._prepared(g) for g in gradients]
        reduced = [None] * len(gradients)
        groups = gradient_groups.split_indices(self._groups, gradients, variables)
        for number, group in enumerate(groups):
            # One grouped allreduce per group, whatever the gradients' dtypes, as Horovod's.
            results = grouped_allreduce(
                [gradients[i] for i in group], op=self._op, compression=self._compression,
                prescale_factor=self._prescale, postscale_factor=self._postscale,
                process_set=self._process_set, **naming(number))
            for i, result in zip(group, results):
                reduced[i] = self._after_sum(result)
        return reduced


class _DistributedGradientTape(tf.GradientTape):
    """A GradientTape whose ``gradient`` returns gradients allreduced over the process set."""

    def __init__(self, reducer, persistent=False, watch_accessed_variables=True):
        super().__init__(persistent=persistent, watch_accessed_variables=watch_accessed_variables)
        self._reducer = reducer

    def register_local_source(self, source):
        """Horovod's: ``source`` (a variable or watched tensor) is this worker's own; its
        gradient is returned unreduced (divided by the set's size with
        ``scale_local_gradients``)."""
        self._reducer.register_local(source)

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False,
                 **kwargs):
        """Horovod's: ``tf.GradientTape.gradient``, each gradient allreduced over the process
        set (local sources' kept, see ``register_local_source``). With ``use_generic_names``
        the i-th reduction is named 'grad_<i>' without name scopes, as Horovod's."""
        gradients = super().gradient(target, sources, output_gradients, **kwargs)
        if gradients is None:
            return None
        reduced = self._reducer.reduce_all(tf.nest.flatten(gradients), tf.nest.flatten(sources),
                                           use_generic_names)
        return tf.nest.pack_sequence_as(gradients, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """Horovod's: ``gradient()``'s gradients as two lists of (source, gradient) pairs in
        the order of ``sources`` (a flat list): those of the local sources
        (``register_local_source``), and the allreduced ones of the others."""
        gradients = self.gradient(target, sources, output_gradients=output_gradients,
                                  use_generic_names=use_generic_names)
        local_pairs, global_pairs = [], []
        for source, gradient in zip(sources, gradients):
            pairs = local_pairs if self._reducer.is_local(source) else global_pairs
            pairs.append((source, gradient))
        return local_pairs, global_pairs


def DistributedGradientTape(gradtape, device_dense='', device_sparse='',  # noqa: N802 (Horovod)
                            compression=Compression.none, sparse_as_dense=False,
                            op=reduce_ops.Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set,
                            scale_local_gradients=True):
    """Horovod's: wraps ``gradtape`` so that ``gradient()`` allreduces what it returns, one by
    one or, with ``groups`` (a count, or lists of the sources' variables), as grouped
    allreduces; sources registered with ``register_local_source`` keep their own gradient."""
    del device_dense, device_sparse
    reducer = GradientReducer(compression, sparse_as_dense, op, gradient_predivide_factor,
                              process_set, gradient_groups.resolve_groups(num_groups, groups),
                              scale_local_gradients)
    # The wrapped tape's settings and recording so far are taken over, as Horovod does.
    tape = _DistributedGradientTape(
        reducer, persistent=gradtape._persistent,  # noqa: SLF001
        watch_accessed_variables=gradtape._watch_accessed_variables)  # noqa: SLF001
    tape._tape = gradtape._tape  # noqa: SLF001
    tape._recording = gradtape._recording  # noqa: SLF001
    return tape


def local_layer_variables(local_layers):
    """The trainable weights of Horovod's ``local_layers`` argument: None, one Keras layer or
    a collection of them (anything else: ValueError, as Horovod)."""
    if local_layers is None:
        return []
    if isinstance(local_layers, tf.keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, tf.keras.layers.Layer) for layer in local_layers):
        raise ValueError('All local layers must be of tf.keras.layers.Layer type.')
    return [var for layer in local_layers for var in layer.trainable_weights]


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='',  # noqa: N802
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=reduce_ops.Average, gradient_predivide_factor=1.0,
                                   num_groups=0, groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """Horovod's: a ``DistributedGradientTape`` whose ``local_layers``' trainable weights are
    registered as local sources (their gradients are not reduced)."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for variable in local_layer_variables(local_layers):
        tape.register_local_source(variable)
    return tape
