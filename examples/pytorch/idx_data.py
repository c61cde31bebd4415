"""MNIST-format data (the four IDX files, raw or gzipped) as float tensors,
normalised as torchvision's ToTensor and Normalize do, and the test-set
pass over them. Plain PyTorch and numpy: the examples need no
torchvision."""

import gzip
import os

import numpy
import torch
import torch.nn.functional as F

# (mean, std) of the training images.
NORMALIZATION = {"mnist": (0.1307, 0.3081), "fashion_mnist": (0.2860, 0.3530)}


def _read(path):
    for candidate in (path, path + ".gz"):
        if os.path.exists(candidate):
            opener = gzip.open if candidate.endswith(".gz") else open
            with opener(candidate, "rb") as f:
                return f.read()
    raise FileNotFoundError("%s (or .gz): not found" % path)


def _idx(path):
    raw = _read(path)
    dims = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims))
    return numpy.frombuffer(raw, dtype=numpy.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split, dataset="mnist"):
    """(images [N, 1, 28, 28] float32, labels [N] int64) of split "train"
    or "t10k"."""
    images = _idx(os.path.join(data_dir, split + "-images-idx3-ubyte"))
    labels = _idx(os.path.join(data_dir, split + "-labels-idx1-ubyte"))
    mean, std = NORMALIZATION[dataset]
    x = (torch.from_numpy(images.astype(numpy.float32)) / 255.0 - mean) / std
    return x.unsqueeze(1).contiguous(), torch.from_numpy(labels.astype(numpy.int64))


def evaluate(model, x, y):
    """(accuracy, mean NLL loss) of `model` (log-probabilities out) on
    (x, y), in batches of 1000, in eval mode (the caller puts it back in
    train mode)."""
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for xb, yb in zip(x.split(1000), y.split(1000)):
            output = model(xb)
            loss += F.nll_loss(output, yb, reduction="sum").item()
            correct += (output.argmax(dim=1) == yb).sum().item()
    return correct / len(y), loss / len(y)
