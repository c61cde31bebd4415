"""The data of each step: this worker's share of the job's global batch,
from where the job is."""

import numpy
import torch

import pstrain
from pstrain._lib import UsageError
from . import _process


class DistributedSampler:
    """This worker's share of a data set, step by step, as the C++ workers
    take theirs: each epoch one seeded permutation of [0, num_examples),
    the same on every worker; global batch s is positions [s*G, (s+1)*G)
    of it (G = num_workers x batch_size) and worker r takes every
    num_workers-th of those from r (as PyTorch's DistributedSampler
    interleaves). Every worker runs len(sampler) steps an epoch.

    batches(epoch) yields the index tensors of the epoch's steps from where
    the job is (a restarted worker resumes at its position; after a
    rollback to a checkpoint the steps since are yielded again), while the
    DistributedOptimizer's step moves it on. After the job's last step it
    waits for every worker's last gradient (DistributedOptimizer.finish), so
    that the chief's model then holds the final parameters. Without an
    optimizer (or with `follow_job=False`) it yields the whole epoch.

    `num_workers` and `rank` default to the task's (pst.init()); give them
    to take a share without a job (num_workers=1: one process's order).
    `device`: where the index tensors go (the data's device)."""

    def __init__(self, num_examples, batch_size, seed=1, num_workers=None, rank=None,
                 follow_job=True, device=None):
        if num_examples < 1 or batch_size < 1:
            raise ValueError("num_examples and batch_size must be >= 1")
        self.num_examples, self.batch_size = int(num_examples), int(batch_size)
        state = _process.current()
        self.seed = int(seed)
        if num_workers is None:
            task = _process.state().task
            self.num_workers, self.rank = task.num_workers, task.rank
            if task.dynamic:
                # Dynamic workers: nobody splits the set; each draws its own
                # order of all of it (its rank in the seed).
                self.seed ^= (0x9E3779B97F4A7C15 * (task.rank + 1)) & (2**64 - 1)
                self.num_workers, self.rank = 1, 0
        else:
            self.num_workers, self.rank = int(num_workers), int(rank or 0)
        if not 0 <= self.rank < self.num_workers:
            raise ValueError("rank %d is not in [0, %d)" % (self.rank, self.num_workers))
        self.follow_job = follow_job and state is not None
        self.device = device
        self._cached = (None, None)

    def __len__(self):
        global_batch = self.num_workers * self.batch_size
        return (self.num_examples + global_batch - 1) // global_batch

    def permutation(self, epoch):
        if self._cached[0] != epoch:
            self._cached = (epoch, pstrain.permutation(self.num_examples, self.seed, epoch))
        return self._cached[1]

    def indices(self, epoch, step):
        """This worker's examples of step `step` of epoch `epoch`."""
        g = self.num_workers * self.batch_size
        chunk = self.permutation(epoch)[step * g:(step + 1) * g]
        idx = torch.from_numpy(numpy.ascontiguousarray(chunk[self.rank::self.num_workers]))
        return idx if self.device is None else idx.to(self.device)

    def batches(self, epoch):
        state = _process.current()
        opt = state.optimizer if self.follow_job and state is not None else None
        if opt is None:
            for step in range(len(self)):
                yield self.indices(epoch, step)
            return
        if opt.steps_per_epoch != len(self):
            raise UsageError("the sampler has %d steps an epoch, the optimizer's job %d: give the "
                             "optimizer sampler=" % (len(self), opt.steps_per_epoch))
        while not opt.done:
            position = opt.global_step
            data_epoch, step = divmod(position, len(self))
            if data_epoch > epoch:
                return
            idx = self.indices(data_epoch, step)
            opt.expect_examples(len(idx))
            yield idx
            if opt.global_step == position and not opt.done:
                # No opt.step() for this batch (GradScaler skips the steps
                # whose gradient is not finite): as in one process, the
                # data moves on and nothing is updated.
                opt.skip_step()
        # The job's last step is done: once every worker's last gradient is
        # in, the chief's model holds the final parameters (to evaluate).
        opt.finish()

    def __iter__(self):
        return self.batches(0)


class ResumableSampler(torch.utils.data.distributed.DistributedSampler):
    """torch's DistributedSampler that knows where the job is: a restarted
    or late worker's loop over a DataLoader with it skips what the job has
    done (whole epochs yield nothing; the epoch under way starts at the
    job's step), so its first batch is the one the job is at.

        sampler = pst.ResumableSampler(dataset, batch_size=64)   # rank and workers: the task's
        loader = DataLoader(dataset, batch_size=64, sampler=sampler)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for x, y in loader:
                ...  opt.step()

    `batch_size` is the DataLoader's (a step is one of its batches: the
    job's step s is batch s % len(loader) of epoch s // len(loader));
    `num_replicas` and `rank` default to the task's; the other arguments
    are torch's. Without a DistributedOptimizer yet, or with
    follow_job=False, it is torch's sampler."""

    def __init__(self, dataset, batch_size, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False, follow_job=True):
        state = _process.state()
        super().__init__(dataset, num_replicas=state.task.num_workers if num_replicas is None
                         else num_replicas, rank=state.task.rank if rank is None else rank,
                         shuffle=shuffle, seed=seed, drop_last=drop_last)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.batch_size, self.follow_job = int(batch_size), follow_job

    def steps_per_epoch(self):
        """The DataLoader's batches an epoch (it keeps a short last one)."""
        return (self.num_samples + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        indices = list(super().__iter__())
        state = _process.current()
        opt = state.optimizer if self.follow_job and state is not None else None
        if opt is None:
            return iter(indices)
        done = opt.global_step - self.epoch * self.steps_per_epoch()
        if done <= 0:
            return iter(indices)
        return iter(indices[done * self.batch_size:])
