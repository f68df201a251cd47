#!/usr/bin/python3
"""Peer of bench/storage: reports written through Optuna's SQLite storage.

TRIALS trials, one after another, each sampling one parameter and reporting
REPORTS intermediate values; after each report the trial asks should_prune()
(SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)), as a tuner
does before it lets a trial go on. The decision is not acted on, so that
every run writes exactly TRIALS * REPORTS reports, like gotune's side.

Usage: /usr/bin/python3 optuna_peer.py --trials 100 --reports 20 --db /tmp/optuna.db
Prints one JSON line: reports, seconds, reports_per_s and versions.
"""
import argparse
import json
import os
import platform
import time

import optuna


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--reports", type=int, default=20)
    ap.add_argument("--db", required=True, help="SQLite file, replaced if it exists")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if os.path.exists(args.db):
        os.remove(args.db)
    study = optuna.create_study(
        storage="sqlite:///" + args.db,
        study_name="bench",
        direction="minimize",
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
    )
    lr = optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)
    pruned = 0
    t0 = time.perf_counter()
    for i in range(args.trials):
        trial = study.ask({"lr": lr})
        v = 1.0
        for step in range(1, args.reports + 1):
            v = 1.0 / step + (i % 7) / 100.0
            trial.report(v, step)
            pruned += trial.should_prune()
        study.tell(trial, v)
    wall = time.perf_counter() - t0
    n = args.trials * args.reports
    print(json.dumps({
        "bench": "storage",
        "system": "optuna",
        "workload": "peer",
        "storage": "sqlite",
        "trials": args.trials,
        "concurrent_trials": 1,
        "reports": n,
        "wall_s": round(wall, 3),
        "reports_per_s": round(n / wall),
        "should_prune_true": pruned,
        "optuna": optuna.__version__,
        "python": platform.python_version(),
    }), flush=True)


if __name__ == "__main__":
    main()
