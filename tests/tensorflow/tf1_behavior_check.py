"""A TF1 program as Horovod's TF1 users write it: ``tf.compat.v1.disable_v2_behavior()``
(reference variables, TF1 control flow), a ``MonitoredTrainingSession`` with
``BroadcastGlobalVariablesHook``, and the two paths of a tf.compat.v1
``DistributedOptimizer`` that keep state in the graph: local aggregation
(``backward_passes_per_step=2``, Momentum) and Adasum (Adam), and the Keras
``DistributedOptimizer``'s ``get_gradients`` (Keras in a TF1 graph), and
``SyncBatchNormalization``'s updates in ``UPDATE_OPS`` (Horovod's TF1 hook). Run by every rank of
``collectiverun -np 2`` (or any power of two); the last line says ``ok`` only if every value
matched."""

import numpy as np
import tensorflow as tf

tf.compat.v1.disable_v2_behavior()

import collective.tensorflow as hvd  # noqa: E402  (after the switch to TF1 behaviour)
import collective.tensorflow.keras as hvd_keras  # noqa: E402


def main():
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    x = tf.compat.v1.placeholder(tf.float32, [])
    w = tf.compat.v1.get_variable('w', initializer=np.ones(2, np.float32))
    step = tf.compat.v1.train.get_or_create_global_step()
    aggregated = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.5, 0.9),
                                          backward_passes_per_step=2)
    train_w = aggregated.minimize(tf.reduce_sum(w * x), global_step=step)
    # Adasum of orthogonal updates is their sum; the start is rank 0's weights (the hook).
    v = tf.compat.v1.get_variable('v', initializer=np.full(size, rank, np.float32))
    own = np.zeros(size, np.float32)
    own[rank] = 1.0
    train_v = hvd.DistributedOptimizer(tf.compat.v1.train.AdamOptimizer(0.1), op=hvd.Adasum,
                                       backward_passes_per_step=2).minimize(tf.reduce_sum(v * own))
    assert isinstance(w, tf.compat.v1.Variable) and not hasattr(w, 'handle'), type(w)
    # Keras in a TF1 graph asks its optimizer for get_gradients: averaged over the ranks.
    u = tf.compat.v1.get_variable('u', initializer=np.zeros(3, np.float32))
    keras_gradients = hvd_keras.DistributedOptimizer(
        tf.keras.optimizers.legacy.SGD(0.1)).get_gradients(tf.reduce_sum(u * x * [1., 2., 3.]),
                                                           [u])

    # A TF1 loop runs the moving statistics' updates from UPDATE_OPS: with momentum 0 the
    # moving mean becomes the mean of every rank's batch (rank r's holds r twice).
    features = tf.compat.v1.placeholder(tf.float32, [2, 1])
    sync_bn = hvd.SyncBatchNormalization(momentum=0.0)
    sync_bn(features, training=True)
    update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)
    assert len(update_ops) == 2, update_ops

    mean_gradient = 2 * (size + 1) / 2.0  # two passes of (rank + 1), averaged over ranks
    expected_w = [1.0, 1.0 - 0.5 * mean_gradient,
                  1.0 - 0.5 * mean_gradient, 1.0 - 0.5 * mean_gradient * (1 + 1.9)]
    with tf.compat.v1.train.MonitoredTrainingSession(
            hooks=[hvd.BroadcastGlobalVariablesHook(0)]) as session:
        np.testing.assert_allclose(
            session.run(keras_gradients, feed_dict={x: rank + 1.0})[0],
            np.array([1., 2., 3.]) * (size + 1) / 2.0, rtol=1e-6)
        session.run(update_ops, feed_dict={features: np.full((2, 1), rank, np.float32)})
        np.testing.assert_allclose(session.run(sync_bn.moving_mean), [(size - 1) / 2.0],
                                   rtol=1e-6)
        for run in range(4):
            session.run([train_w, train_v], feed_dict={x: rank + 1.0})
            np.testing.assert_allclose(session.run(w), np.full(2, expected_w[run]), rtol=1e-6)
            assert session.run(step) == run + 1
            # Adam's first steps move each weight by about its rate.
            local = (run + 1) % 2
            expected_v = np.full(size, -0.1 * (run + 1 - local)) - 0.1 * local * own
            np.testing.assert_allclose(session.run(v), expected_v, atol=1e-4)
    print(f'tf1 behaviour check: rank {rank} of {size} ok', flush=True)


if __name__ == '__main__':
    main()
