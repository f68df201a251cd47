"""A stand-in for pytorch/examples' word_language_model/main.py: it prints
that script's lines, cells between bars: every few batches the training
loss and perplexity, then the epoch's validation line between rules, and
after the last epoch the test line between rules of "=". Its validation
loss falls faster the nearer --lr is to 20. It takes --lr, --epochs and
--save, the file it writes its model to."""
import argparse
import math
import time

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=20)
p.add_argument("--epochs", type=int, default=6)
p.add_argument("--save", default="model.pt")
a = p.parse_args()

rate = 1.0 / (1.0 + abs(math.log10(a.lr / 20)))
for epoch in range(1, a.epochs + 1):
    for batch in (200, 400, 600):
        time.sleep(0.03)
        loss = 7 * math.exp(-rate * (epoch - 1 + batch / 600) / 4)
        print("| epoch {:3d} | {:5d}/ {:5d} batches | lr {:02.2f} | ms/batch {:5.2f} | loss {:5.2f} | ppl {:8.2f}".format(
            epoch, batch, 600, a.lr, 30.0, loss, math.exp(loss)), flush=True)
    val = 6.5 * math.exp(-rate * epoch / 4)
    print("-" * 89)
    print("| end of epoch {:3d} | time: {:5.2f}s | valid loss {:5.2f} | valid ppl {:8.2f}".format(
        epoch, 0.09, val, math.exp(val)))
    print("-" * 89, flush=True)
    with open(a.save, "w") as f:
        f.write("model of epoch %d\n" % epoch)
test = 6.6 * math.exp(-rate * a.epochs / 4)
print("=" * 89)
print("| End of training | test loss {:5.2f} | test ppl {:8.2f}".format(test, math.exp(test)))
print("=" * 89, flush=True)
