"""pst.Embedding: an embedding table held by the ps tasks, rows by id.

    emb = pst.Embedding(16, num_embeddings=None, mode="sum", optimizer="adagrad", lr=0.05)
    out = emb(ids, offsets)     # nn.EmbeddingBag's call: ids 1-D with offsets, or 2-D bags

Each forward pulls the rows of the batch's distinct ids (from the ps that
holds each: a hash of the id), and backward gives them their gradient,
which step() sends before the dense gradient; the ps updates those rows
with the table's own optimizer (torch.optim's SGD, Adagrad or SparseAdam
on a sparse gradient). Nothing of the table lives on the worker between
steps. The rows are not parameters of the model: clip_grad_norm_,
GradScaler and the DistributedOptimizer's param_groups do not see them;
the DistributedOptimizer's zero_grad() clears their gradient as it would
an nn.EmbeddingBag(sparse=True)'s weight's.
The table's lr is its own: `emb.lr`, sent with every step's gradient, so
a schedule sets it (emb.lr = base_lr * factor(step)).

Tables are part of the job's layout: make every one before the
DistributedOptimizer, in the same order on every worker.
"""

import torch
import torch.nn.functional as F

import pstrain
from pstrain._lib import ConfigError, UsageError

from . import _process

_MODES = ("sum", "mean", "max")
_OPTIMIZERS = ("sgd", "adagrad", "adam")


class _Bag:  # pylint: disable=too-few-public-methods
    """A forward between its checks and its rows (Embedding._prepare)."""

    def __init__(self, distinct, inverse, offsets, device, training):
        self.distinct, self.inverse, self.offsets = distinct, inverse, offsets
        self.device, self.training = device, training


def _optimizer(what):
    """The process's DistributedOptimizer, which `what` needs."""
    optimizer = _process.state().optimizer
    if optimizer is None:
        raise UsageError("pst.Embedding: %s needs the DistributedOptimizer: make it first" % what)
    return optimizer


class Embedding(torch.nn.Module):
    """A table of rows of `embedding_dim` floats by int64 id, on the ps.

    num_embeddings: ids are [0, num_embeddings); None: any int64 id (a row
      is made at its first update, from the id and the job's seed).
    mode: "sum", "mean" or "max", as nn.EmbeddingBag's.
    optimizer: "sgd", "adagrad" (torch.optim.Adagrad's sparse update) or
      "adam" (torch.optim.SparseAdam), with lr, eps, betas and
      initial_accumulator_value as torch names them.
    init, init_std: a row's initial values, N(0, init_std^2) ("normal",
      nn.Embedding's with init_std 1) or U(-init_std, init_std).
    admit_after: an id gets a row once this many updates touched it; until
      then it reads as zeros and its gradients are dropped.
    evict_after_steps: a row no update touched for this many of its ps's
      embedding updates (a version in sync, a push in async, of any table)
      is dropped (it starts again as a new id).
    max_rows_per_ps: each ps keeps at most this many rows of the table,
      dropping the least recently updated. `pstrain launch
      --embedding_memory_mb=M` caps each ps's rows of all tables instead.
    """

    def __init__(self, embedding_dim, num_embeddings=None, mode="mean", optimizer="adagrad",
                 lr=0.01, name=None, init="normal", init_std=1.0, admit_after=0,
                 evict_after_steps=0, max_rows_per_ps=0, eps=None, betas=(0.9, 0.999),
                 initial_accumulator_value=0.0):
        super().__init__()
        state = _process.state()
        if state.optimizer is not None:
            raise UsageError("make every pst.Embedding before the DistributedOptimizer: the tables "
                             "are part of the job's layout")
        if mode not in _MODES:
            raise ConfigError("pst.Embedding: mode is one of %s, not %r" % (_MODES, mode))
        if optimizer not in _OPTIMIZERS:
            raise ConfigError("pst.Embedding: optimizer is one of %s, not %r"
                              % (_OPTIMIZERS, optimizer))
        if init not in ("normal", "uniform"):
            raise ConfigError('pst.Embedding: init is "normal" or "uniform", not %r' % (init,))
        self.index = len(state.tables)
        self.embedding_dim = int(embedding_dim)
        self.num_embeddings = None if num_embeddings is None else int(num_embeddings)
        self.mode = mode
        self.lr = float(lr)  # this step's learning rate, sent with its gradient
        self.init, self.init_std = init, float(init_std)
        self.name = name if name is not None else "table%d" % self.index
        self.config = {"name": self.name, "dim": self.embedding_dim,
                       "num_embeddings": self.num_embeddings or 0, "optimizer": optimizer,
                       "lr": float(lr), "init": init, "init_std": self.init_std,
                       "admit_after": int(admit_after), "evict_after_steps": int(evict_after_steps),
                       "max_rows_per_ps": int(max_rows_per_ps),
                       "beta1": float(betas[0]), "beta2": float(betas[1]),
                       "initial_accumulator": float(initial_accumulator_value)}
        if eps is not None:
            self.config["eps"] = float(eps)
        self._step_rows = []  # (distinct ids, their rows as a leaf) of the step's forwards
        # Whether one process's table would have a .grad now (a tensor,
        # empty after zero_grad(set_to_none=False)), not None: its
        # optimizer then counts a step without rows too (_send_grad).
        self._grad_kept = False
        state.tables.append(self)

    def extra_repr(self):
        return "%s, %d, num_embeddings=%s, mode=%s, optimizer=%s, lr=%g" % (
            self.name, self.embedding_dim, self.num_embeddings, self.mode,
            self.config["optimizer"], self.lr)

    def initial_rows(self, ids):
        """The rows the ps starts `ids` from (a float32 tensor (len(ids),
        dim)): for a one-process reference's nn.EmbeddingBag."""
        optimizer = _optimizer("initial_rows (the job's seed)")
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
        return torch.from_numpy(pstrain.embedding_initial_rows(
            ids.numpy(), self.embedding_dim, optimizer.seed, self.index, self.init,
            self.init_std))

    def read_rows(self, ids):
        """The table's rows of `ids` as the ps holds them now (a float32
        tensor (len(ids), dim), no gradient): to save or inspect a table."""
        optimizer = _optimizer("read_rows")
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
        distinct, inverse = torch.unique(ids, return_inverse=True)
        rows = optimizer._table_call(  # pylint: disable=protected-access
            lambda worker: worker.embedding_pull(self.index, distinct.numpy(), self.embedding_dim))
        return torch.from_numpy(rows)[inverse]

    def forward(self, ids, offsets=None, per_sample_weights=None):
        optimizer = _optimizer("a forward")
        bag = self._prepare(optimizer, ids, offsets)
        rows = optimizer._table_call(  # pylint: disable=protected-access
            lambda worker: worker.embedding_pull(self.index, bag.distinct.cpu().numpy(),
                                                 self.embedding_dim))
        return self._finish(bag, rows, per_sample_weights)

    def prefetch(self, ids, offsets=None):
        """Asks for the rows of the next step's forward of `ids` (the ids
        and offsets that forward will be given) behind this step's push, in
        async: step() then brings them with its reply, and that forward
        reads them without a request of its own (one round trip a step for
        both, not two). Call it before step(), with the next batch. A
        forward whose ids differ asks as before, and so does a read between
        steps (read_rows, an evaluation). Sync and SSP: checked, and
        nothing more (docs/embeddings.md says why). `optimizer.prefetched()`
        counts the reads it answered."""
        optimizer = _optimizer("a prefetch")
        distinct = self._distinct(ids, offsets)
        optimizer._table_worker().embedding_prefetch(  # pylint: disable=protected-access
            [(self.index, distinct.cpu().numpy())])

    def _distinct(self, ids, offsets, inverse=False):
        """The distinct ids of a forward's `ids` (and with `inverse`, where
        each id is among them), checked as a forward checks them."""
        ids = torch.as_tensor(ids)
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError("pst.Embedding: ids must be int64 or int32, not %s" % ids.dtype)
        if ids.dim() == 2:
            if offsets is not None:
                raise ValueError("pst.Embedding: offsets go with 1-D ids only (2-D ids are bags "
                                 "of equal length), as nn.EmbeddingBag's")
        elif ids.dim() != 1 or offsets is None:
            raise ValueError("pst.Embedding: ids are 2-D (bags of equal length) or 1-D with "
                             "offsets, as nn.EmbeddingBag's")
        distinct, where = torch.unique(ids.reshape(-1).to(torch.int64), return_inverse=True)
        if self.num_embeddings is not None and distinct.numel() > 0 and (
                int(distinct[0]) < 0 or int(distinct[-1]) >= self.num_embeddings):
            raise IndexError("pst.Embedding %s: ids must be in [0, %d); got %d..%d"
                             % (self.name, self.num_embeddings, int(distinct[0]),
                                int(distinct[-1])))
        return (distinct, where.reshape(ids.shape)) if inverse else distinct

    def _prepare(self, optimizer, ids, offsets):
        """A forward's checks and distinct ids, before its rows are pulled."""
        distinct, inverse = self._distinct(ids, offsets, inverse=True)
        given, ids = ids, torch.as_tensor(ids)
        training = self.training and torch.is_grad_enabled()
        if training:
            optimizer._begin_step()  # pylint: disable=protected-access
        if offsets is not None:
            offsets = torch.as_tensor(offsets, device=ids.device)
            if training:  # the model's first input may be these flat ids: its rows are the bags
                optimizer._bags_of(given, offsets.numel())  # pylint: disable=protected-access
        return _Bag(distinct, inverse, offsets, ids.device, training)

    def _finish(self, bag, rows, per_sample_weights):
        """The bags of a prepared forward from its pulled rows (numpy)."""
        rows = torch.from_numpy(rows).to(bag.device)
        if bag.training:
            rows.requires_grad_(True)
            self._step_rows.append((bag.distinct, rows))
        return F.embedding_bag(bag.inverse, rows, bag.offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights)

    def _send_grad(self, worker):
        """The step's row gradients to the worker (at step()): each forward's
        distinct rows, added up by id."""
        taken, self._step_rows = self._step_rows, []
        if not self.lr >= 0:
            raise ValueError("pst.Embedding %s: lr is %r; a learning rate is a number >= 0"
                             % (self.name, self.lr))
        parts = [(ids, rows.grad) for ids, rows in taken if rows.grad is not None]
        if not parts:
            if self._grad_kept:
                # One process's .grad, emptied by zero_grad(set_to_none=
                # False), still steps: no row moves, the optimizer's step
                # count does (SparseAdam's bias correction).
                worker.embedding_grad(self.index, torch.zeros(0, dtype=torch.int64).numpy(),
                                      torch.zeros(0, self.embedding_dim).numpy(), self.lr)
            return  # else no gradient: the table is left alone this step
        self._grad_kept = True
        if len(parts) == 1:
            ids, grad = parts[0]
        else:
            all_ids = torch.cat([p[0] for p in parts])
            ids, where = torch.unique(all_ids, return_inverse=True)
            grad = torch.zeros(ids.numel(), self.embedding_dim, dtype=torch.float32,
                               device=parts[0][1].device)
            grad.index_add_(0, where, torch.cat([p[1].float() for p in parts]))
        grad = grad.detach().to(torch.float32).cpu()
        worker.embedding_grad(self.index, ids.cpu().numpy(), grad.numpy(), self.lr)

    def _has_gradient(self):
        """Whether a row of the step's forwards has a gradient."""
        return any(rows.grad is not None for _, rows in self._step_rows)

    def _forget_step(self):
        self._step_rows = []

    def _zero_grad(self, set_to_none):
        """The DistributedOptimizer's zero_grad(): the rows' gradients so
        far are gone (a batch that went by without step(), a GradScaler's
        skipped one); a forward before it still takes a backward after."""
        for _, rows in self._step_rows:
            rows.grad = None
        if set_to_none:
            self._grad_kept = False


class EmbeddingBagCollection(torch.nn.Module):
    """Several pst.Embedding tables read together: one request to each ps
    for all of them, where calling each table waits for a reply per table
    (a recommendation model's 26 tables: 26 round trips a forward).

        tables = [pst.Embedding(16, name="c%d" % i) for i in range(26)]
        bags = pst.EmbeddingBagCollection(tables)
        outs = bags([(ids_i, offsets_i) for each table])   # or 2-D ids_i alone

    forward(inputs, per_sample_weights=None) takes one input per table, in
    order: a 2-D tensor of ids (bags of equal length) or (ids, offsets); and
    per_sample_weights, None or one (or None) per table. It returns each
    table's bags, the very tensors each table's own forward returns.
    """

    def __init__(self, tables):
        super().__init__()
        tables = list(tables)
        for t in tables:
            if not isinstance(t, Embedding):
                raise TypeError("pst.EmbeddingBagCollection: tables are pst.Embedding, not %s"
                                % type(t).__name__)
        self.tables = torch.nn.ModuleList(tables)

    def forward(self, inputs, per_sample_weights=None):
        inputs = list(inputs)
        if len(inputs) != len(self.tables):
            raise ValueError("pst.EmbeddingBagCollection: %d inputs for %d tables"
                             % (len(inputs), len(self.tables)))
        weights = [None] * len(inputs) if per_sample_weights is None else list(per_sample_weights)
        if len(weights) != len(inputs):
            raise ValueError("pst.EmbeddingBagCollection: %d per_sample_weights for %d tables"
                             % (len(weights), len(inputs)))
        optimizer = _optimizer("a forward")
        bags = []
        for table, x in zip(self.tables, inputs):
            ids, offsets = x if isinstance(x, (tuple, list)) else (x, None)
            bags.append(table._prepare(optimizer, ids, offsets))  # pylint: disable=protected-access
        wanted = _by_table(self.tables, [b.distinct for b in bags])
        rows = optimizer._table_call(  # pylint: disable=protected-access
            lambda worker: worker.embedding_pull_tables(
                [(t.index, ids.cpu().numpy(), t.embedding_dim) for t, ids in wanted.values()]))
        rows = dict(zip(wanted, rows))
        return [t._finish(b, _rows_for(b.distinct, wanted[t.index][1], rows[t.index]), w)  # pylint: disable=protected-access
                for t, b, w in zip(self.tables, bags, weights)]

    def prefetch(self, inputs):
        """Embedding.prefetch for every table at once: `inputs` as the next
        forward's (one per table, in order)."""
        inputs = list(inputs)
        if len(inputs) != len(self.tables):
            raise ValueError("pst.EmbeddingBagCollection: %d inputs for %d tables"
                             % (len(inputs), len(self.tables)))
        optimizer = _optimizer("a prefetch")
        distincts = []
        for table, x in zip(self.tables, inputs):
            ids, offsets = x if isinstance(x, (tuple, list)) else (x, None)
            distincts.append(table._distinct(ids, offsets))  # pylint: disable=protected-access
        optimizer._table_worker().embedding_prefetch(  # pylint: disable=protected-access
            [(t.index, ids.cpu().numpy()) for t, ids in _by_table(self.tables, distincts).values()])


def _by_table(tables, distincts):
    """{table index: (table, its distinct ids)}: a table read for several
    inputs (one table shared by features) is asked for once, for the
    distinct ids of them all, in the order tables first come."""
    merged = {}
    for table, distinct in zip(tables, distincts):
        if table.index in merged:
            _, before = merged[table.index]
            merged[table.index] = (table, torch.unique(torch.cat([before, distinct])))
        else:
            merged[table.index] = (table, distinct)
    return merged


def _rows_for(distinct, asked, rows):
    """The rows (numpy) of `distinct` among those pulled for `asked`
    (sorted, distinct ids that hold them all)."""
    if asked is distinct:
        return rows
    return rows[torch.searchsorted(asked, distinct).cpu().numpy()]
