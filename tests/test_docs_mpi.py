"""The install page names exactly the commands that run under ``mpirun`` (``cli.MPI_AWARE``)."""

from __future__ import annotations

import re
from pathlib import Path

from wflow.cli import MPI_AWARE

INSTALL = Path(__file__).resolve().parents[1] / "docs" / "install.md"


def mpi_commands_named(text: str) -> set[str]:
    """The ``wflow CMD`` names in the sentence that opens the install page's MPI section."""
    section = text.split("## MPI", 1)[1]
    sentence = section.split("distribute their work", 1)[0]
    return set(re.findall(r"`wflow (\w+)`", sentence))


def test_install_page_lists_every_mpi_aware_command():
    assert mpi_commands_named(INSTALL.read_text()) == set(MPI_AWARE)


def test_a_command_left_out_is_caught():
    # negative control: the sentence as it read before (particles left out) fails the check
    text = ("## MPI\n\n`wflow pde`, `wflow verify` and `wflow reproduce` distribute their "
            "work over MPI ranks;")
    assert mpi_commands_named(text) != set(MPI_AWARE)
