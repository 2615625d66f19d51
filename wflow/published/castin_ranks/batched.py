"""Many draws at once: the batched Euler step, its speculative early stop, one (case, dimension).

Part of :mod:`wflow.published.castin_ranks` (the package re-exports its names).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .moment_ode import draw_matrices, exact_limit, projected_euler
from .options import CASES, RankOptions

#: Relative guard band of the batched stopping tests: a lane whose vectorised residual
#: (or trace) lies within this band of the threshold is re-tested with the published
#: scalar call (``np.linalg.norm`` / ``np.trace``). The vectorised sums differ from the
#: published ones by at most ~25·eps relative (25 terms), 10⁶ times below the band.
_GUARD = 1e-8
#: Steps within which a diverging attempt (``tr Σ > 10³``) is counted as an early failure
#: by the scheduler's estimates (:class:`_Speculator`; no effect on the numbers).
_EARLY = 100


def batched_euler_step(S: np.ndarray, V: np.ndarray, A: np.ndarray, *, step: float,
                       tol: float, tol_high: float = 1e3
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One published projected-Euler iteration for a stack of ``L`` independent lanes.

    Parameters
    ----------
    S, V, A : ndarray, shape (L, d, d)
        Iterates, value matrices and ``A = (Kᵀ·Q)/√d`` (each lane's own, computed once by
        the published expression, which the published code re-evaluates each step).
    step, tol, tol_high : float
        Euler step ``h``, convergence tolerance and divergence trace (u 77, 87-96).

    Returns
    -------
    S_new : ndarray, shape (L, d, d)
        ``P(S + h(R + Rᵀ))``.
    converged : ndarray of bool, shape (L,)
        ``‖R + Rᵀ‖_F < tol`` (the residual of ``S``, tested after the update, u 93).
    diverged : ndarray of bool, shape (L,)
        ``tr S_new > tol_high`` (u 96).

    Notes
    -----
    The same LAPACK/BLAS calls as the published scalar code, slice by slice: NumPy's
    stacked ``matmul`` calls ``gemm`` per ``d×d`` slice as ``np.dot`` does, stacked
    ``eigh`` calls ``syevd`` per slice, and the elementwise operations are those of the
    published line (``R + R.T``, ``S + h*R``, the clipping, ``U·(diag(λ)·Uᵀ)``). The
    two reductions (Frobenius norm, trace) are vectorised and only decide a comparison;
    a lane within :data:`_GUARD` of the threshold is decided by the published call. The
    tests check every iterate count and limit against the published run bit for bit.
    """
    R = np.matmul(np.matmul(V, S), np.matmul(A, S))
    R = R + np.swapaxes(R, 1, 2)
    res = np.sqrt(np.einsum("lij,lij->l", R, R))
    for m in np.flatnonzero(np.abs(res - tol) <= _GUARD * tol):
        res[m] = np.linalg.norm(R[m])
    Sn = S + step * R
    try:
        lam, U = np.linalg.eigh(Sn)
    except np.linalg.LinAlgError:  # pragma: no cover - some lane is NaN: decide per lane
        pairs = [np.linalg.eigh(Sn[m]) for m in range(Sn.shape[0])]  # raises as published
        lam = np.stack([p[0] for p in pairs])
        U = np.stack([p[1] for p in pairs])
    lam[lam < 0] = 1e-14
    d = S.shape[1]
    D = np.zeros_like(Sn)
    D[:, np.arange(d), np.arange(d)] = lam
    P = np.matmul(U, np.matmul(D, np.swapaxes(U, 1, 2)))
    tr = np.trace(P, axis1=1, axis2=2)
    for m in np.flatnonzero(np.abs(tr - tol_high) <= _GUARD * tol_high):
        tr[m] = np.trace(P[m])
    return P, res < tol, tr > tol_high


class _Speculator:
    """The published attempt loop (u 308-346) of one dimension, on ``L`` lanes at once.

    Attempt ``k`` integrates the ``k``-th ``Σ₀`` of the stream with the ``(Q, K, V)`` of
    index ``i`` = the number of attempts before ``k`` that converged, so which ``(k, i)``
    the published loop runs depends on earlier outcomes. Each lane integrates one node
    ``(k, i)`` exactly (:func:`batched_euler_step`); the lanes are spent on the nodes most
    likely to lie on the published path given the outcomes known so far (a success
    probability per index, shrunk to the dimension's rate, and lowered for a node still
    running past the converged attempts' iteration counts). Only nodes on the path, whose
    predecessors' outcomes are all known, are committed: the result is the published
    loop's whatever the predictions.
    """

    def __init__(self, *, d: int, S0: Any, QKV: Any, n_need: int, n_max: int, step: float,
                 tol: float, max_iter: int, lanes: int, p_start: float = 0.3,
                 p_keep: float = 0.1) -> None:
        self.d, self.S0, self.QKV = d, S0, QKV
        self.n_need, self.n_max, self.step, self.tol = n_need, n_max, step, tol
        self.max_iter, self.lanes = max_iter, max(1, lanes)
        # a lane costs ~1/4 of a scalar step (bench): start a node when it is on the
        # published path with probability >= p_start; keep a running one down to p_keep
        self.p_start, self.p_keep = p_start, p_keep
        self.done: dict[tuple[int, int], tuple[np.ndarray, int, bool]] = {}
        self.keys: list[tuple[int, int]] = []
        dd = (0, d, d)
        self.S, self.V, self.A = np.empty(dd), np.empty(dd), np.empty(dd)
        self.n = np.empty(0, np.int64)
        self.path: list[tuple[int, int]] = []
        self.k0 = self.i0 = 0
        self.lane_steps = 0

    # -- probabilities -------------------------------------------------------------
    def _probabilities(self, depth: int) -> dict[tuple[int, int], float]:
        stats = self._stats()
        probs: dict[tuple[int, int], float] = {}
        level = {self.i0: 1.0}
        for k in range(self.k0, min(self.n_max, self.k0 + depth)):
            nxt: dict[int, float] = {}
            for i, pr in level.items():
                if i >= self.n_need or pr < self.p_keep:
                    continue
                key = (k, i)
                probs[key] = pr
                p = stats(key)
                if p > 0:
                    nxt[i + 1] = nxt.get(i + 1, 0.0) + pr * p
                if p < 1:
                    nxt[i] = nxt.get(i, 0.0) + pr * (1.0 - p)
            if not nxt:
                break
            level = nxt
        return probs

    def _stats(self) -> Any:
        """``p_conv(key)``: the known outcome, else an estimate from the outcomes so far.

        Early failures (``tr Σ > 10³`` within :data:`_EARLY` steps) come long before the
        slow outcomes, so the rate is split, ``p = q·c``: ``q = P(survive the early
        phase)`` counts the running lanes past it as survivors, ``c = P(converge |
        survived)`` the finished slow outcomes; a lane running past the early phase has
        ``p = c``. Per index, its own counts shrunk to the dimension's rates (weight 2,
        Jeffreys priors for the dimension).
        """
        cnt: dict[int, list[int]] = {}  # index -> [early fail, slow fail, converged, alive]
        for (_, j), v in self.done.items():
            cnt.setdefault(j, [0, 0, 0, 0])[2 if v[2] else (0 if v[1] <= _EARLY else 1)] += 1
        running: dict[tuple[int, int], int] = {}
        for key, n in zip(self.keys, self.n.tolist(), strict=True):
            running[key] = n
            if n > _EARLY:
                cnt.setdefault(key[1], [0, 0, 0, 0])[3] += 1
        e, f, c, a = (sum(x[m] for x in cnt.values()) for m in range(4))
        q_dim = (f + c + a + 0.5) / (e + f + c + a + 1.0)
        c_dim = (c + 0.5) / (c + f + 1.0)

        def p_conv(key: tuple[int, int]) -> float:
            if key in self.done:
                return 1.0 if self.done[key][2] else 0.0
            ei, fi, ci, ai = cnt.get(key[1], (0, 0, 0, 0))
            cc = (ci + 2.0 * c_dim) / (ci + fi + 2.0)
            if running.get(key, 0) > _EARLY:
                return cc
            return cc * (fi + ci + ai + 2.0 * q_dim) / (ei + fi + ci + ai + 2.0)

        return p_conv

    # -- lanes ---------------------------------------------------------------------
    def _commit(self) -> None:
        while self.i0 < self.n_need and self.k0 < self.n_max and (self.k0, self.i0) in self.done:
            self.path.append((self.k0, self.i0))
            if self.done[(self.k0, self.i0)][2]:
                self.i0 += 1
            self.k0 += 1

    def finished(self) -> bool:
        return self.i0 >= self.n_need or self.k0 >= self.n_max

    def _schedule(self) -> None:
        """Spend the lanes on the most probable nodes; running ones weigh 3× (sunk work)."""
        probs = self._probabilities(depth=2 * self.lanes)
        running = set(self.keys)
        score = [(3.0 * p if k in running else p, k) for k, p in probs.items()
                 if k not in self.done
                 and (p >= self.p_start or (k in running and p >= self.p_keep))]
        score.sort(key=lambda t: (-t[0], t[1][0]))
        chosen = {k for _, k in score[:self.lanes]}
        keep = np.array([k in chosen for k in self.keys], bool)
        if not keep.all():
            self._select(keep)
        new = [k for _, k in score[:self.lanes] if k not in running]
        if not new:
            return
        S = np.stack([self.S0(k) for k, _ in new])
        V = np.stack([self.QKV(i)[0] for _, i in new])
        A = np.stack([self.QKV(i)[1] for _, i in new])
        self.S = np.concatenate([self.S, S])
        self.V = np.concatenate([self.V, V])
        self.A = np.concatenate([self.A, A])
        self.n = np.concatenate([self.n, np.zeros(len(new), np.int64)])
        self.keys.extend(new)

    def _select(self, keep: np.ndarray) -> None:
        self.S, self.V, self.A, self.n = self.S[keep], self.V[keep], self.A[keep], self.n[keep]
        self.keys = [k for k, m in zip(self.keys, keep, strict=True) if m]

    def run(self, *, reschedule: int = 256, min_gap: int = 32
            ) -> list[tuple[tuple[int, int], tuple[np.ndarray, int, bool]]]:
        """Integrate until the path is complete; ``[((k, i), (Σ_last, its, conv)), ...]``.

        The lanes are re-planned every ``reschedule`` steps, and after new outcomes at
        most every ``min_gap`` steps (at once when the head of the path is known or
        fewer than half the lanes run).
        """
        since = reschedule
        news = True
        while True:
            head = (self.k0, self.i0)
            self._commit()
            if self.finished():
                break
            if (since >= reschedule or (news and since >= min_gap)
                    or head != (self.k0, self.i0)
                    or (len(self.keys) < 0.5 * self.lanes and since >= 8)):
                self._schedule()
                since, news = 0, False
            Sn, conv, div = batched_euler_step(self.S, self.V, self.A, step=self.step,
                                               tol=self.tol)
            self.lane_steps += len(self.keys)
            self.n += 1
            stop = conv | div | (self.n >= self.max_iter)
            if stop.any():
                for m in np.flatnonzero(stop):
                    self.done[self.keys[m]] = (self.S[m].copy(), int(self.n[m]), bool(conv[m]))
                self.S = Sn
                self._select(~stop)
                news = True
            else:
                self.S = Sn
            since += 1
        return [(k, self.done[k]) for k in self.path]


def run_case_dim(item: tuple[RankOptions, str, int]) -> dict[str, Any]:
    """All attempts of one case and one dimension (the published loop u 308-346).

    Returns a dict: ``ranks`` (histogram entries, in order), ``exceptions``,
    ``attempts`` (per attempt: index into the draw lists, iterations, converged, rank,
    the limit's eigenvalues, and with ``exact`` the exact rank and threshold rank).
    """
    opts, cname, j = item
    case = CASES[cname]
    d = opts.dims[j]
    Qs, Ks, Vs = draw_matrices(opts, case)
    step = case.steps[j] if j < len(case.steps) else case.steps[-1]
    max_iter = opts.max_iter if opts.max_iter is not None else case.max_iter
    n_max = 1000 if case.n_max_factor is None else case.n_max_factor * opts.n_per_dim
    rng = np.random.RandomState(opts.seed_init)
    t0 = time.perf_counter()
    S0s: list[np.ndarray] = []

    def s0(k: int) -> np.ndarray:  # attempt k's Σ₀: the k-th draw of the stream (u 317-318)
        while len(S0s) <= k:
            G = rng.randn(d, d)
            S0s.append(G @ G.T)
        return S0s[k]

    def qkv(i: int) -> tuple[np.ndarray, np.ndarray]:
        idx = opts.n_per_dim * j + i
        return Vs[idx], np.dot(Ks[idx].T, Qs[idx]) / np.sqrt(d)  # A as in u 12

    if opts.lanes:
        spec = _Speculator(d=d, S0=s0, QKV=qkv, n_need=opts.n_per_dim,
                           n_max=n_max, step=step, tol=case.tol, max_iter=max_iter,
                           lanes=opts.lanes)
        path = spec.run()
        lane_steps = spec.lane_steps
    else:
        path = []
        i = 0
        for k in range(n_max):
            idx = opts.n_per_dim * j + i
            out = projected_euler(s0(k), Qs[idx], Ks[idx], Vs[idx], step=step,
                                  tol=case.tol, max_iter=max_iter)
            path.append(((k, i), out))
            i += out[2]
            if i == opts.n_per_dim:
                break
        lane_steps = sum(o[1] for _, o in path)
    ranks: list[int] = []
    exceptions = 0
    attempts: list[dict[str, Any]] = []
    for (k, i), (last, n_it, conv) in path:
        idx = opts.n_per_dim * j + i
        Q, K, V = Qs[idx], Ks[idx], Vs[idx]
        lam = np.linalg.eigvalsh(last)
        rec: dict[str, Any] = {"index": idx, "iterations": n_it, "converged": conv,
                               "eigenvalues": lam}
        if conv:
            rank = int(np.sum(lam > opts.tol_rank))
            rec["rank"] = rank
            if rank <= (d + 1) // 2:
                ranks.append(rank)
            else:
                exceptions += 1
        if opts.exact:
            Sinf, r_exact, r_uns = exact_limit(s0(k), Q, K, V,
                                               identity=case.value == "identity")
            rec["exact_rank"] = r_exact
            rec["exact_unsettled"] = r_uns
            rec["exact_rank_threshold"] = int(np.sum(np.linalg.eigvalsh(Sinf) > opts.tol_rank))
        attempts.append(rec)
    path_steps = sum(a["iterations"] for a in attempts)
    return {"case": cname, "d": d, "ranks": ranks, "exceptions": exceptions,
            "attempts": attempts, "wall_s": time.perf_counter() - t0,
            "lane_steps": int(lane_steps), "path_steps": int(path_steps)}
