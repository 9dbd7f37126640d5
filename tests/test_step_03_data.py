import json

import pytest

from cells.step_03_data import FIXTURE_KEYS, DataError, load_all, load_fixture, sha256_file


def _write(tmp_path, name, text):
    (tmp_path / name).write_text(text, encoding="utf-8")


def _valid_dir(tmp_path):
    _write(tmp_path, "drifts.yaml", "version: 1\npatterns: []\n")
    _write(tmp_path, "drift_families.yaml", "version: 1\nfamilies: {}\n")
    _write(tmp_path, "templates.yaml", "version: 1\ntemplates: []\n")
    _write(tmp_path, "i18n.yaml", "version: 1\ncities: {}\nphrases: {}\n")
    _write(tmp_path, "extra.json", json.dumps({"version": 1, "x": "தமிழ்"}))
    return tmp_path


def test_load_all_builds_sha256_manifest(tmp_path):
    bundle = load_all(_valid_dir(tmp_path))
    manifest = dict(bundle.manifest)
    assert set(manifest) == {"drifts.yaml", "drift_families.yaml", "templates.yaml", "i18n.yaml", "extra.json"}
    assert manifest["extra.json"] == sha256_file(tmp_path / "extra.json")
    assert bundle.get("extra.json")["x"] == "தமிழ்"
    with pytest.raises(DataError, match="no fixture"):
        bundle.get("nope.yaml")


def test_missing_required_key_names_file_and_key(tmp_path):
    _valid_dir(tmp_path)
    _write(tmp_path, "templates.yaml", "version: 1\n")
    load_fixture.cache_clear()
    with pytest.raises(DataError, match=r"templates\.yaml.*templates"):
        load_all(tmp_path)


def test_unparsable_and_absent_fixtures(tmp_path):
    _valid_dir(tmp_path)
    _write(tmp_path, "drifts.yaml", "version: [1\n")
    load_fixture.cache_clear()
    with pytest.raises(DataError, match=r"drifts\.yaml: cannot parse"):
        load_all(tmp_path)
    (tmp_path / "drifts.yaml").unlink()
    with pytest.raises(DataError, match="expected fixture"):
        load_all(tmp_path)


def test_real_fixtures_load():
    load_fixture.cache_clear()
    bundle = load_all()
    assert set(FIXTURE_KEYS) <= {name for name, _ in bundle.manifest}
