"""The repository keeps its fixed top level and every Rust module says what it is for."""
import pathlib


def test_top_level_is_fixed(repo: pathlib.Path) -> None:
    for name in ["Cargo.toml", "daemon", "adapters", "charts", "samples", "tests", "README.md", "docs", ".ci/run"]:
        assert (repo / name).exists(), f"missing {name}"


def test_every_rust_module_opens_with_a_doc_line(repo: pathlib.Path) -> None:
    for path in list(repo.glob("daemon/**/*.rs")) + list(repo.glob("adapters/**/*.rs")):
        if "target" in path.parts or "tests" in path.parts or "benches" in path.parts:
            continue
        first = path.read_text().lstrip().splitlines()[0]
        assert first.startswith("//!"), f"{path} does not open with a //! line"
