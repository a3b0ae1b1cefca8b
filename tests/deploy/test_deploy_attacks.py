"""The deploy files attacked from the operator's side (issue 44 review), without a Docker engine:
what ``make image`` puts in the image's labels, and whether the Kubernetes pods' writable volumes
hold what the configuration lets the gateway write there."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from hatchway.config.settings import Settings
from tests.support.paths import ROOT

TOKEN = "glpat-S3cretT0ken"


def test_make_image_keeps_the_git_remotes_credentials_out_of_the_image(tmp_path: Path) -> None:
    """The ``org.opencontainers.image.source`` label (and ``docker history``, which shows build
    arguments) was ``git remote get-url origin`` as is: a CI clone's remote often carries a token
    (GitLab CI: ``https://gitlab-ci-token:<token>@host/…``), which then shipped with every image."""
    if shutil.which("git") is None or shutil.which("make") is None:
        pytest.skip("needs git and make")
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "src" / "hatchway").mkdir(parents=True)
    shutil.copy(ROOT / "src" / "hatchway" / "__init__.py", tmp_path / "src" / "hatchway" / "__init__.py")
    (tmp_path / "deploy" / "docker" / "ca").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$DOCKER_ARGS"\n')
    (bin_dir / "docker").chmod(0o755)
    git = {"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, env=os.environ | git)
    remote = f"https://gitlab-ci-token:{TOKEN}@gitlab.example.com/platform/hatchway.git"
    subprocess.run(
        ["git", "-C", str(tmp_path), "remote", "add", "origin", remote], check=True, env=os.environ | git
    )

    env = (
        os.environ
        | git
        | {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "DOCKER_ARGS": str(tmp_path / "docker-args"),
            "PIP_CERT": "/nonexistent",  # no CA bundle to copy
        }
    )
    done = subprocess.run(
        ["make", "--no-print-directory", "image", "PYTHON=python3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    args = (tmp_path / "docker-args").read_text().splitlines()
    assert TOKEN not in "\n".join(args) and TOKEN not in done.stdout + done.stderr
    assert "SOURCE=https://gitlab.example.com/platform/hatchway.git" in args, args


def _bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([KMGT]i)?", quantity).groups()  # type: ignore[union-attr]
    return int(number) * 1024 ** ("_KMGT".index(unit[0]) if unit else 0)


def _render(name: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("HATCHWAY_REQUIRE_NODE_TOOLS"):
            pytest.fail("kubectl not installed")
        pytest.skip("kubectl not installed: it renders deploy/kubernetes (`kubectl kustomize`, offline)")
    done = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "deploy" / "kubernetes" / name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return list(yaml.safe_load_all(done.stdout))


@pytest.mark.parametrize("name", ["overlays/single", "overlays/ha"])
def test_the_run_record_spool_fits_the_volume_it_is_written_to(name: str) -> None:
    """Run records the database cannot take are spooled under the working directory
    (``run_records.spool_dir``, ``./.hatchway/spool``), up to ``spool_max_bytes`` (256 MiB by
    default). In the base the working directory is an ``emptyDir`` of 64Mi: a database outage long
    enough would fill it past its ``sizeLimit``, and the kubelet evicts the pod — deleting the spool
    it was keeping for the outage."""
    objects = _render(name)
    config = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("hatchway-config-")
    )
    settings = Settings.model_validate(yaml.safe_load(config["data"]["hatchway.yaml"]))
    spool = settings.run_records
    for deployment in (o for o in objects if o["kind"] == "Deployment"):
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        state = volumes["state"]  # mounted at /var/lib/hatchway, the working directory
        if spool.spool_dir is None or "emptyDir" not in state:
            continue  # a claim (overlays/single) is sized by the operator
        limit = state["emptyDir"].get("sizeLimit")
        assert limit is not None and spool.spool_max_bytes < _bytes(limit), (
            f"{deployment['metadata']['name']}: run_records.spool_max_bytes {spool.spool_max_bytes} does "
            f"not fit the state emptyDir of {limit}"
        )


@pytest.mark.parametrize("name", ["base", "overlays/ha"])
def test_a_deployment_the_autoscaler_scales_names_no_replica_count(name: str) -> None:
    """``kubectl apply -k`` of a Deployment holding ``spec.replicas`` sets the live count back to it
    on every apply (a config change, a new image): an HPA that had scaled the gateway to 6 under load
    sees it cut to 2, and the pods it had added are terminated mid-stream until it scales up again.
    Kubernetes' HPA documentation: remove ``spec.replicas`` from a Deployment an HPA manages."""
    objects = _render(name)
    scaled = {o["spec"]["scaleTargetRef"]["name"] for o in objects if o["kind"] == "HorizontalPodAutoscaler"}
    assert scaled, "no HorizontalPodAutoscaler rendered"
    for deployment in (o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] in scaled):
        assert "replicas" not in deployment["spec"], (
            f"{deployment['metadata']['name']}: spec.replicas {deployment['spec']['replicas']} "
            "overrides the HorizontalPodAutoscaler's count on every apply"
        )
