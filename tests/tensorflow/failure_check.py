"""The failures that end a collective.tensorflow job, each in a job of its own under
collectiverun (ctest runs both; see tests/tensorflow/CMakeLists.txt):

- ``dead-rank``: the last rank exits (code 0, so the launcher lets the others go on) without
  leaving; every other rank's allreduce fails with an error naming it.
- ``stall``: rank 0 submits an allreduce the others never submit, while they wait in a barrier;
  with the daemon's ``--stall-shutdown-seconds`` both fail with the daemon's message naming the
  missing ranks (DeadlineExceededError), and the job goes on.

Each surviving rank prints 'failure check passed: <mode>' and exits 0; any other outcome
raises, exits non-zero and ends the job.
"""

import os
import sys

import tensorflow as tf

import collective.tensorflow as hvd


def dead_rank():
    last = hvd.size() - 1
    # Every rank is in the job before the last one goes.
    hvd.barrier()
    if hvd.rank() == last:
        sys.stdout.flush()
        os._exit(0)
    try:
        hvd.allreduce(tf.ones([8]), name='failure.dead_rank')
    except tf.errors.OpError as error:
        # Aborted when the allreduce was in the daemon before the death was
        # seen; whichever came first, the message names the rank.
        message = str(error)
        if f'rank {last}' not in message or 'without leaving' not in message:
            raise AssertionError(f'the error does not name rank {last}: {message}') from error
        return
    raise AssertionError('the allreduce completed although a rank had died')


def _expect_stall_error(call, name, missing):
    """Runs ``call``, which must fail with the daemon's stall error for ``name`` naming the
    ``missing`` ranks."""
    try:
        call()
    except tf.errors.DeadlineExceededError as error:
        message = str(error)
        if f"{name}' of process set 0 waited" not in message \
                or f'for ranks [{missing}] to submit it' not in message \
                or 'stall_shutdown_seconds' not in message:
            raise AssertionError(f'unexpected stall error: {message}') from error
        return
    raise AssertionError(f'{name} completed although ranks [{missing}] never submitted it')


def stall():
    # Rank 0 waits in an allreduce the others never submit, they in a barrier rank 0 never
    # reaches: with stall_shutdown_seconds both fail, each naming whom it waited for.
    others = ', '.join(str(r) for r in range(1, hvd.size()))
    if hvd.rank() == 0:
        _expect_stall_error(lambda: hvd.allreduce(tf.ones([8]), name='failure.stalled'),
                            'failure.stalled', others)
    else:
        _expect_stall_error(hvd.barrier, '__collective__.barrier', '0')
    # The job goes on.
    total = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name='failure.after_stall')
    if total.numpy().tolist() != [hvd.size()] * 2:
        raise AssertionError(f'the allreduce after the stall gave {total.numpy()}')


def main():
    mode = sys.argv[1]
    hvd.init()
    {'dead-rank': dead_rank, 'stall': stall}[mode]()
    print(f'failure check passed: {mode}', flush=True)
    if mode != 'dead-rank':
        hvd.shutdown()
    # After a death the job is over: leaving would only report it again.


if __name__ == '__main__':
    main()
