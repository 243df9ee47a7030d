"""Horovod's ``SyncBatchNormalization`` (``horovod.tensorflow.SyncBatchNormalization``): a
Keras ``BatchNormalization`` whose training statistics are those of every worker's batch.

As Horovod's, each worker's mean and mean of squares are averaged over the job (workers
weigh alike: their batches are meant to be the same size) and the variance is the average
mean of squares less the square of the average mean. The averaging is an allreduce, so the
backward pass carries the gradient to every worker's inputs. Outside training (or in a job
of one) it is the plain layer.

In a TF1-style graph (``tf.compat.v1.disable_v2_behavior()``), as Horovod's TF1 hook meant,
each call adds the layer's moving statistics' updates to ``tf.compat.v1.GraphKeys.UPDATE_OPS``,
where a TF1 training loop looks for them (``tf.control_dependencies(update_ops)``): Keras'
own layer leaves them to ``model.fit``. (Horovod's hook calls the TF1 name
``tf.add_to_collection``, which TensorFlow 2's API lacks.)
"""

import tensorflow as tf

from collective.common import reduce_ops
from collective.common.basics import size
from collective.tensorflow.mpi_ops import _allreduce


class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
    """Synchronous batch normalization: the statistics are synchronised across all workers
    during training."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError('SyncBatchNormalization does not support fused=True.')
        kwargs['name'] = kwargs.get('name') or 'sync_batch_normalization'
        super().__init__(fused=fused, **kwargs)

    def _moments(self, inputs, reduction_axes, keep_dims, **kwargs):
        """Horovod's: the mean and variance of the batches of every worker (see the module)."""
        mean, variance = super()._moments(inputs, reduction_axes, keep_dims=keep_dims, **kwargs)
        if size() == 1:
            return mean, variance
        # One allreduce for both: the sums of the workers' means and means of squares.
        stacked = tf.stack([mean, variance + tf.math.square(mean)])
        averaged = _allreduce(stacked, op=reduce_ops.Sum) / size()
        mean, mean_of_square = tf.unstack(averaged)
        return mean, mean_of_square - tf.math.square(mean)

    def call(self, *args, **kwargs):
        """Keras' ``BatchNormalization.call``; in a TF1-style graph its updates are also put in
        ``UPDATE_OPS`` (see the module)."""
        outputs = super().call(*args, **kwargs)
        if not tf.compat.v1.executing_eagerly_outside_functions():
            for update in self.updates:
                tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, update)
        return outputs
