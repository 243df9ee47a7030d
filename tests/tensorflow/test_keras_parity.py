"""collective.keras and collective.tensorflow.keras against Horovod 0.28.1's signatures and
behaviour (issue 48): positional calls written for ``horovod.keras`` mean the same here, its
``allreduce`` averages by default, the optimizer takes Horovod's ``name`` and refuses ops
but Average and Sum, and Horovod's suites find ``parameterized`` in the venv."""

import inspect
import unittest

import numpy as np
import pytest
import tensorflow as tf
from parameterized import parameterized

import collective.keras as hvd
import collective.tensorflow.keras as tf_keras_hvd

# horovod.keras's parameters, in their order (Horovod 0.28.1).
_HOROVOD_KERAS = {
    'DistributedOptimizer': ['optimizer', 'name', 'device_dense', 'device_sparse',
                             'compression', 'sparse_as_dense', 'gradient_predivide_factor',
                             'op', 'num_groups', 'groups'],
    'PartialDistributedOptimizer': ['optimizer', 'name', 'device_dense', 'device_sparse',
                                    'compression', 'sparse_as_dense',
                                    'gradient_predivide_factor', 'op', 'groups',
                                    'process_set', 'local_layers', 'scale_local_gradients'],
    'allreduce': ['value', 'name', 'average', 'prescale_factor', 'postscale_factor', 'op',
                  'compression'],
}


@pytest.mark.parametrize('function', sorted(_HOROVOD_KERAS))
def test_standalone_keras_takes_horovod_keras_parameters_in_order(function):
    assert list(inspect.signature(getattr(hvd, function)).parameters) == _HOROVOD_KERAS[function]
    assert list(inspect.signature(hvd.callbacks.BestModelCheckpoint).parameters) == [
        'monitor', 'verbose', 'mode', 'save_freq']


def test_standalone_keras_positional_optimizer_means_what_horovod_keras_means():
    # optimizer, name, device_dense, device_sparse, compression, sparse_as_dense,
    # gradient_predivide_factor, op, num_groups, groups
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.legacy.SGD(0.1), 'Mine', '', '',
                                         hvd.Compression.none, False, 1.0, hvd.Sum, 0, 1)
    assert optimizer.get_config()['name'] == 'Mine'
    variable = tf.Variable([1.0, 1.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(variable) * (hvd.rank() + 1)
    ((gradient, _),) = optimizer._compute_gradients(loss, [variable], tape=tape)
    # op=Sum, as the eighth positional argument says.
    np.testing.assert_allclose(gradient.numpy(), [hvd.size() * (hvd.size() + 1) / 2] * 2)


def test_standalone_keras_allreduce_averages_unless_average_is_false():
    mine = float(hvd.rank() + 1)
    np.testing.assert_allclose(hvd.allreduce(mine).numpy(), (hvd.size() + 1) / 2)
    np.testing.assert_allclose(hvd.allreduce(mine, average=False).numpy(),
                               hvd.size() * (hvd.size() + 1) / 2)
    # average=True is the default: an op beside it is refused, as horovod.keras's.
    with pytest.raises(ValueError, match='The op parameter supersedes average'):
        hvd.allreduce(mine, op=hvd.Sum)
    np.testing.assert_allclose(hvd.allreduce(mine, average=None, op=hvd.Sum).numpy(),
                               hvd.size() * (hvd.size() + 1) / 2)
    # horovod.tensorflow.keras's default is None: op alone is taken.
    np.testing.assert_allclose(tf_keras_hvd.allreduce(mine, op=hvd.Sum).numpy(),
                               hvd.size() * (hvd.size() + 1) / 2)


def test_standalone_keras_best_model_checkpoint_positional_order():
    checkpoint = hvd.callbacks.BestModelCheckpoint('loss', 1, 'min', 'epoch')
    assert (checkpoint.monitor, checkpoint.verbose, checkpoint.save_freq) == ('loss', 1, 'epoch')
    assert checkpoint.monitor_op is np.less and not checkpoint.save_weights_only
    assert checkpoint.save_best_only and checkpoint.filepath is None


@pytest.mark.parametrize('optimizer_class', [tf.keras.optimizers.SGD,
                                             tf.keras.optimizers.legacy.SGD])
def test_keras_optimizer_takes_horovods_name(optimizer_class):
    assert tf_keras_hvd.DistributedOptimizer(optimizer_class(0.1))._name == 'DistributedSGD'
    named = tf_keras_hvd.DistributedOptimizer(optimizer_class(0.1), name='Mine')
    assert named._name == 'Mine'
    if optimizer_class is tf.keras.optimizers.legacy.SGD:
        assert named.get_config()['name'] == 'Mine'


def test_keras_optimizer_refuses_ops_but_average_and_sum():
    for op in (hvd.Min, hvd.Max, hvd.Product, hvd.Adasum):
        with pytest.raises(ValueError, match='op currently only supports Average and Sum'):
            tf_keras_hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), op=op)


def test_keras_optimizer_names_its_reductions_scope_after_itself():
    optimizer = tf_keras_hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1), name='Mine')
    variable = tf.Variable([1.0])

    @tf.function
    def gradients():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(variable * 3.0)
        return optimizer.compute_gradients(loss, [variable], tape=tape)

    concrete = gradients.get_concrete_function()
    names = [op.name for op in concrete.graph.get_operations() if op.type == 'CollectiveAllreduce']
    assert len(names) == 1 and names[0].startswith('Mine_Allreduce/HorovodAllreduce_'), names
    np.testing.assert_allclose(gradients()[0][0].numpy(), [3.0])


def test_split_list_takes_horovods_parameter_names():
    assert hvd.split_list(l=[1, 2, 3], n=2) == [[1, 2], [3]]


class HorovodSuitesFindParameterized(unittest.TestCase):
    """Horovod's Keras suites parameterize their cases so (issue 48 item 15)."""

    @parameterized.expand([(1,), (2,)])
    def test_expand(self, count):
        self.assertIn(count, (1, 2))
