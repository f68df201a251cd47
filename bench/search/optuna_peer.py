#!/usr/bin/python3
"""Optuna's side of `go run ./bench/search`: the same measurements with Optuna.

quality: for each function, sampler and seed, minimise the function for
--trials trials (study.optimize, one trial at a time) and print the best
value after each of --checkpoints trials:
    {"mode": "quality", "function", "sampler", "seed", "best": {"50": v, "200": v}}

multi: for each problem (ZDT1, ZDT2, DTLZ2), sampler (NSGAIISampler,
TPESampler, which does MOTPE with several objectives) and seed, minimise
every objective for --trials trials and print every trial's objectives:
    {"mode": "multi", "problem", "sampler", "seed", "points": [[f1, f2], ...]}

constrained: for each seed, minimise Branin subject to
(x0 − 2.5)² + (x1 − 7.5)² ≤ 20 with TPESampler's constraints_func and
print the best feasible value after each of --checkpoints trials:
    {"mode": "constrained", "seed", "best": {"50": v, "200": v}}

overhead: for each history length N, give a TPESampler study N-1 finished
trials (random configurations of a 3-parameter space, added
with study.add_trials) and time study.ask() of the N-th, --repeat times at
that same length (asked trials are told FAIL, which TPE ignores):
    {"mode": "overhead", "history": N-1, "ms": [...], "median_ms": m}

tabular: for each table of --tables (JSON written by bench/search's
tabular.go), each pending setting of --settings (k1: one at a time;
syncK: ask K, then tell K; asyncK: K pending, tell the oldest, ask one),
each sampler of --samplers (TPESampler(multivariate=True) with
constant_liar=True, "tpe_liar", and without, "tpe"; k1 runs "tpe" only
and counts it for both) and seed, run --trials trials through study.ask()/study.tell() and
print the regret after each trial and the suggestions that repeat a
pending configuration or any earlier one:
    {"mode": "tabular", "table", "setting", "sampler", "seed", "regret": [...],
     "pending_repeats": n, "repeats": n}

The functions match bench/search/functions.go.

Usage (Debian's python3-optuna 3.1):
  /usr/bin/python3 optuna_peer.py quality --functions branin,hartmann6 --samplers tpe,cmaes --first-seed 0 --seeds 10 --trials 200 --checkpoints 50,200
  /usr/bin/python3 optuna_peer.py overhead --lengths 1000,5000 --repeat 5
Prints {"mode": "error", "error": "..."} and exits 3 when optuna is missing.
"""
import argparse
import json
import math
import statistics
import sys
import time
import warnings

try:
    import numpy as np
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
except ImportError as e:
    print(json.dumps({"mode": "error", "error": "optuna is not installed: %s" % e}), flush=True)
    sys.exit(3)

HARTMANN_A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
              [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
HARTMANN_P = [[1312, 1696, 5569, 124, 8283, 5886], [2329, 4135, 8307, 3736, 1004, 9991],
              [2348, 1451, 3522, 2883, 3047, 6650], [4047, 8828, 8732, 5743, 1091, 381]]
HARTMANN_ALPHA = [1, 1.2, 3, 3.2]


def branin(x):
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    u = x[1] - b * x[0] ** 2 + c * x[0] - 6
    return u * u + 10 * (1 - t) * math.cos(x[0]) + 10


def hartmann6(x):
    total = 0.0
    for i in range(4):
        inner = sum(HARTMANN_A[i][j] * (x[j] - HARTMANN_P[i][j] * 1e-4) ** 2 for j in range(6))
        total += HARTMANN_ALPHA[i] * math.exp(-inner)
    return -total


def rosenbrock(x):
    return sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (x[i] - 1) ** 2 for i in range(len(x) - 1))


FUNCTIONS = {
    "branin": ([-5, 0], [10, 15], branin),
    "hartmann6": ([0] * 6, [1] * 6, hartmann6),
    "rosenbrock10": ([-5] * 10, [10] * 10, rosenbrock),
}


def sampler_for(name, seed):
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise SystemExit("unknown sampler %r" % name)


def quality(args):
    checkpoints = [int(c) for c in args.checkpoints.split(",")]
    for fname in args.functions.split(","):
        low, high, f = FUNCTIONS[fname]
        for sname in args.samplers.split(","):
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                study = optuna.create_study(sampler=sampler_for(sname, seed))
                best = []

                def objective(trial):
                    x = [trial.suggest_float("x%d" % i, low[i], high[i]) for i in range(len(low))]
                    v = f(x)
                    best.append(min(v, best[-1]) if best else v)
                    return v

                study.optimize(objective, n_trials=args.trials, gc_after_trial=False)
                print(json.dumps({"mode": "quality", "function": fname, "sampler": sname, "seed": seed,
                                  "best": {str(c): best[c - 1] for c in checkpoints if c <= len(best)}}),
                      flush=True)


def zdt_g(x):
    return 1 + 9 * sum(x[1:]) / (len(x) - 1)


def zdt1(x):
    g = zdt_g(x)
    return [x[0], g * (1 - math.sqrt(x[0] / g))]


def zdt2(x):
    g = zdt_g(x)
    return [x[0], g * (1 - (x[0] / g) ** 2)]


def dtlz2(x):
    g = sum((v - 0.5) ** 2 for v in x[2:])
    a, b = x[0] * math.pi / 2, x[1] * math.pi / 2
    return [(1 + g) * math.cos(a) * math.cos(b), (1 + g) * math.cos(a) * math.sin(b), (1 + g) * math.sin(a)]


# name: (dimensions, objectives, function), as in bench/search/multi.go.
PROBLEMS = {"zdt1": (10, 2, zdt1), "zdt2": (10, 2, zdt2), "dtlz2": (7, 3, dtlz2)}


def multi_sampler(name, seed):
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "motpe":
        return optuna.samplers.MOTPESampler(seed=seed)
    raise SystemExit("unknown sampler %r" % name)


def multi(args):
    for pname in args.problems.split(","):
        dims, nobj, f = PROBLEMS[pname]
        for sname in args.samplers.split(","):
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                study = optuna.create_study(directions=["minimize"] * nobj, sampler=multi_sampler(sname, seed))
                points = []

                def objective(trial):
                    fs = f([trial.suggest_float("x%d" % i, 0, 1) for i in range(dims)])
                    points.append(fs)
                    return fs

                study.optimize(objective, n_trials=args.trials, gc_after_trial=False)
                print(json.dumps({"mode": "multi", "problem": pname, "sampler": sname, "seed": seed,
                                  "points": points}), flush=True)


def branin_constraint(x):
    """The constraint of the constrained Branin, feasible at or below 0."""
    return (x[0] - 2.5) ** 2 + (x[1] - 7.5) ** 2 - 20


def constrained(args):
    checkpoints = [int(c) for c in args.checkpoints.split(",")]
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        sampler = optuna.samplers.TPESampler(seed=seed, constraints_func=lambda t: [t.user_attrs["c"]])
        study = optuna.create_study(sampler=sampler)
        best = []

        def objective(trial):
            x = [trial.suggest_float("x0", -5, 10), trial.suggest_float("x1", 0, 15)]
            c = branin_constraint(x)
            trial.set_user_attr("c", c)
            v = branin(x)
            prev = best[-1] if best else math.inf
            best.append(min(prev, v) if c <= 0 else prev)
            return v

        study.optimize(objective, n_trials=args.trials, gc_after_trial=False)
        print(json.dumps({"mode": "constrained", "seed": seed,
                          "best": {str(c): best[c - 1] for c in checkpoints if c <= len(best)}}), flush=True)


# The space and final value of the Optuna overhead anchor: lr log-uniform,
# width categorical, dropout uniform.
OVERHEAD_SPACE = {
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "width": CategoricalDistribution([32, 64, 128, 256]),
    "dropout": FloatDistribution(0.0, 0.5),
}
WIDTH_PENALTY = {32: 0.12, 64: 0.05, 128: 0.0, 256: 0.02}


def overhead_objective(p):
    return 0.05 + 0.15 * (math.log10(p["lr"]) + 2) ** 2 + (p["dropout"] - 0.2) ** 2 + WIDTH_PENALTY[p["width"]]


def overhead(args):
    rng = np.random.RandomState(0)
    for n in [int(x) for x in args.lengths.split(",")]:
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
        trials = []
        for _ in range(n - 1):
            p = {"lr": float(math.exp(rng.uniform(math.log(1e-4), math.log(1e-1)))),
                 "width": [32, 64, 128, 256][rng.randint(4)],
                 "dropout": float(rng.uniform(0, 0.5))}
            trials.append(optuna.trial.create_trial(params=p, distributions=OVERHEAD_SPACE,
                                                    value=overhead_objective(p)))
        study.add_trials(trials)
        ms = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            trial = study.ask(OVERHEAD_SPACE)
            ms.append(1000 * (time.perf_counter() - t0))
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        print(json.dumps({"mode": "overhead", "history": n - 1, "ms": [round(m, 3) for m in ms],
                          "median_ms": round(statistics.median(ms), 3)}), flush=True)


def tabular_sampler(name, seed):
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=(name == "tpe_liar"))


def tabular_run(tb, setting, sampler, seed, trials):
    levels, cat = tb["levels"], tb["categorical"]
    dists = {}
    for i, n in enumerate(levels):
        if cat[i]:
            dists["p%d" % i] = CategoricalDistribution(["c%d" % k for k in range(n)])
        else:
            dists["p%d" % i] = IntDistribution(0, n - 1)
    k = 1 if setting == "k1" else int(setting.lstrip("syncasync"))
    asynchronous = setting.startswith("async")
    study = optuna.create_study(sampler=tabular_sampler(sampler, seed))
    queue, pending, ever = [], {}, set()
    best, regret, pending_repeats, repeats = math.inf, [], 0, 0

    def tell():
        trial, at, v = queue.pop(0)
        pending[at] -= 1
        study.tell(trial, v)

    for _ in range(trials):
        if len(queue) == k:
            if asynchronous:
                tell()
            else:
                while queue:
                    tell()
        trial = study.ask(dists)
        at = 0
        for i, n in enumerate(levels):
            v = trial.params["p%d" % i]
            at = at * n + (int(v[1:]) if cat[i] else int(v))
        v = tb["values"][at]
        if pending.get(at, 0) > 0:
            pending_repeats += 1
        if at in ever:
            repeats += 1
        ever.add(at)
        pending[at] = pending.get(at, 0) + 1
        queue.append((trial, at, v))
        best = min(best, v)
        regret.append(best - tb["min"])
    return regret, pending_repeats, repeats


def tabular(args):
    with open(args.tables) as f:
        tables = json.load(f)
    for tb in tables:
        for setting in args.settings.split(","):
            for sampler in (["tpe"] if setting == "k1" else args.samplers.split(",")):
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    regret, pending_repeats, repeats = tabular_run(tb, setting, sampler, seed, args.trials)
                    for name in (["tpe", "tpe_liar"] if setting == "k1" else [sampler]):
                        print(json.dumps({"mode": "tabular", "table": tb["name"], "setting": setting, "sampler": name,
                                          "seed": seed, "regret": regret, "pending_repeats": pending_repeats,
                                          "repeats": repeats}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    q = sub.add_parser("quality")
    q.add_argument("--functions", default="branin,hartmann6,rosenbrock10")
    q.add_argument("--samplers", default="tpe,cmaes")
    q.add_argument("--first-seed", type=int, default=0)
    q.add_argument("--seeds", type=int, default=10)
    q.add_argument("--trials", type=int, default=200)
    q.add_argument("--checkpoints", default="50,200")
    o = sub.add_parser("overhead")
    o.add_argument("--lengths", default="1000,5000")
    o.add_argument("--repeat", type=int, default=5)
    m = sub.add_parser("multi")
    m.add_argument("--problems", default="zdt1,zdt2,dtlz2")
    m.add_argument("--samplers", default="nsga2,tpe")
    m.add_argument("--first-seed", type=int, default=0)
    m.add_argument("--seeds", type=int, default=10)
    m.add_argument("--trials", type=int, default=200)
    c = sub.add_parser("constrained")
    c.add_argument("--first-seed", type=int, default=0)
    c.add_argument("--seeds", type=int, default=10)
    c.add_argument("--trials", type=int, default=200)
    c.add_argument("--checkpoints", default="50,200")
    tb = sub.add_parser("tabular")
    tb.add_argument("--tables", required=True)
    tb.add_argument("--settings", default="k1,sync8,async8,sync32,async32")
    tb.add_argument("--first-seed", type=int, default=0)
    tb.add_argument("--seeds", type=int, default=5)
    tb.add_argument("--trials", type=int, default=200)
    tb.add_argument("--samplers", default="tpe_liar,tpe")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    print(json.dumps({"mode": "version", "optuna": optuna.__version__}), flush=True)
    {"quality": quality, "overhead": overhead, "multi": multi, "constrained": constrained,
     "tabular": tabular}[args.mode](args)


if __name__ == "__main__":
    main()
