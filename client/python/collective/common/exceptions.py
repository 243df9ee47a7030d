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
