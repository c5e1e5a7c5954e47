"""A model named by text: a catalog name, a Transformers config.json (or its folder), or a model file.

What the CLI's MODEL argument and the ``model:`` of a runs file (:mod:`ndcost.io.fit_runs`) accept.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import SpecError
from ..files import read_mapping
from .model import Model
from .model_catalog import catalog_name, models

__all__ = ["model_from_text"]


def model_from_text(text: str) -> Model:
    """MODEL as a catalog name or alias (``llama3.1-70b``, ``meta-llama/Llama-3.1-70B``), a path to a Transformers
    config.json (or its folder), or a YAML/JSON model file."""
    path = Path(text)
    if path.is_dir() and (path / "config.json").exists():
        return Model.from_hf_config(path / "config.json")
    if path.is_file():
        if path.suffix in (".yaml", ".yml"):
            return Model.from_dict(read_mapping(path, "a YAML file of Model fields"))
        if path.suffix == ".json":
            data = read_mapping(path, "a config.json or a JSON file of Model fields")
            if "model_type" in data or "architectures" in data:
                return Model.from_hf_config(data, name=path.stem)
            return Model.from_dict(data)
    name = catalog_name(text)
    if name is not None:
        return Model.from_catalog(name)
    from ..suggest import did_you_mean

    raise SpecError("MODEL", "ndcost", "be a catalog name (see `ndcost models`), a config.json path "
                    f"or a YAML model file{did_you_mean(text, models())}", text)
