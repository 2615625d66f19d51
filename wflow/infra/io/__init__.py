"""Outputs: JSON / CSV / NPZ written atomically, and run directories that are all-or-nothing.

A run writes into a hidden staging folder ``.DIR.partial-XXXX`` beside ``DIR`` and moves
it to ``DIR`` only after every file is complete, so a killed or failed run never leaves a
folder that looks finished. Single files are written to a temporary sibling and
``os.replace``-d into place. Folders and files get the modes the process's umask allows
(``0o777 & ~umask``, ``0o666 & ~umask``), as ``mkdir`` and ``open`` would give them.

wflow never deletes or replaces what it did not write:

* every finished output folder carries a marker file :data:`OUTPUT_MARKER`
  (``.wflow-output.json``: the command line, time, versions and the list of files written);
* :func:`prepare_output` checks an output location *before* any computation: a regular
  file, a symbolic link, the current folder (or one containing it) and an existing folder
  that is not empty and carries no marker are refused; a previous wflow output is replaced
  only with ``overwrite`` (``--overwrite``), and only if it holds nothing but the files
  its marker lists; the parent must be a folder wflow can write in (probed by creating
  and removing a folder there);
* :func:`claim_output` (what every command calls) does the same checks, takes an
  exclusive lock on the location (:mod:`wflow.infra.lock`: a second process on the same
  ``--out`` is refused at once, naming the holder) and records *what* it found there
  (nothing, an empty folder, or one wflow output identified by its inode and its marker's
  inode and mtime). Stale staging folders of dead wflow processes beside it are removed;
* :func:`run_directory` moves the results into place only if the location is still what
  was claimed: anything that appeared or changed during the run is kept, and the new
  results stay in the staging folder named in the message (:class:`OutputChangedError`,
  exit status 1). Without a claim it repeats the checks of :func:`prepare_output`. It
  swaps a replaced output atomically
  (``renameat2(RENAME_EXCHANGE)`` on Linux, so either the old or the new output is at
  ``DIR`` at every instant) and deletes only the files the old marker lists. If the move
  is refused at the end, the results stay in the staging folder and the error names it.

Every staging folder holds :data:`STAGING_MARKER` (``.wflow-staging.json``: "incomplete",
the PID, host and command) from its creation until the moment it is moved into place, so a
folder left by ``kill -9`` is never mistaken for a result and is recognised as wflow's own.

Errors about the output location are :class:`OutputError` (a ``ValueError``: bad input,
exit status 2 on the command line). A full disk while writing is :class:`DiskFullError`
(``no space left on device while writing FILE``; exit status 1).
"""

from __future__ import annotations

from .files import (
    DiskFullError,
    OutputChangedError,
    OutputError,
    atomic_write_bytes,
    atomic_write_text,
    check_finite,
    current_umask,
    finish_history,
    history_columns,
    is_disk_full,
    provenance,
    save_npz,
    set_command_line,
    to_jsonable,
    write_csv,
    write_json,
)
from .outputs import (
    OUTPUT_MARKER,
    STAGING_MARKER,
    abandon_outputs,
    check_parent,
    claim_output,
    glob_escape,  # noqa: F401 (importable here as before)
    prepare_output,
    read_output_marker,
    release_all_outputs,
    release_output,
    remove_stale_staging,
    run_directory,
    stale_staging,
)

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "write_json",
    "write_csv",
    "save_npz",
    "run_directory",
    "prepare_output",
    "check_parent",
    "read_output_marker",
    "OutputError",
    "OutputChangedError",
    "DiskFullError",
    "is_disk_full",
    "OUTPUT_MARKER",
    "STAGING_MARKER",
    "claim_output",
    "release_output",
    "release_all_outputs",
    "abandon_outputs",
    "stale_staging",
    "remove_stale_staging",
    "current_umask",
    "set_command_line",
    "to_jsonable",
    "check_finite",
    "finish_history",
    "history_columns",
    "provenance",
]
