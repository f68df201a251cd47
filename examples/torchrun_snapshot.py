#!/usr/bin/env python3
"""A torchrun script that keeps its own snapshot, as PyTorch's DDP tutorial does.

It knows nothing of gotune beyond printing its metrics through
python/gotune.py: it reads torchrun's variables (LOCAL_RANK, RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT), joins the group with the gloo backend
(CPU), and after every epoch rank 0 saves snapshot.pt in the folder it runs
in. When it starts and finds snapshot.pt there, it resumes after the epoch
the snapshot holds. It trains an MLP on the 8x8 digits
(examples/data/digits.csv, split by examples/data/digits_split.csv).

Under torchrun:

    python3 -m torch.distributed.run --nproc_per_node=2 --redirects 9:0 --tee 9:0 \\
        examples/torchrun_snapshot.py --epochs 5

Under gotune, unchanged (examples/torchrun_snapshot.toml): workdir =
"{trial_dir}" runs every trial in its own folder, so each keeps its own
snapshot.pt, and a worker that fails restarts the group, which resumes from
it. The reports carry the epoch, the scheduler's time_attr, so gotune
records every epoch once across restarts.
"""
import argparse
import os
import sys

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
from pytorch_ddp import load_digits  # noqa: E402


class Trainer:
    """Trains a DDP model, snapshotting every epoch on rank 0."""

    def __init__(self, model, optimizer, loader, val, snapshot_path):
        self.rank = int(os.environ["RANK"])
        self.model, self.optimizer, self.loader, self.val = model, optimizer, loader, val
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            snapshot = torch.load(snapshot_path, map_location="cpu")
            self.model.load_state_dict(snapshot["MODEL_STATE"])
            self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
            self.epochs_run = snapshot["EPOCHS_RUN"]
        self.ddp = DDP(self.model)

    def _save_snapshot(self, epochs_run):
        snapshot = {"MODEL_STATE": self.model.state_dict(), "OPTIMIZER_STATE": self.optimizer.state_dict(),
                    "EPOCHS_RUN": epochs_run}
        torch.save(snapshot, self.snapshot_path + ".tmp")
        os.replace(self.snapshot_path + ".tmp", self.snapshot_path)

    def train(self, max_epochs):
        if self.rank == 0:
            print("torchelastic launched: %s, restart %s, resuming after epoch %d of %d, snapshot %s" % (
                dist.is_torchelastic_launched(), os.environ.get("TORCHELASTIC_RESTART_COUNT"),
                self.epochs_run, max_epochs, os.path.abspath(self.snapshot_path)), flush=True)
        for epoch in range(self.epochs_run, max_epochs):
            self.loader.sampler.set_epoch(epoch)
            self.ddp.train()
            stats = torch.zeros(2, dtype=torch.float64)  # loss sum, samples
            for xb, yb in self.loader:
                self.optimizer.zero_grad(set_to_none=True)
                loss = F.cross_entropy(self.ddp(xb), yb)
                loss.backward()
                self.optimizer.step()
                stats += torch.tensor([loss.item() * len(yb), len(yb)], dtype=torch.float64)
            dist.all_reduce(stats)
            if self.rank == 0:
                xva, yva = self.val
                self.model.eval()
                with torch.no_grad():
                    val_acc = (self.model(xva).argmax(1) == yva).float().mean().item()
                self._save_snapshot(epoch + 1)
                gotune.report(epoch=epoch + 1, loss=stats[0].item() / stats[1].item(), val_acc=val_acc)
            dist.barrier()  # the snapshot is written before anyone moves on


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch-size", type=int, default=64, help="per worker")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--snapshot", default="snapshot.pt")
    ap.add_argument("--data", default=os.path.join(HERE, "data", "digits.csv"))
    ap.add_argument("--split", default=os.path.join(HERE, "data", "digits_split.csv"))
    args = ap.parse_args()

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    xtr, ytr, xva, yva = load_digits(args.data, args.split)
    train = TensorDataset(xtr, ytr)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=DistributedSampler(train, shuffle=True, seed=0))
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    Trainer(model, optimizer, loader, (xva, yva), args.snapshot).train(args.epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
