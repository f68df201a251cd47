"""A command worker written with python/gotune.py, for the trainer's tests.

Every rank hands over a shard of each checkpoint; rank 1 crashes once at
step 2 (a marker file in config()["dir"] remembers). Rank 0 reports x times
the step, and what it found in the checkpoint it resumed from. The ranks
meet at a barrier before each step, as DDP ranks do in their collectives,
and the other ranks hand over their shards before rank 0 reports, as the
command-worker protocol asks of ranks that contribute shards.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import gotune  # noqa: E402

cfg = gotune.config()
rank, size = gotune.world_rank(), gotune.world_size()
start, shards = 0, 0
if gotune.resume_dir():
    files = sorted(os.listdir(gotune.resume_dir()))
    shards = len(files)
    with open(os.path.join(gotune.resume_dir(), "shard_%d" % rank)) as f:
        start = int(f.read())
print("rank %d of %d starts after step %d" % (rank, size, start))


def barrier(name):
    # MASTER_PORT tells this group from the one before a restart.
    prefix = os.path.join(cfg["dir"], "%s-%s-" % (os.environ["MASTER_PORT"], name))
    open(prefix + str(rank), "w").close()
    while not all(os.path.exists(prefix + str(r)) for r in range(size)):
        time.sleep(0.002)


for step in range(start + 1, cfg["steps"] + 1):
    barrier(str(step))
    marker = os.path.join(cfg["dir"], "crashed")
    if rank == 1 and step == 2 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(9)
    ckpt = gotune.checkpoint_dir()
    with open(os.path.join(ckpt, "shard_%d" % rank), "w") as f:
        f.write(str(step))
    def report():
        gotune.report(step=step, value=cfg["x"] * step, rank=rank, size=size, shards=shards,
                      trial=gotune.trial_id(), checkpoint=ckpt)
    if rank != 0:
        report()
    barrier("%d-handed-over" % step)
    if rank == 0:
        report()
