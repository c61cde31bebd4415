"""One tensor of 8.5M floats (34 MB, over the 32 MiB from which a
plaintext connection carries a payload in pieces: transport/pieces.h)
whose forward is one dot product with a fixed input per step, SGD with
momentum, --steps steps: through pstrain.torch (its final parameters are
the job's final_params.f32), or with --single in one process with
torch.optim, writing them to --out."""

import argparse

import torch

FLOATS = 8_500_000


class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(FLOATS) * 0.01)

    def forward(self, x):
        return torch.dot(self.weight, x)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--single", action="store_true")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--out", default="")
    args = p.parse_args()
    torch.manual_seed(3)
    model = Wide()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if not args.single:
        import pstrain.torch as pst  # pylint: disable=import-outside-toplevel
        pst.init()
        opt = pst.DistributedOptimizer(model, opt)
    inputs = torch.Generator().manual_seed(7)
    for _ in range(args.steps):
        x = torch.randn(FLOATS, generator=inputs)
        opt.zero_grad()
        loss = model(x)
        loss.backward()
        opt.step()
    if args.single:
        model.weight.detach().numpy().tofile(args.out)
    else:
        opt.finish()


if __name__ == "__main__":
    main()
