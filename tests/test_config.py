"""The AOT config schema: defaults, and one error naming file and field per malformed value."""

import re
from pathlib import Path

import pytest
from conftest import Cli

from tfaot_dist.config import load_aot_config
from tfaot_dist.errors import InvalidInput

GOOD = """\
model:
  name: test
  version: "1.0.0"
compilation:
  batch_sizes: [4, 1, 2]
"""


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    (tmp_path / "saved_model").mkdir()
    (tmp_path / "saved_model" / "saved_model.pb").write_bytes(b"\x08\x01")
    return tmp_path


def write(config_dir: Path, text: str) -> Path:
    path = config_dir / "aot_config.yaml"
    path.write_text(text)
    return path


def test_defaults_of_the_documentation(config_dir: Path) -> None:
    config = load_aot_config(write(config_dir, GOOD))
    assert config.name == "test"
    assert config.serving_key == "serving_default"  # upstream crashes without it
    assert config.saved_model == (config_dir / "saved_model").resolve()
    assert config.compilation.batch_sizes == (1, 2, 4)
    assert config.compilation.namespace == "tfaot_model"
    assert config.compilation.xla_flags == () and config.compilation.tf_xla_flags == ()
    assert config.compilation.target_triple is None  # the registry's default applies
    assert config.compilation.activation_formulas == "tensorflow"  # Selu and Elu as TensorFlow computes them


def test_verification_tolerance_default_and_value(config_dir: Path) -> None:
    from tfaot_dist import harness

    assert load_aot_config(write(config_dir, GOOD)).tolerance == harness.TOLERANCE == 1e-5
    assert load_aot_config(write(config_dir, GOOD + "verification:\n  tolerance: 1.0e-4\n")).tolerance == 1e-4
    # YAML 1.1 reads 1e-4 (no dot) as a string: it is the number it spells.
    assert load_aot_config(write(config_dir, GOOD + "verification: {tolerance: 1e-4}\n")).tolerance == 1e-4
    assert load_aot_config(write(config_dir, GOOD + "verification: {tolerance: 0.01}\n")).tolerance == 0.01
    for empty in ("verification:\n", "verification: {}\n", "verification:\n  tolerance: null\n"):
        assert load_aot_config(write(config_dir, GOOD + empty)).tolerance == 1e-5, empty
    path = write(config_dir, GOOD + "verification: {tolerance: 1.0e-4, colour: 1}\n")
    assert load_aot_config(path).warnings == (f"{path}: unknown keys ignored: verification.colour",)


def test_json_config_and_all_fields(config_dir: Path) -> None:
    text = (
        '{"model": {"name": "m", "version": "2.1", "saved_model": "saved_model", "serving_key": "serve",'
        ' "author": "A <a@b>", "description": "x & y"}, "compilation": {"batch_sizes": [1],'
        ' "namespace": "ns", "tf_xla_flags": ["--tf_xla_min_cluster_size=4"],'
        ' "xla_flags": ["--xla_cpu_enable_fast_math=true"], "target_triple": "x86_64-pc-linux",'
        ' "target_cpu": "x86-64-v3", "activation_formulas": "xla"}}'
    )
    config = load_aot_config(write(config_dir, text))
    assert config.compilation.xla_flags == ("--xla_cpu_enable_fast_math=true",)
    assert config.compilation.target_cpu == "x86-64-v3"
    assert config.compilation.activation_formulas == "xla"
    assert config.author == "A <a@b>"


TOL_ERROR = "verification.tolerance: expected a number above 0 and at most 0.01, got"
BAD = [
    ("model: [", "malformed YAML"),
    ("- a\n- b\n", "expected a mapping"),
    (GOOD.replace("  name: test\n", ""), "model.name: required field is missing"),
    (GOOD.replace('  version: "1.0.0"\n', ""), "model.version: required field is missing"),
    (GOOD.replace("  batch_sizes: [4, 1, 2]\n", "  namespace: x\n"), "compilation.batch_sizes: required"),
    (GOOD.replace("[4, 1, 2]", "[]"), "compilation.batch_sizes: expected a non-empty list"),
    (GOOD.replace("[4, 1, 2]", "[0]"), "batch size 0 is not positive"),
    (GOOD.replace("[4, 1, 2]", "[-1]"), "batch size -1 is not positive"),
    (GOOD.replace("[4, 1, 2]", "[1, 2, 2]"), "duplicate batch sizes [2]"),
    (GOOD.replace("[4, 1, 2]", "[1.5]"), "batch size 1.5 is not an integer"),
    (GOOD.replace("[4, 1, 2]", "['a']"), "batch size 'a' is not an integer"),
    (GOOD.replace("[4, 1, 2]", "[true]"), "batch size True is not an integer"),
    (GOOD.replace("[4, 1, 2]", "[1000000000]"), "batch size 1000000000 is larger"),
    (GOOD.replace("[4, 1, 2]", "4"), "compilation.batch_sizes: expected a list"),
    (GOOD.replace("name: test", "name: Bad-Name"), "model.name: invalid C++ identifier"),
    (GOOD.replace("name: test", "name: class"), "model.name: 'class' is reserved"),
    (GOOD.replace("name: test", "name: 'a;b'"), "model.name: invalid C++ identifier"),
    (GOOD.replace('"1.0.0"', "1.5"), "model.version: expected a string or an integer"),
    (GOOD.replace('"1.0.0"', '""'), "model.version: expected a non-empty version"),
    (GOOD.replace('"1.0.0"', '"a\\tb"'), "model.version: invalid text"),
    (GOOD.replace("  name: test\n", "  name: null\n"), "model.name: expected a string, got None"),
    (GOOD.replace("[4, 1, 2]", "null"), "compilation.batch_sizes: expected a list, got None"),
    (GOOD + "  namespace: 'a::b'\n", "compilation.namespace: invalid C++ identifier"),
    (GOOD + "  xla_flags: ['--x; rm -rf /']\n", "compilation.xla_flags: invalid flag"),
    (GOOD + "  xla_flags: '--a'\n", "compilation.xla_flags: expected a list"),
    (GOOD + "  target_cpu: '$(id)'\n", "compilation.target_cpu: invalid target cpu"),
    (GOOD + "  target_triple: 'x86_64'\n", "compilation.target_triple: invalid target triple"),
    (
        GOOD + "  activation_formulas: fast\n",
        "compilation.activation_formulas: expected one of tensorflow, xla",
    ),
    (GOOD + "  activation_formulas: [xla]\n", "compilation.activation_formulas: expected a string"),
    (
        GOOD.replace('"1.0.0"\n', '"1.0.0"\n  saved_model: ./missing\n'),
        "model.saved_model: SavedModel directory",
    ),
    (GOOD.replace('"1.0.0"\n', '"1.0.0"\n  description: "two\\nlines"\n'), "model.description: invalid text"),
    (GOOD.replace('"1.0.0"\n', '"1.0.0"\n  serving_key: "a b"\n'), "model.serving_key: invalid serving key"),
    (GOOD + "verification: 1.0e-4\n", "verification: expected a mapping, got 0.0001"),
    (GOOD + "verification:\n  tolerance: 0\n", f"{TOL_ERROR} 0"),
    (GOOD + "verification:\n  tolerance: -1.0e-5\n", f"{TOL_ERROR} -1e-05"),
    (GOOD + "verification:\n  tolerance: 0.02\n", f"{TOL_ERROR} 0.02"),
    (GOOD + "verification:\n  tolerance: .inf\n", f"{TOL_ERROR} inf"),
    (GOOD + "verification:\n  tolerance: .nan\n", f"{TOL_ERROR} nan"),
    (GOOD + "verification:\n  tolerance: small\n", f"{TOL_ERROR} 'small'"),
    (GOOD + "verification:\n  tolerance: true\n", f"{TOL_ERROR} True"),
    (GOOD + "verification:\n  tolerance: [1.0e-4]\n", f"{TOL_ERROR} [0.0001]"),
]


@pytest.mark.parametrize("text, message", BAD, ids=[m for _, m in BAD])
def test_bad_config_names_file_and_field(config_dir: Path, text: str, message: str) -> None:
    path = write(config_dir, text)
    with pytest.raises(InvalidInput) as info:
        load_aot_config(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_saved_model_dir_without_saved_model_pb(config_dir: Path) -> None:
    (config_dir / "saved_model" / "saved_model.pb").unlink()
    with pytest.raises(InvalidInput, match=re.escape("has no saved_model.pb")):
        load_aot_config(write(config_dir, GOOD))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="file not found"):
        load_aot_config(tmp_path / "nope.yaml")


# The shape of cms-tfaot's test_models/{simple,multi}/aot_config.yaml (the configs cmsdist compiles):
# every optional key written out, namespace null, empty flag lists.
UPSTREAM_TEST_MODEL = """\
model:
  name: test_multi
  version: "1.0.0"
  saved_model: ./saved_model
  serving_key: serving_default
  author: Some Author
  description: Multi input/output test model.
compilation:
  batch_sizes: [1, 2, 4]
  namespace: null
  tf_xla_flags: []
  xla_flags: []
"""


def test_upstream_test_model_config_loads_with_defaults(config_dir: Path) -> None:
    config = load_aot_config(write(config_dir, UPSTREAM_TEST_MODEL))
    assert config.name == "test_multi"
    assert config.compilation.namespace == "tfaot_model"
    assert config.compilation.tf_xla_flags == () and config.compilation.xla_flags == ()
    assert config.compilation.batch_sizes == (1, 2, 4)
    assert config.version == config.model_version == "1.0.0"
    assert config.warnings == ()


@pytest.mark.parametrize("empty", ["null", "''", "[]"])
def test_null_or_empty_means_the_default(config_dir: Path, empty: str) -> None:
    text = (
        "model:\n  name: m\n  version: '1'\n"
        f"  saved_model: {empty}\n  serving_key: {empty}\n  author: {empty}\n  description: {empty}\n"
        f"compilation:\n  batch_sizes: [1]\n  namespace: {empty}\n  tf_xla_flags: {empty}\n"
        f"  xla_flags: {empty}\n  target_triple: {empty}\n  target_cpu: {empty}\n"
        f"  activation_formulas: {empty}\n"
    )
    config = load_aot_config(write(config_dir, text))
    assert config.saved_model == (config_dir / "saved_model").resolve()
    assert config.serving_key == "serving_default"
    assert (config.author, config.description) == ("", "")
    assert config.compilation.namespace == "tfaot_model"
    assert config.compilation.target_triple is None and config.compilation.target_cpu is None
    assert config.compilation.activation_formulas == "tensorflow"


# The seed documentation's example: a free-form model.version and keys of later upstream versions.
SEED_EXAMPLE = """\
model:
  name: my_model
  version: "2024-05_final"
  saved_model: saved_model
  serving_key: serving_default
  author: A. Physicist
  description: Jet tagger
  checksum: abc
compilation:
  batch_sizes: [1, 2, 4, 8]
  namespace: tfaot_model
  tf_xla_flags: []
  xla_flags: []
  bogus_option: true
extra_section: {a: 1}
"""


def test_any_model_version_and_unknown_keys_warn(config_dir: Path) -> None:
    path = write(config_dir, SEED_EXAMPLE)
    config = load_aot_config(path)
    assert config.model_version == "2024-05_final"
    assert config.version == "0+2024.5.final"
    assert config.warnings == (
        f"{path}: unknown keys ignored: extra_section, model.checksum, compilation.bogus_option",
    )


@pytest.mark.parametrize(
    "written, pep440",
    [
        ("1.0.0", "1.0.0"),
        ("v2", "2"),
        ("1.0-rc1", "1.0rc1"),
        ("release candidate", "0+release.candidate"),
        ("é", "0"),
    ],
)
def test_package_version_of_a_model_version(written: str, pep440: str) -> None:
    from packaging.version import Version

    from tfaot_dist.config import package_version

    assert package_version(written) == pep440
    assert str(Version(pep440)) == pep440


def test_registry_overrides_still_refuse_unknown_keys(tmp_path: Path) -> None:
    from tfaot_dist.config import parse_compilation

    with pytest.raises(InvalidInput, match=re.escape("overrides.colour: unknown key")):
        parse_compilation({"colour": 1}, tmp_path / "m.yaml", "overrides", True)
    with pytest.raises(InvalidInput, match=re.escape("overrides.namespace: expected a string, got None")):
        parse_compilation({"namespace": None}, tmp_path / "m.yaml", "overrides", True)
    # The tolerance is the model author's (verification.tolerance in the aot config), not an override.
    with pytest.raises(InvalidInput, match=re.escape("overrides.tolerance: unknown key")):
        parse_compilation({"tolerance": 1e-4}, tmp_path / "m.yaml", "overrides", True)


def test_compile_of_an_upstream_shaped_config_warns_and_maps_the_version(
    run: Cli, example_models: Path, tmp_path: Path
) -> None:
    """`compile` of a config as cms-tfaot writes them, with a free-form version and a key we do not know:
    one warning naming the key, a note on the version, and the package under the mapped PEP 440 version."""
    import json
    import shutil

    model = tmp_path / "simple"
    shutil.copytree(example_models / "simple" / "saved_model", model / "saved_model")
    (model / "aot_config.yaml").write_text(
        UPSTREAM_TEST_MODEL.replace("test_multi", "simple")
        .replace('"1.0.0"', '"2024-05_final"')
        .replace("  xla_flags: []\n", "  xla_flags: []\n  bogus_option: 1\n")
        .replace("[1, 2, 4]", "[1]")
    )
    out, err = run(
        "compile", "--aot-config", model / "aot_config.yaml", "--output-directory", tmp_path / "out", "--json"
    )
    printed = out + err
    assert printed.count("unknown keys ignored: compilation.bogus_option") == 1
    assert (
        "model.version '2024-05_final' is not a PEP 440 version; the package version is 0+2024.5.final"
        in printed
    )
    root = Path(json.loads(out)["dir"])
    assert root.name == "tfaot-model-simple-0+2024.5.final"
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["version"] == "0+2024.5.final" and manifest["compilation"]["namespace"] == "tfaot_model"


@pytest.mark.parametrize(
    "text, message",
    [
        # Documented keys beside a missing one are not called unknown ...
        (
            'model: {name: m, version: "1"}\ncompilation: {namespace: ns, target_cpu: haswell}\n',
            "compilation.batch_sizes: required field is missing",
        ),
        (
            'model: {version: "1", saved_model: ./saved_model, serving_key: k}\ncompilation: {batch_sizes: [1]}\n',
            "model.name: required field is missing",
        ),
        # ... the really unknown ones are, the likeliest misspelling first
        (
            'model: {name: m, version: "1"}\ncompilation: {namespace: ns, batch_size: [1], colour: red}\n',
            "compilation.batch_sizes: required field is missing; unknown keys here: 'batch_size', 'colour' "
            "(a misspelling of 'batch_sizes'?)",
        ),
    ],
)
def test_missing_field_names_only_unknown_keys(config_dir: Path, text: str, message: str) -> None:
    path = write(config_dir, text)
    with pytest.raises(InvalidInput) as exc:
        load_aot_config(path)
    assert str(exc.value) == f"{path}: {message}"


@pytest.mark.parametrize(
    "drop, add, message",
    [
        ("version", {}, "version: required field is missing"),
        (
            "aot_config",
            {"aot-config": "x.yaml"},
            "aot_config: required field is missing; unknown key here: 'aot-config' (a misspelling of 'aot_config'?)",
        ),
    ],
)
def test_registry_entry_missing_field_names_only_unknown_keys(
    tmp_path: Path, drop: str, add: dict[str, str], message: str
) -> None:
    from tfaot_dist.registry import parse_entry

    data = {
        "name": "m",
        "version": "1.0.0",
        "source": {"git": "https://host/data.git", "ref": "main", "commit": "a" * 40},
        "aot_config": "m/aot_config.yaml",
        **add,
    }
    del data[drop]
    path = tmp_path / "m.yaml"
    with pytest.raises(InvalidInput) as exc:
        parse_entry(data, path)
    assert str(exc.value) == f"{path}: {message}"
