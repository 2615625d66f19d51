"""The scenario → files jobs of the single-solver commands (numerics live in the solver packages).

* :mod:`~wflow.apps.jobs.particles` — ``wflow particles`` (:func:`run_particles`);
* :mod:`~wflow.apps.jobs.pde` — ``wflow pde`` (:func:`run_pde`, XDMF, renders);
* :mod:`~wflow.apps.jobs.jko` — ``wflow jko`` (:func:`run_jko`, :func:`run_jko_scenario`);
* :mod:`~wflow.apps.jobs.gaussian` — ``wflow gaussian`` (:func:`run_gaussian_scenario`, with
  :mod:`wflow.gaussian.plots`).

Each is imported on use (the PDE job needs DOLFINx, the Gaussian one matplotlib).
"""
