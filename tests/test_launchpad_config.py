"""What the Launchpad shows: every config field of the code location says what it does."""

import importlib

import dagster as dg


def subclasses(cls: type):
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)


def location_config_classes() -> list[type]:
    """The Config and ConfigurableResource classes of lm_assets, once the code location has defined them all."""
    importlib.import_module("lm_assets.definitions")
    found = {cls for cls in subclasses(dg.Config) if cls.__module__.startswith("lm_assets.")}
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__name__}")


def test_the_config_classes_are_found():
    names = {cls.__name__ for cls in location_config_classes()}
    assert {"CuratedShardConfig", "PackedDatasetConfig", "TrainingLauncher", "StorageResource", "ClusterSpec"} <= names


def test_every_config_field_has_a_description():
    undescribed = [
        f"{cls.__module__}.{cls.__name__}.{name}"
        for cls in location_config_classes()
        for name, field in cls.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert undescribed == []
