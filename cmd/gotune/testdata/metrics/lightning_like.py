"""A stand-in for a script that trains with PyTorch Lightning's Trainer in
a terminal: on stderr it prints the Trainer's lines on the accelerators it
found, its model summary, and for each epoch the progress bar, rewritten
with carriage returns as batches go by and left on its line when the
epoch ends, with the metrics logged with prog_bar=True (train_loss, and
val_loss once the epoch is validated); then the line saying max_epochs was
reached. Its validation loss falls faster the nearer --lr is to 1e-2. It
takes --lr and --max_epochs."""
import argparse
import math
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=1e-2)
p.add_argument("--max_epochs", type=int, default=6)
a = p.parse_args()

err = sys.stderr
print("GPU available: False, used: False", file=err)
print("TPU available: False, using: 0 TPU cores", file=err)
print("HPU available: False, using: 0 HPUs", file=err)
print("  | Name  | Type   | Params\n---------------------------------\n0 | layer | Linear | 66    \n---------------------------------", file=err)
rate = 1.0 / (1.0 + abs(math.log10(a.lr) + 2))
for epoch in range(a.max_epochs):
    train_loss = math.exp(-rate * epoch)
    for batch in (16, 32, 63):
        err.write("\rEpoch %d: %3d%%|#####| %d/63 [00:00<00:00, 80.50it/s, v_num=0, train_loss=%.3f]" % (epoch, batch * 100 // 63, batch, train_loss))
        err.flush()
        time.sleep(0.02)
    err.write("\rEpoch %d: 100%%|#####| 63/63 [00:00<00:00, 80.50it/s, v_num=0, train_loss=%.3f, val_loss=%.3f]\n" % (epoch, train_loss, math.exp(-rate * (epoch + 1))))
    err.flush()
print("`Trainer.fit` stopped: `max_epochs=%d` reached." % a.max_epochs, file=err)
