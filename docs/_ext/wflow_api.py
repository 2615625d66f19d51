"""Generate the API reference of wflow from the packages' ``__all__`` (run by conf.py).

Every public module (no ``_`` in its dotted path, an ``__all__``) gets one page
``api/<module>.rst``. A name is documented in full once, on the page of the module that
defines it (its ``__module__``) when that module is public, else on the first public page
that lists it; every other page that re-exports it links there. Nothing is hand-written,
so a name added to an ``__all__`` appears in the reference at the next build.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
import typing
from pathlib import Path

#: Modules that are not API: the command line, shims, entry points.
SKIP_PREFIXES = ("wflow.cli", "wflow.commands", "wflow.jobs", "wflow.gaussian_")


def public_modules() -> list[str]:
    """Dotted names of every public wflow module with an ``__all__``, sorted."""
    import wflow

    names = ["wflow"]
    for info in pkgutil.walk_packages(wflow.__path__, "wflow."):
        name = info.name
        if any(p.startswith("_") for p in name.split(".")):
            continue
        if name.startswith(SKIP_PREFIXES):
            continue
        names.append(name)
    out = []
    for name in names:
        try:
            mod = importlib.import_module(name)
        except ImportError:  # an optional dependency (models) is absent
            continue
        if getattr(mod, "__all__", None):
            out.append(name)
    return sorted(out, key=lambda n: (n.count("."), n))


def _kind(obj) -> str:
    if isinstance(obj, types.GenericAlias) or typing.get_origin(obj) is not None:
        return "autodata"  # a type alias such as ``Spec = dict[str, ...]``
    if inspect.isclass(obj):
        return "autoclass"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj) or callable(obj):
        return "autofunction"
    return "autodata"


def generate(outdir: Path) -> list[str]:
    """Write ``outdir/<module>.rst`` for every public module and ``outdir/index.rst``."""
    mods = public_modules()
    modset = set(mods)
    objects: dict[str, dict[str, object]] = {}
    for m in mods:
        mod = importlib.import_module(m)
        objects[m] = {n: getattr(mod, n) for n in mod.__all__ if n != "__version__"}
    # canonical home of every object (by identity for classes and functions)
    home: dict[int, str] = {}
    for m in sorted(mods, key=lambda n: (-n.count("."), n)):  # deepest first
        for n, obj in objects[m].items():
            if _kind(obj) == "autodata":
                continue
            defined = getattr(obj, "__module__", None)
            if defined in modset and n in objects.get(defined, {}):
                home.setdefault(id(obj), f"{defined}.{n}")
    for m in mods:  # objects defined in private modules: first listing deepest-first
        for n, obj in objects[m].items():
            if _kind(obj) != "autodata":
                home.setdefault(id(obj), f"{m}.{n}")
    outdir.mkdir(parents=True, exist_ok=True)
    for old in outdir.glob("*.rst"):
        old.unlink()
    for m in mods:
        lines = [m, "=" * len(m), "", f".. automodule:: {m}", "   :no-members:", ""]
        reexports = []
        for n, obj in objects[m].items():
            kind = _kind(obj)
            target = home.get(id(obj)) if kind != "autodata" else f"{m}.{n}"
            if target != f"{m}.{n}":
                reexports.append((n, target, kind))
                continue
            if kind == "autodata" and (isinstance(obj, types.GenericAlias)
                                       or typing.get_origin(obj) is not None):
                lines += [f".. py:data:: {m}.{n}", "", f"   Type alias ``{obj!r}``.", ""]
                continue
            opts = ["   :members:", "   :show-inheritance:"] if kind == "autoclass" else []
            lines += [f".. {kind}:: {m}.{n}", *opts, ""]
        if reexports:
            lines += ["Re-exported here", "-" * 16, ""]
            for n, target, kind in reexports:
                role = "class" if kind == "autoclass" else "func"
                lines.append(f"* ``{n}``: :py:{role}:`{target}`")
            lines.append("")
        (outdir / f"{m}.rst").write_text("\n".join(lines), encoding="utf-8")
    HOME.clear()
    HOME.update(home)
    for m in mods:
        HOME.setdefault(id(importlib.import_module(m)), m)
    idx = ["API reference", "=============", "",
           "Every public name of wflow: the ``__all__`` of the package and of each public",
           "module, generated at build time. Shapes, units and conventions are in each",
           "docstring; the formulas they cite are in :doc:`../theory`.", "",
           ".. toctree::", "   :maxdepth: 1", ""]
    idx += [f"   {m}" for m in mods]
    (outdir / "index.rst").write_text("\n".join(idx) + "\n", encoding="utf-8")
    return mods


# --- cross-references ---------------------------------------------------------------------
#: id(object) -> the dotted name under which it is documented (set by :func:`generate`).
HOME: dict[int, str] = {}


class _Field:
    """An annotated field of a class (a dataclass field set per instance), as a target."""

    def __init__(self, owner: type, name: str) -> None:
        self.owner, self.name = owner, name


def _lookup(path: str):
    """The object named by a dotted path (module prefix imported), or raise LookupError."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        except Exception as exc:  # noqa: BLE001 - a module that fails to import is not a target
            raise LookupError(path) from exc
        for attr in parts[i:]:
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
            elif isinstance(obj, type) and any(attr in getattr(c, "__annotations__", {})
                                               for c in obj.__mro__):
                obj = _Field(obj, attr)  # a declared field without a class-level value
            else:
                raise LookupError(path)
        return obj, parts[:i], parts[i:]
    raise LookupError(path)


def _documented(path: str) -> str | None:
    """The documented dotted name of the object at ``path`` (attributes kept), or None."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj, _, _ = _lookup(".".join(parts[:i]))
        except LookupError:
            continue
        home = HOME.get(id(obj))
        if home is not None:
            return ".".join([home, *parts[i:]])
    return None


_NAMES: dict[str, dict[int, str]] = {}


def _unique_path(name: str) -> str | None:
    """The dotted path of the one wflow object called ``name``, or None (none, or several)."""
    if not _NAMES:
        import wflow

        mods = ["wflow"] + [i.name for i in pkgutil.walk_packages(wflow.__path__, "wflow.")]
        for m in mods:
            try:
                mod = importlib.import_module(m)
            except Exception:  # noqa: BLE001, S112 - optional dependencies
                continue
            for n, obj in vars(mod).items():
                if n.startswith("__") or inspect.ismodule(obj):
                    continue
                _NAMES.setdefault(n, {}).setdefault(id(obj), f"{m}.{n}")
    found = _NAMES.get(name, {})
    return next(iter(found.values())) if len(found) == 1 else None


def resolve_missing(app, env, node, contnode):
    """``missing-reference`` handler: a reference to a wflow object by any of its names.

    Docstrings name objects as users import them (``simulate``, ``wflow.particles.simulate``,
    ``wflow.particles.solver.simulate``); the API pages document each once. A target that
    names an importable object is resolved to its documented name (or, for an object
    without a page, a private module or another library, rendered as plain text); a bare
    name that is not importable from the docstring's module is looked up among the names
    of every wflow module and resolved when exactly one object has it. A target that names
    nothing stays unresolved, which ``-n -W`` turns into an error.
    """
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "").lstrip("~.")
    ctx = [node.get("py:module"), node.get("py:class")]
    candidates = []
    if ctx[0] and ctx[1]:
        candidates.append(f"{ctx[0]}.{ctx[1]}.{target}")
    if ctx[0]:
        mod = ctx[0].split(".")
        candidates += [".".join(mod[:i] + [target]) for i in range(len(mod), 0, -1)]
    candidates.append(target)
    head, _, tail = target.partition(".")
    unique = _unique_path(head)
    if unique is not None:  # a bare name defined in exactly one wflow module
        candidates.append(".".join([unique, tail]) if tail else unique)
    domain = env.get_domain("py")
    for cand in candidates:
        try:
            _lookup(cand)
        except LookupError:
            continue
        home = _documented(cand)
        if home is not None:
            for typ in ("obj", node.get("reftype", "obj")):
                new = domain.resolve_xref(env, node["refdoc"], app.builder, typ, home, node,
                                          contnode)
                if new is not None:
                    return new
        return contnode  # importable, no page of its own: plain text
    return None
