"""A stand-in for pytorch/examples' mnist/main.py: it prints that script's
training lines ("Train Epoch: E [n/60000 (p%)]\tLoss: X") and test lines
("Test set: Average loss: X, Accuracy: c/10000 (p%)"), for a loss that
falls faster the nearer --lr is to 1. It takes the script's --lr and
--epochs."""
import argparse
import math
import time

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=1.0)
p.add_argument("--epochs", type=int, default=14)
p.add_argument("--gamma", type=float, default=0.7)
p.add_argument("--no-accel", action="store_true")
a = p.parse_args()

rate = 1.0 / (1.0 + abs(math.log10(a.lr)))
for epoch in range(1, a.epochs + 1):
    for batch in (0, 640):
        loss = 2.3 * math.exp(-rate * (epoch - 1 + batch / 60000))
        print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
            epoch, batch, 60000, 100.0 * batch / 60000, loss))
        time.sleep(0.05)
    test_loss = 0.3 * math.exp(-rate * epoch)
    correct = int(10000 * (1 - test_loss))
    print("\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n".format(
        test_loss, correct, 10000, 100.0 * correct / 10000))
