"""The wheel a user installs, tried as they would: ``python -m build`` makes the sdist and, from
it, the wheel; the wheel (not the tree) goes into a fresh virtual environment; from a directory
outside the tree, ``tool-boundary --version``, ``tool-boundary demo`` and one demo run through
a real ``celery -A tasks worker`` of that environment. A file the package needs at run time
that the wheel leaves out (the Lua scripts, the web view's templates and static files, the
demo's data, ``py.typed``) fails here, where every other test runs on the tree.

The fresh environment gets the wheel alone (``pip install --no-deps --no-index``); the
dependencies it needs are the ones this test environment already has, reached through a
``.pth`` line naming this environment's ``site-packages``. A path line is only added to
``sys.path``, after the fresh environment's own ``site-packages``: the editable install's
finder in this environment is not run, so ``tasks``, ``boundary`` and ``projectors`` can come
from the wheel only (checked). Nothing is downloaded: the test runs offline, in about a
minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import redis

from bench.rig.workers import await_log, settings_env, start_process, stop_group
from boundary import __version__
from tests.conftest import SUBPROCESS_BROKER_DB, celery_test_settings, flush_db, redis_url

# One xdist worker runs them all, so the module's one build runs once. It builds from a copy of
# the tracked files: building in the tree, while other tests wrote there, failed now and then.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.wheel,
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("wheel"),
]

ROOT = Path(__file__).resolve().parents[2]
#: The packages the wheel installs, and only these (no generic ``examples`` beside a user's).
PACKAGES = ("boundary", "projectors", "tasks")


def run(command: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        # (pytest.fail: an assertion's message would be cut to a few lines)
        pytest.fail(
            f"{command} exited {done.returncode}\nstdout:\n{done.stdout[-2000:]}\n"
            f"stderr:\n{done.stderr[-3000:]}"
        )
    return done


def checkout(into: Path) -> Path:
    """The tree's tracked files (as they are in the working tree) copied into ``into``: what a
    user builds from, apart from what other tests write in the tree while this one builds."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (raw.decode() for raw in listed)):
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``python -m build`` makes from the sdist it makes first."""
    out = tmp_path_factory.mktemp("dist")
    source = checkout(tmp_path_factory.mktemp("source"))
    run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        cwd=source,
    )
    assert len(list(out.glob("tool_boundary-*.tar.gz"))) == 1
    (found,) = out.glob("tool_boundary-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel installed in it."""
    home = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", "--without-pip", str(home)], cwd=home)
    python = home / "bin" / "python"
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--disable-pip-version-check", "-q", str(wheel)],
        cwd=home,
    )  # fmt: skip
    purelib = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=home
    ).stdout.strip()
    (Path(purelib) / "tb_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return home


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside the tree, where the installed commands run."""
    where = tmp_path / "elsewhere"
    where.mkdir()
    return where


def user_env(venv: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """A user's shell: the fresh venv's ``bin`` first on ``PATH``, the project on no path."""
    env = dict(os.environ if env is None else env)
    env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def test_the_wheel_installs_the_three_packages_and_every_file_they_need(
    wheel: Path, venv: Path, outside: Path
) -> None:
    # Given the wheel's contents
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    # Then it installs the three packages and nothing else (no top-level ``examples``)
    assert tops == set(PACKAGES)
    # And every file of the tree's packages is in it (scripts, templates, static files, data)
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                assert path.relative_to(ROOT).as_posix() in names, path

    # And, run outside the tree, the packages come from the venv, not the tree
    python = venv / "bin" / "python"
    probe = "import boundary, projectors, tasks; print(tasks.__file__, boundary.__version__)"
    where, version = run([str(python), "-c", probe], cwd=outside).stdout.split()
    assert Path(where).is_relative_to(venv)
    assert version == __version__
    missing = subprocess.run(
        [str(python), "-c", "import examples"], cwd=outside, capture_output=True, check=False
    )
    assert missing.returncode != 0


def test_the_installed_command_prints_its_version_and_runs_the_demo(
    venv: Path, outside: Path
) -> None:
    env = user_env(venv, {k: v for k, v in os.environ.items() if "TOOL_BOUNDARY_" not in k})
    # When the installed console script asks for its version
    done = run([str(venv / "bin" / "tool-boundary"), "--version"], cwd=outside, env=env)
    # Then it is the release's
    assert done.stdout.strip() == f"tool-boundary {__version__}"

    # When the demo runs on its embedded default (no Redis, a worker thread)
    done = run(
        [str(venv / "bin" / "tool-boundary"), "demo", "--json"], cwd=outside, env=env, timeout=240
    )
    # Then every scripted call ended as the script expects
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert report["calls"] and all(call["expected"] for call in report["calls"])


def test_a_call_goes_through_a_worker_of_the_installed_package(
    venv: Path, outside: Path, redis_client: redis.Redis
) -> None:
    # Given a worker started from the installed package (the venv's python -m celery -A tasks:
    # Celery itself is a dependency), on the test Redis, with the demo's tools (the default)
    settings = celery_test_settings(broker_url=redis_url(SUBPROCESS_BROKER_DB))
    env = user_env(venv, settings_env(settings))
    del env["TOOL_BOUNDARY_TOOLS"]  # the default: the demo's tools
    del env["TOOL_BOUNDARY_MAX_RAW_BYTES"]  # the demo's own raw limit
    flush_db(SUBPROCESS_BROKER_DB)
    log = outside / "worker.log"
    command = [
        str(venv / "bin" / "python"), "-m", "celery", "-A", "tasks", "worker",
        "-P", "threads", "-c", "4", "-Q", "tools,long,projections",
        "--without-mingle", "--without-gossip", "-l", "INFO",
    ]  # fmt: skip
    worker = start_process(command, env, log, cwd=outside)
    try:
        await_log(worker, log, " ready.", 60, "the installed worker")
        # When the installed demo sends its calls to that worker (no worker of its own)
        done = run(
            [str(venv / "bin" / "tool-boundary"), "demo", "--no-worker", "--json"],
            cwd=outside,
            env=env,
            timeout=240,
        )
    finally:
        stop_group(worker)
    # Then every call ended as the script expects, executed by that worker
    report = json.loads(done.stdout)
    assert report["mode"] == "redis"
    assert report["calls"] and all(call["expected"] for call in report["calls"])
    assert "tool_boundary.execute[demo-" in log.read_text()
