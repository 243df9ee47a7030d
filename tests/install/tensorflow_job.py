"""A 2-rank collective.tensorflow job, run by pip_install_check.py from outside the source tree.

Each rank sums a tensor and broadcasts a variable through the daemon, checks
the results, and says where collective came from (pip_install_check.py has
checked that it is the environment's site-packages).
"""

import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import tensorflow as tf  # noqa: E402

import collective  # noqa: E402
import collective.tensorflow as hvd  # noqa: E402


def main():
    package = os.path.dirname(collective.__file__)  # pip_install_check.py checked where from
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    summed = hvd.allreduce(tf.fill([4], float(rank + 1)), op=hvd.Sum)
    total = size * (size + 1) / 2
    variable = tf.Variable([float(rank)] * 3)
    hvd.broadcast_variables([variable], root_rank=1)
    if summed.numpy().tolist() != [total] * 4 or variable.numpy().tolist() != [1.0] * 3:
        sys.exit(f'rank {rank}: wrong results {summed.numpy()} {variable.numpy()}')
    print(f'tensorflow job: rank {rank} of {size} (TensorFlow {tf.__version__}) reduced through '
          f'collective {collective.__version__} from {package}')
    hvd.shutdown()


if __name__ == '__main__':
    main()
