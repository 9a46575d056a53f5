"""HTCondor's unified map file, as HTCondor-CE's admins write it (condor_mapfile and
mapfiles.d/*.conf)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from htgrid.net.security import MapFile, SecurityError
from htgrid.net.security._mapfile import WatchedMap

ISS = "https://scitokens.org/osg-connect"


def test_first_matching_line_of_the_method_wins_with_its_groups() -> None:
    mapped = MapFile.parse(
        "# a comment\n"
        "SCITOKENS /^https:\\/\\/scitokens\\.org\\/osg-connect,(pilot)-(\\d+)$/ \\1\\2\n"
        "SCITOKENS /^https:\\/\\/scitokens\\.org\\/osg-connect,/ osg\n"
        "TOKEN     /^https:\\/\\/scitokens\\.org\\/osg-connect,/ not-for-scitokens\n"
        "SCITOKENS /OSG-CONNECT,JANE$/i jane\n"
    )
    assert mapped.lookup(["SCITOKENS"], f"{ISS},pilot-7")[0] == "pilot7"  # type: ignore[index]
    assert mapped.lookup(["SCITOKENS"], f"{ISS},anyone")[0] == "osg"  # type: ignore[index]
    found = mapped.lookup(["SCITOKENS"], "https://x/osg-connect,jane")
    assert found is not None and (found[0], found[1].origin) == ("jane", "mapfile:5")
    assert mapped.lookup(["SCITOKENS"], "https://other,sub") is None
    assert mapped.lookup(["TOKEN"], f"{ISS},x")[0] == "not-for-scitokens"  # type: ignore[index]


def test_ssl_lines_with_dns_and_fqans() -> None:
    mapped = MapFile.parse(
        'SSL "/DC=org/DC=example/CN=Jane Doe" jane\n'
        "SSL /.*,\\/GLOW\\/Role=htpc.*/ glow\n"
        "GSI /^\\/DC=org\\/CN=(\\w+)$/ \\1\n"
    )
    assert mapped.lookup(["SSL"], "/DC=org/DC=example/CN=Jane Doe")[0] == "jane"  # type: ignore[index]
    assert mapped.lookup(["SSL"], "/DC=org/DC=example/CN=Jane Doe2") is None  # a literal
    assert mapped.lookup(["SSL"], "/CN=x,/GLOW/Role=htpc/Capability=NULL")[0] == "glow"  # type: ignore[index]
    assert mapped.lookup(["GSI"], "/DC=org/CN=bob")[0] == "bob"  # type: ignore[index]


def test_include_reads_a_directory_in_lexical_order(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    (etc / "mapfiles.d").mkdir(parents=True)
    (etc / "mapfiles.d" / "90-ban.conf").write_text(
        f"SCITOKENS /^{ISS.replace('/', chr(92) + '/')},/ osgpilot@banned.htcondor.org\n"
    )
    (etc / "mapfiles.d" / "10-scitokens.conf").write_text(
        "SCITOKENS /,pilot$/ pilot\n@include /nonexistent/nested/is/ignored\n"
    )
    (etc / "mapfiles.d" / "10-scitokens.conf~").write_text("SCITOKENS /.*/ backup\n")
    (etc / "mapfiles.d" / ".hidden").write_text("SCITOKENS /.*/ hidden\n")
    (etc / "mapfile").write_text("@include mapfiles.d\nFS /(.*)/ \\1\n")
    mapped = MapFile.load(etc / "mapfile")
    assert [r.canonical for r in mapped.rules] == ["pilot", "osgpilot@banned.htcondor.org", "\\1"]
    assert mapped.lookup(["SCITOKENS"], f"{ISS},pilot")[0] == "pilot"  # type: ignore[index]
    assert mapped.lookup(["SCITOKENS"], f"{ISS},glidein")[0].endswith("@banned.htcondor.org")  # type: ignore[index]
    assert mapped.rules[1].origin == f"{etc / 'mapfiles.d' / '90-ban.conf'}:1"


def test_bad_lines_are_named_by_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(SecurityError, match="mapfile:2: expected METHOD PRINCIPAL CANONICAL"):
        MapFile.parse("SCITOKENS /x/ y\nSCITOKENS onlytwo\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.conf").write_text("\nSCITOKENS /(/ y\n")
    (tmp_path / "mapfile").write_text("@include d\n")
    with pytest.raises(SecurityError, match=r"d/a\.conf:2: bad regular expression"):
        MapFile.load(tmp_path / "mapfile")


def test_an_edit_to_an_included_file_is_seen_at_once(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    conf = tmp_path / "d" / "10.conf"
    conf.write_text("SCITOKENS /,alice$/ alice\n")
    (tmp_path / "mapfile").write_text("@include d\n")
    watched = WatchedMap(tmp_path / "mapfile")
    assert watched.get().lookup(["SCITOKENS"], "i,alice")[0] == "alice"  # type: ignore[index]
    conf.write_text("SCITOKENS /,alice$/ alice@banned.htcondor.org\n")
    os.utime(conf, ns=(1, 1))  # a different mtime even on a coarse clock
    assert watched.get().lookup(["SCITOKENS"], "i,alice")[0] == "alice@banned.htcondor.org"  # type: ignore[index]
    (tmp_path / "d" / "05.conf").write_text("SCITOKENS /,alice$/ first\n")
    os.utime(tmp_path / "d", ns=(2, 2))
    assert watched.get().lookup(["SCITOKENS"], "i,alice")[0] == "first"  # type: ignore[index]


def test_the_issuers_scitokens_lines_name() -> None:
    """What bounds whose keys are fetched (SEC_SCITOKENS_ALLOWED_ISSUERS unset): one issuer
    per line, when its literal start names one; a line that can match more names none."""
    mapped = MapFile.parse(
        "SCITOKENS /^https:\\/\\/issuer\\.example,(.*)$/ \\1\n"
        "SCITOKENS /^https:\\/\\/vo\\.example\\/x,pilot$/ osgpilot@banned.htcondor.org\n"
        "SCITOKENS https://lit.example,frida frida@pool.test\n"
        "SCITOKENS /https:\\/\\/unanchored,(.*)/ a\n"
        "SCITOKENS /^https:\\/\\/a.b,x/ y\n"
        "SCITOKENS /^https:\\/\\/(a|b),x/ y\n"
        "SCITOKENS /^https:\\/\\/\\w+,x/ y\n"
        "TOKEN /^pool\\.example\\.org,(.*)$/ \\1\n"
    )
    assert mapped.scitokens_issuers() == {
        "https://issuer.example",
        "https://vo.example/x",
        "https://lit.example",
    }
