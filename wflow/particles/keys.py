"""Output keys of ``wflow particles`` (assembled in :mod:`wflow.apps.output_keys`)."""

from __future__ import annotations

from ..infra.output_keys import OutputKey

__all__ = ["SUMMARY_KEYS", "CSV_COLUMNS"]

K = OutputKey
_RUN = "wflow run"
_P = "wflow particles"

#: The ``summary.json`` keys only ``wflow particles`` writes (flattened; first match wins).
SUMMARY_KEYS: tuple[OutputKey, ...] = (
    K("gradient_flow_sign", "as `sign`: +1 for V = A (ascent of E), −1 for V = −A", "1",
      "+1 ascent, −1 descent", _P),
    K("n_tokens", "number of tokens n", "count", where=_P),
    K("n_paths", "Monte-Carlo weight-noise paths P", "count", where=_P),
    K("integrator_order", "order of the particle integrator", "count", where=_P),
    K("engine", "the particle time loop that ran: compiled or python", "text", where=_P),
    K("engine_reason", "why the Python loop ran (engine 'auto': what the compiled loop "
      "lacks, e.g. a user's integrator or kind without compiled code)", "text", where=_P),
    K("flow", "transformer (v) or surrogate (v̂ = b̂ P∇ψ, the weighted gradient flow)",
      "text", where=_P + ", " + _RUN),
    K("steps", "time steps taken (gaussian-particles study: RK4 steps)", "count",
      where=_P + ", wflow verify"),
    K("dt.requested", "the time step asked for", "time", where=_P),
    K("dt.used", "the step used: T / ceil(T/dt), so that the steps end at T", "time",
      where=_P),
    K("dt.steps", "number of steps of dt.used", "count", where=_P),
    K("dt.adjusted", "dt.used differs from dt.requested (the command's line says so)",
      "bool", where=_P),
    K("wall_time_s", "wall time of the solve (a study: of the study)", "s",
      where=_P + ", wflow verify"),
    K("final.*.mean", "the history column at T, mean over paths (see the CSV columns)",
      "as the column", where=_P),
    K("final.*.std", "its standard deviation over paths", "as the column", where=_P),
    K("balance.*.mean", "a term of the energy balance over [0, T] (see balance.*), mean over "
      "paths", "energy", where=_P),
    K("balance.*.stderr", "its standard error over paths", "energy", where=_P),
    K("balance.*.paths", "the term for every path", "energy", where=_P),
    K("balance.*_simpson", "the same residual with Simpson's rule in time (fourth-order "
      "checks)", "energy", "signed", _P),
    K("checks.ito_balance.judged", "token diffusion D > 0: whether the Itô energy balance "
      "of the tokens decides the status (wflow.particles.free_energy)", "bool", where=_P),
    K("checks.ito_balance.reason", "why the Itô balance is not judged (compiled loop, a kind "
      "without the closed-form Laplacian, noisy weights)", "text", where=_P),
    K("checks.ito_balance.mean", "mean over paths of E(T) − E(0) − ∫(power + ∂_tE) dt − "
      "D∫Σ_iΔ_{S,i}E dt (zero up to the weak bias and the martingale)", "energy", "signed",
      _P),
    K("checks.ito_balance.stderr", "its standard error from the martingale's quadratic "
      "variation ∫2DΣ_i|∇_{S,i}E|² dt (valid for one path)", "energy", where=_P),
    K("checks.ito_balance.stderr_sample", "its standard error over the paths (NaN for one)",
      "energy", where=_P),
    K("checks.ito_balance.bias_bound", "the weak-bias bound (κh)^q ∫(|power| + |∂_tE| + "
      "D|ΣΔ_SE|) dt of the tolerance", "energy", where=_P),
    K("checks.ito_balance.kappa", "the rate κ = βa(u + D(βa + d − 1)) of the bias bound",
      "1/time", where=_P),
    K("checks.ito_balance.budget", "∫(|power| + |∂_tE| + D|ΣΔ_SE|) dt, mean over paths",
      "energy", where=_P),
    K("checks.ito_balance.z", "standard errors allowed to the mean residual", "1", where=_P),
    K("checks.ito_balance.paths", "paths (token-noise replicates) in the mean", "count",
      where=_P),
    K("checks.ito_balance.diffusion", "D of the run", "radius²/time", where=_P),
    K("checks.ito_balance.judged_diffusion", "D in the Itô term of the judged residual (the "
      "run's)", "radius²/time", where=_P),
)

#: The CSV columns only ``wflow particles`` writes.
CSV_COLUMNS: tuple[OutputKey, ...] = ()
