"""The seed's CNN in PyTorch: pstrain's mnist_cnn (models/net_spec.cc),
layer for layer and parameter for parameter in its order. The one
definition the examples, the benchmarks against PyTorch and the tests of
pstrain.torch import."""

import torch.nn as nn
import torch.nn.functional as F


class MnistCnn(nn.Module):
    """conv 1->10 5x5, max-pool 2, relu; conv 10->20 5x5, dropout2d,
    max-pool 2, relu; flatten 320; linear 320->fc1_out, relu, dropout;
    linear fc1_out->10; log_softmax. Dropout p=0.5, both off with
    dropout=False (two processes then compute the same); fc1_out=50 is the
    seed's."""

    def __init__(self, dropout=True, fc1_out=50):
        super().__init__()
        self.dropout = dropout
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, fc1_out)
        self.fc2 = nn.Linear(fc1_out, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = self.conv2(x)
        if self.dropout:
            x = F.dropout2d(x, p=0.5, training=self.training)
        x = F.relu(F.max_pool2d(x, 2)).view(-1, 320)
        x = F.relu(self.fc1(x))
        if self.dropout:
            x = F.dropout(x, p=0.5, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)
