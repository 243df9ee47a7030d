"""The hook both DistributedOptimizers put on each parameter's gradient accumulator."""

_TOO_MANY_PASSES = ('Gradients were computed more than backward_passes_per_step times '
                    'before call to step(). Increase backward_passes_per_step to '
                    'accumulate gradients locally.')


def hook_last_pass(p, delays, on_last_pass, keep):
    """Calls ``on_last_pass(p)`` when the last of ``delays[p]`` backward passes has produced
    ``p``'s gradient, counting ``delays[p]`` down; a pass more raises AssertionError.

    The hook sits on the accumulator that writes ``p.grad``, so it runs once the gradient
    of a backward pass is complete; ``keep`` (a list) keeps the accumulator alive.
    """
    def hook(*_):
        if delays[p] <= 0:
            raise AssertionError(_TOO_MANY_PASSES)
        assert not p.grad.requires_grad
        delays[p] -= 1
        if delays[p] == 0:
            on_last_pass(p)

    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
    grad_acc.register_hook(hook)
    keep.append(grad_acc)
