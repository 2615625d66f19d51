"""``wflow heads``: multi-head formulas of docs/theory.md §6 ([MH]).

Sub-commands: ``beta-star`` (critical cosine ``c*(H)`` and inverse temperature ``β*``),
``lambda-c`` (convexity threshold of ``φ``) and ``radial-dominance`` (own power,
cross-head radial-shadow terms and margins of given tokens and heads). ``radial-dominance
--modules my_kinds.py --kind my_kind`` reaches an attention kind that the user's module
registers (:func:`wflow.attention.kinds.register_kind`), as a scenario's ``modules`` do.
"""

from __future__ import annotations

import argparse
import json

from . import add_action, add_action_command, print_records

#: ``--n`` of the actions that take token counts.
_N_TOKENS = dict(type=float, nargs="+", required=True, help="number(s) of tokens")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``heads`` subcommand and its sub-subcommands."""
    hs = add_action_command(
        sub, "heads", help="multi-head formulas: critical temperature, λ_c, radial dominance",
        description="Quantitative multi-head results (docs/theory.md §6): the critical inverse "
        "temperature β* of radial dominance, the convexity threshold λ_c of the early rate φ, "
        "and a radial-dominance check of given tokens and heads.")
    add_action(
        hs, "beta-star", _beta_star, help="c*(H) and β* = (1/2α) ln(c*² (n−1)/(1 − c*²))",
        description="Critical cosine c*(H) = (sqrt((H−1)²+4) − (H−1))/2 and critical inverse "
        "temperature β* = (1/2α) ln(c*(H)² (n−1) / (1 − c*(H)²)) of radial dominance for n "
        "orthonormal tokens and H identical scalar heads αI (dominance holds iff β ≤ β*). "
        "Also prints β*_exact = (1/2α) ln((n−1)/(H−1)), where the sharp radial term switches. "
        "Every option takes several values, broadcast against each other. H = 1: β* = inf "
        "(no cross-head term). β* <= 0: dominance fails at every β > 0. Domain: integer "
        "H >= 1, integer n >= 2, α > 0 (otherwise exit status 2 naming the argument).",
        arguments={"--H": dict(type=float, nargs="+", required=True, help="number(s) of heads"),
                   "--n": _N_TOKENS,
                   "--alpha": dict(type=float, nargs="+", default=[1.0],
                                   help="head strength(s) α > 0 (default 1)")},
        json="emit a JSON list of records (infinite values as the string 'inf')")
    add_action(
        hs, "lambda-c", _lambda_c, help="convexity threshold λ_c of φ(λ) = 2λ/(e^{λβ}+n−1)",
        description="λ_c = s_c/β, s_c > 2 the root of (s−2)e^s = (n−1)(s+2): φ is concave "
        "below and convex above λ_c (superadditivity of heterogeneous heads for λ̄ > λ_c).",
        arguments={"--n": _N_TOKENS,
                   "--beta": dict(type=float, nargs="+", default=[1.0],
                                  help="inverse temperature(s) (default 1)")})
    add_action(
        hs, "radial-dominance", _radial_dominance,
        help="per-head own power, cross-head radial-shadow terms, margins",
        description="For tokens x (n, d) and heads, compute per head the own tangential power, "
        "the exact cross-head radial-shadow term, its Cauchy–Schwarz bound R_h = ∫|∇ψ_h| "
        "Σ_{h'≠h} w_h'|a^{h'}|, the margin own − R_h and whether radial dominance holds "
        "(see wflow.multihead).",
        arguments={
            "--tokens": dict(required=True,
                             help=".npy array (n, d) or .npz with array 'x' (unit vectors)"),
            "--heads": dict(required=True,
                            help=".npz heads file (Q, K, V[, w] or A[, V, w])"),
            "--beta": dict(type=float, required=True, help="inverse temperature β > 0"),
            "--kind": dict(default="softmax",
                           help="attention kind: a registered name (wflow's: softmax, usa, "
                           "relu; default softmax) or one that a --modules file registers"),
            "--modules": dict(nargs="+", action="extend", default=[], metavar="MODULE",
                              help="import these modules first ('path/to/file.py' relative "
                              "to the current folder, or 'package.module'), e.g. to register "
                              "attention kinds of your own, as a scenario's top-level "
                              "`modules` key does")})


def _beta_star(args: argparse.Namespace) -> int:
    import numpy as np

    from ..multihead import beta_star, beta_star_exact, c_star

    H, n, a = np.broadcast_arrays(np.asarray(args.H), np.asarray(args.n), np.asarray(args.alpha))
    bs = beta_star(H, n, a)
    be = beta_star_exact(H, n, a)
    cs = c_star(H)
    recs = []
    for i in range(H.size):
        note = ("no cross-head term: dominance at every beta" if H.flat[i] == 1
                else "dominance fails at every beta > 0" if bs.flat[i] <= 0
                else "radial dominance (RD) iff beta <= beta_star; the sharp radial term "
                     "alone (own >= |cross radial|) iff beta <= beta_star_exact")
        recs.append({"H": int(H.flat[i]), "n": int(n.flat[i]), "alpha": float(a.flat[i]),
                     "c_star": float(cs.flat[i]), "beta_star": float(bs.flat[i]),
                     "beta_star_exact": float(be.flat[i]), "note": note})
    return print_records(recs, as_json=args.json, note="note", columns=(
        ("H", "H", 3, ""), ("n", "n", 6, ""), ("alpha", "alpha", 8, ".4g"),
        ("c*(H)", "c_star", 10, ".6f"), ("beta*", "beta_star", 12, ".6g"),
        ("beta*_exact", "beta_star_exact", 12, ".6g")))


def _lambda_c(args: argparse.Namespace) -> int:
    import numpy as np

    from ..multihead import lambda_c

    n, b = np.broadcast_arrays(np.asarray(args.n), np.asarray(args.beta))
    lc = np.atleast_1d(lambda_c(n, b))
    recs = [{"n": int(n.flat[i]), "beta": float(b.flat[i]), "lambda_c": float(lc.flat[i]),
             "s_c": float(lc.flat[i] * b.flat[i])} for i in range(n.size)]
    return print_records(recs, as_json=args.json, jsonable=False, columns=(
        ("n", "n", 6, ""), ("beta", "beta", 8, ".4g"), ("lambda_c", "lambda_c", 12, ".8g"),
        ("s_c=beta*lambda_c", "s_c", 18, ".10g")))


def _load_tokens(path: str):
    from pathlib import Path

    import numpy as np

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"tokens file not found: {p}")
    if p.suffix == ".npz":
        with np.load(p) as z:
            if "x" not in z.files:
                raise ValueError(f"tokens file {p}: needs an array 'x'; found {sorted(z.files)}")
            return np.asarray(z["x"], dtype=np.float64)
    return np.asarray(np.load(p), dtype=np.float64)


def _radial_dominance(args: argparse.Namespace) -> int:
    from ..attention.heads import Attention, Heads
    from ..attention.kinds import REGISTRY
    from ..infra.callables import load_module
    from ..infra.io import to_jsonable
    from ..multihead import radial_dominance

    for i, spec in enumerate(args.modules):
        load_module(spec, base_dir=".", name=f"--modules[{i}]")
    kind = REGISTRY.get(args.kind, "--kind")  # the kinds registered now (modules included)
    x = _load_tokens(args.tokens)
    heads = Heads.from_npz(args.heads)
    if x.ndim != 2 or x.shape[1] != heads.d:
        raise ValueError(f"--tokens: expected shape (n, {heads.d}) to match the heads, "
                         f"got {x.shape}")
    rd = radial_dominance(x, heads, Attention(kind.name, args.beta))
    out = rd.as_dict()
    if args.json:
        print(json.dumps(to_jsonable(out), indent=2))
        return 0
    cols = ("own", "cross_direct", "cross_radial", "cross_bound", "margin", "holds")
    print(f"{'head':>4} " + " ".join(f"{c:>13}" for c in cols))
    for h in range(heads.H):
        vals = [out[c][h] for c in cols]
        print(f"{h:>4} " + " ".join(f"{v!s:>13}" if isinstance(v, bool) else f"{v:>13.6g}"
                                    for v in vals))
    return 0
