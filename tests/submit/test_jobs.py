"""Job-ad translation: universes, grid commands, remote_*, errors, dry-run output."""

from __future__ import annotations

from pathlib import Path

import pytest

from htgrid.submit import SubmitConfig, SubmitDescription, SubmitError, dry_run_text


def jobs(tmp_path: Path, text: str, **kw: object) -> list:  # type: ignore[type-arg]
    desc = SubmitDescription.from_text(text, cwd=str(tmp_path))
    return desc.jobs(42, owner="alice", qdate=1_700_000_000, **kw)  # type: ignore[arg-type]


def test_defaults_of_a_minimal_job(tmp_path: Path) -> None:
    (job,) = jobs(tmp_path, "executable = /bin/true\nqueue\n")
    ad = job.ad
    assert (ad["ClusterId"], ad["ProcId"], ad["JobStatus"], ad["JobUniverse"]) == (42, 0, 1, 5)
    assert ad["QDate"] == ad["EnteredCurrentStatus"] == 1_700_000_000
    assert ad["Cmd"] == "/bin/true"
    assert ad["Iwd"] == str(tmp_path)
    assert ad["Arguments"] == ""
    assert ad["In"] == ad["Out"] == ad["Err"] == "/dev/null"
    assert str(ad.lookup("Requirements")).startswith('(TARGET.Arch == "X86_64")')


def test_batch_grid_job(tmp_path: Path) -> None:
    text = (
        "universe = grid\ngrid_resource = batch slurm\nexecutable = /bin/true\n"
        "batch_queue = debug\nbatch_project = p1\nqueue\n"
    )
    (job,) = jobs(tmp_path, text)
    ad = job.ad
    assert ad["JobUniverse"] == 9
    assert ad["GridResource"] == "batch slurm"
    assert (ad["BatchQueue"], ad["BatchProject"]) == ("debug", "p1")
    assert str(ad.lookup("Requirements")) == "true"
    assert "RequestCpus" not in ad  # batch jobs get no config default requests


def test_condor_c_remote_commands(tmp_path: Path) -> None:
    text = (
        "universe = grid\ngrid_resource = condor s.example.org cm.example.org\n"
        "executable = /bin/true\nremote_universe = vanilla\nremote_initialdir = /scratch\n"
        "remote_grid_resource = batch pbs\n+remote_Requirements = True\nqueue\n"
    )
    (job,) = jobs(tmp_path, text)
    ad = job.ad
    assert ad["Remote_JobUniverse"] == 5
    assert ad["RemoteIwd"] == "/scratch"
    assert ad["Remote_GridResource"] == "batch pbs"
    assert ad["remote_Requirements"] is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("universe = grid\nexecutable = /bin/true\nqueue\n", "grid_resource"),
        ("universe = grid\ngrid_resource = cream x\nexecutable = /bin/true\nqueue\n", "grid type"),
        ("universe = grid\ngrid_resource = ec2 https://x\nexecutable = x\nqueue\n", "EC2 jobs"),
        ("universe = standard\nexecutable = /bin/true\nqueue\n", "not a supported universe"),
        ("queue\n", "No 'executable'"),
        ("executable = missing.exe\nqueue\n", "does not exist"),
        ("executable = /bin/true\n+A = 1 2\nqueue\n", "Parse error"),
        ("executable = /bin/true\nqueue 2 3 in (a)\n", "not a number"),
        ("executable = /bin/true\nhold = maybe\nqueue\n", "must eval to a boolean"),
        ("executable = /bin/true\nnotification = Start\nqueue\n", "Notification"),
    ],
)
def test_errors_carry_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.sub"
    path.write_text(text)
    desc = SubmitDescription.from_file(path)
    with pytest.raises(SubmitError, match=message) as info:
        desc.jobs(1, owner="u", qdate=0)
    assert info.value.path == str(path)
    assert info.value.line == text.count("\n")


def test_matching_and_from_file(tmp_path: Path) -> None:
    for name in ("b.dat", "a.dat", "c.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "rows").write_text("1 one\n2 two\n")
    text = (
        "executable = /bin/true\narguments = $(f)\nqueue f matching *.dat\n"
        "arguments = $(n)=$(w)\nqueue n,w from rows\n"
    )
    got = [j.ad["Args"] for j in jobs(tmp_path, text)]
    assert got == ["a.dat", "b.dat", "1=one", "2=two"]


def test_getenv_and_env_macro_use_the_given_environment(tmp_path: Path) -> None:
    text = "executable = /bin/true\ngetenv = MY*\narguments = $ENV(WHO)\nqueue\n"
    desc = SubmitDescription.from_text(text, cwd=str(tmp_path), env={"WHO": "me"})
    (job,) = desc.jobs(1, owner="u", qdate=0, env={"WHO": "me", "MYVAR": "1", "OTHER": "2"})
    assert job.ad["Environment"] == "MYVAR=1"
    assert job.ad["Args"] == "me"


def test_config_is_injected(tmp_path: Path) -> None:
    cfg = SubmitConfig(arch="AARCH64", filesystem_domain="example.org", submit_method=None)
    (job,) = jobs(tmp_path, "executable = /bin/true\nqueue\n", config=cfg)
    assert job.ad["FileSystemDomain"] == "example.org"
    assert "JobSubmitMethod" not in job.ad
    assert '"AARCH64"' in str(job.ad.lookup("Requirements"))


def test_dry_run_text(tmp_path: Path) -> None:
    out = dry_run_text(jobs(tmp_path, "executable = /bin/true\narguments = x\nqueue 2\n"))
    assert out.startswith("Dry-Run job(s)\n")
    blocks = out.split("\n\n")
    assert len(blocks) == 2
    assert 'Args="x"' in blocks[0] and "ProcId=1" in blocks[1]


def test_itemdata(tmp_path: Path) -> None:
    desc = SubmitDescription.from_text("queue a,b from (\n1 2\n3 4\n)\n", cwd=str(tmp_path))
    (rows,) = desc.itemdata()
    assert [r.values for r in rows] == [(("a", "1"), ("b", "2")), (("a", "3"), ("b", "4"))]


def test_ec2_iam_profile_name_alone_sets_its_attribute(tmp_path: Path) -> None:
    head = (
        "universe = grid\ngrid_resource = ec2 https://ec2.us-east-1.amazonaws.com\n"
        "executable = worker\nec2_access_key_id = a\nec2_secret_access_key = s\n"
        "ec2_ami_id = ami-1\n"
    )
    (job,) = jobs(tmp_path, head + "ec2_iam_profile_name = worker-role\nqueue\n")
    assert job.ad["EC2IamProfileName"] == "worker-role"
    assert "EC2IamProfileArn" not in job.ad and not job.warnings
    arn = "arn:aws:iam::1:instance-profile/w"
    both = f"ec2_iam_profile_arn = {arn}\nec2_iam_profile_name = worker-role\nqueue\n"
    (job,) = jobs(tmp_path, head + both)
    assert job.ad["EC2IamProfileArn"] == arn and "EC2IamProfileName" not in job.ad
    assert any("ignoring ec2_iam_profile_name" in w for w in job.warnings)


@pytest.mark.parametrize(
    ("grid_type", "release"),
    [
        ("cream", "9.2.0"),
        ("unicore", "9.2.0"),
        ("globus", "9.2.0"),
        ("deltacloud", "8.5.4"),
        ("boinc", "10.0.0"),
        ("nordugrid", "10.2.0"),
    ],
)
def test_a_grid_type_htcondor_retired_is_refused_as_such(
    tmp_path: Path, grid_type: str, release: str
) -> None:
    text = f"universe = grid\nexecutable = x\ngrid_resource = {grid_type} https://ce\nqueue\n"
    with pytest.raises(SubmitError) as err:
        SubmitDescription.from_text(text, "job.sub", cwd=str(tmp_path)).jobs(1, owner="a", qdate=1)
    message = str(err.value)
    assert message.startswith("job.sub:4: grid_resource: ")
    assert f'grid type "{grid_type}" was retired by HTCondor in {release}' in message
    assert "Invalid value" not in message


def test_use_x509userproxy_finds_the_proxy_where_gsi_puts_it(tmp_path: Path) -> None:
    """X509_USER_PROXY, else /tmp/x509up_u<uid> (get_x509_proxy_filename); an explicit
    x509userproxy wins, made absolute against the submit directory."""
    import os

    body = "universe = grid\ngrid_resource = arc ce.example.org\nexecutable = /bin/true\n"
    (ad,) = (j.ad for j in jobs(tmp_path, body + "use_x509userproxy = true\nqueue\n", env={}))
    assert ad["x509userproxy"] == f"/tmp/x509up_u{os.getuid()}"
    env = {"X509_USER_PROXY": "/home/me/proxy"}
    (ad,) = (j.ad for j in jobs(tmp_path, body + "use_x509userproxy = true\nqueue\n", env=env))
    assert ad["x509userproxy"] == "/home/me/proxy"
    (ad,) = (j.ad for j in jobs(tmp_path, body + "x509userproxy = p\nqueue\n", env=env))
    assert ad["x509userproxy"] == f"{tmp_path}/p"
