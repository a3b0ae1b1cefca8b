"""The Dockerfile's inputs, checked in ``make test`` without a Docker engine (the image itself is
built and run by ``make image-test``, tests/image/): the pinned requirements still satisfy
pyproject.toml's dependencies, and the final stage keeps to what docs/deploy.md promises."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support.paths import ROOT

DOCKER = ROOT / "deploy" / "docker"


def pins(name: str) -> dict[str, Version]:
    found = {}
    for line in (DOCKER / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line.split("#")[0].strip())
            (specifier,) = requirement.specifier  # exactly one pin, ==
            assert specifier.operator == "==", line
            found[canonicalize_name(requirement.name)] = Version(specifier.version)
    return found


def test_the_image_pins_satisfy_the_package_dependencies() -> None:
    """A dependency added or raised in pyproject.toml without `make image-lock` fails here, not in
    the image build minutes later."""
    locked = pins("requirements.txt")
    problems = []
    for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"sys_platform": "linux"}):
            continue
        pinned = locked.get(canonicalize_name(requirement.name))
        if pinned is None or not requirement.specifier.contains(pinned, prereleases=True):
            problems.append(f"{line}: pinned {pinned}")
    assert problems == [], "run `make image-lock`: " + "; ".join(problems)
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    backend = pins("build-requirements.txt")
    for line in build:
        requirement = Requirement(line)
        assert requirement.specifier.contains(backend[canonicalize_name(requirement.name)]), line


def test_the_final_stage_runs_as_the_documented_user_with_no_secret_baked_in() -> None:
    text = (ROOT / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM ") :]
    assert "USER 10001:10001" in final and 'VOLUME ["/var/lib/hatchway"]' in final
    assert 'ENTRYPOINT ["tini", "--", "hatchway"]' in final and "HEALTHCHECK" in final
    # Only /stage of the build stage is taken: not the CA bundle, the wheels or pip.
    assert re.findall(r"COPY --from=\S+ (\S+)", final) == ["/stage/"]
    # No build argument or environment variable carries a secret into any stage.
    assert not re.search(r"(ARG|ENV)\s+\S*(KEY|SECRET|PASSWORD|TOKEN)", text, re.IGNORECASE)
    ignored = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and line[0] != "#"]
    assert ignored[0] == "*" and "!deploy/docker/" in ignored  # the context is an allowlist: no .venv, .git
