"""A stand-in for a script that trains with fastai's Learner.fit_one_cycle
in a terminal: it prints fastai's table, a header of metric names, then a
row an epoch from epoch 0, left-aligned, with the epoch's time as mm:ss.
Its validation loss falls faster the nearer --lr is to 1e-3. It takes
--lr and --epochs."""
import argparse
import math
import time

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=1e-3)
p.add_argument("--epochs", type=int, default=5)
a = p.parse_args()

rate = 1.0 / (1.0 + abs(math.log10(a.lr) + 3))
print("epoch     train_loss  valid_loss  accuracy  time    ")
for epoch in range(a.epochs):
    time.sleep(0.05)
    valid_loss = 0.8 * math.exp(-rate * (epoch + 1))
    print("%-9d %-11.6f %-11.6f %-9.6f %-8s" % (
        epoch, 0.7 * math.exp(-rate * (epoch + 1)), valid_loss, 1 - valid_loss / 2, "00:01"), flush=True)
