"""A stand-in for a script that trains with skorch's NeuralNetClassifier
and a Checkpoint callback: it prints skorch's table, a header of metric
names over a rule, then a row an epoch, right-aligned, each epoch's best
values coloured, and "+" in the cp column when the checkpoint was saved
(blank otherwise). Its validation accuracy rises faster the nearer --lr is
to 0.1, and dips at epoch 3. It takes --lr and --max_epochs."""
import argparse
import math
import time

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.1)
p.add_argument("--max_epochs", type=int, default=10)
a = p.parse_args()

CYAN, GREEN, MAGENTA, END = "\x1b[36m", "\x1b[32m", "\x1b[35m", "\x1b[0m"
print("  epoch    train_loss    valid_acc    valid_loss    cp     dur")
print("-------  ------------  -----------  ------------  ----  ------")
rate = 1.0 / (1.0 + abs(math.log10(a.lr) + 1))
best = 0.0
for epoch in range(1, a.max_epochs + 1):
    time.sleep(0.05)
    train_loss = 0.7 * math.exp(-rate * epoch)
    acc = 1 - 0.5 * math.exp(-rate * epoch) - (0.1 if epoch == 3 else 0)
    valid_loss = 0.8 * math.exp(-rate * epoch) + (0.1 if epoch == 3 else 0)
    improved = acc > best
    best = max(best, acc)
    colour = (lambda s, c: c + s + END) if improved else (lambda s, c: s)
    print("%7d  %s  %s  %s  %4s  %6.4f" % (
        epoch,
        " " * 6 + colour("%.4f" % train_loss, CYAN),
        " " * 5 + colour("%.4f" % acc, GREEN),
        " " * 6 + colour("%.4f" % valid_loss, MAGENTA),
        "+" if improved else "",
        0.05), flush=True)
