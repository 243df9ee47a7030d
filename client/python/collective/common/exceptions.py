"""Exceptions raised by the collective operations."""


class HorovodInternalError(RuntimeError):
    """A collective failed on every rank that took part in it.

    Raised when waiting for (``synchronize``) an operation that the daemon
    failed: the ranks disagreed on a tensor's shape, dtype, op, root or
    scale factors, a rank left the job, the stall inspector ended it, or the
    daemon itself went away. The message is the daemon's, and every rank of
    the collective receives the same one. Errors in a call's own arguments
    (a duplicate name, bad splits, a process set this rank is not in) are
    ``ValueError`` raised by the call itself.
    """


class HostsUpdatedInterrupt(RuntimeError):
    """Workers were added to or removed from an elastic job (``collectiverun --elastic``).

    Raised by ``State.commit()`` and ``State.check_host_updates()`` on every
    rank at the same step; ``hvd.elastic.run`` catches it, keeps the state
    and re-forms the job. ``skip_sync``: only workers were removed, so every
    rank that goes on already holds the same state and need not receive it.
    """

    def __init__(self, skip_sync):
        super().__init__(
            'the workers of the elastic job changed' + ('' if not skip_sync else ' (removed only)'))
        self.skip_sync = skip_sync
