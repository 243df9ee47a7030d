"""A 2-rank collective.torch job, run by pip_install_check.py from outside the source tree.

Each rank sums and averages a tensor through the daemon, checks the results,
and says where collective came from (pip_install_check.py has checked that it
is the environment's site-packages).
"""

import os
import sys

import torch

import collective
import collective.torch as hvd


def main():
    package = os.path.dirname(collective.__file__)  # pip_install_check.py checked where from
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    summed = hvd.allreduce(torch.full((4,), float(rank + 1)), op=hvd.Sum)
    averaged = hvd.allreduce(torch.full((4,), float(rank + 1)))
    total = size * (size + 1) / 2
    if summed.tolist() != [total] * 4 or averaged.tolist() != [total / size] * 4:
        sys.exit(f'rank {rank}: wrong results {summed.tolist()} {averaged.tolist()}')
    print(f'torch job: rank {rank} of {size} (torch {torch.__version__}) reduced through '
          f'collective {collective.__version__} from {package}')
    hvd.shutdown()


if __name__ == '__main__':
    main()
