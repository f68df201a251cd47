"""A stand-in for a script that trains with Hugging Face's Trainer: it
prints the Trainer's log lines, a dict every half epoch ("{'loss': X,
'grad_norm': G, 'learning_rate': L, 'epoch': E}"), an evaluation dict at
each epoch's end ("{'eval_loss': X, 'eval_accuracy': A, 'eval_runtime': R,
..., 'epoch': E}") and a summary at the end, for an evaluation loss that
falls faster the nearer --learning_rate is to 1e-3. It takes the
Trainer's --learning_rate and --num_train_epochs."""
import argparse
import math
import time

p = argparse.ArgumentParser()
p.add_argument("--learning_rate", type=float, default=5e-5)
p.add_argument("--num_train_epochs", type=int, default=3)
a = p.parse_args()

rate = 1.0 / (1.0 + abs(math.log10(a.learning_rate) + 3))
for half in range(1, 2 * a.num_train_epochs + 1):
    epoch = half / 2
    time.sleep(0.05)
    loss = 0.7 * math.exp(-rate * epoch)
    lr = a.learning_rate * (1 - epoch / a.num_train_epochs)
    print({"loss": round(loss, 4), "grad_norm": round(3 * loss, 4), "learning_rate": lr, "epoch": epoch})
    if half % 2 == 0:
        eval_loss = 0.8 * math.exp(-rate * epoch)
        print({"eval_loss": round(eval_loss, 4), "eval_accuracy": round(1 - eval_loss / 2, 4),
               "eval_runtime": 0.05, "eval_samples_per_second": 2000.0, "eval_steps_per_second": 250.0,
               "epoch": epoch})
print({"train_runtime": 0.3, "train_samples_per_second": 900.0, "train_steps_per_second": 110.0,
       "train_loss": round(loss, 4), "epoch": float(a.num_train_epochs)})
