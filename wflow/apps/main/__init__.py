"""The main job (``wflow run``): PDE, JKO and particles on one initial density, compared.

Rooms: :mod:`~wflow.apps.main.options` (``[run]``, the result), :mod:`~wflow.apps.main.checkpoint`,
:mod:`~wflow.apps.main.orchestration` (:func:`run_main_job`), :mod:`~wflow.apps.main.phases`,
:mod:`~wflow.apps.main.compare`, :mod:`~wflow.apps.main.refinement` (the ``τ/h`` table),
:mod:`~wflow.apps.main.verdicts` (the thresholds), :mod:`~wflow.apps.main.summary`.

Phases, each deterministic given the scenario's seeds and checkpointed when done:

1. ``pde`` — the transformer PDE on the sphere mesh (:func:`wflow.pde.solve_pde`);
2. ``particles`` — ``n`` tokens sampled from the initial cell density
   (:func:`wflow.geometry.density.sample_particles`) and evolved with the same heads
   (:func:`wflow.particles.simulate`), recorded at the PDE output times;
3. ``jko`` — JKO minimising movements on the same mesh (:mod:`wflow.jko`), if enabled;
   ``[jko] tau = "auto"`` (default) takes ``τ`` from the mesh
   (:func:`wflow.jko.auto_step`: ``τ|v|_max ≈ 3h``, off the locking plateau);
   ``pde_surrogate`` — with ``flow = "transformer"`` the JKO scheme still discretises the
   surrogate flow ``v̂`` (docs/theory.md §3), so the PDE is solved once more with
   ``flow = "surrogate"`` as the JKO's reference;
   ``jko_refinement`` — the ``τ/h`` table: JKO and surrogate PDE on
   ``[run] jko_refinement`` coarser icospheres with ``h ∝ τ``;
4. ``compare`` — exact ``W_2`` (POT, geodesic cost) particles vs PDE at every output
   time (above ``[run] max_ot_points`` particles on a seeded random subsample, with its
   sampling floor and the sliced ``W_2`` of every particle: :func:`particles_w2`) and JKO
   vs its reference PDE at the JKO times; checkpointed piece by piece (each ``W_2``
   series, the coarse PDE and every replicate of the moment test), so an interrupted
   comparison resumes where it stopped;
5. ``report`` — ``summary.json`` (the status of every phase and the overall status, the
   worst of them; every number with its meaning, tolerance and verdict), ``report.md``
   with figures, raw data.

Every section of the scenario (``[jko]`` included: its keys, ``T`` a multiple of ``τ``,
value-aligned symmetric heads) is validated before the first phase, so bad input never
costs a computation nor leaves a checkpoint.

Checkpoints live in ``DIR.ckpt/`` (pickles of the phase results, internal format) with
the scenario and its fingerprint (SHA-256 of the scenario table, of every file it names,
and of the source file and qualified name of every ``"package.module:function"`` it
names); the folder is locked while a run uses it (:mod:`wflow.infra.lock`) and carries
the marker :data:`CHECKPOINT_MARKER` from its creation, so wflow recognises even a
partial leftover as its own. Checkpoints are read only with ``--resume``:
``wflow run --resume DIR`` skips the phases found there (naming them; their wall times
count in the total) and gives the same result as an uninterrupted run. Resuming with a
scenario that differs from the checkpointed one (an edited callable included: the module
is named) is refused, naming the difference. Without ``--resume`` a checkpoint of the same
scenario is discarded (the run starts over, saying so); one of another scenario is
refused with the differences named, or replaced with ``overwrite`` (``--overwrite``). The
output directory itself is written atomically at the end, ``summary.json`` last.
"""

from ..run_table import RUN_SCHEMA, RUN_SPEC, RunOptions
from .compare import ParticleW2, particles_w2, resolve_w2, w2_label
from .options import (
    CHECKPOINT_MARKER,
    PHASES,
    MainJobResult,
    default_run_scenario,
)
from .orchestration import run_main_job

__all__ = ["RUN_SCHEMA", "RUN_SPEC", "RunOptions", "MainJobResult", "run_main_job",
           "default_run_scenario", "CHECKPOINT_MARKER", "PHASES", "ParticleW2",
           "particles_w2", "resolve_w2", "w2_label"]
