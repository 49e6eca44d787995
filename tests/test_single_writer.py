"""One writer per profile (pipeline/single_writer.py): a second stage that would write a profile's outputs while
another does is refused at once, naming the holder; the lock goes with its holder, however that ends; and a stage
that DVC started, and its pool's workers, end when their parent does."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from smoke import clean_env, copy_tracked

import pipeline.paths
from pipeline.single_writer import LOCK, StageLocked, parent_death_signal, stage_lock

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A copy of the repository on the smoke profile: its stages run (and lock) there, never in the working tree."""
    return copy_tracked(tmp_path_factory.mktemp("writer") / "repo", "smoke", commit=False)


@pytest.fixture
def in_repo(repo, monkeypatch):
    """This process's stage_lock takes the copy's lock file."""
    monkeypatch.setattr(pipeline.paths, "ROOT", repo)
    return SimpleNamespace(profile="smoke")


def stage(repo: Path, module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=repo, env=clean_env(), capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("module", ["pipeline.train", "pipeline.evaluate", "pipeline.base_models"])
def test_a_second_writer_is_refused_at_once_naming_the_holder(repo, in_repo, module):
    with stage_lock(in_repo, "train"):
        started = time.perf_counter()
        result = stage(repo, module)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: outputs/smoke/{LOCK}: the 'smoke' profile's outputs are being written by the "
                               f"train stage, pid {os.getpid()} (`")
    assert "started 2" in lines[0] and "wait for it to end" in lines[0]
    assert time.perf_counter() - started < 60  # at its start: no model, data or run folder was read


def test_a_second_lock_in_one_process_is_refused_too(in_repo):
    with stage_lock(in_repo, "train"):
        with pytest.raises(StageLocked, match=r"written by the train stage, pid \d+"):
            with stage_lock(in_repo, "report"):
                pass


def test_the_lock_is_released_after_a_failure(repo, in_repo):
    with pytest.raises(ZeroDivisionError):
        with stage_lock(in_repo, "train"):
            1 / 0
    with stage_lock(in_repo, "train"):  # free again
        pass
    # a stage that fails after it took the lock (here: the smoke copy has no data yet) leaves it free
    result = stage(repo, "pipeline.train")
    assert result.returncode == 1 and "prompts" in result.stderr and LOCK not in result.stderr
    with stage_lock(in_repo, "train"):
        pass


def test_a_killed_holder_leaves_the_lock_free(repo, in_repo):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time, types, pipeline.paths as p; from pathlib import Path; "
         f"p.ROOT = Path({str(repo)!r}); from pipeline.single_writer import stage_lock; "
         "lock = stage_lock(types.SimpleNamespace(profile='smoke'), 'train'); lock.__enter__(); "
         "print('held', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True, env=clean_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StageLocked, match=f"pid {holder.pid}"):
            with stage_lock(in_repo, "report"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with stage_lock(in_repo, "report"):  # the kernel released it with its process
        pass


PRINTS_PDEATHSIG = ("from pipeline.common import run_stage; from pipeline.single_writer import parent_death_signal; "
                    "run_stage(lambda: print(parent_death_signal()))")


@linux
@pytest.mark.parametrize("by_dvc, expected", [(True, signal.SIGTERM), (False, 0)])
def test_a_stage_that_dvc_started_gets_sigterm_when_its_parent_ends(by_dvc, expected):
    """DVC sets DVC_STAGE for every stage command; a stage started by hand (nohup, a shell) is left as it was."""
    env = clean_env(**({"DVC_STAGE": "train", "DVC_ROOT": "/repo"} if by_dvc else {}))
    if not by_dvc:
        env.pop("DVC_STAGE", None)
    result = subprocess.run([sys.executable, "-c", PRINTS_PDEATHSIG], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) == expected


@linux
def test_the_pools_workers_get_sigterm_when_their_stage_ends():
    from pipeline.gpus import run_at_once

    results, failed = run_at_once({"worker": (parent_death_signal, ())}, 1, [], False, "test")
    assert failed == {} and results == [signal.SIGTERM]
    assert parent_death_signal() == 0  # the test process itself is left as it was


def gone(pid: int, within: float) -> bool:
    """Whether process `pid` ends (or is left a zombie for its new parent to reap) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        time.sleep(0.1)
    return False


@linux
@pytest.mark.parametrize("through", ["exec", "sh -c"])
def test_killing_dvc_alone_ends_its_stage(through):
    """A parent that starts the stage as DVC does ($SHELL -c, which bash replaces by the command and dash does not)
    and is then killed: the stage ends within seconds, through its parent-death signal or, behind a shell that
    outlives DVC, by watching the shell's parent."""
    child = [sys.executable, "-c", "from pipeline.common import run_stage; import time; "
             "run_stage(lambda: time.sleep(120))"]
    command = child if through == "exec" else ["sh", "-c", " ".join(f"'{part}'" for part in child)]
    fake_dvc = ("import subprocess, sys, time; "
                f"p = subprocess.Popen({command!r}); print(p.pid, flush=True); time.sleep(120)")
    dvc = subprocess.Popen([sys.executable, "-c", fake_dvc], stdout=subprocess.PIPE, text=True,
                           env=clean_env(DVC_STAGE="train", DVC_ROOT="/repo"))
    try:
        first = int(dvc.stdout.readline())
        time.sleep(3)  # the stage process is up (python started, its signal set)
        # behind a shell that did not exec (dash), the stage is the shell's child
        children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(int(p.name)) == first]
        stage_pid = children[0] if children else first
    finally:
        os.kill(dvc.pid, signal.SIGKILL)
        dvc.wait()
    assert gone(stage_pid, within=10), f"the stage process {stage_pid} outlived the dvc that started it"


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def inside_a_run(marker: str) -> None:
    """A pool call inside a run's MLflow run (whose handler turns SIGTERM into SystemExit, to end the run KILLED):
    it says so in `marker`, then trains for two minutes."""
    from cory.tracking.runs import start_run

    with start_run("train", {}, profile="killed", outputs=Path(marker).parent):
        Path(marker).write_text(str(os.getpid()))
        time.sleep(120)


def descendants(pid: int) -> set[int]:
    """Every process below `pid`: its children, theirs, and so on."""
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and _parent(int(entry.name)) == parent and int(entry.name) not in found:
                found.add(int(entry.name))
                todo.append(int(entry.name))
    return found


@linux
def test_killing_dvc_while_workers_are_inside_runs_ends_the_stage_and_every_worker(tmp_path):
    """A stage started as DVC starts it, whose pool of two worker processes is inside two runs, and `dvc` killed
    (SIGKILL): the stage, both workers and the pool's helper processes all end within seconds, none left re-parented
    to init (a worker's loop that caught the run's SystemExit would wait for its next call forever)."""
    markers = [tmp_path / "a.inside", tmp_path / "b.inside"]
    stage = ("import sys; sys.path.insert(0, {tests!r}); from pipeline.common import run_stage; "
             "from pipeline.gpus import run_at_once; import test_single_writer as t; "
             "run_stage(lambda: run_at_once({calls}, 2, [], False, 'test'))").format(
        tests=str(Path(__file__).parent), calls="{" + ", ".join(f"'{m.stem}': (t.inside_a_run, ({str(m)!r},))"
                                                             for m in markers) + "}")
    fake_dvc = ("import subprocess, sys, time; "
                f"p = subprocess.Popen([sys.executable, '-c', {stage!r}]); print(p.pid, flush=True); time.sleep(300)")
    env = clean_env(DVC_STAGE="train", DVC_ROOT=str(tmp_path), MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db")
    dvc = subprocess.Popen([sys.executable, "-c", fake_dvc], stdout=subprocess.PIPE, text=True, env=env)
    try:
        stage_pid = int(dvc.stdout.readline())
        deadline = time.monotonic() + 240
        while not all(m.exists() for m in markers) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert all(m.exists() for m in markers), "the workers never got inside their runs"
        below = descendants(stage_pid)
        assert {int(m.read_text()) for m in markers} <= below
    finally:
        os.kill(dvc.pid, signal.SIGKILL)
        dvc.wait()
    for pid in [stage_pid, *sorted(below)]:
        assert gone(pid, within=30), f"process {pid} ({_name(pid)}) outlived the dvc that started its stage"


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:200]
    except OSError:
        return "gone"
