"""wflow's entropy JKO step against the published LJKO code on LJKO's own Fokker–Planck case.

Usage::

    python bench/published_ljko.py PATH/TO/LJKO [--levels 1 2 3 4] [--out bench/results]

``PATH`` is a checkout of ``gptod/LJKO`` (commit 0a38052: the upwind linearised-JKO
finite-volume scheme of Cancès, Gallouët and Todeschi, Numer. Math. 146, 2020), run here
under GNU Octave (``octave-cli``). Their case, as shipped in ``LJKO.m``: the Fokker–Planck
equation with ``V = 0`` (``E(ρ) = ρ log ρ``, so ``∂_t ρ = Δρ``) on the unit square with
no-flux boundaries, ``ρ₀(x, y) = exp(−((x − ½)² + (y − ½)²)/0.05)`` sampled at the cell
centres, on their acute triangulations ``tri2_mesh1`` … ``tri2_mesh4`` (``tri2_mesh5`` with
``--levels 1 2 3 4 5``: Octave builds LJKO's upwind matrix entry by entry, more than 25
minutes there on a loaded 2-core machine).

What is changed in their script, and only this (the driver copies it and substitutes
lines; the scheme's files ``Fk2D.m``, ``JFk2D.m``, ``Div2D.m``, ``Ktos2D.m`` run unchanged):
the mesh, ``T`` and the initial ``τ`` are parameters; ``kmin = 0`` so that ``τ`` stays
fixed (their script multiplies ``τ`` by 1.2 after a Newton solve of fewer than ``kmin``
iterations, which would make the refinement study's ``τ`` depend on Newton's speed; a
halving after ``kmax`` failed iterations stays, and the recorded times show none
happened); the plots are not drawn; the final density and the step times are saved.

wflow's side: :func:`wflow.jko.fv.fv_entropy_step` with ``D = 1`` on the SAME mesh (its
internal edges' transmissivities ``|σ|/d_σ`` and cell areas, read from their ``.mat``
files), the same ``ρ₀``, ``τ`` and ``T``. The two schemes differ: LJKO solves the
linearised JKO with the upwind mobility of ``ρ^{k+1}`` by Newton on the primal–dual
system; wflow's step freezes the mobility at the arithmetic mean of ``ρ^k`` and solves a
strictly convex dual by Newton. Both are first order in time and space.

Measured: the L¹ error ``Σ_K |K| |ρ_K − ρ̄_K(T)|`` against the exact solution's cell
averages (a cosine series, separable; its coefficients by 400-point Gauss–Legendre,
truncated where ``e^{−k²π²T}`` is below 1e-20; the cell averages by a degree-5 rule on
each triangle), the fitted order of each scheme in ``h`` under ``τ = τ_h·h``, the L¹
distance between the two schemes, and each side's wall and CPU time. Written to
``published_ljko.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import scipy.io as sio

from wflow.jko.fv import fv_entropy_step

T_END = 0.1
TAU_H = 0.1  # τ = TAU_H · h: joint refinement
WIDTH = 0.05  # ρ₀ = exp(−|x − c|²/WIDTH), as in LJKO.m


def _patched_script(src: str) -> str:
    """LJKO.m with the parameters substituted and the plots removed (module docstring)."""
    subs = [("clear\nclose all\n", ""),
            ("load('sq_mesh2')", "load(MESH)"),
            ("T = 1; %integration time", "T = T_END; %integration time"),
            ("tau = 0.01; %initial time step", "tau = TAU0; %initial time step"),
            ("verb = 1;", "verb = 0;"),
            ("kmin = 5;", "kmin = 0;")]
    for a, b in subs:
        if a not in src:
            raise SystemExit(f"LJKO.m: expected line not found: {a!r} (another commit?)")
        src = src.replace(a, b, 1)
    i, j = src.index("    % plot"), src.index("    axis off\n") + len("    axis off\n")
    src = src[:i] + src[j:]
    src = src[:src.index("% Energy decay")]
    return src + ("save('-ascii', '-double', OUTFILE, 'rhot');\n"
                  "save('-ascii', '-double', [OUTFILE '.ts'], 'ts');\n")


def exact_1d_coefficients(T: float) -> tuple[np.ndarray, np.ndarray]:
    """``u(T, x) = Σ_k a_k e^{−k²π²T} cos(kπx)`` for ``u(0, x) = exp(−(x − ½)²/WIDTH)``."""
    xg, wg = np.polynomial.legendre.leggauss(400)
    x, w = 0.5 * (xg + 1), 0.5 * wg
    g = np.exp(-((x - 0.5) ** 2) / WIDTH)
    kmax = int(np.ceil(np.sqrt(20 * np.log(10) / (np.pi**2 * T)))) + 1
    k = np.arange(kmax + 1)
    a = 2 * (np.cos(np.pi * np.outer(k, x)) @ (w * g))
    a[0] /= 2
    return k, a * np.exp(-(k * np.pi) ** 2 * T)


def exact_cell_averages(mesh: dict, T: float) -> np.ndarray:
    """The exact ``ρ(T)`` (product of two 1-D series) averaged over each triangle."""
    k, a = exact_1d_coefficients(T)
    nodes = mesh["nodes"]
    tri = mesh["cells"][:, 1:4].astype(int) - 1
    # Strang–Fix degree-5 rule (7 points) in barycentric coordinates
    p1, p2 = 0.0597158717, 0.4701420641
    q1, q2 = 0.7974269853, 0.1012865073
    bary = np.array([[1 / 3, 1 / 3, 1 / 3], [p1, p2, p2], [p2, p1, p2], [p2, p2, p1],
                     [q1, q2, q2], [q2, q1, q2], [q2, q2, q1]])
    wts = np.array([0.225, *[0.1323941527] * 3, *[0.1259391805] * 3])
    pts = np.einsum("qv,cvd->cqd", bary, nodes[tri])

    def u(x):
        return np.cos(np.pi * x[..., None] * k) @ a

    return (u(pts[..., 0]) * u(pts[..., 1])) @ wts


def wflow_geometry(mesh: dict) -> SimpleNamespace:
    """The FV data of their mesh: cell areas, internal edges ``(K, L)`` and ``|σ|/d_σ``."""
    edges = mesh["edges"]
    internal = mesh["ind"]["internal"][0, 0].ravel().astype(int) - 1
    e = edges[internal]
    return SimpleNamespace(areas=mesh["area"].ravel().astype(float), M=int(mesh["ncell"].item()),
                           edge_cells=e[:, 2:4].astype(int) - 1, trans=e[:, 6].astype(float))


def run_wflow(mesh: dict, tau: float, steps: int) -> tuple[np.ndarray, float, float, int]:
    geo = wflow_geometry(mesh)
    cc = mesh["cc"]
    rho0 = np.exp(-((cc[:, 0] - 0.5) ** 2 + (cc[:, 1] - 0.5) ** 2) / WIDTH)
    m = rho0 * geo.areas
    w0, c0 = time.perf_counter(), time.process_time()
    newton = 0
    for _ in range(steps):
        m, _, it = fv_entropy_step(geo, m, tau=tau, diffusion=1.0)
        newton += it
    return m / geo.areas, time.perf_counter() - w0, time.process_time() - c0, newton


def run_ljko(code: Path, level: int, tau: float, work: Path) -> tuple[np.ndarray, np.ndarray,
                                                                        float, float]:
    out = work / f"rho_{level}.txt"
    expr = (f"MESH='tri2_mesh{level}'; T_END={T_END!r}; TAU0={tau!r}; OUTFILE='{out}'; "
            "ljko_run")
    w0 = time.perf_counter()
    r = subprocess.run(["octave-cli", "--no-gui", "--quiet", "--eval", expr], cwd=work,
                       capture_output=True, text=True, timeout=7200)
    wall = time.perf_counter() - w0
    if not out.is_file():
        raise SystemExit(f"octave failed at level {level}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    cpu = float("nan")  # octave's CPU time is not ours; wall only (one thread)
    return np.loadtxt(out), np.loadtxt(str(out) + ".ts"), wall, cpu


def order(h, err) -> float:
    return float(np.polyfit(np.log(h), np.log(err), 1)[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ljko", type=Path, help="checkout of gptod/LJKO")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args(argv)
    if shutil.which("octave-cli") is None:
        print("octave-cli not found: the published code cannot run here", file=sys.stderr)
        return 2
    commit = subprocess.run(["git", "-C", str(args.ljko), "rev-parse", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    version = subprocess.run(["octave-cli", "--version"], capture_output=True,
                             text=True).stdout.splitlines()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for f in args.ljko.glob("*.m"):
            shutil.copy(f, work)
        for f in args.ljko.glob("*.mat"):
            shutil.copy(f, work)
        (work / "ljko_run.m").write_text(_patched_script((args.ljko / "LJKO.m").read_text()))
        for level in args.levels:
            mesh = sio.loadmat(str(args.ljko / f"tri2_mesh{level}.mat"))
            h = float(mesh["h"].item())
            steps = round(T_END / (TAU_H * h))
            tau = T_END / steps
            exact = exact_cell_averages(mesh, T_END)
            area = mesh["area"].ravel()
            rho_l, ts, wall_l, _ = run_ljko(args.ljko, level, tau, work)
            fixed = bool(np.allclose(np.diff(ts), tau, rtol=1e-9, atol=0))
            rho_w, wall_w, cpu_w, newton = run_wflow(mesh, tau, steps)
            row = dict(level=level, cells=int(area.size), h=h, tau=tau, steps=steps,
                       ljko_fixed_steps=fixed,
                       l1_error_ljko=float(area @ np.abs(rho_l - exact)),
                       l1_error_wflow=float(area @ np.abs(rho_w - exact)),
                       l1_ljko_vs_wflow=float(area @ np.abs(rho_l - rho_w)),
                       mass_defect_wflow=float(abs(area @ rho_w - area @ rho_l) / (area @ rho_l)),
                       wall_s_ljko_octave=wall_l, wall_s_wflow=wall_w, cpu_s_wflow=cpu_w,
                       newton_wflow=newton)
            print(json.dumps(row))
            rows.append(row)
    h = [r["h"] for r in rows]
    res = dict(
        published=f"gptod/LJKO@{commit}", octave=version, case=(
            "Fokker-Planck V = 0 (heat, D = 1) on the unit square, no flux, "
            f"rho0 = exp(-|x - (1/2, 1/2)|^2/{WIDTH}) at the cell centres, T = {T_END}, "
            f"tau = {TAU_H}*h (rounded to T/steps), meshes tri2_mesh{args.levels}"),
        rows=rows,
        order_l1_ljko=order(h, [r["l1_error_ljko"] for r in rows]),
        order_l1_wflow=order(h, [r["l1_error_wflow"] for r in rows]),
    )
    print(f"fitted L1 orders: LJKO {res['order_l1_ljko']:.3f}, wflow {res['order_l1_wflow']:.3f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "published_ljko.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
