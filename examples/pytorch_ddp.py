#!/usr/bin/env python3
"""A PyTorch DDP training script (CPU, gloo) for gotune, on the digits data.

An MLP, Linear(64, hidden) -> ReLU -> Linear(hidden, 10), trained with SGD
and DistributedDataParallel on the 8x8 digits (examples/data/digits.csv),
split 80/20 by examples/data/digits_split.csv. --batch-size is per worker.

It reads its rank from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), which gotune sets too, and reports through python/gotune.py:
after every epoch rank 0 saves a checkpoint and reports

    @gotune {"epoch": E, "loss": ..., "val_acc": ..., "checkpoint": ...}

When gotune restarts the group (a failed worker, a resize, a paused trial
resumed), every rank loads the checkpoint of gotune.resume_dir() and goes on
from the next epoch. Under gotune (examples/pytorch_ddp.toml):

    gotune run examples/pytorch_ddp.toml

and unchanged under torchrun (Debian's torch 1.13 on Python 3.11 needs the
--redirects and --tee options there):

    python3 -m torch.distributed.run --nproc_per_node=2 --master_addr=127.0.0.1 \\
        --master_port=29512 --redirects 9:0 --tee 9:0 examples/pytorch_ddp.py --epochs 5

Outside gotune, --checkpoint-dir DIR keeps DIR/ckpt.pt up to date and
resumes from it.
"""
import argparse
import csv
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import gotune  # noqa: E402


def load_digits(data_path, split_path):
    """Train and validation tensors: features scaled to [0, 1], labels."""
    with open(split_path, newline="") as f:
        split = {int(row["row"]): row["split"] for row in csv.DictReader(f)}
    xs = {"train": [], "val": []}
    ys = {"train": [], "val": []}
    with open(data_path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        label = header.index("label")
        for i, row in enumerate(reader):
            part = split[i]
            ys[part].append(int(row[label]))
            xs[part].append([float(v) / 16.0 for j, v in enumerate(row) if j != label])
    return (torch.tensor(xs["train"]), torch.tensor(ys["train"]),
            torch.tensor(xs["val"]), torch.tensor(ys["val"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--batch-size", type=int, default=64, help="per worker")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--data", default=os.path.join(HERE, "data", "digits.csv"))
    ap.add_argument("--split", default=os.path.join(HERE, "data", "digits_split.csv"))
    ap.add_argument("--checkpoint-dir", default=None, help="outside gotune: keep and resume from DIR/ckpt.pt")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    world, rank = gotune.world_size(), gotune.world_rank()
    distributed = world > 1
    if distributed:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)

    torch.manual_seed(args.seed)
    xtr, ytr, xva, yva = load_digits(args.data, args.split)
    train = TensorDataset(xtr, ytr)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    resume = gotune.resume_dir()
    if resume is None and args.checkpoint_dir and os.path.exists(os.path.join(args.checkpoint_dir, "ckpt.pt")):
        resume = args.checkpoint_dir
    start = 1
    if resume:
        ck = torch.load(os.path.join(resume, "ckpt.pt"), map_location="cpu")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        start = ck["epoch"] + 1
    net = DDP(model) if distributed else model
    if rank == 0:
        print("world %d, epochs %d to %d, resumed from %s" % (world, start, args.epochs, resume), flush=True)

    for epoch in range(start, args.epochs + 1):
        sampler.set_epoch(epoch)
        net.train()
        t0 = time.perf_counter()
        stats = torch.zeros(2, dtype=torch.float64)  # loss sum, samples
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(xb), yb)
            loss.backward()
            opt.step()
            stats += torch.tensor([loss.item() * len(yb), len(yb)], dtype=torch.float64)
        if distributed:
            dist.all_reduce(stats)
        seconds = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            val_acc = (model(xva).argmax(1) == yva).float().mean().item()

        if rank == 0:
            ckpt = None
            if gotune.active():
                ckpt = gotune.checkpoint_dir()
            elif args.checkpoint_dir:
                ckpt = args.checkpoint_dir
                os.makedirs(ckpt, exist_ok=True)
            if ckpt:
                state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}
                torch.save(state, os.path.join(ckpt, "ckpt.pt.tmp"))
                os.replace(os.path.join(ckpt, "ckpt.pt.tmp"), os.path.join(ckpt, "ckpt.pt"))
            gotune.report(epoch=epoch, loss=stats[0].item() / stats[1].item(), val_acc=val_acc,
                          samples_per_s=stats[1].item() / seconds,
                          checkpoint=ckpt if gotune.active() else None)
        if distributed:
            dist.barrier()  # the checkpoint is written before anyone moves on

    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
