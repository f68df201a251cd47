"""A stand-in for nanoGPT's train.py: it prints nanoGPT's eval lines
("step N: train loss X, val loss Y") and log lines ("iter N: loss X, time
Tms, mfu M%") for a loss that falls faster the nearer --learning_rate is
to 1e-3. It takes nanoGPT's --key=value arguments; unknown ones are
ignored, as the real script's configurator would refuse them."""
import math
import sys
import time

args = {"learning_rate": 6e-4, "max_iters": 100, "eval_interval": 20, "log_interval": 10}
for a in sys.argv[1:]:
    if a.startswith("--") and "=" in a:
        k, v = a[2:].split("=", 1)
        if k in args:
            args[k] = type(args[k])(float(v))

print("tokens per iteration will be: 4,096")
print("found vocab_size = 65 (inside data/shakespeare_char/meta.pkl)")
print("number of parameters: 0.01M")
rate = 1.0 / (1.0 + abs(math.log10(args["learning_rate"]) + 3))
for it in range(args["max_iters"] + 1):
    loss = 4.2 * math.exp(-rate * it / 40) + 0.5
    if it % args["eval_interval"] == 0:
        print(f"step {it}: train loss {loss:.4f}, val loss {loss + 0.05:.4f}")
    if it % args["log_interval"] == 0:
        print(f"iter {it}: loss {loss + 0.01:.4f}, time 12.30ms, mfu -100.00%")
    time.sleep(0.01)
