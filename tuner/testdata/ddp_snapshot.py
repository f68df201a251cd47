"""A stand-in for pytorch/examples' DDP tutorial (multigpu_torchrun.py)
without torch: it keeps its own snapshot, the epochs it has run, after
every epoch, resumes from it when it starts, and reports each epoch's loss
with its epoch number. On its first start (TORCHELASTIC_RESTART_COUNT 0)
it is killed in the middle of epoch --kill-at, as a preempted node is.

With --report-time-attr it also reports the epoch under the scheduler's
time_attr, "epoch_done".
"""
import argparse
import json
import os
import signal

parser = argparse.ArgumentParser()
parser.add_argument("--snapshot", required=True)
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--kill-at", type=int, default=4)
parser.add_argument("--report-time-attr", action="store_true")
args = parser.parse_args()

epochs_run = 0
if os.path.exists(args.snapshot):
    with open(args.snapshot) as f:
        epochs_run = json.load(f)["EPOCHS_RUN"]

for epoch in range(epochs_run, args.epochs):
    if epoch == args.kill_at and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        os.kill(os.getpid(), signal.SIGKILL)
    report = {"epoch": epoch, "loss": 1.0 / (epoch + 1)}
    if args.report_time_attr:
        report["epoch_done"] = epoch + 1
    print("@gotune " + json.dumps(report), flush=True)
    with open(args.snapshot + ".tmp", "w") as f:
        json.dump({"EPOCHS_RUN": epoch + 1}, f)
    os.replace(args.snapshot + ".tmp", args.snapshot)
