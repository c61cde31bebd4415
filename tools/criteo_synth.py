#!/usr/bin/env python3
"""Synthetic click data shaped like Criteo's Kaggle set (the Display
Advertising Challenge), made here from a seed: nothing is downloaded.

Each sample has what a Criteo line has: 13 dense features I1..I13
(non-negative counts) and 26 categorical fields C1..C26 (ids), and a click
label. Unlike the real data, the labels come from a planted model whose
true click probability p is written next to each label, so the best AUC
any model can reach on the data (the Bayes-optimal AUC: the AUC of p
against the labels) is known.

Usage: criteo_synth.py --out DIR [--train N] [--test N] [--seed S]
                       [--scale X] [--zipf A] [--ctr C] [--global_ids]
Writes DIR/train.npz and DIR/test.npz, each holding
    dense   float32 [N, 13]  I1..I13, whole numbers >= 0 (missing is 0)
    sparse  int64   [N, 26]  C1..C26, per-field ids in [0, cardinality),
                             or with --global_ids ids made unique across
                             fields by adding the field's offset (the sum
                             of the cardinalities of the fields before it)
    label   float32 [N]      0 or 1
    p       float32 [N]      the true click probability of the sample
and DIR/meta.json: the cardinalities, the flags, the planted model's
parameters, the click rates measured on both splits and the Bayes-optimal
AUC on the test split. The same flags give byte-identical files.

How a sample is made:

- Categorical fields. Field f has cardinality n_f: Criteo Kaggle's, as
  DLRM's reference code uses them (CRITEO_CARDINALITIES), times --scale,
  rounded, at least 1. A field's value is first drawn as a popularity rank
  k in [0, n_f) with P(k) proportional to (k + 1)^-zipf, exactly, by
  rejection-inversion sampling (W. Hörmann and G. Derflinger, "Rejection-
  inversion to generate variates from monotone discrete distributions",
  1996; the variant of Apache Commons' ZipfRejectionInversionSampler),
  vectorised in numpy: O(1) memory per field and at most about 1.02
  uniforms per draw for any n_f, where inverse-CDF tables of all 26
  fields would hold 33.8M float64s (270 MB). Any exponent > 0 works over a finite support,
  1.0 and below included. The rank then goes through a fixed bijection of
  [0, n_f) chosen by the seed (a 4-round unbalanced Feistel network over
  the smallest power of two >= n_f, cycle-walked back into [0, n_f)), so
  the popular ids are spread over the range rather than 0, 1, 2, ...
- Dense features. I_j = floor(exp(mu_j + s_j Z)), Z ~ N(0, 1): log-normal,
  heavy-tailed counts whose median and spread follow Criteo's columns
  roughly (DENSE_MEDIAN, DENSE_SPREAD); with probability DENSE_MISSING[j]
  the value is missing and written as 0, about as often as in Criteo.
  Capped at 2^24 so float32 holds every value exactly.
- Labels, from the planted model:
      logit = bias + sum_f w_f(id_f)                     first order
                   + sum_j beta_j log1p(I_j)             dense
                   + gamma / sqrt(R) sum_{f<g in P} <v_f(id_f), v_g(id_g)>
      p = sigmoid(logit),  label ~ Bernoulli(p).
  w_f(id) ~ N(0, FIELD_SIGMA[f]^2) and the R-dimensional latent vectors
  v_f(id) ~ N(0, I) are functions of (seed, field, id) through a 64-bit
  hash (splitmix64's finaliser, then Box-Muller), so no table of 10M
  weights is held. The interaction term, over the pairs of the fields P
  (INTERACTION_FIELDS: C1, C2, C5 and C8, small enough to be learnt), is
  what a DLRM's dot interactions can pick up and a linear model cannot.
  The weights depend on the per-field id, so --global_ids changes the ids
  written and nothing else. The bias is solved (bisection) so that the
  mean of p over a calibration sample of CALIBRATION_SAMPLES from a
  stream of its own is --ctr; the click rates measured on train and test
  are written to meta.json.

Randomness: the splits are streams of one seed (train TRAIN_STREAM, test
TEST_STREAM, calibration CALIBRATION_STREAM), each cut into blocks of
BLOCK samples with a numpy PCG64 generator of their own, seeded by (seed,
stream, block). The data is made a block at a time, so memory stays
bounded whatever N is, and the first N samples of a stream are the same
whatever the total asked for.

Importable: cardinalities(scale), generate(n, seed, stream, scale, zipf,
...) -> dict of arrays, auc(labels, scores), Model, zipf_ranks(...).
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
import zipfile

import numpy as np

# Criteo Kaggle's categorical cardinalities, C1..C26 (the number of
# distinct values of each field), as DLRM's reference uses them.
CRITEO_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683,
                        8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15,
                        286181, 105, 142572)
NUM_DENSE = 13
NUM_SPARSE = 26
MAX_CARDINALITY = 1 << 48

# I1..I13: median of the non-missing values, log-normal spread s_j, and
# the fraction missing, roughly Criteo's.
DENSE_MEDIAN = (1, 3, 7, 5, 2800, 36, 3, 8, 39, 1, 1, 0, 5)
DENSE_SPREAD = (1.2, 1.6, 1.3, 1.0, 1.8, 1.5, 1.4, 1.0, 1.2, 0.8, 1.0, 1.2, 1.3)
DENSE_MISSING = (0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0005, 0.04, 0.45, 0.04, 0.77, 0.22)
DENSE_MAX = float(1 << 24)

# The planted model's shape (the seed picks its weights): the standard
# deviation of each field's first-order weights, the dense features'
# coefficients (per unit of log1p, scaled by 1/s_j so each feature matters
# about as much as its c_j says), and the interaction term.
FIELD_SIGMA = (0.30, 0.25, 0.35, 0.30, 0.20, 0.25, 0.30, 0.15, 0.10, 0.30, 0.25, 0.35, 0.20,
               0.30, 0.25, 0.35, 0.15, 0.25, 0.20, 0.10, 0.35, 0.15, 0.30, 0.30, 0.20, 0.25)
DENSE_COEF = (0.25, -0.15, 0.10, -0.20, -0.10, 0.15, 0.30, 0.05, -0.10, 0.20, 0.25, 0.10, -0.20)
INTERACTION_FIELDS = (0, 1, 4, 7)  # C1, C2, C5, C8
INTERACTION_RANK = 4
INTERACTION_SCALE = 0.25

BLOCK = 16384
TRAIN_STREAM, TEST_STREAM, CALIBRATION_STREAM = 0, 1, 2
CALIBRATION_SAMPLES = 4 * BLOCK
FEISTEL_ROUNDS = 4  # even: the halves end where they started

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
# Tags of the hashed quantities, so that each draws from a stream of its own.
_TAG_PERMUTATION, _TAG_WEIGHT, _TAG_LATENT = 1, 2, 3


def cardinalities(scale=1.0):
    """Criteo's 26 cardinalities times scale, rounded half up, at least 1."""
    return [max(1, int(math.floor(c * scale + 0.5))) for c in CRITEO_CARDINALITIES]


# --- hashing ---------------------------------------------------------------

def _mix_int(x):
    """splitmix64's output function on a Python int: a bijection of 64-bit
    words with full avalanche."""
    z = (x + _GOLDEN) & _M64
    z = ((z ^ (z >> 30)) * _MUL1) & _M64
    z = ((z ^ (z >> 27)) * _MUL2) & _M64
    return z ^ (z >> 31)


def _key(seed, *parts):
    """A 64-bit key from the seed and small integers (tag, field, ...)."""
    h = _mix_int(seed)
    for p in parts:
        h = _mix_int(h ^ p)
    return h


_U_GOLDEN, _U_MUL1, _U_MUL2 = np.uint64(_GOLDEN), np.uint64(_MUL1), np.uint64(_MUL2)
_U30, _U27, _U31, _U32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)
_U_LOW32 = np.uint64(0xFFFFFFFF)


def _mix(x):
    """_mix_int on a uint64 array (numpy's array arithmetic wraps mod 2^64)."""
    z = x + _U_GOLDEN
    z = (z ^ (z >> _U30)) * _U_MUL1
    z = (z ^ (z >> _U27)) * _U_MUL2
    return z ^ (z >> _U31)


def _normals(h):
    """Two independent N(0, 1) arrays from 64-bit hashes (Box-Muller on the
    high and low 32 bits)."""
    u1 = ((h >> _U32).astype(np.float64) + 0.5) * 2.0 ** -32
    u2 = (h & _U_LOW32).astype(np.float64) * (2.0 * math.pi * 2.0 ** -32)
    r = np.sqrt(-2.0 * np.log(u1))
    return r * np.cos(u2), r * np.sin(u2)


# --- Zipf over [0, n): rejection-inversion ---------------------------------
#
# With h(x) = x^-a and H its antiderivative, H(x) = (x^(1-a) - 1) / (1-a)
# (log x at a = 1), a uniform u on (H(1.5) - 1, H(n + 0.5)] maps to
# x = H^-1(u), k = round(x), accepted when k - x <= s or u >= H(k + 0.5) -
# h(k). Accepted k in 1..n have P(k) proportional to k^-a exactly.
# helper1(t) = log1p(t)/t and helper2(t) = expm1(t)/t keep H and H^-1
# accurate near a = 1.

def _helper1(t):
    small = np.abs(t) < 1e-8
    ts = np.where(small, 1.0, t)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(small, 1.0 - t * (0.5 - t * (1.0 / 3.0 - 0.25 * t)), np.log1p(ts) / ts)


def _helper2(t):
    small = np.abs(t) < 1e-8
    ts = np.where(small, 1.0, t)
    return np.where(small, 1.0 + 0.5 * t * (1.0 + t / 3.0 * (1.0 + 0.25 * t)), np.expm1(ts) / ts)


def _h_integral(x, a):
    lx = np.log(x)
    return _helper2((1.0 - a) * lx) * lx


def _h(x, a):
    return np.exp(-a * np.log(x))


def _h_integral_inverse(x, a):
    t = np.maximum(x * (1.0 - a), -1.0)  # below -1 only by rounding
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(_helper1(t) * x)


class _ZipfConstants:
    def __init__(self, n, a):
        n = np.asarray(n, np.float64)
        self.n, self.a = n, float(a)
        self.h_x1 = float(_h_integral(1.5, a)) - 1.0
        self.h_n = _h_integral(n + 0.5, a)
        self.s = 2.0 - float(_h_integral_inverse(_h_integral(2.5, a) - _h(2.0, a), a))


def _zipf_accept(c, n, h_n, u01):
    """One rejection-inversion try per element: (rank k in 1..n, accepted)."""
    u = h_n + u01 * (c.h_x1 - h_n)
    x = _h_integral_inverse(u, c.a)
    k = np.floor(np.nan_to_num(x, nan=1.0, posinf=np.inf) + 0.5)
    k = np.minimum(np.maximum(k, 1.0), n)
    with np.errstate(invalid="ignore"):
        ok = (k - x <= c.s) | (u >= _h_integral(k + 0.5, c.a) - _h(k, c.a))
    return k, ok


def _zipf_draw(rng, c, shape):
    """Ranks in [0, n) of shape `shape` (last axis: the fields of c.n)."""
    n = np.broadcast_to(c.n, shape)
    h_n = np.broadcast_to(c.h_n, shape)
    k, ok = _zipf_accept(c, n, h_n, rng.random(shape))
    redo = np.flatnonzero(~ok.ravel())
    kf = k.ravel()
    nf, hf = n.ravel(), h_n.ravel()
    while redo.size:
        k2, ok2 = _zipf_accept(c, nf[redo], hf[redo], rng.random(redo.size))
        kf[redo] = k2
        redo = redo[~ok2]
    return kf.reshape(shape).astype(np.int64) - 1


def zipf_ranks(rng, n, a, size):
    """`size` ranks in [0, n), P(k) proportional to (k + 1)^-a, a > 0: the
    sampler the fields use, for one support (rng: a numpy Generator)."""
    return _zipf_draw(rng, _ZipfConstants(np.array([n]), a), (size, 1))[:, 0]


def zipf_pmf(n, a):
    """The exact probabilities zipf_ranks draws from."""
    w = np.arange(1, n + 1, dtype=np.float64) ** -a
    return w / w.sum()


# --- the model --------------------------------------------------------------

def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class Model:
    """The data's distribution: cardinalities, the rank-to-id bijections,
    the dense features' law and the planted click model. bias=None solves
    the bias for `ctr` on the calibration stream."""

    def __init__(self, seed=1, scale=1.0, zipf=1.05, ctr=0.256, global_ids=False, bias=None):
        check_params(seed=seed, scale=scale, zipf=zipf, ctr=ctr)
        self.seed, self.scale = int(seed), float(scale)
        self.zipf, self.ctr = float(zipf), float(ctr)
        self.global_ids = bool(global_ids)
        self.cards = np.array(cardinalities(scale), np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.cards)[:-1]]).astype(np.int64)
        self._zipf = _ZipfConstants(self.cards, self.zipf)
        self._n_u64 = self.cards.astype(np.uint64)

        bits = np.array([max(1, int(c - 1).bit_length()) for c in self.cards])
        self._wl = (bits // 2).astype(np.uint64)
        self._wr = (bits - bits // 2).astype(np.uint64)
        self._perm_keys = np.array([[_key(self.seed, _TAG_PERMUTATION, f, r)
                                     for f in range(NUM_SPARSE)]
                                    for r in range(FEISTEL_ROUNDS)], np.uint64)
        self._weight_keys = np.array([_key(self.seed, _TAG_WEIGHT, f) for f in range(NUM_SPARSE)],
                                     np.uint64)
        self._latent_keys = np.array([[_key(self.seed, _TAG_LATENT, f, j)
                                       for j in range((INTERACTION_RANK + 1) // 2)]
                                      for f in INTERACTION_FIELDS], np.uint64)
        self._sigma = np.array(FIELD_SIGMA)
        self._mu = np.log(np.array(DENSE_MEDIAN, np.float64) + 0.5)
        self._spread = np.array(DENSE_SPREAD)
        self._missing = np.array(DENSE_MISSING)
        self._beta = np.array(DENSE_COEF) / self._spread
        self.bias = self._solve_bias() if bias is None else float(bias)

    def params(self):
        """The planted model, for meta.json."""
        return {"bias": self.bias,
                "field_sigma": list(FIELD_SIGMA),
                "dense_beta": [float(b) for b in self._beta],
                "dense_median": list(DENSE_MEDIAN),
                "dense_spread": list(DENSE_SPREAD),
                "dense_missing": list(DENSE_MISSING),
                "interaction_fields": ["C%d" % (f + 1) for f in INTERACTION_FIELDS],
                "interaction_rank": INTERACTION_RANK,
                "interaction_scale": INTERACTION_SCALE}

    def ids(self, ranks):
        """Per-field ids of ranks [B, 26]: the seed's bijection of each
        field's [0, n_f), a Feistel network over [0, 2^bits) cycle-walked
        until the value falls back into [0, n_f)."""
        y = _feistel(ranks.astype(np.uint64), self._wl, self._wr, self._perm_keys)
        rows, cols = np.nonzero(y >= self._n_u64)
        while rows.size:
            z = _feistel(y[rows, cols], self._wl[cols], self._wr[cols], self._perm_keys[:, cols])
            y[rows, cols] = z
            keep = z >= self._n_u64[cols]
            rows, cols = rows[keep], cols[keep]
        return y.astype(np.int64)

    def logit(self, dense, ids):
        """The logit without the bias: dense [B, 13] float, ids [B, 26]
        per-field ids."""
        u = ids.astype(np.uint64)
        z = (self._sigma * _normals(_mix(u ^ self._weight_keys))[0]).sum(axis=1)
        z += np.log1p(dense) @ self._beta
        vectors = []
        for j, f in enumerate(INTERACTION_FIELDS):
            parts = []
            for key in self._latent_keys[j]:
                parts.extend(_normals(_mix(u[:, f] ^ key)))
            vectors.append(np.stack(parts[:INTERACTION_RANK], axis=1))
        inter = np.zeros(len(z))
        for i in range(len(vectors)):
            for j in range(i + 1, len(vectors)):
                inter += np.einsum("ij,ij->i", vectors[i], vectors[j])
        return z + INTERACTION_SCALE / math.sqrt(INTERACTION_RANK) * inter

    def block(self, stream, index):
        """Block `index` of a stream: (dense, per-field ids, logit without
        the bias, the uniforms the labels are drawn with), BLOCK rows."""
        seeds = np.random.SeedSequence([self.seed, stream, index])
        rng = np.random.Generator(np.random.PCG64(seeds))
        normal = rng.standard_normal((BLOCK, NUM_DENSE))
        missing = rng.random((BLOCK, NUM_DENSE)) < self._missing
        ranks = _zipf_draw(rng, self._zipf, (BLOCK, NUM_SPARSE))
        u = rng.random(BLOCK)
        dense = np.minimum(np.floor(np.exp(self._mu + self._spread * normal)), DENSE_MAX)
        dense[missing] = 0.0
        ids = self.ids(ranks)
        return dense, ids, self.logit(dense, ids), u

    def chunks(self, n, stream):
        """The first n samples of a stream as dicts of arrays (dense,
        sparse, label, p), a block at a time."""
        if n < 0:
            raise ValueError("n must be >= 0, not %d" % n)
        for index in range((n + BLOCK - 1) // BLOCK):
            dense, ids, z, u = self.block(stream, index)
            rows = min(BLOCK, n - index * BLOCK)
            p = _sigmoid(self.bias + z[:rows])
            sparse = ids[:rows] + self.offsets if self.global_ids else ids[:rows]
            yield {"dense": dense[:rows].astype(np.float32),
                   "sparse": np.ascontiguousarray(sparse, np.int64),
                   "label": (u[:rows] < p).astype(np.float32),
                   "p": p.astype(np.float32)}

    def _solve_bias(self):
        z = np.concatenate([self.block(CALIBRATION_STREAM, i)[2]
                            for i in range(CALIBRATION_SAMPLES // BLOCK)])
        lo, hi = -60.0, 60.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi):
                break
            if _sigmoid(mid + z).mean() < self.ctr:
                lo = mid
            else:
                hi = mid
        return 0.5 * (lo + hi)


def _feistel(x, wl, wr, keys):
    """A bijection of [0, 2^(wl + wr)) (per element widths): rounds of
    (hi, lo) -> (lo, hi ^ F(lo)), the halves' widths swapping each round."""
    one = np.uint64(1)
    for r in range(FEISTEL_ROUNDS):
        hi = x >> wr
        lo = x & ((one << wr) - one)
        x = (lo << wl) | (hi ^ (_mix(lo ^ keys[r]) & ((one << wl) - one)))
        wl, wr = wr, wl
    return x


def check_params(seed=1, scale=1.0, zipf=1.05, ctr=0.256):
    """Raises ValueError naming the first bad value."""
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 1 << 63:
        raise ValueError("--seed must be an integer in [0, 2^63), not %r" % (seed,))
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError("--scale must be a finite number > 0, not %r" % (scale,))
    if max(cardinalities(scale)) > MAX_CARDINALITY:
        raise ValueError("--scale %r makes a field of %d ids; at most 2^48 are supported"
                         % (scale, max(cardinalities(scale))))
    if not (math.isfinite(zipf) and zipf > 0):
        raise ValueError("--zipf must be a finite exponent > 0 (1.0 and below are fine over a "
                         "finite support), not %r" % (zipf,))
    if not (math.isfinite(ctr) and 0 < ctr < 1):
        raise ValueError("--ctr must be a click rate strictly between 0 and 1, not %r" % (ctr,))


def generate(n, seed=1, stream=TRAIN_STREAM, scale=1.0, zipf=1.05, ctr=0.256, global_ids=False,
             model=None):
    """The first n samples of a stream (TRAIN_STREAM, TEST_STREAM, or any
    other integer >= 0) as {"dense", "sparse", "label", "p"}; `model`
    (a Model) saves solving the bias again, and then its parameters are
    used instead of the others."""
    if model is None:
        model = Model(seed, scale, zipf, ctr, global_ids)
    parts = list(model.chunks(n, stream))
    if not parts:
        return {"dense": np.zeros((0, NUM_DENSE), np.float32),
                "sparse": np.zeros((0, NUM_SPARSE), np.int64),
                "label": np.zeros(0, np.float32), "p": np.zeros(0, np.float32)}
    return {k: np.concatenate([c[k] for c in parts]) for k in parts[0]}


def auc(labels, scores):
    """The area under the ROC curve of scores against 0/1 labels, by the
    rank-sum (Mann-Whitney) formula, tied scores given their mean rank.
    ValueError when a class is absent or a score is NaN."""
    labels = np.asarray(labels).ravel()
    scores = np.asarray(scores, np.float64).ravel()
    if labels.shape != scores.shape:
        raise ValueError("labels has %d values and scores %d" % (labels.size, scores.size))
    if np.isnan(scores).any():
        raise ValueError("a score is NaN")
    positive = labels > 0.5
    n_pos = int(positive.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("AUC needs both classes (%d positives, %d negatives)" % (n_pos, n_neg))
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    ends = np.append(starts[1:], s.size)
    ranks = np.empty(s.size)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


# --- output -----------------------------------------------------------------

_ARRAYS = (("dense", "<f4", (NUM_DENSE,)), ("sparse", "<i8", (NUM_SPARSE,)),
           ("label", "<f4", ()), ("p", "<f4", ()))


def write_split(model, n, stream, path, keep=False):
    """Writes the first n samples of a stream to the .npz `path`, a block
    at a time: each array to a .npy file of its own beside `path`, then the
    four into an uncompressed zip with fixed timestamps (numpy.savez stamps
    the current time, which would make reruns differ). Returns (clicks,
    sum of p) and, with keep, the labels and p."""
    directory = os.path.dirname(os.path.abspath(path))
    temps, files = [], []
    clicks, p_sum, kept = 0, 0.0, []
    try:
        for name, dtype, tail in _ARRAYS:
            fd, temp = tempfile.mkstemp(prefix=".%s." % name, suffix=".tmp.npy", dir=directory)
            temps.append(temp)
            f = os.fdopen(fd, "wb")
            files.append(f)
            np.lib.format.write_array_header_1_0(f, {
                "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                "fortran_order": False, "shape": (n,) + tail})
        for chunk in model.chunks(n, stream):
            for f, (name, dtype, _) in zip(files, _ARRAYS):
                f.write(np.ascontiguousarray(chunk[name], dtype).tobytes())
            clicks += int(chunk["label"].sum())
            p_sum += float(chunk["p"].astype(np.float64).sum())
            if keep:
                kept.append((chunk["label"], chunk["p"]))
        for f in files:
            f.close()
        fd, temp = tempfile.mkstemp(prefix=".npz.", suffix=".tmp.npz", dir=directory)
        os.close(fd)
        temps.append(temp)
        with zipfile.ZipFile(temp, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for (name, _, _), source in zip(_ARRAYS, temps):
                info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_STORED
                info.external_attr = 0o644 << 16
                with open(source, "rb") as src, z.open(info, "w", force_zip64=True) as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
        temps.pop()
    finally:
        for f in files:
            f.close()
        for temp in temps:
            if os.path.exists(temp):
                os.remove(temp)
    if keep:
        labels = np.concatenate([k[0] for k in kept]) if kept else np.zeros(0, np.float32)
        p = np.concatenate([k[1] for k in kept]) if kept else np.zeros(0, np.float32)
        return clicks, p_sum, labels, p
    return clicks, p_sum


def write(out, train, test, seed=1, scale=1.0, zipf=1.05, ctr=0.256, global_ids=False):
    """Writes out/train.npz, out/test.npz and out/meta.json; returns meta."""
    model = Model(seed, scale, zipf, ctr, global_ids)
    train_clicks, train_p = write_split(model, train, TRAIN_STREAM, os.path.join(out, "train.npz"))
    test_clicks, test_p, labels, p = write_split(model, test, TEST_STREAM,
                                                 os.path.join(out, "test.npz"), keep=True)
    try:
        bayes = auc(labels, p)
    except ValueError:
        bayes = None  # no test samples, or one class only
    meta = {
        "source": "tools/criteo_synth.py: synthetic, Criteo Kaggle-shaped; labels from a planted "
                  "model (see the tool's docstring)",
        "arrays": {"dense": "float32 [N, 13] I1..I13", "sparse": "int64 [N, 26] C1..C26",
                   "label": "float32 [N] 0/1", "p": "float32 [N] true click probability"},
        "seed": model.seed, "scale": model.scale, "zipf": model.zipf, "ctr": model.ctr,
        "global_ids": model.global_ids,
        "cardinalities": [int(c) for c in model.cards],
        "id_offsets": [int(o) for o in model.offsets] if model.global_ids else None,
        "criteo_cardinalities": list(CRITEO_CARDINALITIES),
        "zipf_sampler": "rejection-inversion (Hoermann & Derflinger 1996), exact over [0, n)",
        "id_bijection": "4-round unbalanced Feistel over [0, 2^bits), cycle-walked into [0, n)",
        "train_samples": train, "test_samples": test,
        "train_click_rate": train_clicks / train if train else None,
        "test_click_rate": test_clicks / test if test else None,
        "train_mean_p": train_p / train if train else None,
        "test_mean_p": test_p / test if test else None,
        "bayes_auc_test": bayes,
        "model": model.params(),
    }
    temp = os.path.join(out, ".meta.json.tmp")
    with open(temp, "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(temp, os.path.join(out, "meta.json"))
    return meta


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Writes synthetic Criteo-shaped click data (13 dense counts, 26 Zipf-"
                    "distributed categorical fields, labels from a planted model with known "
                    "Bayes-optimal AUC) to DIR/train.npz, DIR/test.npz and DIR/meta.json. "
                    "Deterministic: the same flags give byte-identical files.")
    parser.add_argument("--out", metavar="DIR", required=True,
                        help="directory to write train.npz, test.npz and meta.json into "
                             "(made if missing)")
    parser.add_argument("--train", metavar="N", type=int, default=1000000,
                        help="training samples, >= 0 (default: %(default)s)")
    parser.add_argument("--test", metavar="N", type=int, default=100000,
                        help="test samples, >= 0, drawn from the same distribution as train "
                             "with a different random stream (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1,
                        help="integer in [0, 2^63): picks the id bijections, the planted "
                             "weights and the samples (default: %(default)s)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiplies each of Criteo's 26 cardinalities (rounded, at least "
                             "1), > 0; e.g. 0.001 for small tables (default: %(default)s)")
    parser.add_argument("--zipf", type=float, default=1.05,
                        help="Zipf exponent a of every field: P(rank k) ~ (k+1)^-a over the "
                             "field's [0, cardinality); any a > 0, 1 and below included "
                             "(default: %(default)s)")
    parser.add_argument("--ctr", type=float, default=0.256,
                        help="target click rate in (0, 1), met by solving the planted model's "
                             "bias; Criteo's is about 0.256 (default: %(default)s)")
    parser.add_argument("--global_ids", action="store_true",
                        help="make ids unique across fields: field f's ids are offset by the "
                             "sum of the cardinalities of the fields before it (default: "
                             "per-field ids in [0, cardinality))")
    args = parser.parse_args(argv)
    if args.train < 0:
        parser.error("--train must be >= 0, not %d" % args.train)
    if args.test < 0:
        parser.error("--test must be >= 0, not %d" % args.test)
    try:
        check_params(seed=args.seed, scale=args.scale, zipf=args.zipf, ctr=args.ctr)
    except ValueError as e:
        parser.error(str(e))
    try:
        os.makedirs(args.out, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe.", suffix=".tmp", dir=args.out)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        parser.error("--out %s is not a writable directory: %s" % (args.out, e.strerror or e))

    start = time.monotonic()
    try:
        meta = write(args.out, args.train, args.test, seed=args.seed, scale=args.scale,
                     zipf=args.zipf, ctr=args.ctr, global_ids=args.global_ids)
    except OSError as e:
        print("%s: error: writing %s: %s" % (parser.prog, args.out, e), file=sys.stderr)
        return 1
    seconds = time.monotonic() - start

    def fmt(x, spec):
        return "n/a" if x is None else format(x, spec)

    print("cardinalities: %s" % meta["cardinalities"])
    print("train: %d samples, click rate %s; test: %d samples, click rate %s (target %g)"
          % (args.train, fmt(meta["train_click_rate"], ".4f"), args.test,
             fmt(meta["test_click_rate"], ".4f"), args.ctr))
    print("Bayes-optimal AUC on test (AUC of p): %s" % fmt(meta["bayes_auc_test"], ".4f"))
    print("wrote %s/{train.npz,test.npz,meta.json} in %.1f s" % (args.out, seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
