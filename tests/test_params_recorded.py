"""The params a stage ran with are the ones DVC records: a stage whose params file changed while it ran fails at its
end with one line, and a stage that DVC runs refuses a $CORY_PARAMS that names another file than params.yaml (DVC
records params.yaml's settings); outside DVC, $CORY_PARAMS runs a side experiment as before. That a stage knows DVC
runs it rests on the variables DVC sets for its stages, checked with a real `dvc repro`."""

import subprocess
import sys
from pathlib import Path

import yaml
from smoke import clean_env, sh

from pipeline.paths import ROOT
from pipeline.profile import render

EDITS_ITS_PARAMS = """
import sys
from pathlib import Path
from pipeline.common import run_stage
from pipeline.params import load_params

def main():
    load_params()
    if sys.argv[1] == "edit":  # as an editor, or `dvc exp run -S` in another shell, would while the stage runs
        path = Path(sys.argv[2])
        path.write_text(path.read_text().replace("learning_rate: 1.41e-05", "learning_rate: 2.0e-05", 1))
    print("done")

run_stage(main)
"""


def smoke_params(tmp_path: Path) -> Path:
    path = tmp_path / "side.yaml"
    path.write_text(yaml.safe_dump(render("smoke"), sort_keys=False))
    return path


def environment(**extra: str) -> dict:
    """A stage's environment (smoke.clean_env) with `extra`, $CORY_PARAMS included."""
    return {**clean_env(), **extra}


def stage(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", EDITS_ITS_PARAMS, *args], cwd=ROOT, capture_output=True, text=True,
                          env=environment(**env), timeout=300)


def test_a_stage_whose_params_file_changed_while_it_ran_fails_with_one_line(tmp_path):
    params = smoke_params(tmp_path)
    assert "learning_rate: 1.41e-05" in params.read_text()
    result = stage(tmp_path, "edit", str(params), CORY_PARAMS=str(params))
    assert result.returncode == 1 and result.stdout.strip() == "done"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {params} changed while the stage ran, which read it at its start: its "
                               "outputs were made with the settings it read, so the stage fails before DVC records")
    unchanged = stage(tmp_path, "keep", str(params), CORY_PARAMS=str(params))
    assert unchanged.returncode == 0 and unchanged.stderr == "", unchanged.stderr


def test_under_dvc_a_cory_params_naming_another_file_stops_the_stage_with_one_line(tmp_path):
    params = smoke_params(tmp_path)
    dvc = {"DVC_STAGE": "params", "DVC_ROOT": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "pipeline.params"], cwd=ROOT, capture_output=True, text=True,
                            env=environment(CORY_PARAMS=str(params), **dvc), timeout=300)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"error: $CORY_PARAMS names {params}, but DVC runs this stage and records params.yaml's settings as the ones "
        f"it ran with: `unset CORY_PARAMS` before `dvc repro` (a side experiment runs a stage outside DVC: "
        f"`CORY_PARAMS={params} python -m pipeline.<stage>`)"]
    for env in ({"CORY_PARAMS": str(params)}, {"CORY_PARAMS": str(ROOT / "params.yaml"), **dvc}):
        # outside DVC: the side experiment's file; under DVC, $CORY_PARAMS naming params.yaml itself is no conflict
        result = subprocess.run([sys.executable, "-m", "pipeline.params"], cwd=ROOT, capture_output=True, text=True,
                                env=environment(**env), timeout=300)
        assert result.returncode == 0 and "every setting is valid" in result.stdout, result.stderr


def test_dvc_sets_the_variables_by_which_a_stage_knows_dvc_runs_it(tmp_path):
    """A real `dvc repro` of a one-stage project: its command finds DVC_STAGE and DVC_ROOT (started_by_dvc); the
    same command run by hand does not."""
    project = tmp_path / "project"
    project.mkdir()
    env = clean_env(PYTHONPATH=str(ROOT))
    sh("git", "init", "-q", cwd=project, env=env)
    sh("dvc", "init", "-q", cwd=project, env=env)
    command = f"{sys.executable} -c 'from pipeline.single_writer import started_by_dvc; print(started_by_dvc())'"
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"probe": {"cmd": f"{command} > seen.txt",
                                                                          "outs": ["seen.txt"]}}}))
    sh("dvc", "repro", "-q", cwd=project, env=env)
    assert (project / "seen.txt").read_text().strip() == "True"
    by_hand = subprocess.run(command, shell=True, cwd=project, env=env, capture_output=True, text=True)
    assert by_hand.stdout.strip() == "False"
