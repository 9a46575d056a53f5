"""The pool's knob table: one default per knob, which every daemon's settings and
`htgrid config_val` take."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.grid import GridManagerConfig
from htgrid.pool import CONFIG_NAME, KNOBS, ConfigFile, PoolError
from htgrid.schedd import ScheddConfig
from htgrid.startd import StartdConfig
from htgrid.testing import run_cli


def test_an_empty_file_gives_each_daemon_its_own_defaults(tmp_path: Path) -> None:
    assert ScheddConfig.load(tmp_path) == ScheddConfig(tmp_path)
    assert StartdConfig.load(tmp_path) == StartdConfig(tmp_path, execute_dir=tmp_path / "execute")
    assert GridManagerConfig().with_knobs(tmp_path) == GridManagerConfig()


def test_an_unset_knob_reads_as_its_default_and_a_set_one_as_written(tmp_path: Path) -> None:
    (tmp_path / CONFIG_NAME).write_text("ALIVE_INTERVAL = 7\nQUEUE_FSYNC = no\n")
    conf = ConfigFile.read(tmp_path)
    assert (conf.number("ALIVE_INTERVAL"), conf.flag("QUEUE_FSYNC")) == (7.0, False)
    assert conf.number("NEGOTIATOR_INTERVAL") == float(KNOBS["NEGOTIATOR_INTERVAL"] or "nan")
    assert conf.address("SCHEDD_ADDRESS") == ("127.0.0.1", 0)
    assert conf.megabytes("MAX_TRANSFER_INPUT_MB") == 10240
    assert conf.names("DAEMON_LIST")[0] == "MASTER"
    with pytest.raises(KeyError, match="SCHEDD_NAME has no default"):
        conf.text("SCHEDD_NAME")  # computed by the schedd: its caller names it


def test_config_val_prints_the_tables_defaults(tmp_path: Path) -> None:
    rc, out, _ = run_cli(tmp_path, "config_val", "-dump")
    assert rc == 0
    dumped = dict(line.split(" = ", 1) for line in out.splitlines()[1:] if not line.startswith("#"))
    assert {name: dumped[name] for name, text in KNOBS.items() if text is not None} == {
        name: text for name, text in KNOBS.items() if text is not None
    }


def test_a_knob_the_table_does_not_name_is_refused_with_its_line(tmp_path: Path) -> None:
    (tmp_path / CONFIG_NAME).write_text("ALIVE_INTERVAL = 7\nALIVE_INTERVALL = 8\n")
    with pytest.raises(PoolError, match=r"htgrid\.conf:2: .* not ALIVE_INTERVALL"):
        ConfigFile.read(tmp_path)


def test_a_ce_raises_the_grid_managers_jobs_per_resource(tmp_path: Path) -> None:
    """HTCondor-CE's GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE = $(CONDORCE_MAX_JOBS):
    a CE's route sends up to 10,000 jobs to its batch system, not the default 1,000."""
    (tmp_path / CONFIG_NAME).write_text("GRIDMANAGER_MAX_SUBMITTED_JOBS_PER_RESOURCE = 10000\n")
    assert GridManagerConfig().with_knobs(tmp_path).max_submitted_per_resource == 10000
