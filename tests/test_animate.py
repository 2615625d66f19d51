"""Pictures of a run (wflow.apps.animate): GIFs, snapshots, the per-run figure, `--gif` flags."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from wflow.apps.animate import (
    GIF_FRAME_MS,
    GIF_FRAMES,
    density_gif,
    frame_indices,
    running_balance,
    token_gif,
    token_snapshots,
)
from wflow.attention.heads import Attention
from wflow.cli import main
from wflow.geometry.mesh import icosphere
from wflow.particles import simulate
from wflow.published.td import (
    published_heads,
    published_ou,
    published_relaxed,
    sample_published_clusters,
)


def _frames(path) -> list[np.ndarray]:
    im = Image.open(path)
    out = []
    for k in range(im.n_frames):
        im.seek(k)
        out.append(np.asarray(im.convert("RGB")))
    return out


def test_frame_indices_as_published():
    idx = frame_indices(801)
    assert idx.size == GIF_FRAMES == 60 and idx[0] == 0 and idx[-1] == 800
    assert np.all(np.diff(idx) > 0)
    assert frame_indices(5).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        frame_indices(0)


def test_token_gif_frames_duration_and_content(tmp_path):
    rng = np.random.default_rng(0)
    x = sample_published_clusters(60, 3, rng)
    traj = np.stack([x * 0 + x for _ in range(80)])
    f = token_gif(traj, np.linspace(0, 1, 80), tmp_path / "a.gif", title="test")
    im = Image.open(f)
    assert im.n_frames == GIF_FRAMES and im.info["duration"] == GIF_FRAME_MS
    frames = _frames(f)
    coloured = [np.sum(np.ptp(fr.astype(int), axis=2) > 80) for fr in frames]
    assert min(coloured) > 50  # hsv-coloured tokens on every frame
    assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).sum() > 0  # the camera turns
    with pytest.raises(ValueError, match="non-finite"):
        bad = traj.copy()
        bad[3, 0, 0] = np.nan
        token_gif(bad, np.linspace(0, 1, 80), tmp_path / "b.gif")
    with pytest.raises(ValueError, match="traj"):
        token_gif(traj[:, :, :2], np.linspace(0, 1, 80), tmp_path / "c.gif")
    token_snapshots([("a", traj), ("b", traj)], np.linspace(0, 1, 80), tmp_path / "s.png")
    assert Image.open(tmp_path / "s.png").size[0] > 500


def test_density_gif(tmp_path):
    tri = icosphere(3)
    verts = tri.points[tri.cells]
    c = verts.mean(axis=1)
    rho = np.stack([1 + np.cos(k / 3) * c[:, 2] for k in range(7)])
    f = density_gif(verts, rho, np.arange(7.0), tmp_path / "d.gif")
    assert Image.open(f).n_frames == 7
    with pytest.raises(ValueError, match="density_gif"):
        density_gif(verts, rho[:, :-1], np.arange(7.0), tmp_path / "e.gif")


@pytest.mark.parametrize("noisy", [True, False])
def test_running_balance_is_the_accumulators(noisy):
    rng = np.random.default_rng(1)
    x0 = sample_published_clusters(40, 3, rng)
    D0 = published_heads(3, 3, seed=2).A
    sch = published_ou(D0) if noisy else published_relaxed(D0)
    res = simulate(x0, sch, Attention("softmax", 1.0), T=0.5, dt=0.01, integrator="euler",
                   record_every=5, n_paths=2, seed=3, head_rates=False, clusters=False)
    bal = running_balance(res.steps, res.t, res.history["balance_chain"], stochastic=noisy)
    assert bal["dE"].shape == (res.n_paths, res.t.size)
    for key in ("dE", "work", "ito", "G2_int", "power_int", "martingale"):
        np.testing.assert_allclose(bal[key][:, -1], res.balance[key], rtol=1e-12, atol=1e-13)
    if noisy:  # negative control: the trapezoid for ∂_tE is not the Itô (left-point) sum
        other = running_balance(res.steps, res.t, res.history["balance_chain"],
                                stochastic=False)
        assert np.abs(other["work"][:, -1] - res.balance["work"]).max() > 1e-6


def _scenario(tmp_path, d: int = 3) -> str:
    f = tmp_path / "sc.toml"
    f.write_text(f"""seed = 42
[attention]
d = {d}
[tokens]
n = 40
sampler = "published"
[heads]
type = "published"
H = 3
[schedule]
type = "ou"
sigma2 = 2.0
symmetric_noise = true
[particles]
T = 0.5
dt = 0.01
integrator = "euler"
n_paths = 2
head_rates = false
""")
    return str(f)


def test_particles_gif_flag(tmp_path):
    out = tmp_path / "run"
    assert main(["particles", _scenario(tmp_path), "--out", str(out), "--gif"]) == 0
    assert Image.open(out / "tokens.gif").n_frames == 51  # 51 records, fewer than 60
    assert (out / "run.png").stat().st_size > 0 and not (out / "trajectory.npz").exists()
    assert json.loads((out / "summary.json").read_text())["status"] == "success"
    # d = 5 has no S² animation: refused before computing, nothing written
    out5 = tmp_path / "run5"
    assert main(["particles", _scenario(tmp_path, d=5), "--out", str(out5), "--gif"]) == 2
    assert not out5.exists()


def test_pde_gif_flag(tmp_path):
    f = tmp_path / "pde.toml"
    f.write_text("""seed = 0
[attention]
beta = 2.0
[heads]
type = "scalar"
lambdas = [1.0]
[density]
type = "vmf"
means = [[0.0, 0.0, 1.0]]
kappas = [2.0]
[pde]
mesh = "icosphere:720"
T = 0.2
n_saves = 5
order = 2
""")
    out = tmp_path / "pde"
    assert main(["pde", str(f), "--out", str(out), "--gif"]) == 0
    assert Image.open(out / "density.gif").n_frames == 5
    assert (out / "run.png").stat().st_size > 0
