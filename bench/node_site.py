"""gpulens as `pip install gpulens` (no extra) puts it on a node.

A development or test environment holds every extra (Streamlit and its
pandas, pyspark, HTA), and pyarrow imports pandas whenever it finds it:
about 0.4 s in every process that converts a Python value. A node has no
pandas, so what runs there is measured (bench/ingest_vs_hta.py) and tested
(tests/test_node_install.py) with this: a virtual environment whose
site-packages holds, by links, gpulens and the distributions its core
dependencies pull in, and nothing else. Its `python` starts as an
installed one does (site, a .pth file), and any other module is not found,
as on a fresh node.
"""

from __future__ import annotations

import re
import sysconfig
import venv
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def core_closure() -> set[str]:
    """gpulens and every distribution its core dependencies pull in, without extras."""
    wanted, seen = ["gpulens"], set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python
        wanted.extend(_requirement_name(r) for r in requires if "extra ==" not in r.replace('"', "").replace("'", ""))
    return seen


def build_node_site(site: Path) -> Path:
    """Fill the empty folder `site` with links to gpulens' source (as the
    wheel lays it out) and to the core closure's installed files."""
    package = site / "gpulens"
    package.mkdir(parents=True)
    for path in (REPO_ROOT / "gpulens").glob("*.py"):
        (package / path.name).symlink_to(path)
    for part in ("collector", "analysis", "dashboard"):
        (package / part).symlink_to(REPO_ROOT / part, target_is_directory=True)
    for name in sorted(core_closure() - {"gpulens"}):
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for file in distribution.files or []:
            top = file.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth") or (site / top).exists():
                continue
            (site / top).symlink_to(Path(distribution.locate_file(top)))
    return site


def build_node_venv(folder: Path) -> Path:
    """A virtual environment in the empty folder `folder` whose packages are
    gpulens' core closure alone (`build_node_site`, linked from a .pth file,
    as an editable install links its source); its `python`."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    site_packages = Path(sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)}))
    site = build_node_site(folder / "node-site")
    (site_packages / "gpulens-node-site.pth").write_text(f"{site}\n", encoding="utf-8")
    return python
