"""The public surface is curated: everything in __all__ exists and comes from Hatchway itself."""

import hatchway


def test_all_exports_exist_and_come_from_hatchway() -> None:
    assert len(set(hatchway.__all__)) == len(hatchway.__all__)
    for name in hatchway.__all__:
        member = getattr(hatchway, name)
        if name != "__version__":
            assert member.__module__.startswith("hatchway."), name


def test_every_lazy_name_is_exported_and_resolves() -> None:
    assert set(hatchway._WHERE) | {"__version__"} == set(hatchway.__all__)
