"""Applications above the solvers: scenarios, the main job, reproductions, reports, animations.

* :mod:`~wflow.apps.scenario` — TOML scenarios (builds heads, schedules and densities);
* :mod:`~wflow.apps.jobs` — the scenario → files job of each solver;
* :mod:`~wflow.apps.main` — ``wflow run`` (the main job);
* :mod:`~wflow.apps.reproduce` — ``wflow reproduce`` (the published experiments);
* :mod:`~wflow.apps.report` — ``report.md`` and its figures;
* :mod:`~wflow.apps.animate` — GIFs and snapshots.
"""
