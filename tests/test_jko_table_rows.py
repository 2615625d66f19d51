"""A row of the main job's τ/h table runs the fixed steps τ it sets, even when the
scenario's ``[jko]`` table asks for error control (``rtol``): a refinement study in τ ∝ h
needs the steps it names. The main JKO phase (no ``tau`` given) keeps the tolerance."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from wflow.apps.jobs import jko as jobs_jko
from wflow.jko.options import jko_table_from_dict


def _capture(monkeypatch):
    seen = {}

    def fake_solve(table, cen, areas, mass0, schedule, attn, mesh, **changes):
        seen.update(changes, step=table.step)
        return "solved"

    monkeypatch.setattr(jobs_jko, "_solve_on", fake_solve)
    mesh = SimpleNamespace(gather_owned=lambda a: a, centroids=np.zeros((2, 3)),
                           areas=np.ones(2))
    sc = SimpleNamespace(table=lambda name: jko_table_from_dict({"rtol": 1e-3}), diffusion=0.0)
    return seen, mesh, sc


def test_a_table_row_drops_the_tolerance_and_the_main_phase_keeps_it(monkeypatch):
    seen, mesh, sc = _capture(monkeypatch)
    jobs_jko.run_jko_scenario(mesh, np.ones(2), None, None, sc, T=1.0, tau=0.1)
    assert seen["rtol"] is None and seen["atol"] is None and seen["step"].tau == 0.1
    seen.clear()
    jobs_jko.run_jko_scenario(mesh, np.ones(2), None, None, sc, T=1.0)  # the main phase
    assert "rtol" not in seen  # negative control: the table's rtol reaches the solver
