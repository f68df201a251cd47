#!/usr/bin/python3
"""Reference values for tuner's TPE tests (tpe_test.go), computed with
Optuna 3.1's TPESampler internals (Debian's python3-optuna) and NumPy.

The tests read tpe_reference.json and need no Python. To regenerate it,
from the repository root:

    /usr/bin/python3 search/testdata/tpe_reference.py > search/testdata/tpe_reference.json

Observations of equal value get bandwidths by their position in sorted
order, which NumPy's unstable argsort leaves arbitrary; so the cases whose
observations weigh differently (more than 25 of them) have no equal values.

Each numeric case names a gotune domain (kind and arguments) and the
Optuna distribution that models it; observations are configuration
values in trial order. The joint cases fit one estimator to whole
configurations of several parameters, with given weights.

gotune's TPE takes Optuna's estimator with consider_endpoints=True, and
with the 1/sigma in a truncated normal's log-density that Optuna 3.1's
_truncnorm.logpdf leaves out and later releases restore (optuna#5109):
the script puts it back.
"""
import json
import warnings
import math

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers._tpe import _truncnorm
from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator, _ParzenEstimatorParameters
from optuna.samplers._tpe.sampler import _split_observation_pairs, default_gamma, default_weights

PARAMS = _ParzenEstimatorParameters(
    consider_prior=True, prior_weight=1.0, consider_magic_clip=True,
    consider_endpoints=True, weights=default_weights, multivariate=False)

_logpdf_without_scale = _truncnorm.logpdf


def _logpdf(x, a, b, loc=0, scale=1):
    return _logpdf_without_scale(x, a, b, loc, scale) - np.log(scale)


_truncnorm.logpdf = _logpdf

warnings.simplefilter("ignore")
rng = np.random.RandomState(7)


def estimator(dist, observations):
    internal = np.asarray([dist.to_internal_repr(v) for v in observations], dtype=float)
    return _ParzenEstimator({"x": internal}, {"x": dist}, PARAMS)


def numeric_case(name, domain, dist, observations, points):
    pe = estimator(dist, observations)
    mus, sigmas, weights = pe._mus["x"], pe._sigmas["x"], pe._weights
    order = sorted(range(len(mus)), key=lambda i: (mus[i], sigmas[i], weights[i]))
    log_pdf = pe.log_pdf({"x": np.asarray(points, dtype=float)})
    return {
        "name": name, "domain": domain, "observations": observations, "points": points,
        "low": pe._low["x"], "high": pe._high["x"],
        "mus": [mus[i] for i in order], "sigmas": [sigmas[i] for i in order],
        "weights": [weights[i] for i in order], "log_pdf": log_pdf.tolist(),
    }


def categorical_case(name, choices, observations):
    dist = CategoricalDistribution(choices)
    pe = estimator(dist, observations)
    probs = np.exp(pe.log_pdf({"x": np.arange(len(choices))}))
    return {"name": name, "choices": choices, "observations": observations, "probs": probs.tolist()}


def uniform(low, high, n):
    return [float(v) for v in rng.uniform(low, high, n)]


def loguniform(low, high, n):
    return [float(v) for v in np.exp(rng.uniform(math.log(low), math.log(high), n))]


numeric = [
    numeric_case("uniform, no observations", {"kind": "uniform", "args": [-5, 10]},
                 FloatDistribution(-5, 10), [], [-5, -1, 2.5, 9.99]),
    numeric_case("uniform, one observation", {"kind": "uniform", "args": [-5, 10]},
                 FloatDistribution(-5, 10), [3.0], [-4, 2.9, 3.0, 7]),
    numeric_case("uniform, 7 observations", {"kind": "uniform", "args": [-5, 10]},
                 FloatDistribution(-5, 10), uniform(-5, 10, 7), [-5, -2, 0.1, 4, 9.5]),
    numeric_case("uniform, 60 observations with the weights ramp", {"kind": "uniform", "args": [0, 1]},
                 FloatDistribution(0, 1), uniform(0, 1, 60), [0, 0.2, 0.5, 0.77, 0.999]),
    numeric_case("uniform, observations at the bounds and the prior's centre", {"kind": "uniform", "args": [0, 2]},
                 FloatDistribution(0, 2), [0.0, 1.0, 1.999, 0.5], [0, 1, 1.5]),
    numeric_case("loguniform, 12 observations", {"kind": "loguniform", "args": [1e-4, 1e-1]},
                 FloatDistribution(1e-4, 1e-1, log=True), loguniform(1e-4, 1e-1, 12), [1e-4, 3e-3, 0.05]),
    numeric_case("qloguniform, modelled as loguniform", {"kind": "qloguniform", "args": [1e-5, 1e-2, 1e-5]},
                 FloatDistribution(1e-5, 1e-2, log=True), [1e-5, 3e-5, 0.00412, 0.0099, 0.0005],
                 [2e-5, 0.001, 0.01]),
    numeric_case("quniform, 9 observations", {"kind": "quniform", "args": [0.5, 0.99, 0.01]},
                 FloatDistribution(0.5, 0.99, step=0.01), [0.5, 0.55, 0.9, 0.91, 0.99, 0.7, 0.71, 0.6, 0.83],
                 [0.5, 0.62, 0.9, 0.99]),
    numeric_case("randint, equal observations", {"kind": "randint", "args": [1, 10]},
                 IntDistribution(1, 9), [3, 3, 3, 7, 1, 9], [1, 2, 3, 5, 9]),
    numeric_case("randint, 40 observations", {"kind": "randint", "args": [0, 100]},
                 IntDistribution(0, 99), [int(v) for v in rng.choice(100, 40, replace=False)], [0, 13, 50, 99]),
    numeric_case("lograndint, 8 observations", {"kind": "lograndint", "args": [16, 1024]},
                 IntDistribution(16, 1023, log=True), [16, 20, 64, 65, 300, 1000, 1023, 128],
                 [16, 17, 100, 1023]),
]

categorical = [
    categorical_case("no observations", ["a", "b", "c"], []),
    categorical_case("4 observations", ["relu", "tanh", "gelu"], ["tanh", "tanh", "relu", "tanh"]),
    categorical_case("30 observations, one choice unseen", [1, 2, 3, 4],
                     [int(v) for v in rng.choice([1, 2, 3], 30)]),
]



def joint_case(name, params, observations, weights, points):
    """params: (name, gotune domain, Optuna distribution) in the order the
    test lists them; observations and points: configurations as lists."""
    space = {p[0]: p[2] for p in params}
    internal = {p[0]: np.asarray([p[2].to_internal_repr(o[i]) for o in observations], dtype=float)
                for i, p in enumerate(params)}
    pe = _ParzenEstimator(internal, space, PARAMS, np.asarray(weights, dtype=float))
    pts = {p[0]: np.asarray([p[2].to_internal_repr(o[i]) for o in points],
                            dtype=int if isinstance(p[2], CategoricalDistribution) else float)
           for i, p in enumerate(params)}
    return {
        "name": name, "domains": [p[1] for p in params], "observations": observations,
        "weights": weights, "points": points, "log_pdf": pe.log_pdf(pts).tolist(),
    }


JOINT_PARAMS = [
    ("a", {"kind": "uniform", "args": [-5, 10]}, FloatDistribution(-5, 10)),
    ("b", {"kind": "loguniform", "args": [1e-4, 1e-1]}, FloatDistribution(1e-4, 1e-1, log=True)),
    ("c", {"kind": "choice", "args": ["relu", "tanh", "gelu"]}, CategoricalDistribution(["relu", "tanh", "gelu"])),
    ("d", {"kind": "randint", "args": [0, 100]}, IntDistribution(0, 99)),
    ("e", {"kind": "quniform", "args": [0.5, 0.99, 0.01]}, FloatDistribution(0.5, 0.99, step=0.01)),
]


def joint_configs(n):
    acts = ["relu", "tanh", "gelu"]
    return [[float(rng.uniform(-5, 10)), float(np.exp(rng.uniform(math.log(1e-4), math.log(1e-1)))),
             acts[rng.randint(3)], int(rng.randint(100)), round(0.5 + 0.01 * int(rng.randint(50)), 2)]
            for _ in range(n)]


joint = [
    joint_case("no observations", JOINT_PARAMS, [], [], joint_configs(3)),
    joint_case("one observation", JOINT_PARAMS, joint_configs(1), [1.0], joint_configs(4)),
    joint_case("12 observations, unequal weights", JOINT_PARAMS, joint_configs(12),
               [float(w) for w in rng.uniform(0.01, 3, 12)], joint_configs(8)),
    joint_case("40 observations, weights ramp", JOINT_PARAMS, joint_configs(40),
               default_weights(40).tolist(), joint_configs(8)),
]

# Trials in number order: completed with a value, or pruned at a step with
# its value there (None: pruned without an intermediate value).
trials = []
for i in range(45):
    if i % 3 == 0:
        trials.append({"state": "pruned", "step": int(rng.randint(1, 4)), "value": float(rng.randint(0, 5))})
    elif i == 20:
        trials.append({"state": "pruned", "step": None, "value": None})
    else:
        trials.append({"state": "complete", "value": float(rng.randint(0, 10))})
scores = [(-math.inf, [t["value"]]) if t["state"] == "complete"
          else (1, [0.0]) if t["step"] is None else (-t["step"], [t["value"]]) for t in trials]
splits = []
for n in [10, 11, 25, 30, 45]:
    below, _ = _split_observation_pairs(scores[:n], default_gamma(n), None)
    splits.append({"n": n, "below": sorted(int(i) for i in below)})

ppf = []
for a, b in [(-1, 1), (-0.5, 3), (-30, 0.2), (0, 5), (-4, 0), (-2, 60), (-0.01, 0.01)]:
    for q in [0, 1e-12, 0.02, 0.5, 0.93, 1 - 1e-6, 1]:
        ppf.append({"q": q, "a": a, "b": b, "x": float(_truncnorm.ppf(np.asarray([q], dtype=float), float(a), float(b))[0])})

mass = []
for a, b in [(-1, 1), (-40, -38), (38, 40), (-3, -2.999), (0.5, 7), (-0.1, 50), (-1e3, 1e3)]:
    mass.append({"a": a, "b": b, "log": float(_truncnorm._log_gauss_mass(np.asarray([a], dtype=float), np.asarray([b], dtype=float))[0])})

log_ndtr = [{"a": a, "log": float(_truncnorm._log_ndtr(np.asarray([a], dtype=float))[0])}
            for a in [-1e3, -60, -20.5, -19.9, -3, 0, 2, 6.5, 30]]

print(json.dumps({
    "optuna": optuna.__version__,
    "gamma": {str(n): default_gamma(n) for n in [1, 9, 10, 11, 29, 30, 31, 100, 240, 241, 250, 251, 5000]},
    "weights": {str(m): default_weights(m).tolist() for m in [0, 1, 24, 25, 26, 27, 40]},
    "numeric": numeric, "categorical": categorical, "joint": joint,
    "trials": trials, "splits": splits,
    "ppf": ppf, "log_gauss_mass": mass, "log_ndtr": log_ndtr,
}, indent=1))
