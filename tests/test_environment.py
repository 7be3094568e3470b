"""environment.yml (conda, Binder) installs what pyproject.toml pins, and nothing else."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "python=3.11" in conda and "pip" in conda
    assert "-e ." in pip, "the course itself must be installed with -e ."
    packages = [p for p in pip if not p.startswith("-")]
    assert sorted(packages) == sorted(project["dependencies"]), (
        "environment.yml's pip list and pyproject.toml's dependencies differ: "
        f"only in environment.yml {sorted(set(packages) - set(project['dependencies']))}, "
        f"only in pyproject.toml {sorted(set(project['dependencies']) - set(packages))}"
    )


def test_torch_is_the_tested_range_everywhere():
    """pyproject.toml asks for helpers/machine/torch_build.py's range, the tested releases lie in it
    (its two ends), and the README names them."""
    from helpers.machine.torch_build import REQUIREMENT, TESTED, bounds, in_range, release

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [d for d in project["dependencies"] if d.startswith("torch")] == [REQUIREMENT]
    low, high = bounds()
    assert all(in_range(v) for v in TESTED) and release(TESTED[0])[:2] == low
    assert release(TESTED[-1])[:2] == (high[0], high[1] - 1), "the newest tested is the top"
    readme = (ROOT / "README.md").read_text()
    assert all(v in readme for v in TESTED) and REQUIREMENT.removeprefix("torch") in readme


def test_every_sanitize_rule_is_read_by_nbval():
    """nbval silently drops a rule it cannot parse (an empty `replace:` is one)."""
    from nbval.plugin import get_sanitize_patterns

    text = (Path(__file__).parent / "sanitize.cfg").read_text()
    rules = [line for line in text.splitlines() if line.startswith("regex:")]
    assert len(get_sanitize_patterns(text)) == len(rules)


def test_binders_post_build_writes_the_settings_make_lab_writes(tmp_path):
    """Binder runs postBuild in the environment it built from environment.yml: the same
    JupyterLab settings as `make install` writes (no news pop-up), and nothing installed."""
    import json
    import os
    import subprocess

    subprocess.run([str(ROOT / "postBuild")], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "NB_PYTHON_PREFIX": str(tmp_path)})
    written = tmp_path / "share/jupyter/lab/settings/overrides.json"
    ours = ROOT / ".venv/share/jupyter/lab/settings/overrides.json"
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()] == [
        "share/jupyter/lab/settings/overrides.json"]
    settings = json.loads(written.read_text())
    assert settings["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    if ours.exists():
        assert written.read_text() == ours.read_text()
