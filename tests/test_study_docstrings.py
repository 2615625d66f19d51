"""The studies' user-facing texts quote no measured number that no results file holds.

The API reference renders the studies' docstrings, the reference page of the studies
their threshold comments (``#:``) and negative controls, and every verdict and
``summary.json`` their criteria's ``what``/``why`` texts: all are user-facing pages
(issue 34: every number on them comes from a measurement file, checked by a test).
Measured sizes, power, observed ranges, runtimes, loads and the seeds at which something
failed live in ``bench/results/size_power*.json`` and are rendered on
``docs/studies_power.md``; a text points there instead of quoting them. The few that a
text keeps (a threshold justified by its null distribution) are listed in :data:`SOURCED`
with the results file and the values they quote, which this test reads and compares;
the criteria a text says a negative control trips are compared with the file's too
(:data:`TRIPPED`). Fast: the texts are read with :mod:`ast`, no study runs.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "wflow" / "studies"
RESULTS = ROOT / "bench" / "results"
#: Study modules not scanned (none: every study's texts are).
EXCLUDED: set[str] = set()

#: Phrases that quote a measurement (a size, power, an observed range, a runtime, a load,
#: a seed at which something failed). Definitions (a threshold's value, a level α, a grid,
#: a derived bound) do not match them.
MEASURED = [
    r"\b\d+ of (the )?\d+ (seeds|runs|particle runs|criteria)\b",
    r"\b\d+ ?/ ?\d+ false fails?\b",
    r"\bseeds? \d+ ?[–-] ?\d+\b",                      # a seed range
    r"\bseeds? [1-9]\d*\b",                            # a particular seed (0: the setting)
    r"\bat load \d", r"\bload \d+(\.\d+)? ?[–-] ?\d",
    r"\d+(\.\d+)? ?(–|-|…) ?\d+(\.\d+)? ?s per run", r"\d+(\.\d+)? ?s per run",
    r"\d+(\.\d+)? ?s (of )?CPU\b", r"≈ ?\d+ ?% of a\b",
    r"false[- ]fail rate (of|was|is) [\d.]",
    r"\bcaught from [±|]?\|?s?\|? ?=? ?[\d.]", r"\bcaught from ±",
    r"\bmeasured\b[^.;]{0,60}?\d",
    r"\(correct solver:? [−-]?\d",
    r"\bseed 0: [^.]*?\b\d+(\.\d+)?\b",
    r"\b[Qq]uick mode[^.]{0,40}?: ``[\w.]+`` [−-]?\d",  # a control's value, hand-quoted
    r"\b(softmax|correct solver):? [−-]?\d+(\.\d+)?(e-?\d+)?\)",
    r"``[\w.]+`` [−-]?\d+(\.\d+)?(e-?\d+)? \((correct solver|softmax|accept)",
    r"[≈~] ?\d+(\.\d+)? ?(–|…) ?\d+(\.\d+)?×",             # an observed ratio range
]
_MEASURED = [re.compile(p) for p in MEASURED]


def measured_phrases(text: str) -> list[str]:
    """The phrases of ``text`` that quote a measured number (:data:`MEASURED`)."""
    flat = " ".join(text.split())
    return [m.group(0) for rx in _MEASURED for m in rx.finditer(flat)]


def _strings(node: ast.AST) -> str:
    """The literal text of a string expression (an f-string's constant parts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values
                       if isinstance(v, ast.Constant) and isinstance(v.value, str))
    if isinstance(node, ast.BinOp):
        return _strings(node.left) + _strings(node.right)
    return ""


def user_texts(source: str) -> list[tuple[str, str]]:
    """``(where, text)`` of every user-facing text of a study module's source.

    Module, class and function docstrings; the ``#:`` comments (the reference page's
    thresholds); the values of ``FAULTS`` and ``FAMILIES`` (printed in verdicts); and the
    ``what=``/``why=`` texts of criteria (printed in verdicts and ``summary.json``).
    """
    tree = ast.parse(source)
    out: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                out.append((getattr(node, "name", "module"), doc))
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
                isinstance(t, ast.Name) and t.id in ("FAULTS", "FAMILIES")
                for t in node.targets):
            out += [("FAULTS", _strings(v)) for v in node.value.values]
        if isinstance(node, ast.keyword) and node.arg in ("what", "why"):
            out.append((node.arg, _strings(node.value)))
    block: list[str] = []
    for line in [*source.splitlines(), ""]:
        s = line.strip()
        if s.startswith("#:"):
            block.append(s[2:].strip())
        elif block:
            out.append(("#:", " ".join(block)))
            block = []
    return out


@dataclass(frozen=True)
class Sourced:
    """A measured statement a study text keeps, with the results file that holds it.

    ``phrase`` (whitespace aside) must stand in ``module``'s texts and name ``file``;
    ``checks`` are ``(JSON path, quoted value, significant digits)``: the value at the
    path (``/``-separated keys; ``len:`` before a path takes a list's length, ``max:`` /
    ``min:`` / ``sd:`` its maximum, minimum, sample s.d. over ``[start, stop)`` of
    ``seeds``) must round to the quoted value.
    """

    module: str
    phrase: str
    file: str
    checks: tuple[tuple[str, float, int], ...]


_SP = "size_power.json"
_EDI = "size_power_edi.json"
_Q, _F = "studies/{}/quick/size/", "studies/{}/full/size/"
SOURCED = [
    Sourced("stability.py", "Measured on the correct solver (bench/results/size_power.json): "
            "quick mode, 100 seeds, largest ``|g/λ_w − 1|`` 1.08e-3", _SP,
            ((_Q.format("stability") + "runs", 100, 3),
             (_Q.format("stability") + "criteria/first_step_growth/max", 1.08e-3, 3))),
    Sourced("asymptotics.py", "Measured on the correct solver (bench/results/size_power.json, "
            "quick mode, 100 seeds): ``ou_slope`` at most 0.28 from −1", _SP,
            ((_Q.format("asymptotics") + "runs", 100, 3),
             ("dev1:" + _Q.format("asymptotics") + "criteria/ou_slope", 0.28, 2))),
    Sourced("asymptotics.py", "measured on the correct solver (bench/results/size_power.json, "
            "quick mode, 100 seeds) at most 0.276", _SP,
            ((_Q.format("asymptotics") + "criteria/ou_decay_ratio/max", 0.276, 3),)),
    Sourced("asymptotics.py", "Measured on the correct solver (bench/results/size_power.json, "
            "quick mode, 80 seeds scored): largest ``particle_accuracy`` 1.22", _SP,
            (("len:" + _Q.format("asymptotics") + "criteria/particle_accuracy/values", 80, 2),
             (_Q.format("asymptotics") + "criteria/particle_accuracy/max", 1.22, 3))),
    Sourced("edi.py", "Measured null (bench/results/size_power_edi.json): full mode, 147 "
            "seeds, RK4 3.86–4.25, Euler 1.01–1.05; quick mode, 150 seeds, RK4 3.94–4.12, "
            "Euler 0.954–1.149; no false fail in either", _EDI,
            ((_F.format("edi") + "runs", 147, 3), (_F.format("edi") + "false_fail_rate", 0, 1),
             ("rk4min:" + _F.format("edi"), 3.86, 3), ("rk4max:" + _F.format("edi"), 4.25, 3),
             (_F.format("edi") + "criteria/particles_euler_edi_order/min", 1.01, 3),
             (_F.format("edi") + "criteria/particles_euler_edi_order/max", 1.05, 3),
             (_Q.format("edi") + "runs", 150, 3), (_Q.format("edi") + "false_fail_rate", 0, 1),
             ("rk4min:" + _Q.format("edi"), 3.94, 3), ("rk4max:" + _Q.format("edi"), 4.12, 3),
             (_Q.format("edi") + "criteria/particles_euler_edi_order/min", 0.954, 3),
             (_Q.format("edi") + "criteria/particles_euler_edi_order/max", 1.149, 4))),
    Sourced("edi.py", "Measured (bench/results/size_power_edi.json): ``jko_edi_order`` 1.02 "
            "quick, 1.01 full", _EDI,
            ((_Q.format("edi") + "criteria/jko_edi_order/max", 1.02, 3),
             (_F.format("edi") + "criteria/jko_edi_order/max", 1.01, 3))),
    Sourced("edi.py", "measured worst deviation 0.046, bench/results/size_power_edi.json", _EDI,
            ((_Q.format("edi") + "criteria/jko_edi_local_order/max", 0.046, 2),
             (_F.format("edi") + "criteria/jko_edi_local_order/max", 0.046, 2))),
    Sourced("gamma.py", "Measured on the correct solver (bench/results/size_power.json): "
            "smallest rate 0.84 in quick mode (100 seeds), 0.73 in full mode (20 seeds", _SP,
            ((_Q.format("gamma") + "runs", 100, 3), (_F.format("gamma") + "runs", 20, 2),
             ("ratemin:" + _Q.format("gamma"), 0.84, 2),
             ("ratemin:" + _F.format("gamma"), 0.73, 2))),
    Sourced("gaussian_particles.py", "Measured on the correct solver "
            "(bench/results/size_power.json, full mode, 20 seeds): slopes −0.58 … −0.45", _SP,
            ((_F.format("gaussian-particles") + "runs", 20, 2),
             ("slopemin:" + _F.format("gaussian-particles"), -0.58, 2),
             ("slopemax:" + _F.format("gaussian-particles"), -0.45, 2))),
    Sourced("gaussian_particles.py", "measured 0.050–0.064 (bench/results/size_power.json, "
            "quick mode, 100 seeds)", _SP,
            ((_Q.format("gaussian-particles") + "runs", 100, 3),
             ("slopesdmin:" + _Q.format("gaussian-particles"), 0.050, 2),
             ("slopesdmax:" + _Q.format("gaussian-particles"), 0.064, 2))),
    Sourced("gaussian_particles.py", "Measured on the correct solver "
            "(bench/results/size_power.json, quick mode, 100 seeds): mean 7.07, maximum 31.9",
            _SP, (("mean:" + _Q.format("gaussian-particles") + "criteria/bias_at_n_inf/values",
                   7.07, 3),
                  (_Q.format("gaussian-particles") + "criteria/bias_at_n_inf/max", 31.9, 3))),
    Sourced("noisy_edi.py", "(bench/results/size_power.json, seeds 0–19: quick s = 0.174, "
            "``t₁₉`` two-sided 3.78: :data:`ORDER_RANGE_QUICK` = [0.35, 1.65]; full s = 0.028",
            _SP, (("sd20:" + _Q.format("noisy-edi") + "criteria/bias_order", 0.174, 3),
                  ("sd20:" + _F.format("noisy-edi") + "criteria/bias_order", 0.028, 2))),
    Sourced("noisy_edi.py", "measured (bench/results/size_power.json, full mode, seeds 0–19) "
            "p = 0.963–1.06 (s.d. 0.028)", _SP,
            ((_F.format("noisy-edi") + "criteria/bias_order/min", 0.963, 3),
             (_F.format("noisy-edi") + "criteria/bias_order/max", 1.06, 3),
             ("sd20:" + _F.format("noisy-edi") + "criteria/bias_order", 0.028, 2))),
    Sourced("noisy_edi.py", "(bench/results/size_power.json, quick mode, seeds 0–19: p = "
            "0.70–1.39, s.d. 0.174", _SP,
            (("min20:" + _Q.format("noisy-edi") + "criteria/bias_order", 0.70, 2),
             ("max20:" + _Q.format("noisy-edi") + "criteria/bias_order", 1.39, 3),
             ("sd20:" + _Q.format("noisy-edi") + "criteria/bias_order", 0.174, 3))),
    Sourced("noisy_mean_field.py", "(bench/results/noisy_mean_field_bias.json: 5 "
            "configurations, ``n`` ∈ {250, 1000}, ``T/h`` ∈ {8, 16, 32}, 384 to 3072 "
            "replicates each): ``a h² = 0.49 % ± 0.09 %`` at ``h = T/16`` and ``b/n = 0.20 % "
            "± 0.06 %`` at ``n = 1000``; the PDE's own error, ``−0.03 %`` (mesh, Richardson) "
            "and ``−0.005 %`` (time step)", "noisy_mean_field_bias.json",
            (("len:rows", 5, 1), ("fit/a_at_h_T_over_16", 0.0049, 2), ("fit/a_se", 0.0009, 1),
             ("fit/b_at_n_1000", 0.0020, 2), ("fit/b_se", 0.0006, 1),
             ("pde/mesh", -0.0003, 1), ("pde/time", -0.00005, 1))),
    Sourced("noisy_mean_field.py", "(``at_study_step`` in "
            "bench/results/noisy_mean_field_bias.json: ``n`` = 250, 1000, 8000, fresh seeds), "
            "agree with it: ``χ² = 0.78`` on 3 degrees of freedom (measured 0.70 %, 0.30 %, "
            "0.15 % of ``D``; predicted 0.93 %, 0.33 %, 0.15 %)", "noisy_mean_field_bias.json",
            (("at_study_step/check/chi2", 0.78, 2), ("at_study_step/check/dof", 3, 1),
             ("at_study_step/check/rows/2/n", 250, 3), ("at_study_step/check/rows/0/n", 1000, 4),
             ("at_study_step/check/rows/1/n", 8000, 4),
             ("at_study_step/check/rows/2/measured", 0.0070, 2),
             ("at_study_step/check/rows/0/measured", 0.0030, 2),
             ("at_study_step/check/rows/1/measured", 0.0015, 2),
             ("at_study_step/check/rows/2/predicted", 0.0093, 2),
             ("at_study_step/check/rows/0/predicted", 0.0033, 2),
             ("at_study_step/check/rows/1/predicted", 0.0015, 2))),
    Sourced("noisy_mean_field.py", "(its size then: 2 false fails in 78 seeds, kept in "
            "noisy_mean_field_bias.json)", "noisy_mean_field_bias.json",
            (("before_h_T_over_32/size/runs", 78, 2),
             ("len:before_h_T_over_32/size/failing_seeds", 2, 1))),
]


@dataclass(frozen=True)
class Tripped:
    """A text's statement of which criteria a negative control trips (quick mode, seed 0).

    ``phrase`` must stand in ``module``'s texts; the ``tripped`` list of ``study``'s
    control ``control`` in ``size_power.json`` must contain ``named`` (``exact``: equal
    it, the text saying these and no others).
    """

    module: str
    phrase: str
    study: str
    control: str
    named: frozenset[str]
    exact: bool = False


TRIPPED = [
    Tripped("asymptotics.py", "of the physics criteria only ``ou_slope`` fails", "asymptotics",
            "no-mobility", frozenset({"ou_slope", "particle_accuracy"}), exact=True),
    Tripped("asymptotics.py", "a dropped mobility trips it", "asymptotics", "no-mobility",
            frozenset({"particle_accuracy"})),
    Tripped("asymptotics.py", "the constant-noise control trips it", "asymptotics",
            "ou-constant-noise", frozenset({"ou_decay_ratio"})),
    Tripped("entropy.py", "trips ``equiangular_closed_form``", "entropy", "no-mobility",
            frozenset({"equiangular_closed_form"})),
    Tripped("equiangular.py", "it trips ``case0_ode_distance``, ``case0_early_rel`` and "
            "``case0_late_rel``", "equiangular", "no-mobility",
            frozenset({"case0_ode_distance", "case0_early_rel", "case0_late_rel"}), exact=True),
    Tripped("gamma.py", "most criteria fail, among them ``init_W2_converges`` and "
            "``init_W2_rate``", "gamma", "no-mobility",
            frozenset({"init_W2_converges", "init_W2_rate", "particle_accuracy"})),
    Tripped("gaussian_particles.py", "``particles_finite`` fails", "gaussian-particles",
            "no-mobility", frozenset({"particles_finite"})),
    Tripped("head_monotonicity.py", "it trips ``rate_identity``, ``monotone_below_beta_star`` "
            "and ``certificate_lower_bound``", "head-monotonicity", "no-mobility",
            frozenset({"rate_identity", "monotone_below_beta_star", "certificate_lower_bound",
                       "particle_accuracy"}), exact=True),
    Tripped("noisy_edi.py", "the control ``no-mobility`` trips only the drift criteria",
            "noisy-edi", "no-mobility",
            frozenset({"drift_matches_model", "drift_matches_model_beta0.5"}), exact=True),
    Tripped("relu_vs_softmax.py", "it trips ``equiangular_times``; the slope criteria hold",
            "relu-vs-softmax", "no-mobility", frozenset({"equiangular_times"}), exact=True),
    Tripped("superadditivity.py", "It trips the gain signs, the rate matches and "
            "``particle_accuracy``", "superadditivity", "no-mobility",
            frozenset({"concave_H2_eps0.4_gain_sign", "concave_H2_eps0.4_rates_match",
                       "convex_H2_eps0.4_gain_sign", "convex_H2_eps0.4_rates_match",
                       "particle_accuracy"}), exact=True),
]


def tripped_mismatches(stated: list[Tripped], texts: dict[str, str],
                       results: Path = RESULTS) -> list[str]:
    """Every :class:`Tripped` statement missing from its module or contradicted by the file."""
    data = json.loads((results / _SP).read_text(encoding="utf-8"))
    bad = []
    for t in stated:
        phrase = " ".join(t.phrase.split())
        if phrase not in texts.get(t.module, ""):
            bad.append(f"{t.module}: statement not found: {phrase!r}")
            continue
        got = set(data["studies"][t.study]["quick"]["power"]["controls"][t.control]["tripped"])
        if not t.named <= got or (t.exact and got != t.named):
            bad.append(f"{t.module}: {phrase!r} but {_SP} has {t.control} tripping "
                       f"{sorted(got)}")
    return bad


def _get(data: dict, path: str):
    for key in path.strip("/").split("/"):  # a list's entries by their index
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


def _value(data: dict, spec: str) -> float:
    """The number a :class:`Sourced` check names (see its docstring)."""
    import numpy as np

    op, _, path = spec.rpartition(":")
    if not op:
        return float(_get(data, path))
    node = _get(data, path)
    if op == "len":
        return float(len(node))
    if op == "mean":
        return float(np.mean(node))
    if op == "dev1":  # the largest distance of a slope from −1
        return float(max(abs(node["min"] + 1), abs(node["max"] + 1)))
    crit = node.get("criteria", {}) if isinstance(node, dict) else {}
    if op in ("rk4min", "rk4max"):
        vals = [crit[k]["min" if op == "rk4min" else "max"] for k in crit
                if k.startswith("rk4_edi_order")]
        return float(min(vals) if op == "rk4min" else max(vals))
    if op == "ratemin":
        return float(min(crit[k]["min"] for k in crit if k.endswith("_rate")))
    if op in ("slopemin", "slopemax", "slopesdmin", "slopesdmax"):
        keys = [k for k in crit if k.startswith("slope_")]
        if op == "slopemin":
            return float(min(crit[k]["min"] for k in keys))
        if op == "slopemax":
            return float(max(crit[k]["max"] for k in keys))
        sds = [float(np.std(crit[k]["values"], ddof=1)) for k in keys]
        return float(min(sds) if op == "slopesdmin" else max(sds))
    if op in ("sd20", "min20", "max20"):  # over seeds 0–19 of the size run
        size = _get(data, path.rsplit("/criteria/", 1)[0])
        seeds = np.asarray(size["seeds"])
        vals = np.asarray(node["values"], float)[seeds < 20]
        return float({"sd20": lambda v: np.std(v, ddof=1), "min20": np.min,
                      "max20": np.max}[op](vals))
    raise ValueError(f"unknown check {spec!r}")


def _round(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}") if x else 0.0


def sourced_mismatches(sourced: list[Sourced], texts: dict[str, str],
                       results: Path = RESULTS) -> list[str]:
    """Every :class:`Sourced` statement missing from its module or disagreeing with its file."""
    bad = []
    cache: dict[str, dict] = {}
    for s in sourced:
        phrase = " ".join(s.phrase.split())
        if phrase not in texts.get(s.module, ""):
            bad.append(f"{s.module}: sourced statement not found: {phrase!r}")
            continue
        if s.file not in phrase:
            bad.append(f"{s.module}: {phrase!r} does not name its results file {s.file}")
        if s.file not in cache:
            cache[s.file] = json.loads((results / s.file).read_text(encoding="utf-8"))
        for spec, quoted, digits in s.checks:
            got = _value(cache[s.file], spec)
            if _round(got, digits) != _round(quoted, digits):
                bad.append(f"{s.module}: {phrase!r} quotes {quoted:g} but {s.file} "
                           f"{spec} is {got:.6g}")
    return bad


#: ``(module, phrase)`` that match :data:`MEASURED` but quote no measurement.
NOT_MEASURED = [
    ("base.py", "FAIL — 1 of 3 criteria not met"),  # the format of a verdict, an example
]


def unsourced(texts: dict[str, list[tuple[str, str]]],
              sourced: list[Sourced]) -> list[str]:
    """Every measured phrase of the texts that no :data:`SOURCED` statement covers
    (nor :data:`NOT_MEASURED`)."""
    allowed: dict[str, list[str]] = {}
    for s in sourced:
        allowed.setdefault(s.module, []).append(" ".join(s.phrase.split()))
    for module, phrase in NOT_MEASURED:
        allowed.setdefault(module, []).append(phrase)
    bad = []
    for module, items in texts.items():
        for where, text in items:
            flat = " ".join(text.split())
            for phrase in measured_phrases(flat):
                at = flat.find(phrase)
                covered = any(a in flat and flat.find(a) <= at
                              and at + len(phrase) <= flat.find(a) + len(a)
                              for a in allowed.get(module, []))
                if not covered:
                    bad.append(f"{module} ({where}): {phrase!r}")
    return bad


def _modules() -> dict[str, list[tuple[str, str]]]:
    return {p.name: user_texts(p.read_text(encoding="utf-8"))
            for p in sorted(STUDIES.glob("*.py")) if p.name not in EXCLUDED}


def _joined(texts: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    return {m: " ".join(" ".join(t.split()) for _, t in items) for m, items in texts.items()}


def test_no_unsourced_measured_number_in_the_studies_texts():
    bad = unsourced(_modules(), SOURCED)
    assert not bad, ("measured numbers without a results file (point to "
                     "docs/studies_power.md, or add a checked SOURCED entry):\n"
                     + "\n".join(bad))


def test_every_sourced_number_agrees_with_its_results_file():
    bad = sourced_mismatches(SOURCED, _joined(_modules()))
    assert not bad, "\n".join(bad)


def test_every_stated_tripped_criterion_agrees_with_the_results_file():
    bad = tripped_mismatches(TRIPPED, _joined(_modules()))
    assert not bad, "\n".join(bad)


def test_negative_control_a_wrong_tripped_statement_is_caught(tmp_path):
    """Negative control: the results file has the control trip another criterion too (a
    rerun), or the text names one it does not trip: both reported."""
    texts = _joined(_modules())
    t = next(t for t in TRIPPED if t.module == "relu_vs_softmax.py")
    data = json.loads((RESULTS / _SP).read_text(encoding="utf-8"))
    ctl = data["studies"]["relu-vs-softmax"]["quick"]["power"]["controls"]["no-mobility"]
    ctl["tripped"] = [*ctl["tripped"], "relu_vs_softmax_d_slope"]
    (tmp_path / _SP).write_text(json.dumps(data), encoding="utf-8")
    assert tripped_mismatches([t], texts, tmp_path)
    wrong = Tripped(t.module, t.phrase, t.study, t.control, frozenset({"relu_slope"}))
    assert tripped_mismatches([wrong], texts)


def test_the_scanner_sees_every_kind_of_text():
    texts = _modules()
    assert set(texts) >= {"stability.py", "edi.py", "noisy_edi.py", "base.py"}
    kinds = {where for items in texts.values() for where, _ in items}
    assert {"module", "#:", "FAULTS", "what", "why", "run"} <= kinds


@pytest.mark.parametrize("text", [
    "Measured over 20 seeds: 0 of 20 seeds fail.",
    "a velocity error is caught from ±0.5 %, seed 33 passes",
    "Runs take 38–236 s per run at load 9–18.",
    "the false-fail rate was 2 % (3 of 150 seeds, seeds 92, 98, 146)",
    "Quick mode, seed 0: ``first_step_growth`` 0.094 (correct solver 3.1e-4)",
    "Quick mode: ``equiangular_times`` 0.50 (accept ≤ 1e-3)",
    "the a-priori bound is loose (measured: ``L*/L_eff ≈ 50–240``)",
])
def test_negative_control_a_measured_number_is_caught(text):
    """Negative control: hand-quoted measurements, as the docstrings had them, are caught
    by the scanner, in a docstring, a ``#:`` comment, a fault text and a criterion's why."""
    assert measured_phrases(text)
    src = (f'"""{text}"""\n#: {text}\nX = 1\nFAULTS = {{"f": {text!r}}}\n'
           f'def f():\n    """{text}"""\n    return C("c", 1.0, why={text!r})\n')
    bad = unsourced({"fake.py": user_texts(src)}, [])
    assert {w.split("(")[1].split(")")[0] for w in bad} == {"module", "#:", "FAULTS", "f",
                                                             "why"}


def test_negative_control_definitions_pass():
    """Thresholds, levels and derived bounds are no measurement: not flagged."""
    for text in ("accept ≤ 3e-3 (Šidák α = 1 − 0.99^{1/8} = 1.26e-3)",
                 "round-off 8 eps (1 + n dt max|v|)", "the scan grid starts at 1e-3",
                 "quick mode runs at seed 0 (the setting)"):
        assert not measured_phrases(text), text


def test_negative_control_a_stale_sourced_number_is_caught(tmp_path):
    """Negative control: a sourced number edited in the text, or its results file rerun
    with another value, is reported; an allow-listed phrase cannot hide a second one."""
    texts = _joined(_modules())
    s = SOURCED[0]
    phrase = " ".join(s.phrase.split())
    edited = {**texts, s.module: texts[s.module].replace(phrase, phrase.replace("1.08e-3",
                                                                                "7.4e-4"))}
    assert any("not found" in b for b in sourced_mismatches([s], edited))
    data = json.loads((RESULTS / s.file).read_text(encoding="utf-8"))
    data["studies"]["stability"]["quick"]["size"]["criteria"]["first_step_growth"]["max"] = 5e-4
    (tmp_path / s.file).write_text(json.dumps(data), encoding="utf-8")
    assert any("quotes" in b for b in sourced_mismatches([s], texts, tmp_path))
    extra = {"stability.py": [("module", phrase + " Also 3 of 20 seeds fail.")]}
    assert unsourced(extra, [s]) == ["stability.py (module): '3 of 20 seeds'"]
