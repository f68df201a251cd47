"""Optuna's side of bench/curves: TPE with a pruner over the same curves.

Reads the table bench/curves replays, runs Optuna's TPESampler (seeded)
with its HyperbandPruner or SuccessiveHalvingPruner (min_resource 1,
reduction_factor 3, max_resource 27), one trial at a time, each trial
training as the table's configuration nearest to its suggestion (the
same lookup as main.go), until the epochs are spent. Prints one JSON
object: Optuna's version and each seed's regret after every epoch.
"""
import argparse
import json
import math

import optuna

MAX_T = 27


def coords(p):
    lin = lambda v, lo, hi: (v - lo) / (hi - lo)
    lg = lambda v, lo, hi: lin(math.log(v), math.log(lo), math.log(hi))
    return [lg(p["lr"], 0.0003, 0.3), lin(p["momentum"], 0, 0.99), lg(p["hidden"], 8, 256),
            lin(p["layers"], 1, 3), lin(p["dropout"], 0, 0.5), lg(p["batch_size"], 16, 256)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--pruner", choices=["hyperband", "sha"], required=True)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=200 * MAX_T)
    a = ap.parse_args()
    rows = []
    with open(a.table) as f:
        for r in json.load(f):
            params = json.loads(r["params_json"])
            rows.append((coords(params), json.loads(r["curve"])))
    top = max(c[MAX_T - 1] for _, c in rows)

    def nearest(p):
        x = coords(p)
        return min(range(len(rows)), key=lambda i: sum((x[k] - rows[i][0][k]) ** 2 for k in range(len(x))))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    traces = []
    for seed in range(1, a.seeds + 1):
        if a.pruner == "hyperband":
            pruner = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=MAX_T, reduction_factor=3)
        else:
            pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed), pruner=pruner)
        trace, best = [], 0.0
        while len(trace) < a.epochs:
            t = study.ask()
            p = {"lr": t.suggest_float("lr", 0.0003, 0.3, log=True),
                 "momentum": t.suggest_float("momentum", 0.0, 0.99),
                 "hidden": t.suggest_int("hidden", 8, 256, log=True),
                 "layers": t.suggest_int("layers", 1, 3),
                 "dropout": t.suggest_float("dropout", 0.0, 0.5),
                 "batch_size": t.suggest_categorical("batch_size", [16, 32, 64, 128, 256])}
            curve = rows[nearest(p)][1]
            pruned = False
            acc = None
            for e in range(1, MAX_T + 1):
                if len(trace) >= a.epochs:
                    break
                acc = curve[e - 1]
                if e == MAX_T:
                    best = max(best, acc)
                trace.append(top - best)
                t.report(acc, e)
                if e < MAX_T and t.should_prune():
                    pruned = True
                    break
            if pruned:
                study.tell(t, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(t, acc)
        traces.append(trace)
    print(json.dumps({"optuna": optuna.__version__, "traces": traces}))


if __name__ == "__main__":
    main()
