"""The ground floor: validators, files, progress bars and parallel maps (imports nothing of wflow).

* :mod:`~wflow.infra.schema` — scenario-table validators (:class:`ScenarioError`);
* :mod:`~wflow.infra.io` — atomic writes, output folders, checkpoints, provenance;
* :mod:`~wflow.infra.progress` — progress bars with an ETA;
* :mod:`~wflow.infra.parallel` — MPI ranks and thread pools;
* :mod:`~wflow.infra.callables` — ``"module:function"`` references;
* :mod:`~wflow.infra.version` — the package version.
"""
