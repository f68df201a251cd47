"""Report to gotune from a training script. Standard library only.

gotune runs a command worker with its place in the training group and the
trial's hyperparameters in the environment, and reads its reports from
stdout, one line each::

    @gotune {"epoch": 3, "val_loss": 0.41, "checkpoint": "/path/to/dir"}

This module reads the one and writes the other::

    import gotune

    cfg = gotune.config()                      # the trial's hyperparameters
    start = 1
    if gotune.resume_dir():                    # a restart, resize or resume
        start = load(os.path.join(gotune.resume_dir(), "model.pt")) + 1
    for epoch in range(start, cfg["epochs"] + 1):
        loss = train_one_epoch()
        ckpt = None
        if gotune.world_rank() == 0:
            ckpt = gotune.checkpoint_dir()     # a fresh folder
            save(os.path.join(ckpt, "model.pt"), epoch)
            gotune.report(epoch=epoch, loss=loss, checkpoint=ckpt)

A checkpoint must be a folder inside the worker's own GOTUNE_CHECKPOINT_DIR
(checkpoint_dir() makes one there), once symbolic links and ".." are
resolved, and not that folder itself: gotune moves it into the trial's
committed checkpoint. Any other folder is refused and left untouched; the
trial gets a "checkpoint_refused" event saying why, and the report's
metrics are recorded without a checkpoint.

Rank 0's reports are the trial's. Other ranks may call report too: their
metrics are ignored, but a checkpoint folder they hand over is merged with
rank 0's checkpoint of the same round (each rank's j-th checkpoint belongs
with rank 0's j-th), so sharded checkpoints work; a rank that hands over a
checkpoint once must do so every time, in step with rank 0 (its shard of a
round before rank 0's report of the next round, as DDP's collectives ensure).

A script can also save a checkpoint just in time when it is stopped (the
trial is interrupted: gotune itself stops, or a batch system ends the job,
as Slurm's scancel, preemption and time limit do, with SIGTERM)::

    for epoch in range(start, cfg["epochs"] + 1):
        loss = train_one_epoch()
        if gotune.should_checkpoint():         # asked to stop: save now
            ckpt = gotune.checkpoint_dir()
            save(os.path.join(ckpt, "model.pt"), epoch)
            gotune.report(epoch=epoch, loss=loss, checkpoint=ckpt)  # and exit
        gotune.report(epoch=epoch, loss=loss)

gotune keeps that checkpoint, and the resumed trial starts from it.

Importing the module inside a gotune worker also lets gotune take the
script's stack on demand (``gotune stack``, the dashboard's trial page, a
hung trial's event): faulthandler writes every thread's Python stack to a
file in GOTUNE_CHECKPOINT_DIR when gotune sends SIGUSR2.

Outside gotune (plain python, or torchrun) the helpers fall back to
torchrun's variables and report lines are still printed, so a script runs
unchanged.

A launcher nested inside a gotune worker (``torchrun --nproc_per_node=4
train.py`` as the command of a one-worker trial) starts processes that
share that worker's stdout. There, report() and heartbeat() print only in
the process whose RANK is 0, so that each report is counted once; the
others' calls do nothing. Such a process is told apart by its
TORCHELASTIC_RUN_ID, which the nested launcher sets to its own run's.
"""

import json
import os
import signal
import sys
import tempfile

__all__ = [
    "active", "config", "report", "heartbeat", "checkpoint_dir", "resume_dir",
    "world_size", "world_rank", "local_rank", "local_world_size", "node_rank",
    "is_chief", "experiment", "trial_id", "seed", "nested", "trial_dir",
    "should_checkpoint", "exit_stopped",
]

PREFIX = "@gotune"


def active():
    """True when this process is a gotune worker."""
    return "GOTUNE_TRIAL_ID" in os.environ


def config():
    """The trial's hyperparameters as a dict ({} outside gotune)."""
    return json.loads(os.environ.get("GOTUNE_CONFIG") or "{}")


def _int(names, default):
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            return int(value)
    return default


def world_size():
    """The number of workers in the group (1 outside a group)."""
    return _int(("GOTUNE_WORLD_SIZE", "WORLD_SIZE"), 1)


def world_rank():
    """This worker's rank in the group, from 0."""
    return _int(("GOTUNE_WORLD_RANK", "RANK"), 0)


def local_rank():
    """This worker's rank among the group's workers on its node."""
    return _int(("GOTUNE_LOCAL_RANK", "LOCAL_RANK"), 0)


def local_world_size():
    """The number of the group's workers on this node."""
    return _int(("GOTUNE_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE"), 1)


def node_rank():
    """The rank of this worker's node in the group."""
    return _int(("GOTUNE_NODE_RANK", "GROUP_RANK"), 0)


def is_chief():
    """True on rank 0, whose metrics are the trial's."""
    return world_rank() == 0


def experiment():
    """The experiment's name, or None outside gotune."""
    return os.environ.get("GOTUNE_EXPERIMENT")


def trial_id():
    """The trial's number within its experiment, or None outside gotune."""
    value = os.environ.get("GOTUNE_TRIAL_ID")
    return int(value) if value else None


def seed():
    """The trial's seed, the same on every rank (0 outside gotune)."""
    return _int(("GOTUNE_SEED",), 0)


def checkpoint_dir():
    """A new, empty folder of this worker's own to write a checkpoint in.

    Hand it over with report(..., checkpoint=path) once it is complete, and
    do not touch it again: gotune moves it into the trial's committed
    checkpoint. Only such a folder, inside GOTUNE_CHECKPOINT_DIR, is taken
    over. Outside gotune the folder is made in the system's temporary
    folder and nobody removes it.
    """
    base = os.environ.get("GOTUNE_CHECKPOINT_DIR") or None
    if base:
        os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix="ckpt-", dir=base)


def trial_dir():
    """The trial's own folder (its checkpoints, logs and reports.csv), where
    files a script keeps for itself belong; None outside gotune."""
    return os.environ.get("GOTUNE_TRIAL_DIR") or None


def resume_dir():
    """The committed checkpoint to start from, or None on a fresh start.

    gotune sets it on a restart after a failure, a resize of an elastic
    group, and the resumption of a paused trial. It holds the files of every
    rank that handed some over.
    """
    return os.environ.get("GOTUNE_RESUME_DIR") or None


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_watching = False
_stopped_by = None  # the signal that asked this worker to stop
_told = False  # should_checkpoint has returned True


def _on_stop(signum, _frame):
    global _stopped_by
    if _stopped_by is None:
        _stopped_by = signum


def should_checkpoint():
    """True once this worker has been asked to stop (SIGTERM or SIGINT).

    The first call takes over those signals (until then they end the script
    as usual), so call it from the start of training, once per step. When it
    returns True, save a checkpoint and hand it over with
    report(..., checkpoint=path): gotune keeps it even though the trial is
    being interrupted, and the resumed trial starts from it. That report
    then ends the process, as the signal would have; a rank that has
    nothing to report calls exit_stopped() instead. gotune waits for it
    (10 s by default, then SIGKILL; under Slurm, gotune's agents wait 20 s
    and Slurm's KillWait is usually 30 s), so save quickly.
    """
    global _watching, _told
    if not _watching:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, _on_stop)
        _watching = True
    _told = _stopped_by is not None
    return _told


def exit_stopped():
    """End this process as the signal that asked it to stop would have.

    Does nothing when no signal has (see should_checkpoint).
    """
    if _stopped_by is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(_stopped_by, signal.SIG_DFL)
    os.kill(os.getpid(), _stopped_by)
    signal.pause()


def report(checkpoint=None, **metrics):
    """Report metrics (numbers), with an optional checkpoint folder.

    The checkpoint must be a folder inside GOTUNE_CHECKPOINT_DIR, such as
    checkpoint_dir() returns; gotune refuses any other (see above).

    Metric names that are not Python identifiers can be passed as
    report(**{"val/loss": 0.4}). A diverging trial may report NaN or an
    infinity: gotune records it as such. Raises ValueError for a value that
    is not a number and for a checkpoint that is not a folder. Once
    should_checkpoint() has returned True, the report is the worker's last:
    it ends the process (see exit_stopped).
    """
    line = {}
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            if hasattr(value, "item"):  # a one-element tensor or numpy scalar
                value = value.item()
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError("gotune.report: %s=%r is not a number" % (name, value))
        line[name] = value
    if checkpoint is not None:
        checkpoint = os.path.abspath(os.fspath(checkpoint))
        if not os.path.isdir(checkpoint):
            raise ValueError("gotune.report: checkpoint %r is not a folder" % checkpoint)
        line["checkpoint"] = checkpoint
    _emit(line)
    if _told:
        exit_stopped()


def heartbeat():
    """Tell gotune this worker is alive, without reporting anything.

    Useful in long phases without reports when the sweep sets
    failure.heartbeat_timeout.
    """
    _emit({})


def nested():
    """True in a process that a launcher nested inside a gotune worker
    started (see the module's notes): torch's variables are then the
    nested launcher's, and only its RANK 0 reports."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if not active() or run_id is None:
        return False
    own = "%s-trial-%s" % (os.environ.get("GOTUNE_EXPERIMENT", ""), os.environ.get("GOTUNE_TRIAL_ID"))
    return run_id != own


def _emit(obj):
    if nested() and os.environ.get("RANK", "0") != "0":
        return  # the nested launcher's rank 0 speaks for the worker
    # One write per line, flushed at once: the line is the report.
    # NaN and infinities are written as NaN, Infinity and -Infinity, which
    # gotune reads although JSON has no such numbers.
    sys.stdout.write(PREFIX + " " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def _install_stack_dump():
    # gotune asks a worker for its stack (`gotune stack`, the trial page, a
    # hung trial) with SIGUSR2, but only once this file exists: faulthandler
    # then writes every thread's Python stack to it from the signal handler
    # itself, even while the interpreter is stuck in C code.
    directory = os.environ.get("GOTUNE_CHECKPOINT_DIR")
    if not active() or not directory or not hasattr(signal, "SIGUSR2"):
        return
    try:
        import faulthandler
        out = open(os.path.join(directory, ".gotune-stack-%d" % os.getpid()), "w")
        faulthandler.register(signal.SIGUSR2, file=out, all_threads=True, chain=False)
    except (OSError, RuntimeError, ValueError):
        return  # no stack on demand: gotune falls back to gdb or /proc
    global _stack_file
    _stack_file = out  # faulthandler writes to its descriptor: keep it open


_stack_file = None
_install_stack_dump()
