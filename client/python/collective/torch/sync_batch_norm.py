"""Batch normalization whose statistics span the batches of every rank.

Forward allgathers each rank's element count, mean and variance per channel
and combines them into the statistics of the whole (concatenated) batch;
backward allreduces the two per-channel sums the input gradient needs. Plain
torch operations only, so it runs on CPU as well as on GPU.
"""

import torch
import torch.nn.functional as F
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from collective.torch.mpi_ops import Sum, allgather, allreduce, global_process_set


class SyncBatchNorm(_BatchNorm):
    """Applies synchronous version of N-dimensional BatchNorm.

    In this version, normalization parameters are synchronized across workers during forward pass.
    This is very useful in situations where each worker can fit a very small number of examples.

    See https://pytorch.org/docs/stable/nn.html#batchnorm2d for more details about BatchNorm.

    Arguments:
        num_features: number of channels `C` from the shape `(N, C, ...)`
        eps: a value added to the denominator for numerical stability. Default: 1e-5
        momentum: the value used for the running_mean and running_var
            computation. Can be set to `None` for cumulative moving average
            (i.e. simple average). Default: 0.1
        affine: a boolean value that when set to `True`, this module has
            learnable affine parameters. Default: `True`
        track_running_stats: a boolean value that when set to `True`, this
            module tracks the running mean and variance, and when set to `False`,
            this module does not track such statistics and always uses batch
            statistics in both training and eval modes. Default: `True`
        process_set: the ranks whose batches are normalized together. Default:
            the global process set.

    Every rank of the process set must call forward (and backward) the same
    number of times, like any collective. The gradients of ``weight`` and
    ``bias`` stay local: DistributedOptimizer reduces them with the others.
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError('expected at least 2D input (got {}D input)'.format(input.dim()))

    def forward(self, input):
        """Normalizes ``input`` (N, C, ...): while training by the mean and variance over the
        batches of every rank of the process set (updating the running statistics), else by
        the running statistics."""
        self._check_input_dim(input)

        # The same bookkeeping as torch.nn.BatchNorm*d.
        average_factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                average_factor = 1.0 / float(self.num_batches_tracked)
        batch_stats = self.training or not self.track_running_stats
        # The running buffers are read in eval and updated while training
        # (when tracked; untracked ones are None).
        running_mean = self.running_mean if not self.training or self.track_running_stats else None
        running_var = self.running_var if not self.training or self.track_running_stats else None

        if not batch_stats or not self.process_set.included() or self.process_set.size() == 1:
            return F.batch_norm(input, running_mean, running_var, self.weight, self.bias,
                                batch_stats, average_factor, self.eps)
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias, running_mean,
                                            running_var, self.eps, average_factor,
                                            self.process_set)


def _channel_view(tensor, dims):
    """Reshapes a per-channel vector to broadcast against an input of `dims` dimensions."""
    return tensor.view([1, -1] + [1] * (dims - 2))


class _SyncBatchNormFunction(Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_set):
        channels = input.size(1)
        reduce_dims = [0] + list(range(2, input.dim()))
        # Statistics in float32 at least (float16 inputs), float64 on the wire
        # so that counts stay exact.
        dtype = torch.promote_types(input.dtype, torch.float32)
        x = input.to(dtype)

        count = input.numel() // channels
        mean = x.sum(reduce_dims) / max(count, 1)
        var = (x - _channel_view(mean, x.dim())).square().sum(reduce_dims) / max(count, 1)
        local = torch.cat([torch.tensor([float(count)], dtype=torch.float64, device=x.device),
                           mean.double(), var.double()]).unsqueeze(0)
        gathered = allgather(local, name='sync_batch_norm.stats', process_set=process_set)

        # Combine (count, mean, var) per rank into the statistics of the whole
        # batch; a rank with an empty batch contributes zeros.
        counts = gathered[:, :1]
        means = gathered[:, 1:1 + channels]
        variances = gathered[:, 1 + channels:]
        total = counts.sum()
        if total <= 1:
            raise ValueError('Expected more than 1 value per channel when training, '
                             'got input size {}'.format(list(input.size())))
        global_mean = (counts * means).sum(0) / total
        global_var = (counts * (variances + (means - global_mean).square())).sum(0) / total

        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:
            unbiased = global_var * (total / (total - 1))
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)

        mean = global_mean.to(dtype)
        invstd = torch.rsqrt(global_var.to(dtype) + eps)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.total = total.item()
        ctx.process_set = process_set
        ctx.bias_dtype = None if bias is None else bias.dtype

        output = (x - _channel_view(mean, x.dim())) * _channel_view(invstd, x.dim())
        if weight is not None:
            output = output * _channel_view(weight, x.dim())
        if bias is not None:
            output = output + _channel_view(bias, x.dim())
        return output.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, mean, invstd = ctx.saved_tensors
        reduce_dims = [0] + list(range(2, x.dim()))
        dy = grad_output.to(x.dtype)
        xmu = x - _channel_view(mean, x.dim())
        sum_dy = dy.sum(reduce_dims)
        sum_dy_xmu = (dy * xmu).sum(reduce_dims)

        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            # The input gradient depends on the two sums over the whole batch.
            sums = allreduce(torch.stack([sum_dy, sum_dy_xmu]), name='sync_batch_norm.grad_sums',
                             op=Sum, process_set=ctx.process_set)
            mean_dy = _channel_view(sums[0] / ctx.total, x.dim())
            mean_dy_xmu = _channel_view(sums[1] / ctx.total, x.dim())
            scale = invstd if weight is None else invstd * weight.to(x.dtype)
            projection = xmu * _channel_view(invstd.square(), x.dim()) * mean_dy_xmu
            grad_input = ((dy - mean_dy - projection) * _channel_view(scale, x.dim()))
            grad_input = grad_input.to(grad_output.dtype)
        # Local sums only: the optimizer reduces parameter gradients.
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = (sum_dy_xmu * invstd).to(weight.dtype)
        if ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(ctx.bias_dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
