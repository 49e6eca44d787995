"""MLflow tracking that never breaks a stage.

The files each DVC stage writes are the record of a run; MLflow is a convenience view over them (runs of one profile
side by side in one experiment). So every MLflow problem (not installed, as on the GPU machine; a store that cannot
be opened or reached; an error mid-run) prints ONE warning line and turns the tracker into a no-op.

Store: $MLFLOW_TRACKING_URI, else `sqlite:///<project root>/mlflow.db` (MLflow 3 refuses the old ./mlruns file
store); a SQLite store keeps its artifacts in `mlartifacts/` next to its file. Experiment: `cory-<profile>`. Every
run is tagged with its DVC stage, profile, git commit, `pipeline_run` ($CORY_PIPELINE_RUN, else the commit: one
`dvc repro` shares one id), `config_hash` (of its resolved params), MLflow's own source, commit and user tags (the
UI's Source, Version and User columns), and, for training runs, seed and algorithm. Metrics are sent asynchronously,
one batch per step, so logging never waits on the store inside a training loop.

MLflow mirrors DVC, which keeps one output per run and replaces it when the run is redone:
- Every run has a key, what it is a run of: a training run's "<group>/<run>/seed<k>", the parent run's "pipeline",
  any other stage's run name (base_model@math, reward_model, evaluate). It is tagged `run_key` = "<profile>/<key>".
  A new run of a key never reuses an old one, even with the same config_hash (DVC ran the code again, so it is a new
  run): every older run of the key is tagged `superseded=true` and `superseded_by=<new run id>`, and one still RUNNING
  (its process is gone) ends KILLED. Every run starts tagged `superseded=false`, so the UI's search
  `tags.superseded != "true"` (or `= "false"`) lists the current runs only.
- A run ends FINISHED; KILLED if its body is interrupted (Ctrl-C, SystemExit, or SIGTERM, which start_run turns into
  SystemExit so that the run can still be closed); FAILED on any other exception.
- A stage's worker processes that train one unit each (base_models) import no MLflow: each hands its unit's run
  (FinishedRun) back, and the stage's own process logs it once the unit is done (log_finished), started and ended
  when its work did; the evaluate stage logs its run once the models are evaluated. Where worker processes do the
  work, the stage's process imports MLflow and opens the store meanwhile (warm_up).
- Results DVC restores from its cache (or `dvc pull`s) ran no code, so sync_runs, called by the report stage, logs a
  run tagged `restored_from=dvc` (params from config.json, metric history from history.csv) for every run folder
  whose current run is missing, unfinished or of another config_hash.

For comparing runs in the UI, a training run is named "<group>/<run>/seed<k>"; its params are its resolved train
config flattened (`ppo.learning_rate`, `cory.n_agents`, `seed`, ...) plus what it is a run of, `group`, `run`, `task`
and `model` (run_identity: PPO-2x differs from PPO by its model alone); its generations are the table artifact
`samples.json` (one row per generation: iteration, phase, agent, role, query, response, score, prompt), LLM1's before
training, then each logged iteration's as it ends (runtime.log_every), then LLM1's after training: the Artifacts tab
shows it beside the run's metrics, the runs page's "Artifact evaluation" view across runs. The report
stage ends with one parent run per `dvc repro` (cory.report.pipeline_run): the headline numbers as metrics and as its
description, each claim's verdict, reports/<profile>/ as artifacts, and the runs the report is made of nested under it.

The modules: `tags` (what a run is a run of, its tags and provenance), `store` (the store and its experiments, opened
once per process), `runs` (one run: start_run, Tracker, FinishedRun), `restore` (runs DVC restored, logged after the
fact); the parent run of a `dvc repro` is the report's (cory.report.pipeline_run).
"""
