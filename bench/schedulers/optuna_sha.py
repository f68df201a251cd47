#!/usr/bin/python3
"""Optuna's sampler with its SuccessiveHalvingPruner on bench/schedulers' synthetic curves.

The curve is sim.CurveValue of gotune's schedulers/sim package (the model of
the Optuna overhead anchor): three parameters, a final loss that is minimal
(0.05) at lr=1e-2, width=128, dropout=0.2, and a learning speed set by lr.
Each trial reports steps 1..max_t; should_prune() is asked after every step
but the last (a trial at max_t is fully trained either way).

For each seed it prints one JSON line:
  {"seed", "compute" (steps trained in all), "best" (lowest value at max_t),
   "compute_to_target" (steps trained until a trial first reached max_t at or
   below the seed's target; null if never), "trials", "completed", "seconds"}

Usage (Debian's python3-optuna):
  /usr/bin/python3 optuna_sha.py --n 81 --max-t 27 --eta 3 --grace 1 \
      --sampler tpe --seeds 1,2 --targets 0.0512,0.0533
"""
import argparse
import json
import math
import time

import optuna

WIDTH_PENALTY = {32: 0.12, 64: 0.05, 128: 0.0, 256: 0.02}


def curve(lr, width, dropout, step):
    q = 0.15 * (math.log10(lr) + 2.0) ** 2 + (dropout - 0.2) ** 2 + WIDTH_PENALTY[width]
    final = 0.05 + q
    speed = 0.25 + 0.5 * min(1.0, lr / 1e-2)
    return final + (1.5 - final) * math.exp(-speed * step)


def run(args, seed, target):
    if args.sampler == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=args.grace, reduction_factor=args.eta)
    study = optuna.create_study(direction="minimize", sampler=sampler, pruner=pruner)
    state = {"compute": 0, "finals": []}

    def objective(trial):
        lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
        width = trial.suggest_categorical("width", [32, 64, 128, 256])
        dropout = trial.suggest_float("dropout", 0.0, 0.5)
        v = None
        for step in range(1, args.max_t + 1):
            v = curve(lr, width, dropout, step)
            state["compute"] += 1
            trial.report(v, step)
            if step < args.max_t and trial.should_prune():
                raise optuna.TrialPruned()
        state["finals"].append((state["compute"], v))
        return v

    t0 = time.perf_counter()
    study.optimize(objective, n_trials=args.n, gc_after_trial=False)
    seconds = time.perf_counter() - t0
    finals = state["finals"]
    to_target = next((c for c, v in finals if v <= target), None)
    return {
        "seed": seed,
        "compute": state["compute"],
        "best": min(v for _, v in finals) if finals else None,
        "compute_to_target": to_target,
        "trials": args.n,
        "completed": len(finals),
        "seconds": round(seconds, 3),
        "optuna": optuna.__version__,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--max-t", type=int, required=True)
    ap.add_argument("--eta", type=int, required=True)
    ap.add_argument("--grace", type=int, required=True)
    ap.add_argument("--sampler", choices=["tpe", "random"], default="tpe")
    ap.add_argument("--seeds", required=True, help="comma-separated")
    ap.add_argument("--targets", required=True, help="comma-separated, one per seed")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds = [int(s) for s in args.seeds.split(",")]
    targets = [float(t) for t in args.targets.split(",")]
    for seed, target in zip(seeds, targets):
        print(json.dumps(run(args, seed, target)), flush=True)


if __name__ == "__main__":
    main()
