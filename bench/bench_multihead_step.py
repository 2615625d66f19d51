"""Per-step time of the published multi-head experiments: wflow vs a batched einsum engine.

Tokens on S² (n = 200), H ∈ {1, 10, 100} frozen random symmetric heads
``D_h = Z + Zᵀ`` with ``V_h = −D_h`` (descent convention), ``w_h = 1/H``,
softmax ``β = 1``; explicit Euler ``x ← (x + dt v)/|x + dt v|``, ``dt = 5e-3``.
Every step records the energy ``E = Σ_h w_h (1/2β) ∫∫ e^{β xᵀD_h y} dμ dμ``, the
published engine's ``G² = ∫ |v|² HM_h(Z_h) dμ`` and the running balance
``E_k − E_0 + Σ_{i<k} dt G²_i`` (docs/theory.md §3: it does not vanish for several heads).

Four implementations of the same step ("peers"), each in its own fresh process with an
explicit, recorded environment and the same thread count (``bench/_common.py``), warmed up
there, in alternating rounds (``--rounds``, the order rotated each round; the median step
time of each process, then the best round):

* ``einsum``  the batched reference engine: ``(H, n, n)`` score tensor by einsum,
  ``exp``, contractions by einsum;
* ``energy``  wflow's general path: ``wflow.energy.evaluate`` + ``head_energies`` +
  ``slope_terms`` (fused kernel inside, NumPy post-processing outside);
* ``fused``   ``wflow.kernels.particle_terms``: the whole step's sums and diagnostics
  in one compiled pass, called once per step from Python;
* ``path``    ``wflow.particles.euler_path``: the whole Euler loop compiled (each step the same
  fused pass, no per-step Python work); per-step time = loop time / (steps + 1)
  evaluations (the median of ``--repeats`` loops).

Usage: ``python bench/bench_multihead_step.py [--steps 200] [--quick] [--cpu-time]
[--rounds 3] [--threads 2]``;
writes ``bench/results/bench_multihead_step[_quick][_cpu].json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    CLOCK,
    call_peer,
    default_threads,
    parent_machine,
    sphere,
    table,
    write_json,
)

DT = 5e-3
BETA = 1.0


def normalize(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def step_einsum(x, A, V, w, wbar):
    """The batched einsum engine: returns (x_next, E, G2)."""
    s = BETA * np.einsum("id,hde,je->hij", x, A, x, optimize=True)
    Kmat = np.exp(s)
    n = x.shape[0]
    Z = Kmat.sum(axis=2) / n
    Y = np.einsum("hij,jd->hid", Kmat, x, optimize=True) / n
    f = np.einsum("hde,hie->hid", V, Y, optimize=True) / Z[:, :, None]
    u = np.einsum("h,hid->id", w, f)
    v = u - np.sum(u * x, axis=1, keepdims=True) * x
    E = float(w @ Z.mean(axis=1)) / (2 * BETA)
    hm = 1.0 / np.einsum("h,hi->i", wbar, 1.0 / Z)
    G2 = float(np.mean(np.sum(v * v, axis=1) * hm))
    return normalize(x + DT * v), E, G2


def step_energy(x, heads, attn, m):
    from wflow.energy import evaluate, head_energies, slope_terms

    fe = evaluate(x, heads, attn, m=m)
    st = slope_terms(x, m, fe, heads, fe.v)
    E = float(heads.w @ head_energies(fe, m, attn))
    return normalize(x + DT * fe.v), E, st.G2


def step_fused(x, heads, attn, m):
    from wflow.kernels import particle_terms

    pt = particle_terms(x, m, heads.Q, heads.K, heads.V, heads.w, beta=attn.beta, kind=attn.kind)
    return normalize(x + DT * pt.velocity), pt.E, pt.G2


def run_path(x0, heads, attn, steps, repeats):
    """The compiled loop: per-step times (loop time / evaluations) and the records."""
    from wflow.particles import euler_path

    euler_path(x0, heads, attn, dt=DT, steps=2)  # warm-up (compilation)
    walls = []
    for _ in range(repeats):
        t0 = CLOCK["timer"]()
        p = euler_path(x0, heads, attn, dt=DT, steps=steps - 1)
        walls.append((CLOCK["timer"]() - t0) / steps)
    assert p.status == "success", p.message
    # the einsum engine's balance: E_k − E_0 + Σ_{i<k} dt G²_i (left point)
    bal = p.E - p.E[0] + np.concatenate([[0.0], np.cumsum(DT * p.G2[:-1])])
    return np.array(walls), p.E, p.G2, bal


def run(step, x0, steps):
    """``steps`` Euler steps; per-step times, and the E / G² / balance records."""
    x = x0.copy()
    E_rec, G_rec, bal, times = [], [], [], []
    acc = 0.0
    E0 = None
    for _ in range(steps):
        t0 = CLOCK["timer"]()
        x_new, E, G2 = step(x)
        times.append(CLOCK["timer"]() - t0)
        E0 = E if E0 is None else E0
        bal.append(E - E0 + acc)
        acc += DT * G2
        E_rec.append(E)
        G_rec.append(G2)
        x = x_new
    return np.array(times), np.array(E_rec), np.array(G_rec), np.array(bal)


def peer(impl: str, H: int, steps: int, repeats: int, cpu_time: bool) -> dict:
    """In a fresh process: warm up and run one implementation; times and records."""
    from wflow.attention.heads import Attention, Heads

    if cpu_time:
        CLOCK.update(timer=time.process_time, name="cpu, 1 thread")
    n = 200
    attn = Attention("softmax", BETA)
    m = np.full(n, 1.0 / n)
    rng = np.random.default_rng(H)
    heads = Heads.random_symmetric(H, 3, rng, value_sign=-1.0)  # D = Z + Zᵀ, V = −D, w = 1/H
    x0 = sphere(rng, n, 3)
    A = np.ascontiguousarray(heads.A)
    V = np.ascontiguousarray(heads.V)
    if impl == "path":
        times, E, _G2, bal = run_path(x0, heads, attn, steps, repeats)
    else:
        fn = {"einsum": lambda x: step_einsum(x, A, V, heads.w, heads.wbar),
              "energy": lambda x: step_energy(x, heads, attn, m),
              "fused": lambda x: step_fused(x, heads, attn, m)}[impl]
        fn(x0)  # warm-up (compilation, caches)
        times, E, _G2, bal = run(fn, x0, steps)
    return {"s_per_step": float(np.median(times)), "E": E.tolist(), "balance": bal.tolist(),
            "clock": CLOCK["name"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200, help="Euler steps per run (T = steps·dt)")
    ap.add_argument("--quick", action="store_true", help="20 steps")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of the compiled loop")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the peers")
    ap.add_argument("--threads", type=int, default=default_threads())
    ap.add_argument("--cpu-time", action="store_true",
                    help="one thread, process CPU time (robust on a shared machine)")
    args = ap.parse_args(argv)
    threads = 1 if args.cpu_time else args.threads
    steps = 20 if args.quick else args.steps
    n = 200
    rows = []
    start = parent_machine()
    impls = ["einsum", "energy", "fused", "path"]
    for H in (1, 10, 100):
        rounds = []
        for r in range(args.rounds):
            order = impls[r:] + impls[:r] if r < len(impls) else impls
            rounds.append({impl: call_peer("bench_multihead_step:peer", threads=threads,
                                           impl=impl, H=H, steps=steps,
                                           repeats=args.repeats, cpu_time=args.cpu_time)
                           for impl in order})
        res = {impl: min((rnd[impl] for rnd in rounds), key=lambda p: p["s_per_step"])
               for impl in impls}
        t_ref = res["einsum"]["s_per_step"]
        E_ref, bal_ref = np.array(res["einsum"]["E"]), np.array(res["einsum"]["balance"])
        for name in impls:
            p = res[name]
            E, bal = np.array(p["E"]), np.array(p["balance"])
            med = p["s_per_step"]
            loads = [v for rnd in rounds for v in (rnd[name]["load_before"],
                                                   rnd[name]["load_after"])]
            rows.append({
                "H": H, "impl": name, "ms_per_step": 1e3 * med, "speedup": t_ref / med,
                "ms_per_step_rounds": [1e3 * rnd[name]["s_per_step"] for rnd in rounds],
                "E_final": float(E[-1]), "balance_final": float(bal[-1]),
                "max_dev_E": float(np.max(np.abs(E - E_ref)) / np.max(np.abs(E_ref))),
                "max_dev_balance": float(np.max(np.abs(bal - bal_ref))),
                "load_max": max(loads), "env": p["env"], "peer": p["peer"],
            })
        print(f"H = {H}: done", flush=True)
    print(f"\nn = {n} tokens on S², softmax β = {BETA}, Euler dt = {DT}, {steps} steps; "
          f"median time per step (E, G², balance recorded every step), {threads} thread(s)")
    print(table(rows, [("H", "H", "{}"), ("impl", "implementation", "{}"),
                       ("ms_per_step", "ms/step", "{:.3f}"), ("speedup", "vs einsum", "{:.1f}x"),
                       ("E_final", "E(T)", "{:.6f}"), ("balance_final", "balance(T)", "{:.5f}"),
                       ("max_dev_E", "max |ΔE|/|E|", "{:.1e}"), ("load_max", "load", "{:.1f}")]))
    out = {"machine_start": start, "machine_end": parent_machine(), "n": n, "dt": DT,
           "beta": BETA, "steps": steps, "threads": threads, "rows": rows,
           "clock": "cpu, 1 thread" if args.cpu_time else "wall",
           "command": "python bench/bench_multihead_step.py" + (" --quick" if args.quick else "")
           + (" --cpu-time" if args.cpu_time else "")}
    name = ("bench_multihead_step" + ("_quick" if args.quick else "")
            + ("_cpu" if args.cpu_time else ""))
    path = write_json(name, out)
    print(f"\nload average start {start['loadavg']} end {out['machine_end']['loadavg']}; "
          f"wrote {path.relative_to(Path(__file__).resolve().parents[1])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
