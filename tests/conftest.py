from pipeline.common import limit_cpu_threads

# The stages' policy (pipeline.common.limit_cpu_threads) for the tests that train models in this process: tiny models
# gain nothing from intra-op threads, and a busy 2-core CI machine loses a lot to oversubscription.
limit_cpu_threads()


import pytest  # noqa: E402

from smoke import reproduce_smoke  # noqa: E402


@pytest.fixture(scope="session")
def smoke_repo(tmp_path_factory):
    """One `dvc repro` of the smoke profile for the whole session (tests/smoke.py): tests that change it copy it."""
    return reproduce_smoke(tmp_path_factory.mktemp("smoke") / "repo")


@pytest.fixture(scope="session")
def test_store(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture(autouse=True)
def mlflow_away_from_the_working_tree(test_store, monkeypatch):
    """A test that logs to MLflow without choosing a store logs to the session's, never to the project's mlflow.db
    in the working tree (a test that sets $MLFLOW_TRACKING_URI itself overrides this)."""
    import os

    if not os.environ.get("MLFLOW_TRACKING_URI"):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", test_store)


@pytest.fixture(autouse=True)
def mlflow_on_again():
    """A stage process turns MLflow off for good at its first failure (cory.tracking.store.warn); the tests share one
    process, so each starts with it on."""
    yield
    import sys

    store = sys.modules.get("cory.tracking.store")
    if store is not None:
        store.forget_warning()


@pytest.fixture(autouse=True)
def hub_mode_restored():
    """cory.hf.offline_unless_reachable puts a stage process offline for good where the hub does not answer; each
    test starts in the mode the session started in."""
    import os
    import sys

    before = os.environ.get("HF_HUB_OFFLINE")
    modules = {name: getattr(sys.modules[name], "HF_HUB_OFFLINE", None)
               for name in ("huggingface_hub.constants", "datasets.config") if name in sys.modules}
    yield
    if before is None:
        os.environ.pop("HF_HUB_OFFLINE", None)
    else:
        os.environ["HF_HUB_OFFLINE"] = before
    offline = (before or "").strip().lower() in ("1", "true", "yes", "on")  # as the libraries read it at import
    for name in ("huggingface_hub.constants", "datasets.config"):
        if name in sys.modules:
            sys.modules[name].HF_HUB_OFFLINE = modules.get(name, offline)
