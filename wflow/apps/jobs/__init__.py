"""The scenario → files jobs of the single-solver commands (numerics live in the solver packages).

Every job is ``spec.options → spec.estimate → spec.solve → write``, run by the one runner
(:func:`~wflow.apps.jobs.runner.run_job`) on the solver's
:class:`~wflow.infra.spec.SolverSpec`; each module keeps only what differs (how the
problem is built from the scenario, what is written):

* :mod:`~wflow.apps.jobs.particles` — ``wflow particles`` (:func:`run_particles`);
* :mod:`~wflow.apps.jobs.pde` — ``wflow pde`` (:func:`run_pde`, XDMF, renders);
* :mod:`~wflow.apps.jobs.jko` — ``wflow jko`` (:func:`run_jko`, :func:`run_jko_scenario`);
* :mod:`~wflow.apps.jobs.gaussian` — ``wflow gaussian`` (:func:`run_gaussian_job`, with
  :mod:`wflow.gaussian.plots`);
* :mod:`~wflow.apps.jobs.mesh` — the mesh a scenario names, its size before it exists, and
  ``wflow mesh``'s cost check.

Each is imported on use (the PDE job needs DOLFINx, the Gaussian one matplotlib).
"""
