"""pstrain.torch: a PyTorch script as a worker of a pstrain job.

    import pstrain.torch as pst
    pst.init()                                       # the task, from TF_CONFIG
    opt = pst.DistributedOptimizer(model, torch.optim.AdamW(groups, lr=3e-4))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_then_cosine)
    for x, y in loader:                              # this worker's share of the data
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()                              # sync: .grad holds the workers' average
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()                                   # the model holds the ps's new parameters
        sched.step()
    if pst.is_chief():
        pst.log_metrics(test_accuracy=acc, test_loss=test_loss)

The ps tasks hold the parameters and the optimizer (torch.optim's SGD,
Adam, AdamW, Adagrad, with PyTorch's definitions, per parameter group);
DistributedOptimizer is a torch.optim.Optimizer whose step is theirs, so
torch's schedulers, GradScaler, clip_grad_norm_ and state_dict work as in
one process, and N sync workers end where DDP with N ranks ends. The job's
flags given to `pstrain launch` (--mode, --staleness, --wire, checkpoints,
metrics, timeline) reach the worker through its environment and mean what
they mean for the C++ workers. docs/pytorch.md says what each idiom does.

pst.run(fn, *args, num_workers=2, num_ps=1, mode="sync", **job_flags)
runs fn in every worker of a job started from this Python (a notebook),
as TorchDistributor.run does (pstrain/runner.py).

The modules: _process (init, the task, how the script ends), _optimizer
(DistributedOptimizer: the training path), _flat (the parameters as flat
buffers), _groups (torch.optim's optimizers as the ps runs them),
_embedding (Embedding: a table of rows by id on the ps),
_sampler (DistributedSampler, ResumableSampler), _buffers (BatchNorm's statistics across
restarts), _timeline (the layers' spans).
"""

from pstrain._lib import ConfigError, JobFinished, PstrainError, UsageError
from pstrain.runner import JobError, WorkerError, run

from ._embedding import Embedding, EmbeddingBagCollection
from ._optimizer import DistributedOptimizer
from ._process import (JobDone, finish, init, is_chief, log_metrics, num_workers, rank,
                       run_dir)
from ._sampler import DistributedSampler, ResumableSampler

__all__ = ["init", "rank", "num_workers", "is_chief", "run_dir", "DistributedOptimizer", "Embedding",
           "EmbeddingBagCollection",
           "DistributedSampler", "ResumableSampler", "log_metrics", "finish", "run", "JobDone",
           "PstrainError", "ConfigError", "UsageError", "JobFinished", "JobError", "WorkerError"]
